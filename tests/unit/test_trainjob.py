"""kuberl convert (and run, validate, render) take a Kubeflow Trainer v2 TrainJob: numNodes, numProcPerNode,
the trainer's command/args/env/image, resourcesPerNode and runtimePatches map where they can; what
only the runtime knows (image, process count) is asked for, never guessed; what cannot carry is a
note naming it. The TrainJobs and runtimes here are kuberl's own, written from Trainer's API
(pkg/apis/trainer/v1alpha1/trainjob_types.go) in the shapes of its examples/yaml (01 multi-node, 02 runtime
patches, 03 Kueue, 05 multi-step); runtime names the converter knows by name (torch-distributed, the flux,
deepspeed, jax and xgboost runtimes) are Trainer's, as a user's TrainJob names them."""

from __future__ import annotations

import copy

import pytest
from conversion_support import assert_any_junk_anywhere_is_converted_or_refused
from kuberl import cli
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import validate_job
from kuberl.core.yamlreader import load_documents
from kuberl.tools.convert import NotConvertible, to_yaml
from kuberl.tools.trainjob import convert_trainjob

IMAGE = "registry.example.com/rl/ppo-trainer:2.13"
SCRIPT = "import torch.distributed as dist\ndist.init_process_group('gloo')\nprint('ppo rank', dist.get_rank())\n"
RUNTIME = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"}
# The Job controller's variable in every node pod of Trainer's Indexed Job; kuberl's from the same rank
COMPLETION_INDEX = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}}


