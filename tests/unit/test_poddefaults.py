"""A platform's defaults for every trainer pod (trainer.podDefaults), laid under a rendered pod by one pure merge:
the job's own spec wins wherever both set the same key, kuberl's own labels and env over both."""

from __future__ import annotations

import copy
import json

import pytest
from kuberl.core import names, poddefaults
from kuberl.core.render import render_podgroup, render_pods
from kuberl.operator.config import operator_config

from tests.support.jobs import make_job

NCCL = {"name": "NCCL_SOCKET_IFNAME", "value": "ib0"}
PROXY = {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "url"}}}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEFAULTS = poddefaults.parse({
    "labels": {"cost-center": "rl-platform", "team": "platform"},
    "annotations": {"sidecar.istio.io/inject": "false"},
    "env": [NCCL, PROXY],
    "tolerations": [GPU_TAINT, {"key": "pool", "operator": "Equal", "value": "shared", "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "gpu", "zone": "a"},
    "priorityClassName": "ml-batch",
})


def pod(**spec) -> dict:
    return render_pods(make_job("cartpole").with_spec(**spec).obj(), "team-a", "uid-1", [0])[0]


def trainer(p: dict) -> dict:
    return next(c for c in p["spec"]["containers"] if c["name"] == names.TRAINER_CONTAINER)


def test_a_job_that_sets_nothing_takes_every_default():
    merged = poddefaults.apply(pod(), DEFAULTS)
    assert merged["metadata"]["labels"].items() >= {"cost-center": "rl-platform", "team": "platform"}.items()
    assert merged["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert trainer(merged)["env"][-2:] == [NCCL, PROXY]
    assert merged["spec"]["tolerations"] == list(DEFAULTS.tolerations)
    assert merged["spec"]["nodeSelector"] == {"pool": "gpu", "zone": "a"}
    assert merged["spec"]["priorityClassName"] == "ml-batch"


@pytest.mark.parametrize(("spec", "read", "expected"), [
    ({"labels": {"team": "rl"}}, lambda p: p["metadata"]["labels"]["team"], "rl"),
    ({"template": {"metadata": {"annotations": {"sidecar.istio.io/inject": "true"}}}},
     lambda p: p["metadata"]["annotations"]["sidecar.istio.io/inject"], "true"),
    ({"template": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]}]}}},
     lambda p: [e["value"] for e in trainer(p)["env"] if e["name"] == "NCCL_SOCKET_IFNAME"], ["eth0"]),
    ({"nodeSelector": {"pool": "cpu"}}, lambda p: p["spec"]["nodeSelector"], {"pool": "cpu", "zone": "a"}),
    ({"tolerations": [{"key": "pool", "operator": "Equal", "value": "mine", "effect": "NoSchedule"}]},
     lambda p: p["spec"]["tolerations"], [{"key": "pool", "operator": "Equal", "value": "mine", "effect": "NoSchedule"}, GPU_TAINT]),
    ({"priorityClassName": "urgent"}, lambda p: p["spec"]["priorityClassName"], "urgent"),
], ids=["label", "annotation", "env", "nodeSelector", "toleration", "priorityClassName"])
def test_the_jobs_own_value_wins_where_both_set_the_same_key(spec, read, expected):
    assert read(poddefaults.apply(pod(**spec), DEFAULTS)) == expected


def test_kuberls_own_labels_and_env_win_and_sidecars_get_no_env():
    sidecar = {"name": "logs", "image": "busybox"}
    rendered = pod(workers=2, template={"spec": {"containers": [sidecar]}})
    defaults = poddefaults.PodDefaults(labels={names.LABEL_JOB: "someone-else"}, env=({"name": "RANK", "value": "7"},))  # not parse()d
    merged = poddefaults.apply(rendered, defaults)
    assert merged["metadata"]["labels"][names.LABEL_JOB] == "cartpole"
    assert [e["value"] for e in trainer(merged)["env"] if e["name"] == "RANK"] == ["0"]
    assert "env" not in next(c for c in merged["spec"]["containers"] if c["name"] == "logs")


def test_the_pod_is_not_changed_and_no_defaults_change_nothing():
    rendered = pod()
    before = copy.deepcopy(rendered)
    poddefaults.apply(rendered, DEFAULTS)
    assert rendered == before
    assert poddefaults.apply(rendered, poddefaults.NONE) == rendered


