"""kuberl convert: a Kubeflow PyTorchJob becomes the RLTrainingJob that runs the same pods; every field
not carried over (or changed in meaning) is a note naming it; what cannot be converted is refused at
the PyTorchJob's own field path. The guide's own pair lives in test_docs_migration.py."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
from conversion_support import assert_any_junk_anywhere_is_converted_or_refused
from kuberl import cli
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob
from kuberl.core.yamlreader import MAX_DOCUMENT_BYTES, load_documents
from kuberl.tools.convert import NotConvertible, convert, starts_processes, to_yaml

IMAGE = "registry.example.com/ml/train:1.4"
SECURITY = {"runAsUser": 1000}


def pytorch(**fields) -> dict:
    """The `pytorch` container, with a CPU limit and a securityContext (without them, convert notes kuberl's)."""
    return {"name": "pytorch", "image": IMAGE, "command": ["python", "/app/train.py"], "resources": {"limits": {"cpu": "2"}},
            "securityContext": SECURITY, **fields}


def replica(replicas: int | None, *containers: dict, restart: str | None = "OnFailure", **pod) -> dict:
    out: dict = {"template": {"spec": {"containers": list(containers) or [pytorch()], **pod}}}
    if replicas is not None:
        out["replicas"] = replicas
    if restart:
        out["restartPolicy"] = restart
    return out


def pytorchjob(master: dict | None = None, worker: dict | None = None, name: str = "train", **spec) -> dict:
    replicas = {k: v for k, v in (("Master", master), ("Worker", worker)) if v is not None}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"backoffLimit": 3}, **spec, "pytorchReplicaSpecs": replicas}}  # unset, convert notes it


def with_metadata(**metadata) -> dict:
    doc = pytorchjob(None, replica(2))
    doc["metadata"] |= metadata
    return doc


