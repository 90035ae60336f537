"""Rendered objects: valid for Kubernetes' own schemas and for the rules those
schemas do not check (DNS names, label values, port names), over a table of jobs."""

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kuberl.cli import registered_env_ids
from kuberl.core import names
from kuberl.core.render import PLACEHOLDER_UID, render_job
from kuberl.core.rules import validate_job

from tests.support.jobs import make_job as job_builder

K8S_VERSION = "1.32"
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def make_job(name="cartpole", **spec):
    """The one builder's job (env id alone, 10000 timesteps); `spec` fields set whole."""
    return job_builder(name).env("CartPole-v1").with_spec(totalTimesteps=10000).replace(**spec).obj()


SIDECAR_TEMPLATE = {
    "metadata": {"labels": {"team": "rl"}, "annotations": {"example.com/note": "hi"}},
    "spec": {
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "regcred"}],
        "containers": [
            {"name": "trainer", "env": [{"name": "EXTRA", "value": "1"}, {"name": "PYTHONUNBUFFERED", "value": "0"}]},
            {"name": "log-shipper", "image": "busybox:1.36", "args": ["sleep", "infinity"]},
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    },
}

CASES = {
    "one-worker": make_job(workers=1),
    "64-workers": make_job(workers=64),
    "4-procs": make_job(procsPerWorker=4),
    "4-gpus": make_job(gpusPerWorker=4, nodeSelector={"nvidia.com/gpu.present": "true"},
                       tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "sidecar-template": make_job(template=SIDECAR_TEMPLATE),
    "50-char-name": make_job(name="a" * 49 + "z", workers=16),
    "queue-name": make_job(queueName="team-a-queue", priorityClassName="high"),
    "volcano": make_job(schedulerName="volcano", workers=8),
    "coscheduling": make_job(schedulerName="scheduler-plugins-scheduler"),
    "claim-name": make_job(checkpoint={"claimName": "shared-checkpoints", "size": "5Gi"}),
    "resources": make_job(resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": 3000000000}},
                          affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                              {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["rl"]}]}]}}}),
}

# Volcano and scheduler-plugins CRDs are not in Kubernetes' schemas; checked by hand below.
NON_CORE_KINDS = {("scheduling.volcano.sh/v1beta1", "PodGroup"), ("scheduling.x-k8s.io/v1alpha1", "PodGroup")}


def rendered(case, target="cluster", namespace="team-rl"):
    return render_job(CASES[case], namespace, PLACEHOLDER_UID, target=target)


def label_problems(labels):
    problems = []
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS_1123_SUBDOMAIN.fullmatch(prefix)):
            problems.append(f"label key prefix {key!r}")
        if len(name) > 63 or not LABEL_NAME.fullmatch(name):
            problems.append(f"label key {key!r}")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            problems.append(f"label value {key}={value!r}")
    return problems


def container_problems(container, volume_names):
    problems = []
    if not DNS_1123_LABEL.fullmatch(container["name"]) or len(container["name"]) > 63:
        problems.append(f"container name {container['name']!r}")
    port_names = [p["name"] for p in container.get("ports", [])]
    for port in port_names:
        if len(port) > 15 or not IANA_SVC_NAME.fullmatch(port) or "--" in port or not re.search("[a-z]", port):
            problems.append(f"port name {port!r}")
    if len(set(port_names)) != len(port_names):
        problems.append("duplicate port names")
    numbers = [p["containerPort"] for p in container.get("ports", [])]
    if len(set(numbers)) != len(numbers):
        problems.append("duplicate container ports")
    env_names = [e["name"] for e in container.get("env", [])]
    if len(set(env_names)) != len(env_names):
        problems.append(f"duplicate env names in {container['name']}")
    problems += [f"env name {n!r}" for n in env_names if not ENV_NAME.fullmatch(n)]
    mounts = container.get("volumeMounts", [])
    problems += [f"mount of unknown volume {m['name']!r}" for m in mounts if m["name"] not in volume_names]
    if len({m["mountPath"] for m in mounts}) != len(mounts):
        problems.append("duplicate mountPath")
    return problems


def pod_problems(pod):
    spec = pod["spec"]
    problems = []
    for key in ("hostname", "subdomain"):
        if key in spec and (len(spec[key]) > 63 or not DNS_1123_LABEL.fullmatch(spec[key])):
            problems.append(f"{key} {spec[key]!r}")
    volume_names = [v["name"] for v in spec.get("volumes", [])]
    if len(set(volume_names)) != len(volume_names):
        problems.append("duplicate volume names")
    problems += [f"volume name {v!r}" for v in volume_names if not DNS_1123_LABEL.fullmatch(v) or len(v) > 63]
    containers = spec["containers"]
    if len({c["name"] for c in containers}) != len(containers):
        problems.append("duplicate container names")
    for c in containers:
        problems += container_problems(c, set(volume_names))
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("resourceFieldRef")
            if ref and ref.get("containerName", c["name"]) not in {x["name"] for x in containers}:
                problems.append(f"resourceFieldRef to unknown container {ref}")
    return problems


def rule_problems(obj):
    """What an API server refuses but the JSON schemas let through."""
    meta = obj["metadata"]
    problems = []
    if len(meta["name"]) > 63 or not DNS_1035_LABEL.fullmatch(meta["name"]):
        problems.append(f"name {meta['name']!r} is not a DNS-1035 label")
    problems += label_problems(meta.get("labels"))
    problems += [f"annotation value {k} is not a string" for k, v in (meta.get("annotations") or {}).items() if not isinstance(v, str)]
    if obj["kind"] == "Pod":
        problems += pod_problems(obj)
    if obj["kind"] == "Service":
        problems += [f"service port name {p['name']!r}" for p in obj["spec"]["ports"] if len(p["name"]) > 15 or not IANA_SVC_NAME.fullmatch(p["name"])]
        problems += label_problems(obj["spec"]["selector"])
    if obj["kind"] == "NetworkPolicy":
        problems += label_problems(obj["spec"]["podSelector"]["matchLabels"])
    return problems