@pytest.mark.parametrize(("document", "said"), [
    ({"labels": {"kuberl.dev/job": "x"}}, "kuberl.dev/ is kuberl's own prefix"),
    ({"labels": {"team": "a b"}}, "trainer.podDefaults.labels.team: expected a label value"),
    ({"env": [{"name": "MASTER_ADDR", "value": "x"}]}, "MASTER_ADDR is reserved"),
    ({"env": [{"name": "KUBERL_JOB", "value": "x"}]}, "KUBERL_JOB is reserved"),
    ({"env": [{"name": "1BAD", "value": "x"}]}, "expected an env var name"),
    ({"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]}, "tolerations[0].effect"),
    ({"nodeSelector": {"Bad Key": "x"}}, "expected a label key"),
    ({"priorityClassName": "Not_A_Name"}, "expected a PriorityClass name"),
    ({"podLabels": {}}, "trainer.podDefaults.podLabels: unknown field"),
    ({"labels": {f"k{i}": "v" * 60 for i in range(600)}}, "bytes of JSON"),
])
def test_defaults_kubernetes_would_refuse_are_refused_at_once_naming_the_field(document, said):
    with pytest.raises(ValueError) as refused:
        poddefaults.parse(document)
    assert said in str(refused.value)


def test_a_job_keeps_the_defaults_it_first_met():
    recorded = {"trainerDefaults": {"image": "i", "pod": DEFAULTS.document()}}
    assert poddefaults.recorded(recorded, poddefaults.NONE) == DEFAULTS
    assert poddefaults.recorded({"trainerDefaults": {"image": "i", "pod": {}}}, DEFAULTS) == poddefaults.NONE  # met none: keeps none
    assert poddefaults.recorded({}, DEFAULTS) == DEFAULTS  # never recorded: the operator's
    assert poddefaults.recorded({"trainerDefaults": {"pod": {"labels": {"kuberl.dev/x": "1"}}}}, DEFAULTS) == DEFAULTS  # a hand edit
    assert poddefaults.parse(json.loads(json.dumps(DEFAULTS.document()))) == DEFAULTS


def test_the_operator_reads_them_from_its_environment_and_stops_on_bad_ones(monkeypatch):
    from kuberl.cli import build_parser

    monkeypatch.setenv("KUBERL_TRAINER_POD_DEFAULTS", json.dumps(DEFAULTS.document()))
    assert operator_config(build_parser().parse_args(["operator"])).trainer_pod_defaults == DEFAULTS
    monkeypatch.delenv("KUBERL_TRAINER_POD_DEFAULTS")
    assert operator_config(build_parser().parse_args(["operator"])).trainer_pod_defaults == poddefaults.NONE
    monkeypatch.setenv("KUBERL_TRAINER_POD_DEFAULTS", '{"env": [{"name": "RANK", "value": "1"}]}')
    with pytest.raises(SystemExit, match="KUBERL_TRAINER_POD_DEFAULTS: trainer.podDefaults.env.0..name: RANK is reserved"):
        operator_config(build_parser().parse_args(["operator"]))
    monkeypatch.setenv("KUBERL_TRAINER_POD_DEFAULTS", "{not json")
    with pytest.raises(SystemExit, match="not JSON"):
        operator_config(build_parser().parse_args(["operator"]))


PRIORITY_SOURCES = {  # where a job may name its pods' PriorityClass, each alone and with the others
    "spec": {"priorityClassName": "urgent"},
    "template": {"template": {"spec": {"priorityClassName": "from-template"}}},
    "spec-and-template": {"priorityClassName": "urgent", "template": {"spec": {"priorityClassName": "from-template"}}},
    "template-empties-it": {"priorityClassName": "urgent", "template": {"spec": {"priorityClassName": ""}}},
    "template-nulls-it": {"priorityClassName": "urgent", "template": {"spec": {"priorityClassName": None}}},
    "none": {},
}


@pytest.mark.parametrize("defaults", [DEFAULTS, poddefaults.NONE], ids=["platform-default", "no-default"])
@pytest.mark.parametrize("source", PRIORITY_SOURCES, ids=list(PRIORITY_SOURCES))
def test_a_volcano_podgroup_states_the_priority_class_its_pods_get(source, defaults):
    """Volcano orders its queue by the PodGroup's priorityClassName: a group without its pods' class waits
    behind the jobs those pods would preempt, and one with another class jumps a queue they do not. The pods'
    class (template over spec, the platform's default under both) and the group's come from one function."""
    job = make_job("cartpole").with_spec(schedulerName="volcano", **copy.deepcopy(PRIORITY_SOURCES[source])).obj()
    pods = [poddefaults.apply(p, defaults) for p in render_pods(job, "team-a", "uid-1", [0, 1])]
    group = render_podgroup(job, "team-a", defaults.priority_class_name)
    expected = {"spec": "urgent", "template": "from-template", "spec-and-template": "from-template"}.get(
        source, defaults.priority_class_name)
    assert [p["spec"].get("priorityClassName") for p in pods] == [expected, expected]
    assert group["spec"].get("priorityClassName") == expected


def test_only_volcanos_podgroup_states_a_priority_class():
    """scheduler-plugins' PodGroupSpec has no priority field (apis/scheduling/v1alpha1/types.go), and no PodGroup is
    made for any other scheduler."""
    job = make_job("cartpole").with_spec(schedulerName="scheduler-plugins-scheduler", priorityClassName="urgent").obj()
    assert "priorityClassName" not in render_podgroup(job, "team-a", "ml-batch")["spec"]
    assert render_podgroup(make_job("cartpole").with_spec(priorityClassName="urgent").obj(), "team-a", "ml-batch") is None


# --- enforced: a default a job may not change ------------------------------------------------------------------------

ENFORCED = poddefaults.parse({**DEFAULTS.document(), "enforced": list(poddefaults.ENFORCEABLE)})
OTHER_POOL = {"key": "pool", "operator": "Equal", "value": "mine", "effect": "NoSchedule"}


@pytest.mark.parametrize(("spec", "said"), [
    ({"labels": {"team": "rl"}}, "metadata.labels.team: trainer.podDefaults enforces 'platform' (got 'rl')"),
    ({"template": {"metadata": {"annotations": {"sidecar.istio.io/inject": "true"}}}},
     "metadata.annotations.sidecar.istio.io/inject: trainer.podDefaults enforces 'false' (got 'true')"),
    ({"template": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]}]}}},
     ("'NCCL_SOCKET_IFNAME': trainer.podDefaults enforces {'name': 'NCCL_SOCKET_IFNAME', 'value': 'ib0'} (got {'name':"
     " 'NCCL_SOCKET_IFNAME', 'value': 'eth0'})")),
    ({"nodeSelector": {"pool": "cpu"}}, "spec.nodeSelector.pool: trainer.podDefaults enforces 'gpu' (got 'cpu')"),
    ({"priorityClassName": "urgent"}, "spec.priorityClassName: trainer.podDefaults enforces 'ml-batch' (got 'urgent')"),
], ids=["label", "annotation", "env", "nodeSelector", "priorityClassName"])
def test_an_enforced_default_refuses_a_job_that_sets_its_key_otherwise(spec, said):
    """A default is the job's to set aside by writing the same key (the table above): a platform that keeps tenants on
    its GPU pool, in its PriorityClass or under the label its NetworkPolicy selects had no way to hold them there.
    Enforced, a job setting it otherwise is refused naming the pod field, as PodNodeSelector admission refuses."""
    assert poddefaults.conflicts(pod(**spec), DEFAULTS) == []  # a default: the job's value wins, silently
    found = poddefaults.conflicts(pod(**spec), ENFORCED)
    assert len(found) == 1 and found[0].endswith(said), found


