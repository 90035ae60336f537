"""kuberl convert takes a JobSet (jobset.x-k8s.io/v1alpha2) of torch pods: its one replicated Job's pods
become the gang, what torchrun met at (MASTER_PORT) the rendezvous port, its failure policy the run
policy; what a gang cannot honour (a driver beside the workers, Jobs that run pods in turns, one process
on several GPUs) is refused at the JobSet's field; every other field is a note naming it."""

from __future__ import annotations

import copy

import pytest
from conversion_support import assert_any_junk_anywhere_is_converted_or_refused
from kuberl import cli
from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod
from kuberl.core.rules import validate_job
from kuberl.core.yamlreader import load_documents
from kuberl.tools.convert import NotConvertible, to_yaml
from kuberl.tools.jobset import convert_jobset

POD = "spec.replicatedJobs[0].template.spec.template.spec"
TRAINER = f"{POD}.containers[0]"
# kuberl's own JobSet in the shape of JobSet's PyTorch examples (not a copy of one): four Indexed pods of one
# replicated Job, each starting torchrun with MASTER_ADDR, MASTER_PORT and RANK written in its own env
DDP_GANG = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "ddp-gang"},
    "spec": {"replicatedJobs": [{"name": "trainers", "template": {"spec": {
        "parallelism": 4, "completions": 4, "backoffLimit": 0, "template": {"spec": {"containers": [{
            "name": "pytorch", "image": "registry.example.com/ml/ddp-train:1.0",
            "ports": [{"containerPort": 29400}],
            "env": [{"name": "MASTER_ADDR", "value": "ddp-gang-trainers-0-0.ddp-gang"},
                    {"name": "MASTER_PORT", "value": "29400"},
                    {"name": "RANK", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                    {"name": "PYTHONUNBUFFERED", "value": "0"}],
            "command": ["bash", "-xc", ("torchrun --nnodes=4 --nproc_per_node=1 --master_addr=$MASTER_ADDR"
                                        " --master_port=$MASTER_PORT --node_rank=$RANK train.py --epochs 1  ")]}]}}}}}]},
}


def jobset(container: dict | None = None, jobs: int | None = None, pods: int = 2, **spec) -> dict:
    """A JobSet of one replicated Job, `jobs` Jobs of `pods` pods each, running `container`."""
    container = container or {"name": "pytorch", "image": "train:1", "command": ["torchrun", "train.py"]}
    replicated: dict = {"name": "workers", "template": {"spec": {
        "parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": {"containers": [container]}}}}}
    if jobs is not None:
        replicated["replicas"] = jobs
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "train"},
            "spec": {"replicatedJobs": [replicated], **spec}}