@pytest.mark.parametrize("target", ["cluster", "local"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_is_valid_kubernetes(case, target):
    objects = rendered(case, target)
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in NON_CORE_KINDS:
            assert obj["spec"]["minMember"] == CASES[case]["spec"]["workers"]
        elif obj["kind"] != "Pod" or obj["metadata"]["labels"][names.LABEL_RANK] in ("0", "1"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)  # ranks past 1 differ from rank 1 in values only
        assert rule_problems(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    last = max((o for o in objects if o["kind"] == "Pod"), key=lambda o: int(o["metadata"]["labels"][names.LABEL_RANK]))
    kubernetes_validate.validate(last, K8S_VERSION, strict=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_service_selects_exactly_the_jobs_pods(case):
    objects = rendered(case)
    service = next(o for o in objects if o["kind"] == "Service")
    pods = [o for o in objects if o["kind"] == "Pod"]
    selector = service["spec"]["selector"]
    assert len(pods) == CASES[case]["spec"]["workers"]
    for pod in pods:
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    other = render_job(make_job(name="other"), "team-rl", PLACEHOLDER_UID)
    for pod in (o for o in other if o["kind"] == "Pod"):
        assert not selector.items() <= pod["metadata"]["labels"].items()


def test_local_target_renders_only_what_runs_here():
    kinds = [o["kind"] for o in rendered("volcano", "local")]
    assert kinds == ["ConfigMap", "Service"] + ["Pod"] * 8


def test_cluster_target_renders_every_child_in_creation_order():
    kinds = [o["kind"] for o in rendered("volcano")]
    assert kinds == ["ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "Service", "PodGroup"] + ["Pod"] * 8


def test_a_claim_name_means_no_pvc_and_the_users_claim_on_rank_0():
    objects = rendered("claim-name")
    assert "PersistentVolumeClaim" not in [o["kind"] for o in objects]
    pod0 = next(o for o in objects if o["kind"] == "Pod")
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod0["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["shared-checkpoints"]


def test_render_does_not_mutate_the_job():
    for case, job in CASES.items():
        before = copy.deepcopy(job)
        rendered(case)
        assert job == before, case


def test_the_rule_checks_catch_what_they_claim_to():
    pod = copy.deepcopy(rendered("one-worker")[-1])
    pod["metadata"]["labels"]["kuberl.dev/job"] = "x" * 64
    pod["spec"]["hostname"] = "Rank_0"
    pod["spec"]["containers"][0]["ports"][0]["name"] = "metrics-port-0123"
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "nope", "mountPath": "/nope"})
    problems = " | ".join(rule_problems(pod))
    for expected in ("label value", "hostname", "port name", "unknown volume"):
        assert expected in problems


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "manifests" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_validates_and_renders_valid_objects(example):
    (job,) = [d for d in yaml.safe_load_all(example.read_text()) if d]
    validate_job(job, env_ids=registered_env_ids())
    for obj in render_job(job, "default", PLACEHOLDER_UID):
        if (obj["apiVersion"], obj["kind"]) not in NON_CORE_KINDS:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert rule_problems(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def test_the_cartpole_example_stays_a_two_worker_ppo_job():
    job = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests" / "examples" / "cartpole-ppo.yaml").read_text())
    spec = validate_job(job)
    assert (spec.algorithm, spec.env.id, spec.workers, spec.procs) == ("ppo", "CartPole-v1", 2, 1)


DNS_NAMES = st.from_regex(r"\A[a-z]([-a-z0-9]{0,48}[a-z0-9])?\Z", fullmatch=True)


@st.composite
def valid_jobs(draw):
    gpus = draw(st.sampled_from([0, 0, 1, 2, 8]))
    spec = {
        "workers": draw(st.sampled_from([1, 2, 3, 17, 64, names.MAX_WORKERS])),
        "gpusPerWorker": gpus,
        "metrics": {"port": draw(st.integers(1024, 20000))},
        "labels": draw(st.dictionaries(st.from_regex(r"\A[a-z][a-z0-9]{0,9}\Z"), st.from_regex(r"\A[a-z0-9]{0,20}\Z"), max_size=3)),
    }
    if gpus == 0:
        spec["procsPerWorker"] = draw(st.integers(1, names.MAX_PROCS_PER_WORKER))
    if draw(st.booleans()):
        spec["queueName"] = draw(DNS_NAMES)
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["volcano", "scheduler-plugins-scheduler", "default-scheduler"]))
    if draw(st.booleans()):
        spec["checkpoint"] = {"claimName": draw(DNS_NAMES)}
    return make_job(name=draw(DNS_NAMES), **spec)


@settings(max_examples=30, deadline=None)
@given(job=valid_jobs(), target=st.sampled_from(["cluster", "local"]))
def test_any_valid_job_renders_objects_an_api_server_accepts(job, target):
    objects = render_job(job, "ns", PLACEHOLDER_UID, target=target)
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert len(pods) == job["spec"]["workers"]
    for obj in [o for o in objects if o["kind"] != "Pod"] + [pods[0], pods[-1]]:  # the last has the longest names
        if (obj["apiVersion"], obj["kind"]) not in NON_CORE_KINDS:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert rule_problems(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
