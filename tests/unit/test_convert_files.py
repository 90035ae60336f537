"""A published job file holds more than the job: kuberl run, validate, render and convert take the
PyTorchJob (or RLTrainingJob) from a file of several documents or a `kind: List`, carry the
ConfigMaps it reads, and name every other document they leave out on stderr, one line each;
several job documents are refused, each named. The etcd objects beside an etcd-rendezvous
PyTorchJob (the shape of aws-samples/awsome-distributed-training's pytorch/ddp job file) are
called out as replaced by kuberl's static rendezvous."""

from __future__ import annotations

import pytest
from kuberl import cli
from kuberl.core.yamlreader import MAX_DOCUMENT_BYTES, load_documents
from kuberl.local.runner import split_documents
from kuberl.tools.convert import NotConvertible, to_yaml
from kuberl.tools.documents import runnable_documents

IMAGE = "registry.example.com/rl/ppo-ddp:1"

# The etcd server beside an etcd-rendezvous job: the Service is known by the job's rdzvHost, the Deployment by its image
ETCD_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "rollout-store"},
                "spec": {"ports": [{"name": "client", "port": 2379}], "selector": {"app": "rollout-store"}}}
ETCD_DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rollout-store-server"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "rollout-store"}}, "template": {
                       "metadata": {"labels": {"app": "rollout-store"}},
                       "spec": {"containers": [{"name": "server", "image": "registry.example.com/infra/etcd:3.5"}]}}}}



def load_job(path):
    """What `kuberl run` runs of a file: its documents made runnable (`kuberl.cli.cmd_run`), then the
    job and the ConfigMaps beside it."""
    return split_documents(runnable_documents(cli.load_jobs(path), path, one_job=True), path)

def pytorchjob(name: str = "ppo-ddp", **elastic) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": {
        "elasticPolicy": {"rdzvBackend": "etcd", "rdzvHost": "rollout-store", "rdzvPort": 2379, "minReplicas": 2,
                          "maxReplicas": 4, **elastic},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": {"spec": {
            "containers": [{"name": "pytorch", "image": IMAGE,
                            "command": ["torchrun", "--nproc_per_node=1", "--nnodes=2", "/opt/rl/ppo_ddp.py"],
                            "envFrom": [{"configMapRef": {"name": "ppo-settings"}}]}]}}}}}}


SETTINGS = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ppo-settings"}, "data": {"ROLLOUT_STEPS": "128"}}
RLTJ = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "mine"}, "spec": {}}


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
        message = ""
    except SystemExit as e:
        code, message = 1, str(e.code)
    out, err = capsys.readouterr()
    return code, out, err + message


def write(tmp_path, docs: list) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(to_yaml(docs))
    return str(path)


ETCD_LINES = ["Service 'rollout-store': left out: an etcd server", "Deployment 'rollout-store-server': left out: an etcd server"]


def test_convert_takes_the_pytorchjob_and_names_the_etcd_objects_it_leaves_out(tmp_path, capsys):
    path = write(tmp_path, [ETCD_SERVICE, ETCD_DEPLOYMENT, SETTINGS, pytorchjob()])
    code, out, err = run_cli(capsys, ["convert", path])
    assert code == 0, err
    assert [d["kind"] for d in load_documents(out)] == ["ConfigMap", "RLTrainingJob"]
    skipped = [line for line in err.splitlines() if "left out" in line]
    assert [line.removeprefix(f"{path}: ")[:len(w)] for line, w in zip(skipped, ETCD_LINES, strict=True)] == ETCD_LINES
    assert all("static rendezvous" in line for line in skipped)
    backend = next(line for line in err.splitlines() if "elasticPolicy.rdzvBackend" in line)
    assert "kuberl runs no etcd server" in backend


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_take_the_job_from_the_same_file(tmp_path, capsys, command):
    path = write(tmp_path, [ETCD_SERVICE, ETCD_DEPLOYMENT, SETTINGS, pytorchjob()])
    code, out, err = run_cli(capsys, [command, path])
    assert code == 0, err
    assert "ppo-ddp" in out
    assert sum("left out" in line for line in err.splitlines()) == 2