def test_an_enforced_default_the_job_repeats_or_leaves_unset_is_no_conflict():
    same = pod(labels={"team": "platform"}, nodeSelector={"pool": "gpu", "disk": "ssd"}, priorityClassName="ml-batch",
               template={"spec": {"containers": [{"name": "trainer", "env": [NCCL, {"name": "OWN", "value": "1"}]}]}})
    assert poddefaults.conflicts(same, ENFORCED) == [] and poddefaults.conflicts(pod(), ENFORCED) == []
    nulls = poddefaults.parse({"env": [{**NCCL, "valueFrom": None}], "enforced": ["env"]})  # null: no value, either side
    assert poddefaults.conflicts(same, nulls) == []
    merged = poddefaults.apply(same, ENFORCED)
    assert merged["spec"]["nodeSelector"] == {"pool": "gpu", "zone": "a", "disk": "ssd"}


def test_enforced_tolerations_are_added_beside_the_jobs_own_for_the_same_key():
    assert poddefaults.apply(pod(tolerations=[OTHER_POOL]), ENFORCED)["spec"]["tolerations"] == [OTHER_POOL, *DEFAULTS.tolerations]
    assert poddefaults.apply(pod(tolerations=[GPU_TAINT]), ENFORCED)["spec"]["tolerations"] == list(DEFAULTS.tolerations)


def test_enforced_names_fields_and_is_recorded_with_the_defaults():
    with pytest.raises(ValueError) as refused:
        poddefaults.parse({"enforced": ["nodeSelector", "image"]})
    assert str(refused.value) == ("trainer.podDefaults.enforced[1]: expected one of labels, annotations, env, tolerations,"
                                  " nodeSelector, priorityClassName (got 'image')")
    with pytest.raises(ValueError, match=r"trainer.podDefaults.enforced: expected a list"):
        poddefaults.parse({"enforced": "nodeSelector"})
    kept = {"trainerDefaults": {"pod": json.loads(json.dumps(ENFORCED.document()))}}
    assert poddefaults.recorded(kept, poddefaults.NONE).enforced == set(poddefaults.ENFORCEABLE)


def test_a_job_that_ran_before_any_record_is_not_failed_by_an_upgrade_that_enforces():
    """Jobs from an operator before trainer.podDefaults have a status and no trainerDefaults.pod: recorded() gives them
    the operator's defaults, enforced fields included, and an operator restart judges every job again, so a running
    job with its own nodeSelector was failed by the upgrade (the design: an upgrade never restarts a healthy gang)."""
    running = {"phase": "Running", "trainerDefaults": {"image": "i"}}
    assert poddefaults.judged_by(running, ENFORCED).enforced == frozenset()
    assert poddefaults.conflicts(pod(nodeSelector={"pool": "cpu"}), poddefaults.judged_by(running, ENFORCED)) == []
    assert poddefaults.judged_by({}, ENFORCED) == ENFORCED  # a new job: the operator's, enforced
    kept = {"phase": "Running", "trainerDefaults": {"pod": ENFORCED.document()}}
    assert poddefaults.judged_by(kept, poddefaults.NONE) == ENFORCED  # what it recorded holds through restarts
    assert poddefaults.judged_by({"phase": "Running", "trainerDefaults": {"pod": {}}}, ENFORCED) == poddefaults.NONE