def test_a_jobset_shaped_as_jobsets_pytorch_examples_converts_to_the_same_gang():
    before = copy.deepcopy(DDP_GANG)
    job, notes = convert_jobset(DDP_GANG)
    assert DDP_GANG == before
    validate_job(job)
    spec = job["spec"]
    assert (spec["workers"], spec["procsPerWorker"], spec["rendezvous"], spec["runPolicy"]) == (4, 1, {"port": 29400}, {"backoffLimit": 0})
    (trainer,) = spec["template"]["spec"]["containers"]
    assert trainer["env"] == [{"name": "PYTHONUNBUFFERED", "value": "0"},  # kuberl gives MASTER_ADDR, MASTER_PORT and RANK
                              {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}}]
    assert trainer["command"] == DDP_GANG["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    said = {n.path: n.message for n in notes}
    assert "to the same value (worker 0's address" in said[f"{TRAINER}.env[0]"]
    assert "MASTER_PORT=29400 is now spec.rendezvous.port" in said[f"{TRAINER}.env[1]"]
    assert "to the same value (the pod's rank)" in said[f"{TRAINER}.env[2]"]
    assert "first failed Job" in said["spec.failurePolicy"]
    env = {e["name"]: e.get("value") for e in render_pod(Job("ddp-gang", validate_job(job)), "default", PLACEHOLDER_UID, 3)
           ["spec"]["containers"][0]["env"]}
    assert (env["MASTER_ADDR"].split(".")[:2], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == (["ddp-gang-0", "ddp-gang"], "29400", "3", "4")


def test_a_jobset_runs_as_the_rltrainingjob_convert_prints(tmp_path, capsys):
    path = tmp_path / "jobset.yaml"
    path.write_text(to_yaml([DDP_GANG]))
    assert cli.main(["convert", str(path)]) == 0
    out, err = capsys.readouterr()
    (job,) = load_documents(out)
    assert job == convert_jobset(DDP_GANG)[0]
    assert "left out" not in err
    assert cli.main(["validate", str(path)]) == 0


# (id, JobSet, the RLTrainingJob spec fields expected)
CONVERTED = [
    ("jobs-of-one-pod-count-the-workers", jobset(jobs=3, pods=1), {"workers": 3}),
    # batch/v1 Job success policy (KEP-3998), its leader story: the Job succeeds once index 0, the leader, has
    ("the-leaders-success-is-the-jobs", {**jobset(), "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {
        **jobset()["spec"]["replicatedJobs"][0]["template"]["spec"], "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}}}]}},
     {"runPolicy": {"backoffLimit": 0, "successPolicy": "Worker0"}}),
    ("failure-policy-is-the-backoff-limit", jobset(failurePolicy={"maxRestarts": 3, "rules": [
        {"name": "fail-on-oom", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]}),
     {"runPolicy": {"backoffLimit": 3}}),
    ("suspend-ttl-and-kueue", {**jobset(suspend=True, ttlSecondsAfterFinished=60),
                               "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}},
     {"queueName": "team-a", "runPolicy": {"backoffLimit": 0, "suspend": True, "ttlSecondsAfterFinished": 60}}),
    ("gpus-with-a-process-each", jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "--nproc-per-node=4", "t.py"],
                                         "resources": {"limits": {"nvidia.com/gpu": 4, "cpu": "8"}}}),
     {"gpusPerWorker": 4, "procsPerWorker": 4, "resources": {"limits": {"cpu": "8"}}}),
    ("the-pods-own-pet-master-port", jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "t.py"],
                                             "env": [{"name": "PET_MASTER_PORT", "value": "29400"}]}), {"rendezvous": {"port": 29400}}),
    ("the-pods-own-pet-nproc", jobset({"name": "main", "image": "train:1", "command": ["torchrun", "t.py"],
                                       "env": [{"name": "PET_NPROC_PER_NODE", "value": "2"}]}), {"procsPerWorker": 2}),
    ("a-command-without-a-launcher", jobset({"name": "pytorch", "image": "train:1", "command": ["python", "t.py"]}),
     {"workers": 2, "procsPerWorker": None}),
    ("accelerate-launch-on-gpus", jobset({"name": "pytorch", "image": "train:1", "command": ["accelerate", "launch", "t.py"],
                                          "resources": {"limits": {"nvidia.com/gpu": 4}}}),
     {"gpusPerWorker": 4, "procsPerWorker": None}),
]


@pytest.mark.parametrize(("doc", "expected"), [c[1:] for c in CONVERTED], ids=[c[0] for c in CONVERTED])
def test_a_jobset_converts_to_a_valid_job(doc, expected):
    job, _ = convert_jobset(doc)
    validate_job(job)
    assert {k: job["spec"].get(k) for k in expected} == expected