def test_run_takes_the_job_and_the_configmaps_it_reads(tmp_path, capsys):
    path = write(tmp_path, [ETCD_SERVICE, ETCD_DEPLOYMENT, SETTINGS, pytorchjob()])
    job, configmaps = load_job(path)
    assert job["kind"] == "RLTrainingJob" and configmaps == {"ppo-settings": {"ROLLOUT_STEPS": "128"}}
    err = capsys.readouterr().err
    assert sum(line.startswith(f"{path}: Service 'rollout-store': left out") for line in err.splitlines()) == 1


def test_a_list_is_read_as_its_items(tmp_path, capsys):
    """`kubectl get pytorchjob,svc,cm -o yaml` writes one `kind: List`."""
    other = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tracker-token"}, "stringData": {"t": "x"}}
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
              "items": [SETTINGS, {**pytorchjob(), "spec": {**pytorchjob()["spec"], "elasticPolicy": {"rdzvBackend": "c10d"}}},
                        other]}
    path = write(tmp_path, [listed])
    code, out, err = run_cli(capsys, ["convert", path])
    assert code == 0, err
    assert [d["kind"] for d in load_documents(out)] == ["ConfigMap", "RLTrainingJob"]
    assert f"{path}: Secret 'tracker-token': left out: kuberl takes the job" in err
    job, configmaps = load_job(path)
    assert job["metadata"]["name"] == "ppo-ddp" and set(configmaps) == {"ppo-settings"}


@pytest.mark.parametrize("docs", [
    [pytorchjob("a"), pytorchjob("b")],
    [pytorchjob("a"), RLTJ],
    [{"apiVersion": "v1", "kind": "List", "items": [pytorchjob("a"), ETCD_SERVICE]}, pytorchjob("b")],
], ids=["two-pytorchjobs", "pytorchjob-and-rltj", "one-in-a-list"])
@pytest.mark.parametrize("command", ["convert", "validate", "render", "run"])
def test_several_job_documents_are_refused_naming_each(tmp_path, capsys, docs, command):
    path = write(tmp_path, docs)
    code, out, err = run_cli(capsys, [command, path])
    assert code == 1 and (out == "" or command == "run"), err  # run says its pod security level first
    line = next(line for line in err.splitlines() if "job documents" in line)
    assert "PyTorchJob 'a'" in line and ("PyTorchJob 'b'" in line or "RLTrainingJob 'mine'" in line), line


def test_a_typo_in_a_job_kind_is_refused_not_left_out(tmp_path, capsys):
    path = write(tmp_path, [ETCD_SERVICE, {**pytorchjob(), "kind": "PytorchJob"}])
    code, out, err = run_cli(capsys, ["convert", path])
    assert (code, out) == (1, "")
    assert "did you mean 'PyTorchJob'?" in err


def test_a_name_is_escaped_and_bounded_on_stderr(tmp_path, capsys):
    hostile = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x\x1b[2J" + "y" * 500}}
    path = write(tmp_path, [hostile, pytorchjob()])
    code, _, err = run_cli(capsys, ["convert", path])
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if "Service" in line]
    assert "\x1b" not in line and "\\x1b[2J" in line and len(line) < 400


def test_the_whole_stream_stays_under_the_readers_budget(tmp_path, capsys):
    """Many small documents add up: the reader's 1.5 MiB bound is the file's, not each document's."""
    filler = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}, "data": {"k": "x" * 100_000}}
              for i in range(16)]
    path = write(tmp_path, [{"apiVersion": "v1", "kind": "List", "items": filler}, pytorchjob()])
    assert (tmp_path / "job.yaml").stat().st_size > MAX_DOCUMENT_BYTES
    for command in ("convert", "validate", "run"):
        code, out, err = run_cli(capsys, [command, path])
        assert (code, out) == (1, "") and "larger than" in err, err


# --- hostPath under the baseline level ------------------------------------------------------------------------------