def trainjob(name: str = "ppo-nodes", runtime: dict | None = None, **trainer) -> dict:
    """01-multi-node's shape: no image, no process count, a torchrun --no-python python3 -c script."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": runtime or RUNTIME, "trainer": {
                "numNodes": 3, "command": ["torchrun", "--no-python", "python3", "-c", SCRIPT], **trainer}}}


PATCHES = [{"manager": "rl.example.com/infra", "trainingRuntimeSpec": {"template": {
    "metadata": {"labels": {"group": "rl-research"}},
    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
        "metadata": {"labels": {"example.com/cost-center": "rl"}},
        "spec": {"serviceAccountName": "ppo-sa", "nodeSelector": {"pool": "rl-cpu"},
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "rl", "effect": "NoSchedule"}],
                 "volumes": [{"name": "replays", "persistentVolumeClaim": {"claimName": "ppo-replays"}}],
                 "containers": [{"name": "node", "volumeMounts": [{"name": "replays", "mountPath": "/replays"}],
                                 "securityContext": {"runAsUser": 2100}}],
                 "terminationGracePeriodSeconds": 45}}}}}]}}}}]


def spec_of(doc: dict, **options) -> tuple[dict, dict[str, str]]:
    job, notes = convert_trainjob(doc, **options)
    validate_job(job)
    return job["spec"], {n.path: n.message for n in notes}


def test_the_multi_node_example_asks_for_its_image_then_its_process_count():
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(trainjob())
    (problem,) = e.value.problems
    assert problem.path == "spec.trainer.image" and "--image" in problem.message and "torch-distributed" in problem.message
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(trainjob(), image=IMAGE)
    (problem,) = e.value.problems
    assert problem.path == "spec.trainer.numProcPerNode" and "--procs-per-worker" in problem.message
    spec, notes = spec_of(trainjob(), image=IMAGE, procs_per_worker=2)
    assert (spec["image"], spec["workers"], spec["procsPerWorker"]) == (IMAGE, 3, 2)
    assert spec["template"]["spec"]["containers"][0]["command"][-1] == SCRIPT, "the multi-line script passes intact"
    assert "spec.runtimeRef" in notes


@pytest.mark.parametrize(("trainer", "expected"), [
    ({"image": IMAGE, "numProcPerNode": 4}, {"procsPerWorker": 4}),
    ({"image": IMAGE, "numProcPerNode": "2"}, {"procsPerWorker": 2}),  # Trainer 2.0's IntOrString
    ({"image": IMAGE, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4, "cpu": "16"}}},
     {"gpusPerWorker": 4, "procsPerWorker": None, "resources": {"limits": {"cpu": "16"}}}),
    # the torch plugin: auto with no GPU starts one process per CPU of resourcesPerNode (the request first)
    ({"image": IMAGE, "resourcesPerNode": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}}, {"procsPerWorker": 2}),
    ({"image": IMAGE, "resourcesPerNode": {"limits": {"cpu": "1500m"}}}, {"procsPerWorker": 2}),
    ({"image": IMAGE, "command": ["torchrun", "--nproc_per_node=3", "/workspace/t.py"]}, {"procsPerWorker": 3}),
    ({"image": IMAGE, "numNodes": None, "numProcPerNode": 1}, {"workers": 1}),
])
def test_the_trainers_fields_map(trainer, expected):
    spec, _ = spec_of(trainjob(**trainer))
    assert {k: spec.get(k) for k in expected} == expected


def test_the_command_lines_count_wins_over_numprocpernode_as_in_torchrun():
    spec, notes = spec_of(trainjob(image=IMAGE, numProcPerNode=2, command=["torchrun", "--nproc_per_node=4", "t.py"]))
    assert spec["procsPerWorker"] == 4
    assert "torchrun took the command line's --nproc-per-node '4'" in notes["spec.trainer.numProcPerNode"]


def test_runtime_patches_land_in_the_pod_template():
    doc = trainjob(image=IMAGE, numProcPerNode=1, env=[{"name": "ROLLOUT_STEPS", "value": "128"}, {"name": "PET_NNODES", "value": "9"}])
    doc["spec"]["runtimePatches"] = PATCHES
    spec, notes = spec_of(doc)
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ppo-sa" and pod["nodeSelector"] == {"pool": "rl-cpu"}
    assert pod["tolerations"][0]["key"] == "dedicated" and pod["volumes"][0]["name"] == "replays"
    (trainer,) = pod["containers"]
    assert trainer["volumeMounts"] == [{"name": "replays", "mountPath": "/replays"}] and trainer["securityContext"] == {"runAsUser": 2100}
    assert trainer["env"] == [{"name": "ROLLOUT_STEPS", "value": "128"}, COMPLETION_INDEX]
    assert spec["template"]["metadata"] == {"labels": {"example.com/cost-center": "rl"}}
    assert spec["runPolicy"]["terminationGracePeriodSeconds"] == 45
    assert "PET_NNODES not carried over" in notes["spec.trainer.env[1]"]
    assert "no JobSet" in notes["spec.runtimePatches[0].trainingRuntimeSpec.template.metadata"]
    assert "spec.trainer" not in notes, "a securityContext came with the patch"


def test_what_cannot_carry_is_named_one_line_each():
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["spec"] |= {"initializer": {"dataset": {"storageUri": "hf://example-org/cartpole-rollouts"}, "model": {"storageUri": "hf://example-org/ppo-policy"}},
                    "managedBy": "kueue.x-k8s.io/multikueue", "suspend": True,
                    "podTemplateOverrides": [{"targetJobs": [{"name": "dataset-initializer"}], "spec": {"nodeSelector": {"a": "b"}}}],
                    "activeDeadlineSeconds": 600}
    doc["spec"]["runtimePatches"] = [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "dataset-initializer", "template": {}},
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "initContainers": [{"name": "fetch"}], "schedulingGates": [{"name": "g"}],
            "containers": [{"name": "sidecar", "env": []}]}}}}}]}}}}]
    doc["status"] = {"conditions": []}
    spec, notes = spec_of(doc)
    assert spec["runPolicy"] == {"suspend": True, "activeDeadlineSeconds": 600}
    jobs = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs"
    pod = f"{jobs}[1].template.spec.template.spec"
    for path in ("spec.initializer.dataset", "spec.initializer.model", "spec.managedBy", "spec.podTemplateOverrides[0]",
                 "status", f"{jobs}[0]", f"{pod}.initContainers", f"{pod}.schedulingGates", f"{pod}.containers[0]"):
        assert notes[path].startswith("not carried over"), path
    assert "kuberl run does not" in notes["spec.initializer.dataset"]


def test_the_kueue_label_is_the_queue_and_suspend_is_noted():
    doc = trainjob(image=IMAGE, command=["python3", "-c", "print('one ppo process')"],
                   resourcesPerNode={"requests": {"cpu": "2"}, "limits": {"cpu": "4"}})
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "rl-team"}
    doc["spec"]["suspend"] = True
    spec, notes = spec_of(doc)
    assert spec["queueName"] == "rl-team" and spec["runPolicy"]["suspend"] is True
    assert "nothing unsuspends" in notes["spec.suspend"]
    # Trainer set PET_NPROC_PER_NODE=2 from the CPU request, but `python3 -c` is one process: WORLD_SIZE counts 1 a pod
    assert spec.get("procsPerWorker") is None and "starts no torch launcher" in notes["spec.trainer.numProcPerNode"]


@pytest.mark.parametrize(("doc", "path", "words"), [
    ({**trainjob(image=IMAGE), "apiVersion": "kubeflow.org/v2alpha1"}, "apiVersion", "before Kubeflow Trainer 2.0"),
    (trainjob(image=IMAGE, numProcPerNode=1, command=None), "spec.trainer.command", "set command"),
    (trainjob(image=IMAGE, numProcPerNode="auto", command=["torchrun", "--nproc_per_node=cpu", "t.py"]),
     "spec.trainer.command[1]", "affinity mask"),
    (trainjob(image=IMAGE, numProcPerNode=1, numNodes=5000), "spec.trainer.numNodes", "at most 1024"),
    (trainjob(image=IMAGE, numProcPerNode=1, env=[{"name": "X", "value": 1}]), "spec.trainer.env[0].value", "quote it"),
    # Trainer's JAX runtime on a multi-host TPU slice (as a JobSet's or PyTorchJob's are refused): converted, its hosts
    # never met without GKE's TPU webhook env
    (trainjob(image=IMAGE, numProcPerNode=1, numNodes=4, resourcesPerNode={"limits": {"google.com/tpu": 4}}),
     "spec.trainer.resourcesPerNode.limits.google.com/tpu", "TPU_WORKER_HOSTNAMES"),
    # a GPU asked for in requests alone is named there, not at a limit the TrainJob never wrote
    (trainjob(image=IMAGE, numProcPerNode=2, resourcesPerNode={"requests": {"nvidia.com/gpu": 1}}),
     "spec.trainer.numProcPerNode", "must equal spec.trainer.resourcesPerNode.requests.nvidia.com/gpu"),
])
def test_what_cannot_be_converted_is_refused_at_the_trainjobs_field(doc, path, words):
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(doc)
    assert e.value.problems[0].path == path and words in e.value.problems[0].message, e.value.problems


def test_the_user_kuberl_runs_as_is_said_without_calling_the_trainer_unset():
    _, notes = spec_of(trainjob(image=IMAGE, numProcPerNode=1))
    note = notes["spec.trainer"]
    assert note.startswith("no securityContext (a TrainJob's trainer has no such field): changed") and "65532" in note


def test_the_pods_get_what_trainer_gave_them():
    """Trainer sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR/PORT: kuberl sets those and more."""
    job, _ = convert_trainjob(trainjob(image=IMAGE, numProcPerNode=2))
    pods = [o for o in render_job(job, "default", PLACEHOLDER_UID) if o["kind"] == "Pod"]
    assert len(pods) == 3
    env = {e["name"]: e.get("value") for e in pods[2]["spec"]["containers"][0]["env"]}
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"], env["WORLD_SIZE"]) == ("3", "2", "2", "6")


def test_any_value_anywhere_converts_or_is_refused_with_a_path_never_a_traceback():
    doc = trainjob(image=IMAGE, numProcPerNode=1, env=[{"name": "A", "value": "1"}],
                   resourcesPerNode={"limits": {"cpu": "2"}})
    doc["spec"]["runtimePatches"] = PATCHES
    assert_any_junk_anywhere_is_converted_or_refused(doc, convert_trainjob)


def test_convert_run_and_validate_take_a_trainjob(tmp_path, capsys):
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-distributed"}, "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}}}
    path = tmp_path / "tj.yaml"
    path.write_text(to_yaml([runtime, trainjob()]))
    assert cli.main(["convert", str(path)]) == 1
    err = capsys.readouterr().err
    assert "ClusterTrainingRuntime 'torch-distributed': left out: a Kubeflow Trainer runtime" in err
    assert "spec.trainer.image: unset: the image comes from" in err, "this runtime names no image"
    assert cli.main(["convert", "--image", IMAGE, "--procs-per-worker", "2", str(path)]) == 0
    out, err = capsys.readouterr()
    (job,) = load_documents(out)
    assert (job["spec"]["image"], job["spec"]["procsPerWorker"]) == (IMAGE, 2)
    assert f"{path}: TrainJob 'ppo-nodes': spec.runtimeRef: not carried over" in err
    try:  # run and validate take no --image: they say where it is asked
        code = cli.main(["validate", str(path)])
    except SystemExit as e:
        code, said = 1, str(e.code)
    else:
        said = ""
    assert code == 1
    assert f"kuberl convert --image IMAGE --procs-per-worker N {path} > job.yaml" in said + capsys.readouterr().err
    path.write_text(to_yaml([trainjob(image=IMAGE, numProcPerNode=1)]))
    assert cli.main(["validate", str(path)]) == 0
    assert "3 worker(s) x 1 process(es)" in capsys.readouterr().out


def test_a_runtime_in_the_same_file_gives_the_trainer_its_image_resources_and_node_count(tmp_path, capsys):
    """05-multi-step and 04-volcano ship their runtime beside the TrainJob: nothing to ask for then."""
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "with-init"},
               "spec": {"mlPolicy": {"numNodes": 2, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                   {"name": "dataset-initializer", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "dataset-initializer", "image": "registry.example.com/rl/fetch-rollouts:1"}]}}}}},
                   {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "node", "image": IMAGE, "resources": {"requests": {"cpu": "3"}}}]}}}}}]}}}}
    doc = trainjob(runtime={"kind": "TrainingRuntime", "name": "with-init"}, numNodes=None)
    job, notes = convert_trainjob(doc, runtimes=[runtime])
    assert (job["spec"]["image"], job["spec"]["workers"], job["spec"]["procsPerWorker"]) == (IMAGE, 2, 3)
    taken = {n.path for n in notes if "taken from TrainingRuntime 'with-init' in the same file" in n.message}
    assert taken == {"spec.trainer.image", "spec.trainer.numNodes", "spec.trainer.resourcesPerNode"}
    path = tmp_path / "tj.yaml"
    path.write_text(to_yaml([runtime, doc]))
    assert cli.main(["convert", str(path)]) == 0
    assert cli.main(["validate", str(path)]) == 0
    assert "2 worker(s) x 3 process(es)" in capsys.readouterr().out


def test_a_runtime_in_the_same_file_gives_the_process_count_its_torch_policy_states():
    """kubeflow/trainer manifests/base/runtimes/torch_distributed.yaml's shape, with mlPolicy.torch.numProcPerNode set:
    Trainer's torch plugin takes it unless the TrainJob sets its own. convert refused the TrainJob beside it, saying
    the count 'comes from ClusterTrainingRuntime 'torch-distributed', which kuberl cannot see'. Left unset (today's
    runtime, `torch: {}`) or 'auto' (v2.1's) with no resources on the node container or the TrainJob, Trainer gives 1:
    kubeflow/trainer pkg/runtime/framework/plugins/torch/torch.go (since v2.1.0), EnforceMLPolicy: 'auto' and no GPU
    in resourcesPerNode set PET_NPROC_PER_NODE to max(1, getNumCPUPerNode(resourcesPerNode)), and that is 0 for none.
    convert refused it, saying torchrun's auto would count the node's CPUs."""
    def runtime(torch):
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "torch-distributed"},
                "spec": {"mlPolicy": {"numNodes": 1, "torch": torch}, "template": {"spec": {"replicatedJobs": [
                    {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": IMAGE}]}}}}}]}}}}
    job, notes = convert_trainjob(trainjob(), runtimes=[runtime({"numProcPerNode": 2})])
    assert job["spec"]["procsPerWorker"] == 2
    assert any(n.path == "spec.trainer.numProcPerNode" and "taken from ClusterTrainingRuntime 'torch-distributed' in the same"
               " file" in n.message for n in notes)
    job, _ = convert_trainjob(trainjob(numProcPerNode=4), runtimes=[runtime({"numProcPerNode": 2})])
    assert job["spec"]["procsPerWorker"] == 4  # the TrainJob's own wins
    for torch in ({}, {"numProcPerNode": "auto"}):
        job, notes = convert_trainjob(trainjob(), runtimes=[runtime(torch)])
        assert job["spec"]["procsPerWorker"] == 1
        assert any(n.path == "spec.trainer.numProcPerNode" and "sets PET_NPROC_PER_NODE to 1" in n.message for n in notes)
    job, _ = convert_trainjob(trainjob(command=["torchrun", "--nproc-per-node=3", "t.py"]), runtimes=[runtime({})])
    assert job["spec"]["procsPerWorker"] == 3  # torchrun's own flag wins over PET_NPROC_PER_NODE


def test_a_runtime_in_the_file_whose_torch_policy_says_gpu_or_cpu_is_read_or_asked_for_at_the_runtime():
    """Trainer v2.0's TorchMLPolicySource.numProcPerNode (kubeflow/trainer pkg/apis/trainer/v1alpha1/
    trainingruntime_types.go, IntOrString: auto, cpu, gpu or a count). convert refused it at spec.trainer.numProcPerNode,
    a field the TrainJob never set, as 'expected a number of processes (got 'gpu')'."""
    def runtime(nproc, resources):
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "torch-distributed"},
                "spec": {"mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": nproc}}, "template": {"spec": {
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": IMAGE, "resources": resources}]}}}}}]}}}}
    gpus = {"limits": {"nvidia.com/gpu": 4}}
    job, notes = convert_trainjob(trainjob(), runtimes=[runtime("gpu", gpus)])
    assert job["spec"]["gpusPerWorker"] == 4 and job["spec"].get("procsPerWorker") in (None, 4)
    assert any(n.path == "spec.runtimeRef" and "'gpu': one process per GPU" in n.message for n in notes)
    for nproc, resources in (("cpu", {"limits": {"cpu": 4}}), ("gpu", {"limits": {"cpu": 4}})):
        with pytest.raises(NotConvertible) as e:
            convert_trainjob(trainjob(), runtimes=[runtime(nproc, resources)])
        assert [p.path for p in e.value.problems] == ["spec.runtimeRef"]
        assert f"mlPolicy.torch.numProcPerNode {nproc!r}" in e.value.problems[0].message
        assert "--procs-per-worker N" in e.value.problems[0].message
        job, _ = convert_trainjob(trainjob(), procs_per_worker=2, runtimes=[runtime(nproc, resources)])
        assert job["spec"]["procsPerWorker"] == 2
    job, _ = convert_trainjob(trainjob(numProcPerNode=3), runtimes=[runtime("cpu", {"limits": {"cpu": 4}})])
    assert job["spec"]["procsPerWorker"] == 3  # the TrainJob's own wins


# Trainer v2.1's podTemplateOverrides (since replaced by runtimePatches), as training-on-eks's samples use them: the
# nodes kept in one zone by their JobSet's name, a node type, a memory-backed /dev/shm of its own size
OVERRIDDEN = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "ppo-zone"},
    "spec": {
        "podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "spec": {
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "ppo-zone"}},
                 "topologyKey": "topology.kubernetes.io/zone"}]}},
            "nodeSelector": {"node.kubernetes.io/instance-type": "rl-large"},
            "containers": [{"name": "node", "volumeMounts": [{"mountPath": "/dev/shm", "name": "shm"}]}],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "6Gi"}}]}}],
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": 4, "numProcPerNode": 1, "image": IMAGE,
                    "env": [{"name": "GLOO_SOCKET_IFNAME", "value": "eth0"}],
                    "command": ["/bin/bash", "-c", "torchrun --nproc_per_node=1 --rdzv_backend=c10d /opt/rl/ppo.py"],
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "example.com/fast-nic": 1}}}}}


def test_trainer_v2_1_pod_template_overrides_carry_as_runtime_patches_do():
    job, notes = convert_trainjob(OVERRIDDEN)
    spec, notes = job["spec"], {n.path: n.message for n in notes}
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "rl-large"}
    assert pod["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "6Gi"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"mountPath": "/dev/shm", "name": "shm"}]
    selector = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
    assert selector == {"matchLabels": {"kuberl.dev/job": "ppo-zone"}}
    assert not any(path.startswith("spec.podTemplateOverrides") and "not carried over" in message
                   for path, message in notes.items()), notes
    rendered = render_job(job, "default", PLACEHOLDER_UID)
    shm = [v for p in rendered if p["kind"] == "Pod" for v in p["spec"]["volumes"] if v["name"] == "shm"]
    assert shm and all(v["emptyDir"]["sizeLimit"] == "6Gi" for v in shm), "the job's /dev/shm size wins over kuberl's default"


def test_trainer_v2_0_pod_spec_overrides_carry_too_and_other_jobs_are_named():
    """podSpecOverrides (kubeflow/trainer v2.0 pkg/apis/trainer/v1alpha1/trainjob_types.go PodSpecOverride): the pod
    fields sit beside targetJobs."""
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["spec"]["podSpecOverrides"] = [
        {"targetJobs": [{"name": "node"}], "serviceAccountName": "ppo-sa",
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"targetJobs": [{"name": "dataset-initializer"}], "volumes": [{"name": "cache", "emptyDir": {}}]}]
    spec, notes = spec_of(doc)
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ppo-sa"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "volumes" not in pod
    assert "'dataset-initializer'" in notes["spec.podSpecOverrides[1]"] and "spec.podSpecOverrides[0]" not in notes


def test_any_value_anywhere_in_pod_template_overrides_converts_or_is_refused():
    assert_any_junk_anywhere_is_converted_or_refused(OVERRIDDEN, convert_trainjob)


# A TrainJob launched by Trainer's Flux runtime (mlPolicy.flux), as its flux example is: an MPI program that is no
# torch program, and the runtime beside it
SIM_FLUX = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "sim-flux"},
            "spec": {"runtimeRef": {"name": "flux-distributed"},
                     "trainer": {"numNodes": 2, "numProcPerNode": 4, "image": "registry.example.com/sim/cartpole-mpi:1",
                                 "command": ["/opt/sim/step", "--cells", "64", "--steps", "1000"],
                                 "env": [{"name": "SIM_LOG_DIR", "value": "/tmp/sim"}]}}}
FLUX_RUNTIME = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "flux-distributed", "labels": {"trainer.kubeflow.org/framework": "flux"}},
                "spec": {"mlPolicy": {"numNodes": 1, "flux": {}}, "template": {"spec": {"replicatedJobs": [
                    {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": "registry.example.com/sim/flux-base:1"}]}}}}}]}}}}


@pytest.mark.parametrize(("runtimes", "ref", "words"), [
    ((), {"name": "flux-distributed"}, "Kubeflow Trainer's flux runtime"),
    ((), {"name": "flux-runtime"}, "Kubeflow Trainer's flux runtime"),  # its first name (examples/flux, 2025)
    ((FLUX_RUNTIME,), {"name": "flux-distributed"}, "in this file has mlPolicy.flux"),
    ((), {"name": "deepspeed-distributed"}, "mpirun"),  # manifests/base/runtimes/deepspeed_distributed.yaml: mlPolicy.mpi
    ((), {"name": "jax-distributed"}, "JAX_COORDINATOR_ADDRESS"),
    ((), {"name": "xgboost-distributed"}, "DMLC_TRACKER_URI"),
], ids=["flux-by-name", "flux-by-its-first-name", "flux-in-the-file", "deepspeed-mpi", "jax", "xgboost"])
def test_a_trainjob_of_another_framework_than_torch_is_refused_at_its_runtime(runtimes, ref, words):
    doc = {**SIM_FLUX, "spec": {**SIM_FLUX["spec"], "runtimeRef": ref}}
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(doc, runtimes=runtimes)
    (problem,) = e.value.problems
    assert problem.path == "spec.runtimeRef.name" and words in problem.message and "torch.distributed" in problem.message


def test_a_torch_runtime_of_a_known_name_in_the_file_wins_over_the_name():
    torch_runtime = {**FLUX_RUNTIME, "spec": {**FLUX_RUNTIME["spec"], "mlPolicy": {"numNodes": 1, "torch": {}}}}
    spec, _ = spec_of(SIM_FLUX, runtimes=[torch_runtime])
    assert (spec["workers"], spec["procsPerWorker"]) == (2, 4)


def rocm_trainjob(gpu: str = "amd.com/gpu") -> dict:
    """kubeflow/trainer docs/user-guides/pytorch-rocm.md: a TrainJob on torch-distributed with resources_per_node
    {"amd.com/gpu": ...}; Trainer counts any resource named gpu (runtime.GetNumGPUPerNode) and leaves torchrun auto."""
    return trainjob(image="registry.example.com/rl/ppo-rocm:1", numNodes=2,
                    resourcesPerNode={"limits": {gpu: 8}})


def test_a_trainjob_on_amd_gpus_starts_one_process_per_gpu():
    spec, notes = spec_of(rocm_trainjob())
    assert spec["procsPerWorker"] == 8 and spec["resources"] == {"limits": {"amd.com/gpu": 8}}
    assert "ROCm build" in notes["spec.trainer.numProcPerNode"]


def test_a_trainjob_on_another_gpu_asks_for_the_process_count():
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(rocm_trainjob("gpu.intel.com/xe"))
    (problem,) = e.value.problems
    assert problem.path == "spec.trainer.numProcPerNode" and "--procs-per-worker" in problem.message
    spec, _ = spec_of(rocm_trainjob("gpu.intel.com/xe"), procs_per_worker=8)
    assert spec["procsPerWorker"] == 8


def test_any_value_anywhere_in_a_rocm_trainjob_converts_or_is_refused():
    assert_any_junk_anywhere_is_converted_or_refused(rocm_trainjob(), convert_trainjob)


def test_any_value_in_resources_per_node_that_sets_the_process_count_is_converted_or_refused():
    """Trainer's CPU count (getNumCPUPerNode) read from resourcesPerNode: a cpu that is no quantity is refused
    at its field, not a traceback."""
    doc = trainjob(image=IMAGE, resourcesPerNode={"requests": {"cpu": "2"}, "limits": {"cpu": "4"}})
    assert spec_of(doc)[0]["procsPerWorker"] == 2
    assert_any_junk_anywhere_is_converted_or_refused(doc, convert_trainjob)


def test_a_kueue_priority_class_on_the_trainjob_reaches_the_pods():
    """kubernetes-sigs/kueue site/content/en/docs/concepts/workload_priority_class.md: a job gets its
    WorkloadPriorityClass from its kueue.x-k8s.io/priority-class label; kuberl's pods are Kueue's pod group, which
    reads it from the pods."""
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "rl-team", "kueue.x-k8s.io/priority-class": "rl-urgent"}
    spec, notes = spec_of(doc)
    assert spec["template"]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "rl-urgent"
    assert "metadata.labels.kueue.x-k8s.io/priority-class" in notes


def test_the_patch_kueue_wrote_on_admission_is_not_carried():
    """An admitted TrainJob as `kubectl get -o yaml` gives it: Kueue's runtime patch (kubernetes-sigs/kueue
    pkg/controller/jobs/trainjob/trainjob_controller.go RunWithPodSetsInfo, manager kueue.x-k8s.io/manager) holds
    the flavor's nodeSelector and tolerations; the user's patch beside it is carried."""
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "rl-team"}
    kueue = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"}},
            "spec": {"nodeSelector": {"example.com/flavor": "spot-a"},
                     "tolerations": [{"key": "example.com/preemptible", "operator": "Exists", "effect": "NoSchedule"}]}}}}}]}}}}
    doc["spec"]["runtimePatches"] = [kueue, *PATCHES]
    spec, notes = spec_of(doc)
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "rl-cpu"}, "the user's, not the flavor Kueue chose then"
    assert all(t["key"] != "example.com/preemptible" for t in pod["tolerations"])
    assert "kueue.x-k8s.io/podset" not in spec["template"]["metadata"]["labels"]
    assert notes["spec.runtimePatches[0]"].startswith("not carried over: Kueue wrote it")
    doc["spec"]["podTemplateOverrides"] = [{**kueue, "targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"x": "y"}}}]
    del doc["spec"]["runtimePatches"]
    spec, notes = spec_of(doc)
    assert "nodeSelector" not in spec["template"]["spec"] and "Kueue wrote it" in notes["spec.podTemplateOverrides[0]"]


def test_a_gang_scheduling_runtime_in_the_file_says_how_kuberl_gangs():
    """A runtime with podGroupPolicy.volcano (the shape of Trainer's examples/yaml/04-volcano-integration.yaml) made
    Trainer create a Volcano PodGroup; kuberl makes one only for spec.schedulerName volcano, which the file does not say."""
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "rl-gang", "labels": {"trainer.kubeflow.org/framework": "torch"}},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "podGroupPolicy": {"volcano": {}},
                        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                            "containers": [{"name": "node", "image": IMAGE}]}}}}}]}}}}
    doc = trainjob(runtime={"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "rl-gang"},
                   numNodes=4, command=["python3", "-c", "print('one ppo process')"],
                   resourcesPerNode={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}})
    job, notes = convert_trainjob(doc, runtimes=[runtime])
    gang = [n.message for n in notes if n.path == "spec.runtimeRef" and "podGroupPolicy.volcano" in n.message]
    assert len(gang) == 1 and "spec.schedulerName" in gang[0] and "spec.queueName" in gang[0]
    assert "schedulerName" not in job["spec"], "which scheduler the pods run under is the user's to say"


def test_a_command_that_names_a_jobset_pod_is_noted_with_kuberls_name_for_it():
    """Trainer's torch plugin gives PET_MASTER_ADDR as <trainjob>-node-0-0.<trainjob> (JobSet's hostname and
    subdomain); a command that writes it out names a pod kuberl's gang does not have."""
    doc = trainjob(image=IMAGE, numProcPerNode=1,
                   command=["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=ppo-nodes-node-0-0.ppo-nodes:29400", "t.py"])
    _, notes = spec_of(doc)
    assert "its pod is ppo-nodes-0, reached as ppo-nodes-0.ppo-nodes" in notes["spec.trainer.command[2]"]