GPU = {"limits": {"nvidia.com/gpu": 4, "cpu": "16", "memory": "64Gi"}}
TORCHRUN = ["torchrun", "/app/train.py"]
EXPORTED = pytorchjob(replica(1), replica(1), nprocPerNode="1")  # as `kubectl get pytorchjob -o yaml` gives it
EXPORTED["metadata"] |= {"namespace": "ml", "uid": "0b6f", "resourceVersion": "42", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"team": "vision"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "owner": "ana"}}
EXPORTED["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}


# (id, PyTorchJob, the RLTrainingJob spec fields expected, the PyTorchJob fields noted)
CONVERTED = [
    ("master-and-workers-with-their-port",  # a Master and 3 Workers, args after the command, the port spelled out
     pytorchjob(replica(1, pytorch(args=["--rollout-steps", "128"], ports=[{"name": "pytorchjob-port", "containerPort": 29611}])),
                replica(3, pytorch(args=["--rollout-steps", "128"], ports=[{"name": "pytorchjob-port", "containerPort": 29611}]))),
     {"trainer": "custom", "workers": 4, "image": IMAGE, "rendezvous": {"port": 29611},
      "template": {"spec": {"containers": [{"name": "trainer", "command": ["python", "/app/train.py"], "securityContext": SECURITY, "args": ["--rollout-steps", "128"]}]}}},
     ["spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
    ("worker-only-elastic-c10d",  # Workers alone under an elasticPolicy, torchrun told its backend
     pytorchjob(None, replica(2, pytorch(command=["torchrun", "--rdzv_backend=c10d", "./ppo.py"],
                                         env=[{"name": "LOG_EVERY", "value": "10"}]), restart=None),
                elasticPolicy={"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 3, "maxRestarts": 5}),
     {"workers": 2, "template": {"spec": {"containers": [{"name": "trainer", "command": ["torchrun", "--rdzv_backend=c10d", "./ppo.py"], "securityContext": SECURITY,
                                                          "env": [{"name": "LOG_EVERY", "value": "10"}]}]}}},
     ["spec.nprocPerNode", "spec.elasticPolicy.rdzvBackend", "spec.elasticPolicy.minReplicas",
      "spec.elasticPolicy.maxReplicas", "spec.elasticPolicy.maxRestarts"]),
    ("master-only", pytorchjob(replica(None), None, nprocPerNode="2"), {"workers": 1, "procsPerWorker": 2},
     ["spec.pytorchReplicaSpecs.Master.restartPolicy"]),
    ("worker-replicas-0-runs-the-master", pytorchjob(replica(1), replica(0), nprocPerNode="1"), {"workers": 1, "procsPerWorker": 1},
     ["spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
    ("nproc-int-unquoted", pytorchjob(None, replica(2, restart=None), nprocPerNode=4), {"procsPerWorker": 4}, []),
    ("nproc-gpu-from-the-limit", pytorchjob(replica(1, pytorch(command=TORCHRUN, resources=GPU)),
                                            replica(1, pytorch(command=TORCHRUN, resources=GPU)), nprocPerNode="gpu"),
     {"workers": 2, "gpusPerWorker": 4, "resources": {"limits": {"cpu": "16", "memory": "64Gi"}}},
     ["spec.nprocPerNode", "spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
    ("nproc-unset-with-gpus", pytorchjob(None, replica(2, pytorch(command=TORCHRUN, resources={"limits": {"nvidia.com/gpu": "8", "cpu": "8"}}),
                                                       restart=None)),
     {"gpusPerWorker": 8}, ["spec.nprocPerNode"]),
    ("nproc-number-equal-to-gpus", pytorchjob(None, replica(2, pytorch(resources=GPU), restart=None), nprocPerNode="4"),
     {"gpusPerWorker": 4, "procsPerWorker": 4}, []),
    ("nproc-gpu-without-gpus", pytorchjob(None, replica(2, pytorch(command=TORCHRUN), restart=None), nprocPerNode="gpu"),
     {"workers": 2}, ["spec.nprocPerNode"]),
    ("nproc-auto", pytorchjob(None, replica(2, pytorch(command=TORCHRUN), restart=None), nprocPerNode="auto"), {"workers": 2},
     ["spec.nprocPerNode"]),
    ("nproc-cpu", pytorchjob(None, replica(2, pytorch(command=TORCHRUN), restart=None), nprocPerNode="cpu"), {"workers": 2},
     ["spec.nprocPerNode"]),
    # kubeflow/training-operator examples/pytorch/simple.yaml: python, no launcher; PyTorchJob counted the word as 1
    ("nproc-word-without-a-launcher-is-one-process", pytorchjob(None, replica(2, restart=None), nprocPerNode="auto"),
     {"workers": 2, "procsPerWorker": None}, ["spec.nprocPerNode"]),
    ("nproc-unset-without-a-launcher-says-nothing", pytorchjob(None, replica(2, restart=None)), {"workers": 2}, []),
    ("one-gpu-without-a-launcher", pytorchjob(None, replica(2, pytorch(resources={"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}),
                                                            restart=None)),
     {"gpusPerWorker": 1, "procsPerWorker": None}, []),
    ("restart-never-is-no-retries", pytorchjob(replica(1, restart="Never"), replica(1, restart="Never"), nprocPerNode="1",
                                                runPolicy={"backoffLimit": 6}),
     {"runPolicy": {"backoffLimit": 0}},
     ["spec.runPolicy.backoffLimit", "spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
    ("run-policy-and-scheduling", pytorchjob(None, replica(2, restart=None), nprocPerNode="1", runPolicy={
        "backoffLimit": 2, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 60, "suspend": True, "cleanPodPolicy": "None",
        "schedulingPolicy": {"queue": "research", "minAvailable": 2, "priorityClass": "high", "scheduleTimeoutSeconds": 30}}),
     {"queueName": None, "runPolicy": {"backoffLimit": 2, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 60, "suspend": True}},
     ["spec.runPolicy.cleanPodPolicy", "spec.runPolicy.schedulingPolicy.queue", "spec.runPolicy.schedulingPolicy.minAvailable",
      "spec.runPolicy.schedulingPolicy.priorityClass", "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"]),
    ("kueue-label-is-the-queue", {**pytorchjob(None, replica(2, restart=None), nprocPerNode="1"),
                                  "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "rl-team"}}},
     {"queueName": "rl-team"}, []),
    ("kueue-and-suspend", {**pytorchjob(None, replica(2, restart=None), nprocPerNode="1", runPolicy={"suspend": True, "backoffLimit": 3}),
                           "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "rl-team"}}},
     {"queueName": "rl-team", "runPolicy": {"suspend": True, "backoffLimit": 3}}, ["spec.runPolicy.suspend"]),
    ("kueue-label-beside-a-volcano-queue",
     {**pytorchjob(None, replica(2, restart=None), nprocPerNode="1", runPolicy={"schedulingPolicy": {"queue": "volcano-q"}, "backoffLimit": 3}),
      "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "rl-team"}}},
     {"queueName": "rl-team"}, ["spec.runPolicy.schedulingPolicy.queue"]),
    ("volcano-sidecar-and-pod-fields", pytorchjob(None, replica(
        2, pytorch(), {"name": "log-shipper", "image": "fluent-bit:3"}, restart=None, schedulerName="volcano",
        priorityClassName="batch-high", restartPolicy="OnFailure", nodeSelector={"pool": "gpu"},
        imagePullSecrets=[{"name": "registry-pull"}]), nprocPerNode="1"),
     {"schedulerName": "volcano", "priorityClassName": "batch-high",
      "template": {"spec": {"containers": [{"name": "trainer", "command": ["python", "/app/train.py"], "securityContext": SECURITY},
                                           {"name": "log-shipper", "image": "fluent-bit:3"}],
                            "nodeSelector": {"pool": "gpu"}, "imagePullSecrets": [{"name": "registry-pull"}]}}},
     ["spec.pytorchReplicaSpecs.Worker.template.spec.restartPolicy"]),
    ("pod-fields-before-containers", pytorchjob(None, {"replicas": 2, "template": {"spec": {
        "schedulerName": "volcano", "containers": [pytorch(resources={"limits": {"nvidia.com/gpu": 2, "cpu": "4"}})]}}},
        elasticPolicy={"nProcPerNode": 2}),
     {"schedulerName": "volcano", "gpusPerWorker": 2, "procsPerWorker": 2}, []),
    ("reserved-env-dropped", pytorchjob(replica(1, pytorch(env=[{"name": "WORLD_SIZE", "value": "8"}, {"name": "LR", "value": "0.1"},
                                                                {"name": "LOCAL_RANK", "value": "0"}])),
                                        replica(1, pytorch(env=[{"name": "WORLD_SIZE", "value": "8"}, {"name": "LR", "value": "0.1"},
                                                                {"name": "LOCAL_RANK", "value": "0"}])), nprocPerNode="1"),
     {"template": {"spec": {"containers": [{"name": "trainer", "command": ["python", "/app/train.py"], "securityContext": SECURITY, "env": [{"name": "LR", "value": "0.1"}]}]}}},
     ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]",
      "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[2]",
      "spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
    ("master-differs-beyond-the-program", pytorchjob(replica(1, pytorch(env=[{"name": "ROLE", "value": "master"}]), restart=None),
                                                    replica(1, pytorch(), restart=None), nprocPerNode="1"),
     {"template": {"spec": {"containers": [{"name": "trainer", "command": ["python", "/app/train.py"], "securityContext": SECURITY}]}}},
     ["spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env"]),
    ("no-cpu-limit-is-noted", pytorchjob(None, replica(2, pytorch(resources={"requests": {"cpu": "4"}}), restart=None), nprocPerNode="1"),
     {"resources": {"requests": {"cpu": "4"}}}, ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu"]),
    ("no-security-context-is-noted", pytorchjob(None, replica(2, {k: v for k, v in pytorch().items() if k != "securityContext"},
                                                             restart=None), nprocPerNode="1"),
     {"template": {"spec": {"containers": [{"name": "trainer", "command": ["python", "/app/train.py"]}]}}},
     ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].securityContext"]),
    ("backoff-limit-unset-is-noted", pytorchjob(None, replica(2, restart=None), nprocPerNode="1", runPolicy={}),
     {"runPolicy": None}, ["spec.runPolicy.backoffLimit"]),
    # Without a Master PyTorchJob appends no PET_NPROC_PER_NODE of its own: the pod's value is what torchrun read.
    ("worker-only-pet-nproc-env-is-the-process-count",
     pytorchjob(None, replica(2, pytorch(command=["torchrun", "/app/train.py"], env=[{"name": "PET_NPROC_PER_NODE", "value": "2"}]),
                              restart=None)),
     {"workers": 2, "procsPerWorker": 2, "template": {"spec": {"containers": [
         {"name": "trainer", "command": ["torchrun", "/app/train.py"], "securityContext": SECURITY, "env": []}]}}},
     ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]"]),
    ("worker-only-pet-nproc-env-auto", pytorchjob(None, replica(2, pytorch(command=TORCHRUN, env=[{"name": "PET_NPROC_PER_NODE", "value": "auto"}]),
                                                                restart=None)),
     {"workers": 2, "procsPerWorker": None}, ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]"]),
    # With a Master, PyTorchJob's own PET_NPROC_PER_NODE (spec.nprocPerNode, default auto) came after it and won.
    ("master-overrides-pet-nproc-env",
     pytorchjob(replica(1, pytorch(command=TORCHRUN, env=[{"name": "PET_NPROC_PER_NODE", "value": "2"}]), restart=None),
                replica(1, pytorch(command=TORCHRUN, env=[{"name": "PET_NPROC_PER_NODE", "value": "2"}]), restart=None)),
     {"workers": 2, "procsPerWorker": None},
     ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]", "spec.nprocPerNode"]),
    ("kubectl-get-export", EXPORTED, {"workers": 2},
     ["metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp",
      "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration", "status",
      "spec.pytorchReplicaSpecs.Master.restartPolicy", "spec.pytorchReplicaSpecs.Worker.restartPolicy"]),
]


@pytest.mark.parametrize(("doc", "expected", "noted"), [c[1:] for c in CONVERTED], ids=[c[0] for c in CONVERTED])
def test_a_pytorchjob_converts_to_a_valid_job_and_notes_what_changed(doc, expected, noted):
    before = copy.deepcopy(doc)
    job, notes = convert(doc)
    assert doc == before
    validate_job(job)
    # with a Master the PyTorchJob succeeded when its Master did (training-operator UpdateJobStatus), so does the job
    with_master = "Master" in doc["spec"]["pytorchReplicaSpecs"]
    got = {k: job["spec"].get(k) for k in expected}
    if isinstance(got.get("runPolicy"), dict):  # its successPolicy is checked below
        got["runPolicy"] = {k: v for k, v in got["runPolicy"].items() if k != "successPolicy"}
    assert got == expected
    # without a Master training-operator set no WORLD_SIZE, RANK or MASTER_ADDR (envvar.go): a command that starts no
    # launcher is told, on more than one pod, that kuberl's now join its pods
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    alone = not with_master and job["spec"]["workers"] > 1 and not starts_processes(trainer.get("command"), trainer.get("args"))
    told = ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command"] * alone
    assert sorted(n.path for n in notes) == sorted(noted + ["spec.runPolicy.successPolicy"] * with_master + told), [str(n) for n in notes]
    assert (job["spec"].get("runPolicy") or {}).get("successPolicy") == ("Worker0" if with_master else None)
    job["spec"]["template"]["spec"]["containers"][0]["command"].append("changed")
    assert doc == before, "the output shares nothing with the input"


def test_a_pytorchjob_that_names_no_port_keeps_the_port_its_pods_had():
    """training-operator's defaulting gives the `pytorch` container of every replica a pytorchjob-port of 23456 when it
    names none (kubeflow/training-operator pkg/apis/kubeflow.org/v1/pytorch_defaults.go setPytorchDefaultPort,
    PytorchJobDefaultPort in pytorch_types.go), so MASTER_PORT, and an elastic job's PET_RDZV_ENDPOINT, said 23456.
    Converted, the pods said kuberl's 29500: an Istio annotation that excludes the port, a NetworkPolicy or firewall
    rule that allows it, or a script that names it no longer matched the rendezvous."""
    for doc in (pytorchjob(replica(1), replica(2)),
                pytorchjob(None, replica(2, pytorch(command=TORCHRUN), restart=None), elasticPolicy={"rdzvBackend": "c10d"})):
        job, notes = convert(doc)
        assert job["spec"]["rendezvous"] == {"port": 23456}
        assert not any("rendezvous" in n.path or "23456" in n.message for n in notes), "the pods' port, kept: nothing to say"
        for pod in (o for o in render_job(job, "default", PLACEHOLDER_UID) if o["kind"] == "Pod"):
            trainer = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
            env = {e["name"]: e.get("value") for e in trainer["env"]}
            assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"
            assert env["PET_RDZV_ENDPOINT"].endswith(":23456")
    # the Master's own port wins, as getPortFromPyTorchJob reads the Master's (the Workers' defaulted one is unused)
    named = pytorchjob(replica(1, pytorch(ports=[{"name": "pytorchjob-port", "containerPort": 29611}])), replica(1))
    assert convert(named)[0]["spec"]["rendezvous"] == {"port": 29611}


def test_an_exported_job_keeps_only_what_a_new_object_carries():
    job, _ = convert(EXPORTED)
    assert job["metadata"] == {"name": "train", "namespace": "ml", "labels": {"team": "vision"}, "annotations": {"owner": "ana"}}
    assert set(job) == {"apiVersion", "kind", "metadata", "spec"}


def test_the_notes_say_what_happens_instead():
    notes = {c[0]: {n.path: n.message for n in convert(c[1])[1]} for c in CONVERTED}
    assert "cannot be known" in notes["nproc-gpu-without-gpus"]["spec.nprocPerNode"]
    assert "nvidia.com/gpu" in notes["nproc-gpu-without-gpus"]["spec.nprocPerNode"]
    assert "os.cpu_count()" in notes["nproc-auto"]["spec.nprocPerNode"]
    env0 = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]"
    assert "PET_NPROC_PER_NODE=2 is now spec.procsPerWorker" in notes["worker-only-pet-nproc-env-is-the-process-count"][env0]
    assert "os.cpu_count()" in notes["worker-only-pet-nproc-env-auto"][env0]
    assert "PyTorchJob's own value overrode it" in notes["master-overrides-pet-nproc-env"][env0]
    assert "gpusPerWorker 8" in notes["nproc-unset-with-gpus"]["spec.nprocPerNode"]
    assert "WORLD_SIZE" in notes["nproc-unset-with-gpus"]["spec.nprocPerNode"]
    one_gpu = pytorchjob(None, replica(2, pytorch(command=TORCHRUN, resources={"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}),
                                        restart=None))
    (note,) = convert(one_gpu)[1]
    assert "gpusPerWorker 1" in note.message and "WORLD_SIZE" not in note.message, "1 process per pod: WORLD_SIZE is as before"
    assert "backoffLimit is 0" in notes["restart-never-is-no-retries"]["spec.pytorchReplicaSpecs.Worker.restartPolicy"]
    env = notes["reserved-env-dropped"]
    assert "overrode it too" in env["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0]"]  # WORLD_SIZE
    assert "changed" in env["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[2]"]  # LOCAL_RANK
    assert "could use the node's idle CPUs" in notes["no-cpu-limit-is-noted"][
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu"]
    assert "read-only root filesystem" in notes["no-security-context-is-noted"][
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].securityContext"]
    assert "nothing unsuspends the RLTrainingJob" in notes["kueue-and-suspend"]["spec.runPolicy.suspend"]
    assert "without end" in notes["backoff-limit-unset-is-noted"]["spec.runPolicy.backoffLimit"]
    assert "every pod gets the Worker's" in notes["master-differs-beyond-the-program"][
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env"]


def big_script(size: int) -> str:
    line = "print('a line of an inline training script, as some manifests carry one')\n"
    return line * (size // len(line))


# (id, document, the PyTorchJob field refused, words of the message)
REFUSED = [
    ("master-of-3", pytorchjob(replica(3), replica(2)), "spec.pytorchReplicaSpecs.Master.replicas", "expected 1 (got 3)"),
    ("kind-typo", {**pytorchjob(None, replica(2)), "kind": "PytorchJob"}, "kind", "did you mean 'PyTorchJob'?"),
    ("already-ours", {**pytorchjob(None, replica(2)), "kind": "RLTrainingJob"}, "kind", "already an RLTrainingJob"),
    ("wrong-api-version", {**pytorchjob(None, replica(2)), "apiVersion": "kubeflow.org/v2"}, "apiVersion", "kubeflow.org/v1"),
    # kubeflow/pytorch-operator's pkg/apis/pytorch/v1beta2/types.go: the fields kubeflow.org/v1 reads, so the way is said
    ("pytorch-operator-v1beta2", {**pytorchjob(None, replica(2)), "apiVersion": "kubeflow.org/v1beta2"}, "apiVersion",
     ("was kubeflow/pytorch-operator's, whose pytorchReplicaSpecs and spec-level run policy kubeflow.org/v1 reads the same:"
      " write apiVersion: kubeflow.org/v1")),
    # kubeflow/training-operator examples/mpi/tensorflow-mnist.yaml: its other kinds run another framework's launcher
    ("an-mpijob", {**pytorchjob(None, replica(2)), "kind": "MPIJob"}, "kind", "Kubeflow's MPIJob starts mpirun"),
    ("a-list", [pytorchjob(None, replica(2))], "(document)", "a YAML mapping"),
    ("no-replica-specs", {**pytorchjob(None, replica(2)), "spec": {"nprocPerNode": "1"}}, "spec.pytorchReplicaSpecs", "required"),
    ("empty-replica-specs", pytorchjob(None, None), "spec.pytorchReplicaSpecs", "expected a Master or a Worker"),
    # a typo (another case of Worker is read as Worker, as training-operator's defaulting renames it)
    ("misspelt-worker", {**pytorchjob(None, None), "spec": {"pytorchReplicaSpecs": {"Wroker": replica(2)}}},
     "spec.pytorchReplicaSpecs.Wroker", "did you mean 'Worker'?"),
    ("images-differ", pytorchjob(replica(1, pytorch(image="train:1")), replica(1, pytorch(image="train:2"))),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image", "differs from the Worker's ('train:1' and 'train:2')"),
    ("commands-differ", pytorchjob(replica(1, pytorch(command=["python", "master.py"])), replica(1)),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command", "differs from the Worker's"),
    ("no-pytorch-container", pytorchjob(None, replica(2, {"name": "main", "image": IMAGE, "command": ["python"]})),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers", "named 'pytorch'"),
    ("no-image", pytorchjob(None, replica(2, {"name": "pytorch", "command": ["python", "/app/train.py"]})),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image", "required"),
    ("tpu-hosts", pytorchjob(None, replica(2, pytorch(resources={"limits": {"google.com/tpu": 4}}))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.google.com/tpu", "TPU_WORKER_HOSTNAMES"),
    ("half-a-gpu", pytorchjob(None, replica(2, pytorch(resources={"limits": {"nvidia.com/gpu": "0.5"}}))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.nvidia.com/gpu", "whole number"),
    ("nproc-word-torchrun-lacks", pytorchjob(None, replica(2), nprocPerNode="two"), "spec.nprocPerNode", "auto, cpu or gpu"),
    ("too-many-workers", pytorchjob(None, replica(2000)), "spec.pytorchReplicaSpecs.Worker.replicas", "at most 1024"),
    ("privileged-port", pytorchjob(replica(1, pytorch(ports=[{"name": "pytorchjob-port", "containerPort": 80}])), replica(1)),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].ports[0].containerPort", "at least 1024"),
    ("unquoted-env-value", pytorchjob(None, replica(2, pytorch(env=[{"name": "EPOCHS", "value": 10}]))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0].value", "quote it"),
    ("reserved-trainer-name", pytorchjob(None, replica(2, pytorch(), {"name": "trainer", "image": "x"})),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[1].name", "rename this one"),
    ("restart-policy-typo", pytorchjob(None, replica(2, restart="OnFailed")), "spec.pytorchReplicaSpecs.Worker.restartPolicy",
     "expected one of OnFailure, ExitCode, Always, Never"),
    ("long-name", pytorchjob(None, replica(2), name="a" * 60), "metadata.name", "at most 50"),
    # argoproj/argo-workflows examples/k8s-jobs.yaml: a resource step creates its object with generateName
    ("generate-name", {**pytorchjob(None, replica(2)), "metadata": {"generateName": "ppo-sweep-"}}, "metadata.generateName",
     "write metadata.name"),
    # the image's ENTRYPOINT ran; it was refused at the converted job's 'trainer' container, a name the user never wrote
    # Container.Command and Args are []string: a number or a string there no cluster decodes, and it ran as characters
    ("unquoted-arg", pytorchjob(None, replica(2, pytorch(args=["--epochs", 10]))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].args[1]", "quote it (got 10)"),
    ("string-command", pytorchjob(None, replica(2, pytorch(command="python /app/train.py"))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command", "expected a list of strings"),
    # ValidateObjectMeta (k8s.io/apimachinery/pkg/api/validation/objectmeta.go), which custom resources get too:
    # IsQualifiedName label and annotation keys, IsValidLabelValue values; the job converted and kubectl refused it
    ("label-key", with_metadata(labels={"team/ml/x": "a"}), "metadata.labels.team/ml/x", "optional DNS subdomain and '/'"),
    ("label-value", with_metadata(labels={"owner": "Ana Lopez"}), "metadata.labels.owner", "expected a label value"),
    ("long-label-value", with_metadata(labels={"run": "x" * 64}), "metadata.labels.run", "at most 63"),
    ("annotation-key", with_metadata(annotations={"my note": "x"}), "metadata.annotations.my note", "optional DNS subdomain"),
    ("annotations-size", with_metadata(annotations={"a": "x" * 256 * 1024}), "metadata.annotations", "at most 262144"),
    # what the API server refuses in the pods (localnode.source_problems): it converted, and the pods were refused
    ("envfrom-prefix", pytorchjob(None, replica(2, pytorch(envFrom=[{"prefix": "A=", "configMapRef": {"name": "s"}}]))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].envFrom[0].prefix", "printable ASCII"),
    ("configmap-item-path", pytorchjob(None, replica(2, volumes=[{"name": "code", "configMap": {
        "name": "s", "items": [{"key": "t.py", "path": "../t.py"}]}}])),
     "spec.pytorchReplicaSpecs.Worker.template.spec.volumes[code].configMap.items[0].path", "must not contain '..'"),
    ("image-entrypoint", pytorchjob(None, replica(2, pytorch(command=None))),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command", "ENTRYPOINT and CMD ran"),
    ("a-1mb-script-times-20-workers", pytorchjob(None, replica(20, pytorch(command=["python", "-c", big_script(1_000_000)]))),
     "spec.pytorchReplicaSpecs.Worker.template", "bytes of pod template across the gang"),
]


@pytest.mark.parametrize(("doc", "path", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_cannot_be_converted_is_refused_at_the_pytorchjobs_field(doc, path, words):
    before = copy.deepcopy(doc)
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    assert doc == before
    assert [p.path for p in e.value.problems][:1] == [path], e.value.problems
    assert words in e.value.problems[0].message, e.value.problems[0]


def test_the_yaml_printed_reads_back_as_the_same_job_with_every_string_a_string():
    # `y`, `n` and `0o644` too, which kubectl (go-yaml v2) reads as true, false and 420: written bare, `kubectl apply`
    # of the converted job sent booleans and a number where the pod takes strings
    tricky = [{"name": n, "value": v} for n, v in (("LR", "1e-3"), ("FLAG", "on"), ("DAY", "2026-01-01"), ("N", "10"), ("NULL", "~"),
                                                  ("AMP", "n"), ("MODE", "0o644"), ("RATIO", "3:2"), ("SEP", "="))]
    job, _ = convert(pytorchjob(None, replica(2, pytorch(env=tricky, args=["--script", "line one\nline two\n", "--compile", "y"]))))
    (back,) = load_documents(to_yaml([job]))
    assert back == job


# --- the command line ----------------------------------------------------------------------------------------------


def run_cli(capsys, path, command: str = "convert") -> tuple[int, str, str]:
    try:
        code = cli.main([command, str(path)])
    except SystemExit as e:  # the reader's one-line refusals
        code, message = 1, str(e.code)
        out, err = capsys.readouterr()
        return code, out, err + message
    out, err = capsys.readouterr()
    return code, out, err


def test_convert_prints_the_job_and_one_line_per_note(tmp_path, capsys):
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([CONVERTED[0][1]]))
    code, out, err = run_cli(capsys, path)
    assert code == 0, err
    (job,) = load_documents(out)
    assert job == convert(CONVERTED[0][1])[0]
    lines = err.splitlines()
    assert lines == [f"{path}: PyTorchJob 'train': {n}" for n in convert(CONVERTED[0][1])[1]]
    assert len(lines) == 3  # two restartPolicy notes, the Master's successPolicy (python, no launcher: no nprocPerNode)


def test_configmaps_beside_the_job_pass_through(tmp_path, capsys):
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"EPOCHS": "3"}}
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([configmap, CONVERTED[2][1]]))
    code, out, err = run_cli(capsys, path)
    assert code == 0, err
    assert [d["kind"] for d in load_documents(out)] == ["ConfigMap", "RLTrainingJob"]


# ValidateConfigMap (pkg/apis/core/validation/validation.go): IsConfigMapKey keys (k8s.io/apimachinery
# pkg/util/validation: [-._a-zA-Z0-9]+, at most 253, not '.' nor starting with '..'), string values,
# base64 binaryData, no key in both, at most core.MaxSecretSize (1 MiB) in all; a DNS-1123 subdomain name.
@pytest.mark.parametrize(("data", "words"), [
    ({"data": {"my script.py": "x"}}, "data.my script.py: expected a ConfigMap key"),
    ({"data": {"..data": "x"}}, "data...data: expected a ConfigMap key"),
    ({"data": {"EPOCHS": 3}}, "data.EPOCHS: expected a string; quote it"),
    ({"data": ["EPOCHS=3"]}, "data: expected a mapping of keys to strings"),
    ({"data": {"big": "x" * (1024 * 1024 + 1)}}, "data: 1048577 bytes in all"),
    ({"binaryData": {"model.bin": "not base64!"}}, "binaryData.model.bin: expected base64"),
    ({"data": {"k": "1"}, "binaryData": {"k": "AAEC"}}, "binaryData.k: duplicate of a data key"),
    ({"metadata": {"name": "Settings"}}, "metadata.name: expected a DNS-1123 subdomain"),
    ({"metadata": {"name": "settings", "labels": {"app": "my app"}}}, "metadata.labels.app: expected a label value"),
    ({"apiVersion": "v2"}, "ConfigMap 'settings' is invalid (1 problem(s)):\n  apiVersion: expected v1"),  # was "PyTorchJob 'settings'"
])
def test_a_configmap_beside_the_job_that_kubectl_apply_would_refuse_is_named_and_nothing_printed(tmp_path, capsys, data, words):
    """ConfigMaps passed through convert unchecked: the file printed, then kubectl apply (or kuberl run) refused it."""
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, **data}
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([configmap, CONVERTED[2][1]]))
    code, out, err = run_cli(capsys, path)
    assert (code, out) == (1, ""), err
    assert "is invalid (1 problem(s)):" in err and words in err, err


# Go's base64.StdEncoding (encoding/json's []byte) skips '\r' and '\n': base64 wrapped at 76 in a YAML
# block scalar (base64 FILE's own output) is what a cluster takes.
@pytest.mark.parametrize("encoded", ["AAEC", "AAECAwQFBgcICQoL\nDA0ODxAR\n", "AAECAwQF\r\nBgcI\r\n"])
def test_a_configmap_with_binary_data_converts_as_a_cluster_takes_it(tmp_path, capsys, encoded):
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "weights"}, "binaryData": {"w.bin": encoded}}
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([configmap, CONVERTED[2][1]]))
    code, out, err = run_cli(capsys, path)
    assert code == 0, err
    assert load_documents(out)[0] == configmap


@pytest.mark.parametrize(("text", "words"), [
    ("", "no YAML document found"),
    ("kind: PytorchJob\napiVersion: kubeflow.org/v1\nmetadata: {name: x}\nspec: {}\n", "kind: expected 'PyTorchJob'"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no PyTorchJob, TrainJob or JobSet document"),
    ("spec: {a: 1, a: 2}\n", "duplicate key"),
    (to_yaml([pytorchjob(replica(3), replica(1))]), "spec.pytorchReplicaSpecs.Master.replicas: expected 1 (got 3)"),
], ids=["empty", "kind-typo", "only-configmaps", "duplicate-key", "master-of-3"])
def test_convert_exits_1_naming_the_field_and_prints_nothing(tmp_path, capsys, text, words):
    path = tmp_path / "pj.yaml"
    path.write_text(text)
    code, out, err = run_cli(capsys, path)
    assert (code, out) == (1, "")
    assert words in err, err


def test_a_1mb_manifest_converts(tmp_path, capsys):
    doc = pytorchjob(None, replica(2, pytorch(command=["python", "-c", big_script(1_000_000)]), restart=None), nprocPerNode="1")
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([doc]))
    assert 1_000_000 < path.stat().st_size < MAX_DOCUMENT_BYTES  # a megabyte, under the reader's 1.5 MiB bound
    code, out, err = run_cli(capsys, path)
    assert code == 0 and [line for line in err.splitlines() if "starts no torch launcher" not in line] == [], err[:2000]
    (job,) = load_documents(out)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][2] == big_script(1_000_000)


def test_stdin_is_read_with_a_dash():
    done = subprocess.run([sys.executable, "-m", "kuberl.cli", "convert", "-"], input=to_yaml([CONVERTED[2][1]]),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "workers: 1" in done.stdout and "-: PyTorchJob 'train': spec.pytorchReplicaSpecs.Master.restartPolicy:" in done.stderr


@pytest.mark.parametrize("case", ["master-and-workers-with-their-port", "nproc-gpu-from-the-limit", "run-policy-and-scheduling"])
def test_any_value_anywhere_converts_or_is_refused_with_a_path_never_a_traceback(case):
    doc = next(c[1] for c in CONVERTED if c[0] == case)
    assert_any_junk_anywhere_is_converted_or_refused(doc, convert)


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_take_a_pytorchjob_as_it_stands(tmp_path, capsys, command):
    """What `kuberl run` takes too: the PyTorchJob is the RLTrainingJob convert prints, its notes on stderr."""
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([CONVERTED[0][1]]))
    code, out, err = run_cli(capsys, path, command)
    assert code == 0, err
    assert "train" in out
    assert err.splitlines() == [f"{path}: PyTorchJob 'train', run as an RLTrainingJob (`kuberl convert` prints it): {n}"
                                for n in convert(CONVERTED[0][1])[1]]
    path.write_text(to_yaml([pytorchjob(replica(3), replica(1))]))
    code, out, err = run_cli(capsys, path, command)
    assert code == 1 and "no RLTrainingJob equivalent" in err and "Master" in err


def test_metadata_the_user_set_is_noted_as_the_pytorchjobs_not_the_api_servers():
    doc = pytorchjob(None, replica(2, restart=None), nprocPerNode="1")
    doc["metadata"] |= {"uid": "0b6f", "finalizers": ["example.com/cleanup"],
                        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "1"}]}
    notes = {n.path: n.message for n in convert(doc)[1]}
    assert notes["metadata.uid"] == "not carried over: the API server sets it for the new object"
    for key in ("finalizers", "ownerReferences"):
        assert "belonged to the PyTorchJob" in notes[f"metadata.{key}"], notes


def pytorch_operator_job() -> dict:
    """kubeflow/pytorch-operator's kubeflow.org/v1 (pkg/apis/pytorch/v1/types.go) kept activeDeadlineSeconds,
    backoffLimit, cleanPodPolicy and ttlSecondsAfterFinished at spec, as kubeflow/website's PyTorchJob guide shows in
    `kubectl get -o yaml pytorchjobs` output (spec.cleanPodPolicy: None; creationTimestamp: null in each template)."""
    doc = pytorchjob(replica(1), replica(3))
    del doc["spec"]["runPolicy"]
    doc["spec"] |= {"cleanPodPolicy": "None", "backoffLimit": 5, "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 600}
    for rtype in ("Master", "Worker"):
        doc["spec"]["pytorchReplicaSpecs"][rtype]["template"]["metadata"] = {"creationTimestamp": None}
    return doc


def test_pytorch_operators_run_policy_at_spec_is_read_as_run_policy():
    job, notes = convert(pytorch_operator_job())
    assert job["spec"]["runPolicy"] == {"backoffLimit": 5, "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 600,
                                        "successPolicy": "Worker0"}
    noted = {}
    for n in notes:
        noted.setdefault(n.path, []).append(n.message)
    for key in ("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert any(f"read as spec.runPolicy.{key}" in m for m in noted[f"spec.{key}"]), noted
        assert not any("unknown" in m for m in noted[f"spec.{key}"])
    assert any("deletes pods still running" in m for m in noted["spec.cleanPodPolicy"]), "None's meaning, as under runPolicy"
    assert not any(".metadata.creationTimestamp" in path for path in noted), "kubectl's null is nothing to carry"
    assert "spec.runPolicy.backoffLimit" not in noted, "it is set"


def test_run_policy_wins_over_the_old_place_and_a_bad_value_is_refused_where_written():
    doc = pytorch_operator_job()
    doc["spec"]["runPolicy"] = {"backoffLimit": 1}
    job, notes = convert(doc)
    assert job["spec"]["runPolicy"]["backoffLimit"] == 1
    assert "spec.runPolicy.backoffLimit is set too, and wins" in {n.path: n.message for n in notes}["spec.backoffLimit"]
    doc = pytorch_operator_job()
    doc["spec"]["activeDeadlineSeconds"] = -5
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    assert [p.path for p in e.value.problems] == ["spec.activeDeadlineSeconds"]


def test_replica_types_in_another_case_are_read_as_training_operators_defaulting_renames_them():
    """`master:` and `worker:` ran: kubeflow/training-operator's pkg/apis/kubeflow.org/v1/pytorch_defaults.go
    (setPytorchTypeNamesToCamelCase, as kubeflow/pytorch-operator's pkg/apis/pytorch/v1beta2/defaults.go did) renames
    any case of Master and Worker before the job is read; convert refused them as unknown replica types."""
    written = pytorchjob(replica(1), replica(3))
    lower = copy.deepcopy(written)
    lower["spec"]["pytorchReplicaSpecs"] = {"master": replica(1), "WORKER": replica(3)}
    before = copy.deepcopy(lower)
    job, notes = convert(lower)
    assert lower == before
    assert job == convert(written)[0]
    noted = {n.path: n.message for n in notes}
    assert "read as Master" in noted["spec.pytorchReplicaSpecs.master"]
    assert "read as Worker" in noted["spec.pytorchReplicaSpecs.WORKER"]
    # both spellings of one type: the defaulting kept one, which the manifest does not say
    both = pytorchjob(replica(1), replica(3))
    both["spec"]["pytorchReplicaSpecs"]["worker"] = replica(5)
    with pytest.raises(NotConvertible) as e:
        convert(both)
    assert [p.path for p in e.value.problems] == ["spec.pytorchReplicaSpecs.worker"]
    assert "Worker, worker" in e.value.problems[0].message and "keep one" in e.value.problems[0].message


def test_any_value_anywhere_in_a_pytorch_operator_job_converts_or_is_refused():
    assert_any_junk_anywhere_is_converted_or_refused(pytorch_operator_job(), convert)


def rocm_job(command: list[str] | None = None, gpu: str = "amd.com/gpu") -> dict:
    """kubeflow/trainer docs/user-guides/pytorch-rocm.md: AMD GPUs are requested as amd.com/gpu (8 on an MI300X
    node), never nvidia.com/gpu, under a ROCm build of torch; here as a Workers-only PyTorchJob."""
    container = pytorch(image="registry.example.com/ml/train-rocm:1.4",
                        command=command or ["torchrun", "/workspace/train.py"],
                        resources={"limits": {gpu: 8, "cpu": "32", "memory": "256Gi"}})
    return pytorchjob(None, replica(2, container, restart=None, tolerations=[{"key": gpu, "operator": "Exists", "effect": "NoSchedule"}]))


def test_amd_gpus_are_the_process_count_torchrun_auto_starts():
    job, notes = convert(rocm_job())
    assert job["spec"]["procsPerWorker"] == 8 and "gpusPerWorker" not in job["spec"]
    assert job["spec"]["resources"]["limits"]["amd.com/gpu"] == 8
    note = {n.path: n.message for n in notes}["spec.nprocPerNode"]
    assert "ROCm build sees the pod's 8 amd.com/gpu as CUDA devices" in note
    job, _ = convert(rocm_job(["torchrun", "--nproc-per-node=auto", "/workspace/train.py"]))
    assert job["spec"]["procsPerWorker"] == 8
    validate_job(job)


def test_amd_gpus_under_nproc_gpu_are_refused_with_the_number_to_write():
    with pytest.raises(NotConvertible) as e:
        convert(rocm_job(["torchrun", "--nproc-per-node=gpu", "/workspace/train.py"]))
    (problem,) = e.value.problems
    assert problem.path == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command[1]"
    assert "write --nproc-per-node 8" in problem.message


def test_another_gpu_is_said_to_depend_on_the_torch_build():
    job, notes = convert(rocm_job(gpu="gpu.intel.com/i915"))
    assert job["spec"].get("procsPerWorker") is None
    note = {n.path: n.message for n in notes}["spec.nprocPerNode"]
    assert "8 gpu.intel.com/i915 only with a torch built for it" in note and "set spec.procsPerWorker" in note
    assert "one process per CPU of the node it lands on" not in note


def test_any_value_anywhere_in_a_rocm_job_converts_or_is_refused():
    assert_any_junk_anywhere_is_converted_or_refused(rocm_job(), convert)


def test_a_kueue_priority_class_on_the_job_reaches_the_pods():
    """A PyTorchJob labelled kueue.x-k8s.io/priority-class, as AWS's HyperPod task-governance samples label theirs:
    Kueue's PyTorchJob integration read it there, its pod integration (kuberl's pods) reads it from the pods."""
    doc = pytorchjob(None, replica(2, restart=None), nprocPerNode="1")
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "rl-team",
                                 "kueue.x-k8s.io/priority-class": "rl-experiments"}
    job, notes = convert(doc)
    assert job["spec"]["template"]["metadata"]["labels"] == {"kueue.x-k8s.io/priority-class": "rl-experiments"}
    assert "from its pods" in {n.path: n.message for n in notes}["metadata.labels.kueue.x-k8s.io/priority-class"]
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod

    pod = render_pod(Job("train", validate_job(job)), "default", PLACEHOLDER_UID, 1)
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "rl-experiments"
    assert "metadata" not in convert(pytorchjob(None, replica(2, restart=None), nprocPerNode="1"))[0]["spec"]["template"]


def test_a_command_that_names_a_pytorchjob_pod_is_noted_with_kubers_name_for_it():
    """training-operator names the Master's pod and Service <job>-master-0 (a Worker's <job>-worker-<i>); scripts
    that hard-code it (os.environ['MASTER_ADDR'] = '<job>-master-0.<job>', as published examples do, or an init
    container that waits for it) would look for a host kuberl's gang does not have."""
    script = "import os\nos.environ['MASTER_ADDR'] = 'train-master-0.train'\n"
    wait = {"name": "wait", "image": "busybox", "command": ["sh", "-c", "until nslookup train-worker-1; do sleep 2; done"]}
    doc = pytorchjob(replica(1, pytorch(command=["python", "-c", script])),
                     replica(2, pytorch(command=["python", "-c", script]), initContainers=[wait]))
    _, notes = convert(doc)
    found = {n.path: n.message for n in notes if "a pod of the PyTorchJob" in n.message}
    worker = "spec.pytorchReplicaSpecs.Worker.template.spec"
    assert set(found) == {f"{worker}.containers[0].command[2]", f"{worker}.initContainers[0].command[2]"}
    assert "its pod is train-0, reached as train-0.train" in found[f"{worker}.containers[0].command[2]"]
    assert "its pod is train-2" in found[f"{worker}.initContainers[0].command[2]"], "Worker 1 is kuberl's worker 2"
    _, quiet = convert(pytorchjob(None, replica(2, pytorch(command=["python", "/app/retrain-master-0.py"]))))
    assert not any("a pod of the" in n.message for n in quiet), "another name that merely ends alike"


def test_a_pod_security_context_that_says_who_runs_keeps_saying_it():
    """A pod-level securityContext that names the user, the group and fsGroup in a PyTorchJob: kuberl's own
    container securityContext (user 65532) would win over it, so the run-as fields go onto the trainer container too."""
    doc = pytorchjob(None, replica(2, {k: v for k, v in pytorch().items() if k != "securityContext"}, restart=None,
                                   securityContext={"runAsUser": 2100, "runAsGroup": 2100, "fsGroup": 2200}),
                     nprocPerNode="1")
    job, notes = convert(doc)
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsUser": 2100, "runAsGroup": 2100, "fsGroup": 2200}
    assert pod["containers"][0]["securityContext"] == {"runAsUser": 2100, "runAsGroup": 2100}
    noted = {n.path: n.message for n in notes}
    assert "runs as the PyTorchJob's did" in noted["spec.pytorchReplicaSpecs.Worker.template.spec.securityContext"]
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].securityContext" not in noted, "it is no longer unset"
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod

    rendered = render_pod(Job("train", validate_job(job)), "default", PLACEHOLDER_UID, 0)
    trainer = next(c for c in rendered["spec"]["containers"] if c["name"] == "trainer")
    assert trainer["securityContext"]["runAsUser"] == 2100, "as the PyTorchJob's process ran"
    only_fs_group = pytorchjob(None, replica(2, {k: v for k, v in pytorch().items() if k != "securityContext"}, restart=None,
                                             securityContext={"fsGroup": 2200}), nprocPerNode="1")
    job, notes = convert(only_fs_group)
    assert "securityContext" not in job["spec"]["template"]["spec"]["containers"][0], "nothing about who runs: kuberl's"


def test_a_named_service_account_is_told_its_token_is_no_longer_mounted():
    """A PyTorchJob naming a ServiceAccount (so its pods can call the API, as Trainer's data-cache runtime's does):
    PyTorchJob's pods mounted its token, kuberl's mount none unless the template says so (docs/security.md)."""
    doc = pytorchjob(None, replica(2, restart=None, serviceAccountName="ppo-sa"), nprocPerNode="1")
    job, notes = convert(doc)
    note = {n.path: n.message for n in notes}["spec.pytorchReplicaSpecs.Worker.template.spec.serviceAccountName"]
    assert "automountServiceAccountToken: true" in note and "'ppo-sa'" in note
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod

    assert render_pod(Job("train", validate_job(job)), "default", PLACEHOLDER_UID, 0)["spec"]["automountServiceAccountToken"] is False
    said = pytorchjob(None, replica(2, restart=None, serviceAccountName="ppo-sa", automountServiceAccountToken=True),
                      nprocPerNode="1")
    job, notes = convert(said)
    assert not any(n.path.endswith(".serviceAccountName") for n in notes)
    assert render_pod(Job("train", validate_job(job)), "default", PLACEHOLDER_UID, 0)["spec"]["automountServiceAccountToken"] is True


def test_a_service_link_variable_the_pod_no_longer_gets_is_noted():
    """A script reaching a Service through the kubelet's Service links ($(MLFLOW_SERVICE_HOST)), the discovery
    kubernetes/website content/en/docs/concepts/services-networking/service.md describes (REDIS_PRIMARY_SERVICE_HOST)
    and Pods get by default; kuberl's pods have them off unless the template says so. The API server's own
    KUBERNETES_SERVICE_HOST is set either way, and is not noted."""
    command = ["sh", "-c", ("python /app/train.py --tracking http://$(MLFLOW_SERVICE_HOST):$(MLFLOW_SERVICE_PORT)"
                            " --api $KUBERNETES_SERVICE_HOST")]
    _, notes = convert(pytorchjob(None, replica(2, pytorch(command=command), restart=None), nprocPerNode="1"))
    found = [n for n in notes if "enableServiceLinks" in n.message]
    assert [n.path for n in found] == ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command[2]"]
    assert found[0].message.startswith("reads MLFLOW_SERVICE_HOST")
    _, quiet = convert(pytorchjob(None, replica(2, pytorch(command=command), restart=None, enableServiceLinks=True), nprocPerNode="1"))
    assert not any("enableServiceLinks" in n.message for n in quiet)


def test_a_volume_named_as_kuberls_configuration_volume_is_renamed_with_its_mounts():
    """'config' is a common name for one's own ConfigMap volume; kept, it replaced kuberl's (the merge is by
    name) and a built-in trainer's KUBERL_CONFIG with it. Renamed, the job runs as the PyTorchJob did."""
    trainer = pytorch(volumeMounts=[{"name": "config", "mountPath": "/etc/app"}, {"name": "data", "mountPath": "/data"}])
    init = {"name": "fetch", "image": "busybox", "volumeMounts": [{"name": "config", "mountPath": "/cfg", "readOnly": True}]}
    volumes = [{"name": "config", "configMap": {"name": "app-config"}}, {"name": "pytorchjob-config", "emptyDir": {}},
               {"name": "data", "emptyDir": {}}]
    doc = pytorchjob(None, replica(2, trainer, initContainers=[init], volumes=volumes))
    job, notes = convert(doc)
    validate_job(job)
    pod = job["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["pytorchjob-config-2", "pytorchjob-config", "data"]
    assert pod["volumes"][0]["configMap"] == {"name": "app-config"}
    assert [m["name"] for m in pod["containers"][0]["volumeMounts"]] == ["pytorchjob-config-2", "data"]
    assert pod["initContainers"][0]["volumeMounts"] == [{"name": "pytorchjob-config-2", "mountPath": "/cfg", "readOnly": True}]
    [note] = [n for n in notes if n.path == "spec.pytorchReplicaSpecs.Worker.template.spec.volumes[0].name"]
    assert "renamed 'pytorchjob-config-2'" in note.message and "/etc/kuberl" in note.message
    assert doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["name"] == "config"  # input untouched


WRITTEN = {"annotation": "Entraînement réparti — 東京", "argument": "--tag=été", "value": "naïve café"}


def unicode_job(value: str = WRITTEN["value"]) -> dict:
    doc = pytorchjob(None, replica(2, pytorch(args=[WRITTEN["argument"]], env=[{"name": "NOTE", "value": value}])))
    doc["metadata"]["annotations"] = {"description": WRITTEN["annotation"]}
    return doc


def convert_cli(path, encoding: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "convert", str(path)], capture_output=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": encoding})


def test_letters_beyond_ascii_are_printed_as_written_and_read_back_the_same(tmp_path):
    """PyYAML's default escaped them: description: "Entra\\xEEnement r\\xE9parti \\u2014 \\u6771\\u4EAC"."""
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([unicode_job()]), encoding="utf-8")
    done = convert_cli(path, "utf-8")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    assert all(text in out for text in WRITTEN.values()), out
    assert "\\x" not in out and "\\u" not in out
    (back,) = load_documents(out)
    assert back == convert(unicode_job())[0]


def test_a_bidirectional_control_stays_escaped_and_a_console_that_cannot_take_letters_gets_escapes(tmp_path):
    """Raw, U+202E would make the line on screen read otherwise than the value ("Trojan Source"); a console in
    a legacy code page would end `kuberl convert` with UnicodeEncodeError. Both read back as the same job."""
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([unicode_job("naïve \u202eevil")]), encoding="utf-8")
    out = convert_cli(path, "utf-8").stdout.decode("utf-8")
    assert "\u202e" not in out and '"na\\xEFve \\u202Eevil"' in out
    assert WRITTEN["annotation"] in out  # only the string that holds one is escaped
    done = convert_cli(path, "ascii")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("ascii")
    assert "Entra\\xEEnement" in text
    assert load_documents(text) == load_documents(out) == [convert(unicode_job("naïve \u202eevil"))[0]]


def test_render_prints_letters_as_written_too(tmp_path, capsys):
    path = tmp_path / "pj.yaml"
    path.write_text(to_yaml([unicode_job()]), encoding="utf-8")
    code, out, err = run_cli(capsys, path, "render")
    assert code == 0, err
    assert "- --tag=été" in out and "value: naïve café" in out


def test_gpus_for_a_command_without_a_launcher_convert_when_the_script_spawns_its_processes():
    job, _ = convert(pytorchjob(None, replica(2, pytorch(resources=GPU))), procs_per_worker=4)
    assert (job["spec"]["procsPerWorker"], job["spec"]["gpusPerWorker"]) == (4, 4)
    validate_job(job)


def test_scheduling_policy_queue_is_volcanos_and_goes_to_its_podgroup_not_to_kueue():
    """training-operator gave schedulingPolicy.queue to the Volcano PodGroup it made (common/job.go); made
    spec.queueName, it put Kueue's queue-name label on the pods (Kueue's pod integration then gates them under a
    LocalQueue of that name) and kuberl's Volcano PodGroup ran in Volcano's default queue."""
    doc = pytorchjob(None, replica(2, restart=None, schedulerName="volcano"), nprocPerNode="1",
                     runPolicy={"backoffLimit": 3, "schedulingPolicy": {"queue": "team-a"}})
    job, notes = convert(doc)
    assert "queueName" not in job["spec"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "team-a"}
    (group,) = [o for o in render_job(job, "ml", PLACEHOLDER_UID) if o["kind"] == "PodGroup"]
    assert group["spec"]["queue"] == "team-a"
    note = next(n.message for n in notes if n.path == "spec.runPolicy.schedulingPolicy.queue")
    assert "Volcano PodGroup" in note and "set spec.schedulerName" not in note, "the pods already say volcano"
    without = convert(pytorchjob(None, replica(2, restart=None), nprocPerNode="1", runPolicy={"schedulingPolicy": {"queue": "q"}}))[1]
    assert "set spec.schedulerName: volcano" in next(n.message for n in without if n.path.endswith("schedulingPolicy.queue"))
    with pytest.raises(NotConvertible, match="Volcano queue"):
        convert(pytorchjob(None, replica(2), runPolicy={"schedulingPolicy": {"queue": 7}}))


@pytest.mark.parametrize("queue", ["Team A", "team_a", "q" * 254, "x\x1b[2J"])
def test_a_volcano_queue_no_queue_object_can_be_named_is_refused_at_its_field(queue):
    """A Volcano Queue is an object, so its name is a DNS-1123 subdomain (the API server's
    customresource validator: ValidateObjectMetaAccessor with NameIsDNSSubdomain). 'Team A' converted
    and validated, and kuberl's PodGroup named a queue that cannot exist: the gang never ran."""
    with pytest.raises(NotConvertible) as refused:
        convert(pytorchjob(None, replica(2, restart=None, schedulerName="volcano"), nprocPerNode="1",
                           runPolicy={"schedulingPolicy": {"queue": queue}}))
    assert "spec.runPolicy.schedulingPolicy.queue" in {p.path for p in refused.value.problems}, refused.value.problems
    written = copy.deepcopy(convert(pytorchjob(None, replica(2, restart=None, schedulerName="volcano"), nprocPerNode="1",
                                               runPolicy={"schedulingPolicy": {"queue": "team-a"}}))[0])
    written["spec"]["template"]["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] = queue
    with pytest.raises(InvalidJob, match=r"spec\.template\.metadata\.annotations\.scheduling\.volcano\.sh/queue-name: expected a Kubernetes object name"):
        validate_job(written)


def test_a_job_multikueue_dispatched_is_told_to_be_created_in_the_worker_cluster():
    """Kueue's MultiKueue sets managedBy: kueue.x-k8s.io/multikueue and runs the job on a worker cluster; the note said
    only 'not carried over', and the RLTrainingJob ran in the manager cluster, whose Kueue has no such integration."""
    from kuberl.tools.jobset import convert_jobset
    from kuberl.tools.trainjob import convert_trainjob

    pj = pytorchjob(None, replica(2), nprocPerNode="1", runPolicy={"backoffLimit": 3, "managedBy": "kueue.x-k8s.io/multikueue"})
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
          "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "trainer": {"image": IMAGE, "command": ["python", "t.py"], "numNodes": 2}}}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
          "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "replicatedJobs": [{"name": "w", "template": {"spec": {
              "parallelism": 2, "template": {"spec": {"containers": [{"name": "pytorch", "image": IMAGE, "command": ["python", "t.py"]}]}}}}}]}}
    for notes, path in ((convert(pj)[1], "spec.runPolicy.managedBy"), (convert_trainjob(tj)[1], "spec.managedBy"),
                        (convert_jobset(js)[1], "spec.managedBy")):
        assert "worker cluster" in next(n.message for n in notes if n.path == path), path



@pytest.mark.parametrize("command", [["accelerate", "launch", "--multi_gpu", "train.py"], ["deepspeed", "train.py"],
                                     ["bash", "-c", "cd /app && /opt/conda/bin/deepspeed train.py --deepspeed ds.json"],
                                     ["tune", "run", "ppo_recipe.py", "--config", "ppo.yaml"]])
def test_another_projects_launcher_starts_a_process_per_gpu_as_torchrun_does(command):
    """accelerate launch, deepspeed and tune run start one process per GPU: kuberl's default, one per GPU, as before;
    only a command that starts no launcher at all is one process on several GPUs."""
    job, _ = convert(pytorchjob(None, replica(2, pytorch(command=command, resources=GPU), restart=None)))
    assert (job["spec"]["gpusPerWorker"], job["spec"].get("procsPerWorker")) == (4, None)


def test_a_flag_named_deepspeed_is_no_launcher():
    job, notes = convert(pytorchjob(None, replica(2, pytorch(command=["python", "train.py", "--deepspeed", "ds.json"], resources=GPU))))
    assert (job["spec"]["gpusPerWorker"], job["spec"]["procsPerWorker"]) == (4, 1)
    assert "the command starts none" in next(n.message for n in notes if n.path == "spec.nprocPerNode")


@pytest.mark.parametrize("nproc", [None, "auto", "1", 1])
def test_one_process_with_every_gpu_of_its_pod_stays_one_process(nproc):
    """PyTorchJob counted nprocPerNode 1, or a word with a command that starts no launcher, as one process per pod
    (WORLD_SIZE = replicas), which drove all 4 GPUs (DataParallel, or a script that spawns its own); kuberl's default
    of one process per GPU made every pod's WORLD_SIZE count ranks that never start, and init_process_group hung."""
    spec = {} if nproc is None else {"nprocPerNode": nproc}
    job, _ = convert(pytorchjob(None, replica(2, pytorch(command=["python", "/app/train.py"], resources=GPU)), **spec))
    assert (job["spec"]["workers"], job["spec"]["gpusPerWorker"], job["spec"]["procsPerWorker"]) == (2, 4, 1)
    validate_job(job)  # a custom trainer may drive several GPUs per process


def test_kueues_older_queue_name_annotation_names_a_pytorchjobs_queue():
    job, _ = convert(with_metadata(annotations={"kueue.x-k8s.io/queue-name": "rl-team"}))
    assert job["spec"]["queueName"] == "rl-team"


@pytest.mark.parametrize(("command", "words"), [
    (["accelerate", "launch", "--num_processes", "2", "train.py"], "accelerate launch is given --num_processes 2"),
    (["bash", "-c", "deepspeed --num_gpus=2 train.py --deepspeed ds.json"], "deepspeed is given --num_gpus 2"),
])
def test_another_launchers_own_process_count_is_named_not_silently_replaced(command, words):
    """`accelerate launch --num_processes 2` on 4 GPUs converted to 4 processes per pod with no word: each pod's
    WORLD_SIZE, CPU share and OMP_NUM_THREADS were sized for processes it never starts."""
    job, notes = convert(pytorchjob(None, replica(2, pytorch(command=command, resources=GPU), restart=None)))
    assert job["spec"].get("procsPerWorker") is None
    note = next(n for n in notes if n.path == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command")
    assert words in note.message and "--procs-per-worker" in note.message, note


def test_another_launchers_count_equal_to_kuberls_needs_no_note():
    _, notes = convert(pytorchjob(None, replica(2, pytorch(command=["accelerate", "launch", "--num-processes=4", "t.py"],
                                                                resources=GPU), restart=None)))
    assert not [n for n in notes if "is given" in n.message]


def test_another_launchers_long_count_is_shown_shortened():
    """A 5,000-digit --num_processes was repeated in full in the note."""
    _, notes = convert(pytorchjob(None, replica(2, pytorch(command=["accelerate", "launch", "--num_processes", "9" * 5000, "t.py"],
                                                                resources=GPU), restart=None)))
    (note,) = [n for n in notes if "is given" in n.message]
    assert "999999999999… (5000 characters)" in note.message and len(note.message) < 400, note.message


def test_a_worker_only_job_whose_command_starts_no_launcher_is_told_its_pods_now_join():
    """training-operator's envvar.go sets WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT only beside a Master: Workers
    alone running `python train.py` ran alone in each pod (or failed at env:// init); kuberl's env joins them."""
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command"
    _, notes = convert(pytorchjob(None, replica(3, restart=None), nprocPerNode="1"))
    said = {n.path: n.message for n in notes}
    assert "ran alone in each pod or failed" in said[path] and "(WORLD_SIZE 3), so it now joins the 3 pods" in said[path]
    for quiet in (pytorchjob(replica(1), replica(2), nprocPerNode="1"), pytorchjob(None, replica(1, restart=None)),
                  pytorchjob(None, replica(2, pytorch(command=TORCHRUN), restart=None), nprocPerNode="1")):
        assert path not in {n.path for n in convert(quiet)[1]}