def with_host_paths() -> dict:
    """Volumes as AWS's DDP sample has them: the host's /dev/shm and a node disk, a PVC for checkpoints."""
    doc = pytorchjob()
    pod = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [{"name": "shm", "hostPath": {"path": "/dev/shm"}}, {"name": "scratch", "hostPath": {"path": "/mnt/nvme0/replays"}},
                      {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ppo-checkpoints"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "scratch", "mountPath": "/replays"},
                                            {"name": "ckpt", "mountPath": "/checkpoints"}]
    return doc


def test_convert_notes_each_host_path_the_baseline_level_refuses_and_the_ways_out():
    from kuberl.core.podsecurity import check_pods
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod
    from kuberl.core.rules import validate_job
    from kuberl.tools.convert import convert

    job, notes = convert(with_host_paths())
    volumes = "spec.pytorchReplicaSpecs.Worker.template.spec.volumes"
    found = {n.path: n.message for n in notes if n.path.startswith(volumes)}
    assert set(found) == {f"{volumes}[0].hostPath", f"{volumes}[1].hostPath"}
    assert "spec.shmSize" in found[f"{volumes}[0].hostPath"]
    assert "PersistentVolumeClaim" in found[f"{volumes}[1].hostPath"] and "emptyDir" in found[f"{volumes}[1].hostPath"]
    assert all("baseline" in m and "--pod-security privileged" in m and "Pod Security Admission" in m for m in found.values())
    # what the notes name is what the operator's default level refuses, and nothing else
    pod = render_pod(Job("ppo-ddp", validate_job(job)), "default", PLACEHOLDER_UID, 0)
    assert sorted(v.path for v in check_pods([pod], "baseline")) == [
        "spec.volumes[scratch].hostPath", "spec.volumes[shm].hostPath"]


def test_convert_notes_each_field_the_baseline_level_refuses_at_the_pytorchjobs_field():
    """A PyTorchJob on RDMA nodes in the shape of oracle-quickstart/oci-hpc-oke's
    docs/running-pytorch-jobs-on-oke-using-hostnetwork-with-rdma.md: host network, a privileged trainer with
    IPC_LOCK, the host's /dev/infiniband. It converted silently and kuberl validate then refused it at baseline,
    the operator's default level: every such field is now a note at the PyTorchJob's own path, a hostPath once."""
    from kuberl.core.podsecurity import check_pods
    from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod
    from kuberl.core.rules import validate_job
    from kuberl.tools.convert import convert

    doc = pytorchjob()
    pod = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet",
               volumes=[{"name": "ib", "hostPath": {"path": "/dev/infiniband"}}])
    pod["containers"][0].update(securityContext={"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}},
                                volumeMounts=[{"name": "ib", "mountPath": "/dev/infiniband"}])
    job, notes = convert(doc)
    base = "spec.pytorchReplicaSpecs.Worker.template.spec"
    refused = {n.path: n.message for n in notes if "baseline" in n.message and "--pod-security privileged" in n.message}
    assert set(refused) == {f"{base}.hostNetwork", f"{base}.volumes[0].hostPath",
                            f"{base}.containers[0].securityContext.privileged",
                            f"{base}.containers[0].securityContext.capabilities.add"}
    assert [n.path for n in notes].count(f"{base}.volumes[0].hostPath") == 1
    assert "IPC_LOCK" in refused[f"{base}.containers[0].securityContext.capabilities.add"]
    # what the notes name is what the operator's default level refuses, and nothing else
    rendered = render_pod(Job("ppo-ddp", validate_job(job)), "default", PLACEHOLDER_UID, 0)
    assert sorted(v.control for v in check_pods([rendered], "baseline")) == [
        "Capabilities", "Host Namespaces", "HostPath Volumes", "Privileged Containers"]


# --- what is not a manifest of a job: wrappers, kustomizations, templates -------------------------------------------

# Each written for these tests from the kind's field reference, in the shape its project documents.
# An AppWrapper (workload.codeflare.dev/v1beta2) whose one component is a PyTorchJob, queued by Kueue's label
APPWRAPPER = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
              "metadata": {"name": "ppo-wrapped", "labels": {"kueue.x-k8s.io/queue-name": "rl-team"}},
              "spec": {"components": [{"template": pytorchjob("ppo-inner")}]}}