def test_a_patched_pod_security_context_that_says_who_runs_keeps_saying_it():
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["spec"]["runtimePatches"] = [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"securityContext": {"runAsUser": 2100, "fsGroup": 2200}}}}}}]}}}}]
    spec, notes = spec_of(doc)
    assert spec["template"]["spec"]["containers"][0]["securityContext"] == {"runAsUser": 2100}
    path = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.securityContext"
    assert "runs as the TrainJob's did" in notes[path] and "spec.trainer" not in notes


def test_the_runtime_patches_service_account_is_told_its_token_is_no_longer_mounted():
    """A runtime patch that names the node pods' serviceAccountName, as Trainer's 02-runtime-patches example does."""
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["spec"]["runtimePatches"] = PATCHES
    _, notes = spec_of(doc)
    path = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.serviceAccountName"
    assert "automountServiceAccountToken: true" in notes[path] and "TrainJob's pods had 'ppo-sa'" in notes[path]


def test_a_trainer_that_reads_job_completion_index_still_gets_it():
    """Trainer's node Job is an Indexed Job, so every node's container had JOB_COMPLETION_INDEX (the Job
    controller's; kubeflow/trainer's torch plugin reads the same index for PET_NODE_RANK); kuberl's pods get it from
    kuberl.dev/rank when the trainer reads it."""
    doc = trainjob(image=IMAGE, numProcPerNode=1,
                   command=["sh", "-c", "python /app/train.py --node-index $JOB_COMPLETION_INDEX"])
    job, notes = convert_trainjob(doc)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}}]
    assert "Indexed Job" in {n.path: n.message for n in notes}["spec.trainer.command[2]"]
    pods = [p for p in render_job(job, "default", PLACEHOLDER_UID) if p["kind"] == "Pod"]
    assert [p["metadata"]["labels"]["kuberl.dev/rank"] for p in pods] == ["0", "1", "2"]
    # a script file the command starts may read it too: every node's container had it
    assert convert_trainjob(trainjob(image=IMAGE, numProcPerNode=1))[0]["spec"]["template"]["spec"]["containers"][0]["env"] == [
        COMPLETION_INDEX]