def test_the_job_index_is_the_rank_when_each_job_is_one_pod():
    doc = jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "t.py"], "env": [
        {"name": "NODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}}]},
        jobs=4, pods=1)
    job, _ = convert_jobset(doc)
    (var,) = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['kuberl.dev/rank']"


TWO_CONTAINERS = jobset()
TWO_CONTAINERS["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"] = [
    {"name": "main", "image": "x", "command": ["torchrun", "t.py"]}, {"name": "log", "image": "y"}]
# (id, JobSet, the field refused, words of the message)
REFUSED = [
    # kubernetes-sigs/jobset site/static/examples/simple/success-policy.yaml: a leader and workers, two programs
    ("a-driver-beside-the-workers", {**jobset(), "spec": {"replicatedJobs": [
        {**jobset()["spec"]["replicatedJobs"][0], "name": "leader"}, jobset()["spec"]["replicatedJobs"][0]]}},
     "spec.replicatedJobs", "2 replicated Jobs ('leader', 'workers')"),
    # AI-Hypercomputer/xpk's GPU env: the replicated Job's name read to build worker 0's host in the script
    ("replicated-job-name-for-a-host", jobset({"name": "pytorch", "image": "train:1", "command": ["bash", "-c", "torchrun t.py"],
                                               "env": [{"name": "REPLICATED_JOB_NAME", "valueFrom": {"fieldRef": {
                                                   "fieldPath": "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"}}}]}),
     f"{TRAINER}.env[0].valueFrom.fieldRef.fieldPath", "read MASTER_ADDR"),
    ("pods-in-turns", {**jobset(), "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {
        "parallelism": 2, "completions": 8, "template": jobset()["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]}}}]}},
     "spec.replicatedJobs[0].template.spec.completions", "at once"),
    ("completion-index-across-jobs", jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "t.py"], "env": [
        {"name": "NODE_ID", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]}, jobs=2, pods=2),
     f"{TRAINER}.env[0].valueFrom.fieldRef.fieldPath", "within each of the 2 Jobs"),
    ("which-container", TWO_CONTAINERS, f"{POD}.containers", "one named 'pytorch'"),
    ("no-command", jobset({"name": "pytorch", "image": "train:1"}), f"{TRAINER}.command", "ENTRYPOINT"),
    ("not-a-jobset", {**jobset(), "apiVersion": "jobset.x-k8s.io/v1alpha1"}, "apiVersion", "jobset.x-k8s.io/v1alpha2"),
    ("no-replicated-job", {**jobset(), "spec": {"replicatedJobs": []}}, "spec.replicatedJobs", "empty: the pods"),
    ("completion-index-env-across-jobs", jobset({"name": "pytorch", "image": "train:1", "command": [
        "bash", "-c", "torchrun --node_rank=$JOB_COMPLETION_INDEX t.py"]}, jobs=2, pods=2), f"{TRAINER}.command[2]",
     "within its Job"),
    # kubernetes-sigs/jobset site/static/examples/tpu-multislice/v6e-jax-workload.yaml: 2 slices x 4 TPU hosts
    ("a-multi-host-tpu-slice", jobset({"name": "jax-tpu", "image": "tpu:latest", "command": ["bash", "-c", "python train.py"],
                                       "resources": {"limits": {"google.com/tpu": 4}}}, jobs=2, pods=4),
     f"{TRAINER}.resources.limits.google.com/tpu", "TPU_WORKER_HOSTNAMES"),
]


@pytest.mark.parametrize(("doc", "path", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_a_gang_cannot_honour_is_refused_at_the_jobsets_field(doc, path, words):
    with pytest.raises(NotConvertible) as refused:
        convert_jobset(doc)
    problems = {p.path: p.message for p in refused.value.problems}
    assert path in problems, problems
    assert words in problems[path]


def test_any_value_anywhere_in_a_jobset_converts_or_is_refused():
    assert_any_junk_anywhere_is_converted_or_refused(DDP_GANG, convert_jobset)


def test_any_value_anywhere_in_a_jobsets_policies_converts_or_is_refused():
    doc = jobset(failurePolicy={"maxRestarts": 2, "restartStrategy": "Recreate", "rules": [{"name": "r", "action": "FailJobSet"}]},
                 successPolicy={"operator": "Any"}, startupPolicy={"startupPolicyOrder": "InOrder"},
                 network={"enableDNSHostnames": False, "subdomain": "s", "publishNotReadyAddresses": False},
                 coordinator={"replicatedJob": "workers", "jobIndex": 0, "podIndex": 1}, suspend=False,
                 ttlSecondsAfterFinished=5, jobs=2, pods=1)
    doc["spec"]["replicatedJobs"][0]["template"]["spec"] |= {"activeDeadlineSeconds": 60, "completionMode": "Indexed",
                                                             "successPolicy": {"rules": [{"succeededIndexes": "0"}]}}
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0] |= {
        "command": ["bash", "-c", "torchrun --node_rank=$JOB_COMPLETION_INDEX t.py"], "env": [{"name": "NNODES", "value": "2"}]}
    doc["metadata"]["annotations"] = {"kueue.x-k8s.io/queue-name": "q", "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}
    assert_any_junk_anywhere_is_converted_or_refused(doc, convert_jobset)


def test_jobsets_exclusive_placement_is_said_and_not_carried():
    """kubernetes-sigs/jobset site/static/examples/simple/exclusive-placement.yaml: one Job per node pool."""
    doc = jobset()
    doc["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool", "team": "a"}
    job, notes = convert_jobset(doc)
    assert job["metadata"]["annotations"] == {"team": "a"}
    assert any(n.path == "metadata.annotations.alpha.jobset.sigs.k8s.io/exclusive-topology" and "kuberl.dev/job" in n.message
               for n in notes)


def test_a_command_that_reads_the_completion_index_gets_it_from_the_rank():
    """`torchrun --node_rank=$JOB_COMPLETION_INDEX`, as JobSet's users write it: the Job controller set the variable
    in an Indexed Job's pods; kuberl's had none, so torchrun read an empty --node_rank and exited."""
    doc = jobset({"name": "pytorch", "image": "train:1", "command": ["bash", "-c", "torchrun --node_rank=$JOB_COMPLETION_INDEX t.py"]})
    job, notes = convert_jobset(doc)
    (var,) = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert var == {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}}
    assert any(n.path == f"{TRAINER}.command[2]" and "the same value" in n.message for n in notes)
    env = {e["name"]: e for e in render_pod(Job("train", validate_job(job)), "default", PLACEHOLDER_UID, 1)["spec"]["containers"][0]["env"]}
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['kuberl.dev/rank']"


def test_an_exported_jobset_says_nothing_of_jobsets_own_defaults():
    """`kubectl get jobset -o yaml` carries what JobSet's webhook defaulted (AnyOrder, Recreate, DNS hostnames,
    success of All): kuberl's own behaviour, so no line each, while a choice of the user's is still said."""
    doc = copy.deepcopy(DDP_GANG)
    doc["spec"] |= {"network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                    "startupPolicy": {"startupPolicyOrder": "AnyOrder"}, "successPolicy": {"operator": "All", "targetReplicatedJobs": ["trainers"]},
                    "failurePolicy": {"maxRestarts": 2, "restartStrategy": "Recreate"}}
    paths = {n.path for n in convert_jobset(doc)[1]}
    assert not {p for p in paths if p.startswith(("spec.network", "spec.startupPolicy", "spec.successPolicy", "spec.failurePolicy"))}, paths
    doc["spec"] |= {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "failurePolicy": {"restartStrategy": "InPlaceRestart"}}
    paths = {n.path for n in convert_jobset(doc)[1]}
    assert {"spec.startupPolicy", "spec.failurePolicy.restartStrategy"} <= paths, paths


def test_a_node_count_the_container_wrote_is_the_same_value_when_it_counts_the_pods():
    doc = jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "t.py"], "env": [
        {"name": "NNODES", "value": "2"}, {"name": "PET_NNODES", "value": "3"}]})
    said = {n.path: n.message for n in convert_jobset(doc)[1]}
    assert "to the same value (2 pods)" in said[f"{TRAINER}.env[0]"]
    assert "changed" in said[f"{TRAINER}.env[1]"]