# A Katib Experiment (kubeflow.org/v1beta1) whose trials are PyTorchJobs (trialTemplate.trialSpec)
EXPERIMENT = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"namespace": "rl-tuning", "name": "ppo-lr-sweep"},
              "spec": {"parallelTrialCount": 2, "objective": {"type": "maximize", "objectiveMetricName": "episode_return"},
                       "trialTemplate": {"primaryContainerName": "pytorch", "trialSpec": {
                           "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": pytorchjob()["spec"]}}}}
# A kustomization.yaml: no apiVersion, no kind, a base and a JSON patch
KUSTOMIZATION = {"resources": ["../base"], "patches": [{
    "patch": "- op: replace\n  path: /spec/pytorchReplicaSpecs/Worker/replicas\n  value: 3\n", "target": {"kind": "PyTorchJob"}}]}
# A Kubeflow Trainer runtime, and no job
RUNTIME_ONLY = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "rl-torch", "labels": {"trainer.kubeflow.org/framework": "torch"}},
                "spec": {"mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": 1}}}}


@pytest.mark.parametrize(("doc", "words"), [
    (APPWRAPPER, "AppWrapper 'ppo-wrapped': left out: it wraps a PyTorchJob at spec.components[0].template"),
    (EXPERIMENT, "Experiment 'ppo-lr-sweep': left out: it wraps a PyTorchJob at spec.trialTemplate.trialSpec"),
    (KUSTOMIZATION, ("document 1: left out: a kustomization, which lists the manifests and patches kustomize builds;"
                     " kuberl reads what it builds: kubectl kustomize DIR | kuberl convert -")),
    (RUNTIME_ONLY, "ClusterTrainingRuntime 'rl-torch': left out: a Kubeflow Trainer runtime"),
], ids=["appwrapper", "katib-experiment", "kustomization", "runtime-only"])
def test_a_file_with_no_job_of_its_own_says_what_it_holds_instead(tmp_path, capsys, doc, words):
    path = write(tmp_path, [doc])
    code, out, err = run_cli(capsys, ["convert", path])
    assert (code, out) == (1, ""), err
    assert f"{path}: {words}" in err
    assert err.splitlines()[-1] == f"{path}: no PyTorchJob, TrainJob or JobSet document", "there are no ConfigMaps to speak of"