def test_args_alone_run_the_runtimes_command_so_they_need_it():
    """kubeflow/trainer pkg/runtime/framework/plugins/jobset/builder.go replaces the node container's command and args
    each alone: a TrainJob with args only ran its runtime's command with them. A runtime that has one (Trainer's
    torchtune runtimes run `tune run ...`) is not in the file, so kuberl cannot see it; the torch-distributed runtime
    has none, so the image's ENTRYPOINT ran them, as in kuberl's pod."""
    tune = trainjob(runtime={"name": "rl-tuner"}, image=IMAGE, numProcPerNode=1, args=["epochs=3"])
    del tune["spec"]["trainer"]["command"]
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(tune)
    (problem,) = e.value.problems
    assert problem.path == "spec.trainer.command" and "the node command of ClusterTrainingRuntime 'rl-tuner'" in problem.message
    plain = trainjob(image=IMAGE, numProcPerNode=1, args=["--epochs", "3"])
    del plain["spec"]["trainer"]["command"]
    spec, _ = spec_of(plain)
    assert spec["template"]["spec"]["containers"][0] == {"name": "trainer", "args": ["--epochs", "3"], "env": [COMPLETION_INDEX]}


def test_a_runtime_in_the_file_gives_the_command_args_run_under():
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "rl-tuner"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                   {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "node", "image": "registry.example.com/rl/tuner:1",
                        "command": ["tune", "run", "ppo_recipe.py", "--config", "ppo.yaml"]}]}}}}}]}}}}
    doc = trainjob(runtime={"name": "rl-tuner"}, numProcPerNode=1, args=["epochs=3"])
    del doc["spec"]["trainer"]["command"]
    job, notes = convert_trainjob(doc, runtimes=[runtime])
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert (trainer["command"][:2], trainer["args"]) == (["tune", "run"], ["epochs=3"])
    assert "taken from ClusterTrainingRuntime 'rl-tuner'" in {n.path: n.message for n in notes}["spec.trainer.command"]