def test_kueues_older_queue_name_annotation_is_the_queue_too():
    """A GKE JobSet (kubectl create from a heredoc) that names its LocalQueue in Kueue's deprecated annotation form:
    the annotation rode along on the RLTrainingJob and the pods ran outside Kueue's quota."""
    doc = jobset()
    doc["metadata"]["annotations"] = {"kueue.x-k8s.io/queue-name": "rl-gpu"}
    job, notes = convert_jobset(doc)
    assert job["spec"]["queueName"] == "rl-gpu"
    assert any(n.path == "metadata.annotations.kueue.x-k8s.io/queue-name" for n in notes)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "main"}
    assert convert_jobset(doc)[0]["spec"]["queueName"] == "main", "the label wins, as in Kueue"


def test_a_script_file_that_reads_the_completion_index_finds_it():
    """`bash /app/launch.sh` whose file says `--node_rank=$JOB_COMPLETION_INDEX`: the manifest never names the
    variable, and the Job controller gave it to every Indexed Job pod; kuberl's trainer container gets it too."""
    job, notes = convert_jobset(jobset({"name": "pytorch", "image": "train:1", "command": ["bash", "/app/launch.sh"]}))
    assert {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}} in (
        job["spec"]["template"]["spec"]["containers"][0]["env"])
    assert any(n.path == f"{TRAINER}.env" for n in notes)
    several = convert_jobset(jobset({"name": "pytorch", "image": "train:1", "command": ["bash", "/app/launch.sh"]}, jobs=2))[0]
    assert "env" not in several["spec"]["template"]["spec"]["containers"][0], "with several Jobs it is no rank"