# A scheduling Workload (scheduling.k8s.io/v1alpha1) that names its JobSet (a reference, no template); and a
# PyTorchJob's pod, exported, that names its owner
REFERENCES = [
    {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": "ppo-gang-wl"},
     "spec": {"controllerRef": {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "ppo-gang"}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ppo-ddp-worker-0", "ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ppo-ddp", "uid": "1", "controller": True}]},
     "spec": {"containers": [{"name": "pytorch", "image": IMAGE}]}},
]


@pytest.mark.parametrize("doc", REFERENCES, ids=["workload-controller-ref", "pod-owner-reference"])
def test_a_document_that_names_a_job_does_not_wrap_one(tmp_path, capsys, doc):
    path = write(tmp_path, [doc])
    _, _, err = run_cli(capsys, ["convert", path])
    assert "left out: kuberl takes the job" in err and "wraps" not in err, err


def test_a_wrapper_beside_its_configmaps_still_says_only_configmaps(tmp_path, capsys):
    path = write(tmp_path, [APPWRAPPER, SETTINGS])
    code, _, err = run_cli(capsys, ["convert", path])
    assert code == 1 and err.splitlines()[-1] == f"{path}: no PyTorchJob, TrainJob or JobSet document, only ConfigMaps"


def envsubst_job() -> dict:
    """A job file meant for `envsubst < job.yaml | kubectl apply -f -`, as AWS's FSDP samples ship theirs: blanks in
    replicas, the image, the command line and an env value."""
    doc = pytorchjob("ppo-fsdp")
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = "$WORKER_PODS"
    container = worker["template"]["spec"]["containers"][0]
    container |= {"image": "${TRAINER_IMAGE}", "command": ["/usr/local/bin/torchrun", "--nproc_per_node=$PROCS_PER_POD",
                                                            "--nnodes=$WORKER_PODS", "/opt/rl/ppo_fsdp.py"],
                  "env": [{"name": "TRACKER_TOKEN", "value": "${TRACKER_TOKEN}"}]}
    return doc


def test_an_envsubst_template_is_refused_saying_it_is_one():
    from kuberl.tools.documents import convert_documents

    _, _, failures = convert_documents([envsubst_job()])
    ((label, e),) = failures
    assert label == "PyTorchJob 'ppo-fsdp'"
    blank = [p for p in e.problems if "template's blank" in p.message]
    assert [p.path for p in blank] == ["spec.pytorchReplicaSpecs.Worker.replicas"]
    assert "envsubst < FILE | kuberl convert -" in blank[0].message


def test_a_template_that_converts_is_noted_as_one_and_a_script_s_own_variables_are_not():
    from kuberl.tools.documents import convert_documents

    doc = envsubst_job()
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    _, notes, failures = convert_documents([doc])
    assert not failures
    ((_, job_notes),) = notes
    blank = [n for n in job_notes if "template's blank" in n.message]
    assert [n.path for n in blank] == ["spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image"]
    done = envsubst_job()
    done["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    done["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = IMAGE
    _, notes, _ = convert_documents([done])  # ${TRACKER_TOKEN} in env, $PROCS_PER_POD in the command: the shell's own
    assert not any("template's blank" in n.message for _, ns in notes for n in ns)


def test_a_node_selector_no_api_server_takes_is_refused():
    """ValidatePodSpec validates nodeSelector as labels (unversionedvalidation.ValidateLabels): a kustomize base
    whose overlay was to fill ${NODE_TIER} in."""
    from kuberl.tools.convert import convert

    doc = pytorchjob()
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"pool.example.com/tier": "${NODE_TIER}"}
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    (problem,) = e.value.problems
    assert problem.path == "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector.pool.example.com/tier"
    assert "label value" in problem.message


def test_a_job_of_another_kind_is_named_by_its_own_kind(tmp_path, capsys):
    path = write(tmp_path, [{**pytorchjob(), "kind": "MPIJob"}])
    code, out, err = run_cli(capsys, ["convert", path])
    assert (code, out) == (1, "")
    assert f"{path}: MPIJob 'ppo-ddp' cannot be converted (1 problem(s)):" in err and "mpirun" in err


# A KubeRay RayJob (ray.io/v1) and a plain Indexed Job
@pytest.mark.parametrize(("doc", "words"), [
    ({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "ppo-on-ray"},
      "spec": {"entrypoint": "python /opt/rl/ppo_ray.py", "rayClusterSpec": {}}},
     "RayJob 'ppo-on-ray': left out: not a job kuberl converts (a PyTorchJob, a TrainJob or a JobSet): KubeRay starts"),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ppo-ddp"}, "spec": {"completionMode": "Indexed"}},
     "Job 'ppo-ddp': left out: not a job kuberl converts (a PyTorchJob, a TrainJob or a JobSet): a batch/v1 Job: as a JobSet"),
], ids=["rayjob", "batch-job"])
def test_another_projects_workload_is_named_as_the_workload_not_as_something_to_apply_beside(tmp_path, capsys, doc, words):
    path = write(tmp_path, [doc])
    code, _, err = run_cli(capsys, ["convert", path])
    assert code == 1 and f"{path}: {words}" in err, err
    assert "kubectl apply the rest yourself" not in err


@pytest.mark.parametrize("value", ["{{ .Values.image }}", "x {{x}} y", "{" * 400_000, "{{" + "}" + "{" * 400_000])
def test_a_template_blank_is_found_in_one_pass_over_a_long_value(value):
    """Helm's or Jinja's {{ }} was searched with a lazy `.*?` from every '{': a 20,000-character value of braces
    took a second, a 1.4 MB one (what the file reader lets in) over an hour of kuberl convert."""
    from kuberl.tools.documents import template_blank

    from tests.support.cputime import cpu_seconds

    # No count of the regex's steps exists: 400,000 braces take 6 ms of CPU with two CPU burners running, the lazy
    # regex 1.9 s at 20,000 (quadratic: about 770 s at 400,000); 2 s sits near the geometric middle (2.2 s).
    found, seconds = cpu_seconds(lambda: template_blank({"spec": {"image": value}}))
    assert seconds < 2, seconds
    assert (found is not None) == ("}}" in value[value.find("{{") + 2:] if "{{" in value else False)
