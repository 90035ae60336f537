"""kuberl convert: a template that selects its own gang by the labels training-operator (or a TrainJob's
JobSet) put on its pods, or reads them through the downward API, still finds the gang under kuberl
(the key becomes kuberl.dev/job or kuberl.dev/rank, which hold the same values), or is refused naming
the field. Carried over as written, a required podAffinity on training.kubeflow.org/job-name would
match no kuberl pod and leave the gang Pending, and a fieldRef to replica-index would read "" on
every pod. The manifests are kuberl's own, in the shapes of published ones, each cited."""

from __future__ import annotations

import copy

import pytest
from conversion_support import assert_any_junk_anywhere_is_converted_or_refused
from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod
from kuberl.core.rules import validate_job
from kuberl.tools.convert import NotConvertible, convert
from kuberl.tools.trainjob import convert_trainjob

IMAGE = "registry.example.com/rl/ppo-gpu:1"
SAME_HOST = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "labelSelector": {"matchExpressions": [{"key": "training.kubeflow.org/job-name", "operator": "In",
                                            "values": ["ppo-same-host"]}]},
    "topologyKey": "kubernetes.io/hostname"}]}}


def replica(count: int, affinity: dict | None = None, env: list | None = None, command: list | None = None) -> dict:
    pod: dict = {"containers": [{"name": "pytorch", "image": IMAGE, "command": command or ["/bin/bash", "-c"],
                                 "args": ["python /opt/rl/ppo.py --updates 300"],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    if affinity:
        pod["affinity"] = copy.deepcopy(affinity)
    if env:
        pod["containers"][0]["env"] = copy.deepcopy(env)
    return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": pod}}


def pytorchjob(master: dict | None, worker: dict, name: str = "ppo-same-host") -> dict:
    specs = {"Worker": worker} if master is None else {"Master": master, "Worker": worker}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": "rl"},
            "spec": {"runPolicy": {"cleanPodPolicy": "Running"}, "pytorchReplicaSpecs": specs}}


# A Master and Workers, each with a required podAffinity on the job's own training.kubeflow.org/job-name, so the
# gang shares one host (the shape of gnosia93/training-on-eks kustomize/base/pytorch-dist-job.yaml)
SAME_HOST_JOB = pytorchjob(replica(1, SAME_HOST), replica(3, SAME_HOST))

# Workers only; the script makes the pod whose replica-index is 0 the c10d rendezvous host and names each pod by its
# own name (the shape of oracle-quickstart/oci-hpc-oke's RDMA guide, Training Operator section)
RANK_ENV = [{"name": "WORKER_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}}},
            {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
RANK_COMMAND = ["/bin/bash", "-c", ('HOST=false; [ "$WORKER_INDEX" = 0 ] && HOST=true\n'
                                    "torchrun --local_addr=$MY_POD --nproc_per_node=1 --rdzv-conf=is_host=$HOST /opt/rl/ppo.py")]
RANK_JOB = pytorchjob(None, replica(2, env=RANK_ENV, command=RANK_COMMAND), name="ppo-rdma")
RANK_JOB["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4, "maxRestarts": 3}


def matches(selector: dict, labels: dict) -> bool:
    """metav1.LabelSelector as the scheduler evaluates it (LabelSelectorAsSelector): every matchLabels pair and
    every expression must hold."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        held = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
                "Exists": present, "DoesNotExist": not present}[e["operator"]]
        if not held:
            return False
    return True


def pods(job: dict) -> list[dict]:
    parsed = validate_job(job)
    return [render_pod(Job(job["metadata"]["name"], parsed), job["metadata"].get("namespace", "default"), PLACEHOLDER_UID, rank)
            for rank in range(parsed.workers)]


def test_a_required_pod_affinity_on_the_jobs_own_name_still_matches_every_pod_of_the_gang():
    before = copy.deepcopy(SAME_HOST_JOB)
    job, notes = convert(SAME_HOST_JOB)
    assert SAME_HOST_JOB == before
    term = job["spec"]["template"]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"] == {"matchExpressions": [{"key": "kuberl.dev/job", "operator": "In", "values": ["ppo-same-host"]}]}
    for pod in pods(job):  # each pod matches its own term: the scheduler places the first, the rest join it
        rendered = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert matches(rendered["labelSelector"], pod["metadata"]["labels"]), pod["metadata"]["name"]
    noted = {n.path: n.message for n in notes}
    key = ("spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
           ".labelSelector.matchExpressions[0].key")
    assert "'kuberl.dev/job'" in noted[key]


def test_as_written_the_selector_would_have_matched_no_kuberl_pod():
    """The test above can fail: training-operator's label is on none of kuberl's pods."""
    job, _ = convert(SAME_HOST_JOB)
    for pod in pods(job):
        assert not matches(SAME_HOST["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"],
                           pod["metadata"]["labels"])


def test_a_replica_index_read_by_the_downward_api_reads_the_pods_rank_without_a_master():
    job, notes = convert(RANK_JOB)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "WORKER_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kuberl.dev/rank']"}}}
    for rank, pod in enumerate(pods(job)):  # as the kubelet serves it: the label's value, "0" on the rendezvous host
        assert pod["metadata"]["labels"]["kuberl.dev/rank"] == str(rank)
    noted = {n.path: n.message for n in notes}
    container = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"
    assert "'kuberl.dev/rank'" in noted[f"{container}.env[0].valueFrom.fieldRef.fieldPath"]
    # --local_addr=$MY_POD: PyTorchJob's pod names each had a Service, kuberl's are reached as <job>-<rank>.<job>
    assert "ppo-rdma-<rank>.ppo-rdma" in noted[f"{container}.env[1].valueFrom.fieldRef.fieldPath"]


# (id, PyTorchJob, the field refused, words of the message)
REFUSED = [
    ("replica-index-with-a-master", pytorchjob(replica(1, env=RANK_ENV[:1]), replica(2, env=RANK_ENV[:1])),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath", "Worker i is worker i+1"),
    ("job-role-read", pytorchjob(None, replica(2, env=[{"name": "ROLE", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['training.kubeflow.org/job-role']"}}}])),
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env[0].valueFrom.fieldRef.fieldPath", "RANK or NODE_RANK"),
    ("replica-type-selector", pytorchjob(None, replica(2, {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"training.kubeflow.org/replica-type": "worker"}},
                                            "topologyKey": "kubernetes.io/hostname"}}]}})),
     ("spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
      ".podAffinityTerm.labelSelector.matchLabels.training.kubeflow.org/replica-type"), "kuberl.dev/job"),
    ("another-jobs-name", pytorchjob(None, replica(2, {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "training.kubeflow.org/job-name", "operator": "In", "values": ["data-loader"]}]},
         "topologyKey": "kubernetes.io/hostname"}]}})),
     ("spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
      ".labelSelector.matchExpressions[0].key"), "other PyTorchJobs' pods"),
]


@pytest.mark.parametrize(("doc", "field", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_label_kuberl_has_no_twin_for_is_refused_at_its_field(doc, field, words):
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    assert [p.path for p in e.value.problems] == [field]
    assert words in e.value.problems[0].message


def test_spread_constraints_and_label_keys_follow_the_same_rule():
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "ppo-same-host"}},
              "matchLabelKeys": ["training.kubeflow.org/replica-index"]}
    doc = pytorchjob(None, replica(4))
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["topologySpreadConstraints"] = [spread]
    job, _ = convert(doc)
    (got,) = job["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert got["labelSelector"] == {"matchLabels": {"kuberl.dev/job": "ppo-same-host"}}
    assert got["matchLabelKeys"] == ["kuberl.dev/rank"]


# A TrainJob whose nodes are kept in one zone by its JobSet's name, through runtimePatches (training-on-eks's
# samples do it through podTemplateOverrides), and read their index from the completion-index annotation
ZONE_TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "ppo-zone-pair"},
    "spec": {"runtimeRef": {"name": "torch-distributed"},
             "runtimePatches": [{"manager": "user", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                 {"name": "node", "template": {"spec": {"template": {"spec": {"affinity": {"podAffinity": {
                     "requiredDuringSchedulingIgnoredDuringExecution": [{
                         "labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "ppo-zone-pair"}},
                         "topologyKey": "topology.kubernetes.io/zone"}]}}}}}}}]}}}}],
             "trainer": {"numNodes": 2, "numProcPerNode": 1, "image": IMAGE, "command": ["torchrun", "/opt/rl/ppo.py"],
                         "env": [{"name": "NODE_INDEX", "valueFrom": {"fieldRef": {
                             "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]}}}


def test_a_trainjob_selects_its_gang_and_reads_its_index_by_kuberls_labels():
    job, notes = convert_trainjob(ZONE_TRAINJOB)
    pod_spec = job["spec"]["template"]["spec"]
    selector = pod_spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
    assert selector == {"matchLabels": {"kuberl.dev/job": "ppo-zone-pair"}}
    assert pod_spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['kuberl.dev/rank']"
    assert all(matches(selector, pod["metadata"]["labels"]) for pod in pods(job))
    assert "spec.trainer.env[0].valueFrom.fieldRef.fieldPath" in {n.path for n in notes}


def test_a_trainjob_reading_another_jobset_label_is_refused():
    doc = copy.deepcopy(ZONE_TRAINJOB)
    doc["spec"]["trainer"]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] = "metadata.labels['jobset.sigs.k8s.io/job-index']"
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(doc)
    assert [p.path for p in e.value.problems] == ["spec.trainer.env[0].valueFrom.fieldRef.fieldPath"]


@pytest.mark.parametrize(("doc", "converter"), [(SAME_HOST_JOB, convert), (RANK_JOB, convert), (ZONE_TRAINJOB, convert_trainjob)],
                         ids=["same-host-job", "rank-from-replica-index", "zone-trainjob"])
def test_any_value_anywhere_in_these_manifests_converts_or_is_refused_never_a_traceback(doc, converter):
    assert_any_junk_anywhere_is_converted_or_refused(doc, converter)


def test_a_label_the_template_sets_itself_is_the_users_and_kept():
    """A template that writes training-operator's key into its own labels gives kuberl's pods that label too: the
    selector on it still matches, so it is neither rewritten nor refused."""
    selector = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"training.kubeflow.org/replica-type": "worker"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    doc = pytorchjob(None, replica(2, selector))
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"training.kubeflow.org/replica-type": "worker"}}
    job, _ = convert(doc)
    term = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"] == {"matchLabels": {"training.kubeflow.org/replica-type": "worker"}}
    assert all(matches(term["labelSelector"], pod["metadata"]["labels"]) for pod in pods(job))


def test_a_rewrite_onto_a_key_the_selector_already_names_is_refused_not_merged():
    """matchLabels is one map: job-name rewritten to kuberl.dev/job beside a kuberl.dev/job of the template's own
    replaced one requirement by the other, whichever came last, and the selector meant something else."""
    term = {"labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "ppo-same-host",
                                              "kuberl.dev/job": "another-job"}},
            "topologyKey": "kubernetes.io/hostname"}
    doc = pytorchjob(None, replica(2, {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    assert [p.path for p in e.value.problems] == [(
        "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".labelSelector.matchLabels.training.kubeflow.org/job-name")]
    assert "already matches ('another-job')" in e.value.problems[0].message


@pytest.mark.parametrize("rewritten", ["matchLabelKeys", "mismatchLabelKeys"])
def test_a_rewrite_that_puts_a_key_in_both_label_key_lists_is_refused_as_the_api_server_refuses_the_pod(rewritten):
    """validateMatchLabelKeysAndMismatchLabelKeys refuses a key in both lists: the converted job passed kuberl validate
    and every pod create was refused (InvalidChild)."""
    other = "mismatchLabelKeys" if rewritten == "matchLabelKeys" else "matchLabelKeys"
    term = {"labelSelector": {"matchLabels": {"app": "trainer"}}, "topologyKey": "kubernetes.io/hostname",
            rewritten: ["training.kubeflow.org/job-name"], other: ["kuberl.dev/job"]}
    doc = pytorchjob(None, replica(2, {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    with pytest.raises(NotConvertible) as e:
        convert(doc)
    assert [p.path for p in e.value.problems] == [(
        "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        f".{rewritten}[0]")]
    assert "exists in both matchLabelKeys and mismatchLabelKeys" in e.value.problems[0].message


# The unprefixed labels of the operators before training-operator's prefix (kubeflow/pytorch-operator
# pkg/controller.v1/pytorch/controller.go and pod.go; kubeflow/common job_controller/api/v1 constants.go, the
# *Deprecated keys): a manifest written for them selects and reads the same values by these names.
SPREAD_BY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"KEY": "ppo-same-host"}}, "topologyKey": "kubernetes.io/hostname"}]}}


@pytest.mark.parametrize("key", ["pytorch-job-name", "pytorch_job_name", "job-name"])
def test_an_unprefixed_job_name_label_of_the_older_operators_becomes_kuberls_job_label(key):
    affinity = copy.deepcopy(SPREAD_BY)
    term = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["labelSelector"]["matchLabels"] = {key: "ppo-same-host"}
    job, notes = convert(pytorchjob(replica(1, affinity), replica(2, affinity)))
    got = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert got["labelSelector"] == {"matchLabels": {"kuberl.dev/job": "ppo-same-host"}}
    assert all(matches(got["labelSelector"], pod["metadata"]["labels"]) for pod in pods(job))
    assert not any(matches(term["labelSelector"], pod["metadata"]["labels"]) for pod in pods(job))  # as written: none
    assert any(f"{key!r} is now 'kuberl.dev/job'" in n.message for n in notes)


@pytest.mark.parametrize("key", ["pytorch-replica-index", "replica-index"])
def test_an_unprefixed_replica_index_reads_the_rank_without_a_master_and_is_refused_beside_one(key):
    env = [{"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}}]
    job, _ = convert(pytorchjob(None, replica(2, env=env)))
    assert job["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['kuberl.dev/rank']")
    with pytest.raises(NotConvertible) as e:
        convert(pytorchjob(replica(1, env=env), replica(2, env=env)))
    assert "Worker i is worker i+1" in e.value.problems[0].message


@pytest.mark.parametrize("key", ["group-name", "group_name", "pytorch-replica-type", "replica-type", "job-role"])
def test_an_unprefixed_label_kuberl_has_no_twin_for_is_refused_at_its_field(key):
    affinity = copy.deepcopy(SPREAD_BY)
    affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"] = {
        key: "kubeflow.org"}
    with pytest.raises(NotConvertible) as e:
        convert(pytorchjob(None, replica(2, affinity)))
    assert [p.path for p in e.value.problems] == [(
        "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        f".labelSelector.matchLabels.{key}")]
    assert "kuberl.dev/job" in e.value.problems[0].message


def test_an_unprefixed_label_the_template_sets_itself_is_kept():
    affinity = copy.deepcopy(SPREAD_BY)
    affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"] = {
        "group-name": "trainers"}
    doc = pytorchjob(None, replica(2, affinity))
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"group-name": "trainers"}}
    job, _ = convert(doc)
    term = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["labelSelector"] == {"matchLabels": {"group-name": "trainers"}}


def test_a_trainjob_selecting_by_the_job_controllers_unprefixed_job_name_is_refused():
    """On a TrainJob's pods job-name is the child Job's name (<jobset>-node-0), not the TrainJob's: no kuberl twin."""
    doc = copy.deepcopy(ZONE_TRAINJOB)
    pod = doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod["template"]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"] = {
        "matchLabels": {"job-name": "ppo-zone-pair-node-0"}}
    with pytest.raises(NotConvertible) as e:
        convert_trainjob(doc)
    assert [p.path.rsplit(".", 2)[-2:] for p in e.value.problems] == [["matchLabels", "job-name"]]