def test_a_runtime_in_the_file_with_env_says_it_is_not_carried():
    """Trainer upserts spec.trainer.env into the runtime node container's env (torch plugin, apply.UpsertEnvVars):
    the runtime's own variables reached the pods too."""
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "rl-custom"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                   {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "node", "image": IMAGE, "env": [{"name": "GLOO_SOCKET_IFNAME", "value": "eth0"}]}]}}}}}]}}}}
    doc = trainjob(runtime={"kind": "TrainingRuntime", "name": "rl-custom"}, numProcPerNode=1)
    _, notes = convert_trainjob(doc, runtimes=[runtime])
    assert any("(GLOO_SOCKET_IFNAME)" in n.message and "add it to spec.trainer.env" in n.message for n in notes if n.path == "spec.runtimeRef")


@pytest.mark.parametrize(("second", "field", "words"), [
    ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "other"}}]},
     "spec.podSpecOverrides[1].volumes[0].name", "'data': a volume of that name is already in the pod"),
    ({"volumes": [{"name": "cache", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]},
     "spec.podSpecOverrides[1].volumes[1].name", "'cache': a volume of that name is already in the pod"),
    ({"containers": [{"name": "node", "volumeMounts": [{"name": "cache", "mountPath": "/data"}]}],
      "volumes": [{"name": "cache", "emptyDir": {}}]},
     "spec.podSpecOverrides[1].containers[0].volumeMounts[0].mountPath", "'/data': the trainer container already mounts"),
])
def test_overrides_that_add_up_to_a_pod_the_api_server_refuses_are_refused_at_the_field(second, field, words):
    """Two overrides (or an override and a runtime patch) that both bring a volume `data`, or a mount at /data, were
    appended: kuberl validate said valid and every pod create was refused (ValidatePodSpec: a volume name twice is
    "Duplicate value", a mountPath twice in one container "must be unique")."""
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    doc["spec"]["podSpecOverrides"] = [
        {"targetJobs": [{"name": "node"}], "volumes": [{"name": "data", "emptyDir": {}}],
         "containers": [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
        {"targetJobs": [{"name": "node"}], **second}]
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(doc)
    assert [p.path for p in e.value.problems] == [field]
    assert words in e.value.problems[0].message and "the API server refuses the pod" in e.value.problems[0].message


def test_a_patched_volume_named_as_kuberls_configuration_volume_is_renamed_with_its_mounts():
    doc = trainjob(image=IMAGE, numProcPerNode=1)
    patches = copy.deepcopy(PATCHES)
    pod = patches[0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["volumes"][0]["name"] = "config"
    pod["containers"][0]["volumeMounts"][0]["name"] = "config"
    doc["spec"]["runtimePatches"] = patches
    spec, notes = spec_of(doc)
    assert spec["template"]["spec"]["volumes"] == [{"name": "trainjob-config", "persistentVolumeClaim": {"claimName": "ppo-replays"}}]
    assert spec["template"]["spec"]["containers"][0]["volumeMounts"] == [{"name": "trainjob-config", "mountPath": "/replays"}]
    assert "renamed 'trainjob-config'" in notes["spec.template.spec.volumes[0].name"]


def test_a_runtimes_initializer_jobs_and_the_nodes_mounts_are_said_when_the_runtime_is_in_the_file():
    """A runtime whose dataset and model initializer Jobs fill the 'initializer' claim the node container reads at
    /workspace (the shape of Trainer's torchtune runtimes); kuberl takes the node's command and ran it over an empty
    /workspace, with only the general runtimeRef note."""
    node = {"name": "node", "image": "registry.example.com/rl/tuner:1",
            "command": ["tune", "run", "ppo_recipe.py", "--config", "ppo.yaml"],
            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "rl-tuner"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                   {"name": "dataset-initializer", "template": {"spec": {"template": {"spec": {"containers": [
                       {"name": "dataset-initializer", "image": "registry.example.com/rl/fetch-rollouts:1"}]}}}}},
                   {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [node]}}}}}]}}}}
    doc = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "ppo-tune"},
           "spec": {"runtimeRef": {"name": "rl-tuner"},
                    "trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2, "cpu": "8"}}}}}
    _, notes = convert_trainjob(doc, runtimes=[runtime])
    said = [n.message for n in notes if n.path == "spec.runtimeRef"]
    assert any("'dataset-initializer' Job" in m for m in said), said
    assert any("initializer at /workspace" in m for m in said), said
    assert not any("'node' Job" in m for m in said)