def test_one_process_on_four_gpus_stays_one_process_as_under_jobset():
    """torchrun with no --nproc-per-node starts 1 process, which drove the pod's 4 GPUs; a custom trainer may."""
    job, notes = convert_jobset(jobset({"name": "pytorch", "image": "train:1", "command": ["torchrun", "t.py"],
                                        "resources": {"limits": {"nvidia.com/gpu": 4}}}))
    assert (job["spec"]["gpusPerWorker"], job["spec"]["procsPerWorker"]) == (4, 1)
    assert "--nproc-per-node is 1 unless set" in next(n.message for n in notes if n.path.endswith("nvidia.com/gpu"))
    validate_job(job)


def test_kueues_queue_label_on_the_pods_alone_is_refused_for_the_gang():
    """A pod template's kueue.x-k8s.io/queue-name did nothing under the JobSet (Kueue's pod webhook leaves a
    managed Job's pods to it); on kuberl's pods, with no spec.queueName, Kueue's pod integration admits each pod
    on its own (a plain pod: no pod-group-name), so a gang part admitted waits for the rest. Refused at the
    field, as the job's own label is, where it carried over and validated."""
    from kuberl.core.validation import InvalidJob

    from tests.support.jobs import make_job

    doc = jobset()
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": "team"}}
    with pytest.raises(NotConvertible) as refused:
        convert_jobset(doc)
    said = {p.path: p.message for p in refused.value.problems}
    assert "spec.queueName" in said["spec.replicatedJobs[0].template.spec.template.metadata.labels.kueue.x-k8s.io/queue-name"], said
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    assert convert_jobset(doc)[0]["spec"]["queueName"] == "team", "with the job queued, its pods form one group"
    labelled = make_job().template({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team"}}}).obj()
    with pytest.raises(InvalidJob, match=r"spec\.template\.metadata\.labels\.kueue\.x-k8s\.io/queue-name: .*spec\.queueName: team"):
        validate_job(labelled)
    validate_job(make_job().template({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team"}}}).queue("team").obj())


def test_accelerate_launchs_own_process_count_is_named():
    doc = jobset({"name": "pytorch", "image": "train:1", "command": ["accelerate", "launch", "--num_processes=2", "t.py"],
                  "resources": {"limits": {"nvidia.com/gpu": 4}}})
    job, notes = convert_jobset(doc)
    assert job["spec"].get("procsPerWorker") is None
    assert any("--num_processes 2" in n.message and n.path.endswith(".containers[0].command") for n in notes), notes
