"""The Helm chart, with real Helm: lint, render, validate every object, refuse
bad values with the key named, least-privilege RBAC, locked-down pods, and the
generated copies (CRD, manifests/install.yaml) never stale."""

from __future__ import annotations

import io
import json
import re
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml
from chart_support import (
    ALL_FEATURES,
    CHART,
    CLUSTER_SCOPED,
    HELM,
    NAMESPACED,
    ROOT,
    HelmError,
    helm,
    of_kind,
    operator_container,
    parse_operator_args,
    pod_specs,
    render,
    validate,
)
from kuberl import cli
from kuberl.core import contract, names, poddefaults
from kuberl.core.render import DEFAULT_IMAGE, PLACEHOLDER_UID, render_job
from kuberl.core.yamlreader import load_documents
from kuberl.operator.kubeapi import API_CALLS, PEERING_API_CALLS

SCENARIOS = {
    "defaults": {},
    "all-features": ALL_FEATURES,
    "namespaced": NAMESPACED,
    "metrics-off": {"metrics": {"enabled": False}, "rbac": {"create": True}},
    "no-rbac-existing-sa": {"rbac": {"create": False}, "operator": {"serviceAccount": {"create": False, "name": "mine"}}},
}


def refusal(values: dict | None = None, *set_args: str) -> str:
    extra = [a for pair in (("--set", s) for s in set_args) for a in pair]
    with pytest.raises(HelmError) as refused:
        helm("template", "kuberl", str(CHART), *extra, values=values)
    return str(refused.value)


# --- lint and render ---------------------------------------------------------

@pytest.mark.parametrize("scenario", ["defaults", "all-features", "namespaced"])
def test_helm_lint_strict(scenario):
    out = helm("lint", "--strict", str(CHART), values=SCENARIOS[scenario])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_object_is_valid_for_its_schema(scenario):
    objects = render(SCENARIOS[scenario], "kuberl-system", "--include-crds")
    problems = {f"{o['kind']}/{o['metadata']['name']}": validate(o) for o in objects}
    assert {k: v for k, v in problems.items() if v} == {}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_manifest_reads_under_a_strict_yaml_reader(scenario):
    """yaml.v3 (kustomize's helmCharts, yq) refuses a key written twice, where Helm's own reader keeps the
    last in silence: the helm test pod's labels once wrote app.kubernetes.io/component twice."""
    out = helm("template", "kuberl", str(CHART), "--namespace", "kuberl-system", "--include-crds", values=SCENARIOS[scenario])
    assert load_documents(out)


@pytest.mark.parametrize("path", ["commonLabels", "operator.podLabels", "monitoring.serviceMonitor.labels"])
def test_a_values_label_the_chart_writes_itself_is_refused_naming_both(path):
    values: dict = {"monitoring": {"serviceMonitor": {"enabled": True}}}
    node = values
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = {"app.kubernetes.io/name": "mine"}
    assert f"{path} sets app.kubernetes.io/name, a label the chart writes itself" in refusal(values)


@pytest.mark.parametrize("replicas", [1, 2], ids=["deployment", "statefulset"])
def test_common_labels_reach_the_operators_pods_under_its_pod_labels(replicas):
    """commonLabels are what a platform's policy asks of every object (a cost centre, an owner), and policies that
    require a label are written for Pods first (Kyverno's require-labels, Gatekeeper's k8srequiredlabels): the
    operator's pods lacked them, so such a policy refused every one and the release installed without an operator."""
    values = {"commonLabels": {"cost-center": "ml", "owner": "platform"}, "operator": {"replicas": replicas, "podLabels": {"owner": "rl-team"}}}
    out = helm("template", "kuberl", str(CHART), "--namespace", "kuberl-system", values=values)
    objects = [o for o in load_documents(out) if o]  # a strict reader: each key once
    (workload,) = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert labels["cost-center"] == "ml" and labels["owner"] == "rl-team"
    assert workload["spec"]["selector"]["matchLabels"].keys() == {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                                                  "app.kubernetes.io/component"}, "the selector, immutable, keeps its labels"
    (test_pod,) = [o for o in objects if o["kind"] == "Pod"]
    assert test_pod["metadata"]["labels"]["cost-center"] == "ml"


def test_all_features_renders_every_kind():
    kinds = sorted({o["kind"] for o in render(ALL_FEATURES)})
    assert kinds == sorted([
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "StatefulSet", "ClusterKopfPeering",
        "PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap", "Pod", "NetworkPolicy", "PodDisruptionBudget",
    ])
    namespaced = sorted({o["kind"] for o in render(NAMESPACED)})
    assert {"Role", "RoleBinding", "KopfPeering"} <= set(namespaced)
    assert "ClusterKopfPeering" not in namespaced


def test_defaults_render_one_standalone_deployment_and_nothing_optional():
    objects = render()
    assert sorted(o["kind"] for o in objects) == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment", "Pod", "NetworkPolicy",
         "ClusterRole", "ClusterRole"])  # the operator's, then the job submitters' edit and view
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--peering") for a in args)


def test_example_jobs_are_valid_rltrainingjobs():
    examples = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        for job in yaml.safe_load_all(path.read_text()):
            assert validate(job) == [], path


def test_crd_schema_refuses_a_bad_job():
    job = yaml.safe_load((ROOT / "manifests" / "examples" / "cartpole-ppo.yaml").read_text())
    job["spec"]["wrokers"] = 2
    job["spec"]["totalTimesteps"] = "many"
    problems = validate(job)
    assert any("wrokers" in p for p in problems) and any(p.startswith("spec.totalTimesteps") for p in problems)


def test_prometheus_operator_validation_refuses_unknown_and_mistyped_fields():
    (pod_monitor,) = of_kind(render(ALL_FEATURES), "PodMonitor")
    pod_monitor["spec"]["podMetricsEndpoints"][0]["portt"] = "metrics-0"
    pod_monitor["spec"]["namespaceSelector"]["any"] = "yes"
    problems = validate(pod_monitor)
    assert any("portt: unknown field" in p for p in problems)
    assert any("namespaceSelector/any must be boolean" in p for p in problems)


# --- values: schema, comments, refusals ---------------------------------------

def test_misspelled_key_is_refused_naming_it():
    assert "additional properties 'replcas' not allowed" in refusal(None, "operator.replcas=2")
    message = refusal({"monitoring": {"podMonitor": {"enabeld": True}}})
    assert "/monitoring/podMonitor" in message and "'enabeld'" in message
    assert "'imageTag'" in refusal({"imageTag": "1.0"})


def test_wrong_value_type_is_refused_naming_the_key():
    message = refusal(None, "operator.replicas=two")
    assert "/operator/replicas" in message and "want integer" in message
    message = refusal({"metrics": {"enabled": "yes"}})
    assert "/metrics/enabled" in message and "want boolean" in message
    assert "/operator/logLevel" in refusal({"operator": {"logLevel": "loud"}})


@pytest.mark.parametrize(("values", "expected"), [
    ({"operator": {"image": {"tag": ""}}}, "operator.image.tag is empty: set operator.image.tag (e.g. 0.1.0) or operator.image.digest"),
    ({"trainer": {"image": {"tag": ""}}}, "trainer.image.tag is empty"),
    ({"metrics": {"enabled": False}, "monitoring": {"serviceMonitor": {"enabled": True}}}, "monitoring.serviceMonitor.enabled=true needs metrics.enabled=true"),
    ({"metrics": {"port": 8080}}, "metrics.port and operator.health.port are both 8080"),
    ({"operator": {"replicas": 2, "peering": {"name": ""}}}, "operator.replicas > 1 needs operator.peering.name"),
    ({"operator": {"watchNamespaces": ["a", "a"]}}, "operator.watchNamespaces lists a namespace twice"),
    ({"operator": {"serviceAccount": {"create": False}}}, "operator.serviceAccount.name must name an existing ServiceAccount"),
])
def test_bad_combinations_fail_with_a_precise_message(values, expected):
    assert expected in refusal(values)


# What the StatefulSet controller puts on each pod of a StatefulSet named `name` (pkg/controller/statefulset
# stateful_set_utils.go: newVersionedStatefulSetPod, getPodName, updateIdentity): the revision label's value is
# history.ControllerRevisionName(name, hash), name + "-" + rand.SafeEncodeString of a uint32 (up to 10 characters;
# pkg/controller/history/controller_history.go), and the pod's name and its statefulset.kubernetes.io/pod-name label
# are name + "-" + ordinal. Each value is checked as the API server checks a pod's labels (apimachinery
# validation.IsValidLabelValue: at most 63 characters), so a longer one fails every pod create (kubernetes#64023).
def statefulset_pod_label_values(name: str, replicas: int) -> list[str]:
    return [f"{name}-{'b' * 10}", f"{name}-{replicas - 1}"]


@pytest.mark.parametrize("length", [52, 53, 63])
def test_several_replicas_are_refused_a_full_name_whose_statefulset_pods_kubernetes_would_refuse(length):
    values = {"fullnameOverride": "k" * length, "operator": {"replicas": 2}}
    if length > 52:
        message = refusal(values)
        assert f"operator.replicas > 1 runs the operator as a StatefulSet named {'k' * length} ({length} characters)" in message
        assert "fullnameOverride" in message and "at most 52" in message
        assert max(map(len, statefulset_pod_label_values("k" * length, 2))) > 63, "refused only what Kubernetes refuses"
        return
    (statefulset,) = of_kind(render(values), "StatefulSet")
    name, replicas = statefulset["metadata"]["name"], statefulset["spec"]["replicas"]
    assert all(len(v) <= 63 for v in statefulset_pod_label_values(name, replicas)), name
    assert of_kind(render({"fullnameOverride": "k" * 63}), "Deployment"), "one replica: a Deployment, whose pods' names are generated"


def test_image_digest_wins_over_tag():
    digest = "sha256:" + "a" * 64
    (deployment,) = of_kind(render({"operator": {"image": {"tag": "", "digest": digest}}}), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"ghcr.io/kuberl/operator@{digest}"


def _leaf_paths(values: dict, prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        is_parent = isinstance(value, dict) and value and path not in (
            "operator.resources", "operator.podSecurityContext", "operator.securityContext", "monitoring.prometheusPodLabels")
        paths += _leaf_paths(value, path + ".") if is_parent else [path]
    return paths


def test_every_value_has_a_comment():
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    commented = set()
    for number, line in enumerate(lines):
        if m := re.match(r"^(\s*)([A-Za-z][\w-]*):", line):
            indent = len(m.group(1))
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, m.group(2))]
            if number and lines[number - 1].strip().startswith("# -- "):
                commented.add(".".join(k for _, k in stack))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert [p for p in _leaf_paths(values) if p not in commented] == []


def _object_nodes(schema: dict, path: str = "$"):
    if schema.get("type") == "object":
        yield path, schema
    for key, child in (schema.get("properties") or {}).items():
        yield from _object_nodes(child, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _object_nodes(schema["items"], f"{path}[]")


# Kubernetes affinity terms are passed through to the API server, which checks them.
OPEN_BY_DESIGN = {"$.operator.affinity.nodeAffinity", "$.operator.affinity.podAffinity", "$.operator.affinity.podAntiAffinity",
                  "$.operator.volumes[]"}  # a Volume: a name and one of some thirty sources


def test_values_schema_is_closed_everywhere():
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_nodes = [p for p, node in _object_nodes(schema) if "additionalProperties" not in node and p not in OPEN_BY_DESIGN]
    assert open_nodes == []
    maps = [p for p, node in _object_nodes(schema) if isinstance(node.get("additionalProperties"), dict)]
    assert all(node.get("properties") is None for p, node in _object_nodes(schema) if p in maps)


def test_image_tags_follow_the_chart_and_the_operator_default():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["operator"]["image"]["tag"] == values["trainer"]["image"]["tag"] == chart["appVersion"]
    assert f"{values['trainer']['image']['repository']}:{values['trainer']['image']['tag']}" == DEFAULT_IMAGE


# --- the operator pod -----------------------------------------------------------

@pytest.mark.parametrize("scenario", ["defaults", "all-features", "namespaced"])
def test_operator_args_parse_with_the_kuberl_cli(scenario):
    values = SCENARIOS[scenario]
    _, container = operator_container(render(values))
    parsed = parse_operator_args(container["args"], pod_index=2)
    assert parsed.command == "operator"
    assert parsed.namespace == values.get("operator", {}).get("watchNamespaces", [])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (parsed.health_port, parsed.metrics_port) == (ports["health"], ports["metrics"])


def test_replicas_get_distinct_kopf_priorities_from_their_ordinal():
    objects = render(ALL_FEATURES)
    workload, container = operator_container(objects)
    assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 3
    env = {e["name"]: e for e in container["env"]}
    assert env["KUBERL_POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    priorities = {parse_operator_args(container["args"], i).priority for i in range(workload["spec"]["replicas"])}
    assert len(priorities) == 3
    assert parse_operator_args(container["args"], 0).peering_lifetime == 60  # the failover time, chart default
    _, faster = operator_container(render({**ALL_FEATURES, "operator": {**ALL_FEATURES["operator"], "peering": {
        "name": "kuberl", "failoverSeconds": 20}}}))
    assert parse_operator_args(faster["args"], 0).peering_lifetime == 20
    assert "/operator/peering/failoverSeconds" in refusal({"operator": {"replicas": 2, "peering": {"failoverSeconds": 5}}})
    peering = parse_operator_args(container["args"], 0).peering
    assert [p["metadata"]["name"] for p in of_kind(objects, "ClusterKopfPeering")] == [peering]
    namespaced = render(NAMESPACED)
    assert sorted(p["metadata"]["namespace"] for p in of_kind(namespaced, "KopfPeering")) == ["team-a", "team-b"]


def test_replicas_keep_a_standby_through_a_drain_and_one_replica_blocks_no_drain():
    """A node pool's upgrade drains several nodes at once: without a budget every replica could be evicted together
    and no job reconciled until they are rescheduled. One replica gets none (allowing no eviction blocks drains)."""
    objects = render(ALL_FEATURES)
    (budget,) = of_kind(objects, "PodDisruptionBudget")
    workload, _ = operator_container(objects)
    assert budget["spec"]["maxUnavailable"] == 1 and budget["metadata"]["namespace"] == workload["metadata"]["namespace"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    assert not validate(budget)
    assert of_kind(render(), "PodDisruptionBudget") == []


def test_operator_gets_the_default_trainer_image_and_settings():
    _, container = operator_container(render(ALL_FEATURES))
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERL_TRAINER_IMAGE"] == DEFAULT_IMAGE
    assert env["KUBERL_TRAINER_IMAGE_PULL_SECRETS"] == "regcred"
    assert env["KUBERL_LOG_LEVEL"] == "debug"


def test_operator_env_names_are_the_contract_ones():
    operator_env = {v for k, v in vars(contract).items() if k.startswith("ENV_OPERATOR_")}
    _, peering = operator_container(render(ALL_FEATURES))
    _, standalone = operator_container(render())
    assert {e["name"] for e in peering["env"]} == operator_env
    assert {e["name"] for e in standalone["env"]} == operator_env - {contract.ENV_OPERATOR_POD_INDEX}
    assert f"--priority=$({contract.ENV_OPERATOR_POD_INDEX})" in peering["args"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_is_locked_down(scenario):
    specs = pod_specs(render(SCENARIOS[scenario]))
    assert specs
    for where, spec in specs:
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0, where
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert "hostNetwork" not in spec and "hostPID" not in spec, where
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], where
            assert sc.get("privileged", False) is False, where
            assert "limits" in container["resources"] and "memory" in container["resources"]["limits"], where


def test_helm_test_pod_checks_the_operator_health_endpoint_through_its_service():
    objects = render()
    (test_pod,) = of_kind(objects, "Pod")
    (service,) = of_kind(objects, "Service")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["automountServiceAccountToken"] is False
    script = test_pod["spec"]["containers"][0]["command"][-1]
    health = next(p for p in service["spec"]["ports"] if p["name"] == "health")
    assert f"http://{service['metadata']['name']}.kuberl-system.svc:{health['port']}/healthz" in script
    compile(script, "helm-test", "exec")


def test_helm_test_pod_schedules_where_the_operator_does():
    """On a cluster whose only nodes are tainted, the test pod without the operator's tolerations stayed Pending."""
    scheduling = {"nodeSelector": {"pool": "system"},
                  "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                      {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}}}
    objects = render({"operator": scheduling})
    (test_pod,) = of_kind(objects, "Pod")
    workload, _ = operator_container(objects)
    for key, value in scheduling.items():
        assert test_pod["spec"][key] == workload["spec"]["template"]["spec"][key] == value, key


def test_notes_tell_the_next_commands():
    out = helm("install", "kuberl", str(CHART), "--dry-run=client", "--namespace", "kuberl-system", values=NAMESPACED)
    notes = out[out.index("NOTES:"):]
    assert "kubectl -n kuberl-system rollout status statefulset/kuberl" in notes
    assert "helm test kuberl -n kuberl-system" in notes
    assert "kubectl apply -n team-a -f manifests/examples/cartpole-ppo.yaml" in notes
    assert "kubectl apply --server-side --force-conflicts -f charts/kuberl/crds/" in notes


def test_notes_say_the_default_images_are_yours_to_build_until_both_are_set():
    """`helm install kuberl charts/kuberl` with the defaults: the operator's pod waited in ImagePullBackOff on
    ghcr.io/kuberl/operator, which no one pushes, and NOTES' first step (rollout status) never ended, without a word."""
    notes = {}
    for case, values in {"defaults": {}, "trainer set": {"trainer": {"image": {"repository": "registry.example.com/me/trainer"}}},
                         "both set": {"operator": {"image": {"repository": "registry.example.com/me/operator"}},
                                      "trainer": {"image": {"repository": "registry.example.com/me/trainer"}}}}.items():
        out = helm("install", "kuberl", str(CHART), "--dry-run=client", "--namespace", "kuberl-system", values=values)
        notes[case] = out[out.index("NOTES:"):out.index("1. Wait")]
    assert "operator.image.repository=ghcr.io/kuberl/operator, trainer.image.repository=ghcr.io/kuberl/trainer" in notes["defaults"]
    assert "make images REGISTRY=" in notes["defaults"]
    assert "operator.image.repository=ghcr.io/kuberl/operator:" in notes["trainer set"] and "trainer.image" not in notes["trainer set"]
    assert "Images:" not in notes["both set"]


@pytest.mark.parametrize("pod_monitor", [True, False])
def test_notes_name_every_alert_the_rule_holds(pod_monitor):
    """NOTES named 9 of the PrometheusRule's 13 alerts: KuberlJobFailed, KuberlCheckpointVolumeFailing,
    KuberlOperatorNamespaceRefused and KuberlOperatorThrottled were left out of what the installer is told."""
    values = {"monitoring": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": pod_monitor},
                             "prometheusRule": {"enabled": True}}}
    out = helm("install", "kuberl", str(CHART), "--dry-run=client", "--namespace", "kuberl-system", values=values)
    notes = out[out.index("NOTES:"):]
    listed = set(re.findall(r"\bKuberl[A-Za-z]+\b", notes[notes.index("Alerts (PrometheusRule"):]))
    (rule,) = of_kind(render(values), "PrometheusRule")
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}
    assert listed == alerts


# --- RBAC: least privilege ---------------------------------------------------------

def _as_grants(calls) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for verb, group, resource, subresource in calls:
        grants.setdefault((group, f"{resource}/{subresource}" if subresource else resource), set()).add(verb)
    return grants


PODGROUPS = {("scheduling.volcano.sh", "podgroups"), ("scheduling.x-k8s.io", "podgroups")}
# The calls the operator makes (enforced by its integration tests), plus the one no request uses:
# update on the job's finalizers, which ownerReferences with blockOwnerDeletion need.
EVERY_JOB_RULE = {**_as_grants(API_CALLS), (names.GROUP, f"{names.PLURAL}/finalizers"): {"update"}}
JOB_RULES = {k: v for k, v in EVERY_JOB_RULE.items() if k not in PODGROUPS}
PODGROUP_RULES = {k: v for k, v in EVERY_JOB_RULE.items() if k in PODGROUPS}
PEERING = _as_grants(PEERING_API_CALLS)


def _grants(role: dict) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_wildcards_no_secrets(scenario):
    for role in of_kind(render(SCENARIOS[scenario]), "ClusterRole") + of_kind(render(SCENARIOS[scenario]), "Role"):
        for (group, resource), verbs in _grants(role).items():
            assert "*" not in (group, resource) and "*" not in verbs, role["metadata"]
            assert resource != "secrets" and not {"escalate", "bind", "impersonate"} & verbs


def _operators(roles: list[dict]) -> list[dict]:
    """The roles the operator's bindings refer to (not the job submitters')."""
    return [r for r in roles if not r["metadata"]["name"].endswith(("-edit", "-view"))]


def test_cluster_wide_rules_are_exactly_the_operators_calls():
    (default_role,) = _operators(of_kind(render(), "ClusterRole"))
    assert _grants(default_role) == JOB_RULES
    (full_role,) = _operators(of_kind(render(ALL_FEATURES), "ClusterRole"))
    assert _grants(full_role) == {**JOB_RULES, **PODGROUP_RULES, ("kopf.dev", "clusterkopfpeerings"): PEERING[("kopf.dev", "clusterkopfpeerings")]}
    assert PODGROUP_RULES.keys() == PODGROUPS


def test_listed_namespaces_get_one_role_each_and_nothing_cluster_wide():
    objects = render(NAMESPACED)
    assert _operators(of_kind(objects, "ClusterRole")) == of_kind(objects, "ClusterRoleBinding") == []
    roles = of_kind(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert _grants(role) == {**JOB_RULES, **PODGROUP_RULES, ("kopf.dev", "kopfpeerings"): PEERING[("kopf.dev", "kopfpeerings")]}
    bindings = of_kind(objects, "RoleBinding")
    assert sorted((b["metadata"]["namespace"], b["roleRef"]["kind"]) for b in bindings) == [("team-a", "Role"), ("team-b", "Role")]
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kuberl", "namespace": "kuberl-system"}]


# The default user-facing roles aggregate ClusterRoles by these labels (Kubernetes RBAC docs, "Default roles
# and role bindings": admin, edit and view carry aggregationRules selecting rbac.authorization.k8s.io/aggregate-to-<role>).
SUBMITTER_GRANTS = {
    "edit": {(names.GROUP, names.PLURAL): {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
             (names.GROUP, f"{names.PLURAL}/status"): {"get", "list", "watch"}},
    "view": {(names.GROUP, names.PLURAL): {"get", "list", "watch"}, (names.GROUP, f"{names.PLURAL}/status"): {"get", "list", "watch"}},
}


@pytest.mark.parametrize("scenario", ["defaults", "namespaced"])
def test_job_submitters_get_edit_and_view_roles_aggregated_into_the_defaults_with_status_read_only(scenario):
    objects = render(SCENARIOS[scenario])
    roles = {r["metadata"]["name"].rsplit("-", 1)[1]: r for r in of_kind(objects, "ClusterRole")
             if r["metadata"]["name"].endswith(("-edit", "-view"))}
    assert {name: _grants(role) for name, role in roles.items()} == SUBMITTER_GRANTS
    aggregated = {name: sorted(k.rsplit("-", 1)[1] for k, v in role["metadata"]["labels"].items()
                               if k.startswith("rbac.authorization.k8s.io/aggregate-to-") and v == "true")
                  for name, role in roles.items()}
    assert aggregated == {"edit": ["admin", "edit"], "view": ["view"]}
    # only the operator may write status: a tenant's own Succeeded or restart count would be believed
    assert not any(verbs & {"create", "update", "patch", "delete"} for name in roles
                   for (_, resource), verbs in _grants(roles[name]).items() if resource.endswith("/status"))
    # they grant nothing until bound, and the chart binds them to no one
    bound = {b["roleRef"]["name"] for b in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding")}
    assert not bound & {r["metadata"]["name"] for r in roles.values()}


def test_user_roles_off_renders_no_submitter_roles():
    objects = render({"rbac": {"create": True, "userRoles": False}})
    assert [r["metadata"]["name"] for r in of_kind(objects, "ClusterRole")] == ["kuberl"]


# --- monitoring ---------------------------------------------------------------------

def test_pod_monitor_selects_every_rendered_trainer_port():
    (pod_monitor,) = of_kind(render(ALL_FEATURES), "PodMonitor")
    (selector,) = pod_monitor["spec"]["selector"]["matchExpressions"]
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    keep = next(r for r in endpoint["relabelings"] if r["action"] == "keep")
    job = yaml.safe_load((ROOT / "manifests" / "examples" / "cartpole-ppo.yaml").read_text())
    job["spec"]["procsPerWorker"] = 3
    pods = [o for o in render_job(job, "team-a", PLACEHOLDER_UID) if o["kind"] == "Pod"]
    assert pods
    for pod in pods:
        assert selector == {"key": names.LABEL_JOB, "operator": "Exists"} and names.LABEL_JOB in pod["metadata"]["labels"]
        ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
        kept = [p for p in ports if re.fullmatch(keep["regex"], p)]
        assert kept == [names.metrics_port_name(i) for i in range(3)]


def test_pod_monitor_bounds_what_one_trainer_target_may_send_and_zero_lifts_a_bound():
    """Any tenant's pod labelled kuberl.dev/job is scraped into the shared Prometheus (a real one refuses a
    flood under these limits: tests/e2e/test_monitoring_limits.py); the limits validate as prometheus-operator's."""
    (pod_monitor,) = of_kind(render(ALL_FEATURES), "PodMonitor")
    spec = pod_monitor["spec"]
    assert (spec["sampleLimit"], spec["labelLimit"], spec["labelNameLengthLimit"], spec["labelValueLengthLimit"], spec["bodySizeLimit"]) \
        == (10000, 40, 128, 1024, "10MiB")
    assert validate(pod_monitor) == []
    (lifted,) = of_kind(render({**ALL_FEATURES, "monitoring": {**ALL_FEATURES["monitoring"], "podMonitor": {
        **ALL_FEATURES["monitoring"]["podMonitor"], "sampleLimit": 0, "bodySizeLimit": ""}}}), "PodMonitor")
    assert "sampleLimit" not in lifted["spec"] and "bodySizeLimit" not in lifted["spec"] and lifted["spec"]["labelLimit"] == 40
    assert "/monitoring/podMonitor/sampleLimit" in refusal({"monitoring": {"podMonitor": {"sampleLimit": -1}}})


def test_service_monitor_scrapes_the_operator_metrics_port():
    objects = render(ALL_FEATURES)
    (service_monitor,) = of_kind(objects, "ServiceMonitor")
    (service,) = of_kind(objects, "Service")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in service_monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def admits(policy: dict, namespace: str, port: str, pod_labels: dict | None = None) -> bool:
    """Whether `policy` lets a pod labelled `pod_labels` of `namespace` (labelled as the API server labels every
    namespace, kubernetes.io/metadata.name, GA in 1.22) connect to `port`, as kubernetes.io/docs/concepts/
    services-networking/network-policies reads: a rule admits when one of its peers and one of its ports match (no
    `from`: every source); a peer with only a namespaceSelector matches every pod of a matching namespace, one with
    a namespaceSelector and a podSelector the pods both select (a lone podSelector: the policy's own namespace)."""
    labels = {"kubernetes.io/metadata.name": namespace}

    def peer_matches(peer: dict) -> bool:
        if "namespaceSelector" not in peer or set(peer) - {"namespaceSelector", "podSelector"}:
            return False  # IP blocks and same-namespace pod selectors: no pod of these tests matches them
        pods = (peer.get("podSelector") or {}).get("matchLabels") or {}
        return (peer["namespaceSelector"]["matchLabels"].items() <= labels.items()
                and pods.items() <= (pod_labels or {}).items())

    return any(("from" not in rule or any(peer_matches(p) for p in rule["from"]))
               and ("ports" not in rule or any(p["port"] == port for p in rule["ports"]))
               for rule in policy["spec"].get("ingress", []))


def selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector as the API server reads it: every matchLabels pair, every In, NotIn, Exists, DoesNotExist."""
    expressions = {"In": lambda r: labels.get(r["key"]) in r["values"], "NotIn": lambda r: labels.get(r["key"]) not in r["values"],
                   "Exists": lambda r: r["key"] in labels, "DoesNotExist": lambda r: r["key"] not in labels}
    return (selector.get("matchLabels", {}).items() <= labels.items()
            and all(expressions[r["operator"]](r) for r in selector.get("matchExpressions", [])))


def egress_admits(policy: dict, namespace: str, to_namespace: str, to_labels: dict, port: int, protocol: str = "TCP") -> bool:
    """Whether an Egress `policy` of `namespace` lets its pods connect to a pod labelled `to_labels` of `to_namespace`
    (the docs' reading, as admits() above): a lone podSelector peer is the policy's own namespace."""
    def peer_matches(peer: dict) -> bool:
        if "ipBlock" in peer:
            return False
        in_namespace = (selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": to_namespace})
                        if "namespaceSelector" in peer else to_namespace == namespace)
        return in_namespace and selects(peer.get("podSelector", {}), to_labels)

    return any(("to" not in rule or any(peer_matches(p) for p in rule["to"]))
               and ("ports" not in rule or any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in rule["ports"]))
               for rule in policy["spec"].get("egress", []))


def test_the_documented_egress_policy_lets_a_gang_meet_in_a_namespace_that_denies_egress():
    """Where tenant namespaces deny all egress by default, a gang's ranks could neither resolve MASTER_ADDR nor reach
    rank 0, and each job restarted as PeerLost every 600 s; the docs said nothing. Their policy opens what a gang
    needs and nothing else, for every pod kuberl renders."""
    section = (ROOT / "docs" / "cluster.md").read_text().split("## Namespaces that deny egress")[1].split("\n## ")[0]
    (policy,) = yaml.safe_load_all(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))
    assert validate(policy) == []
    assert policy["spec"]["policyTypes"] == ["Egress"], "ingress stays as each job's own policy has it"
    job = yaml.safe_load((ROOT / "manifests" / "examples" / "cartpole-ppo.yaml").read_text())
    pods = [o for o in render_job(job, "team-a", PLACEHOLDER_UID) if o["kind"] == "Pod"]
    assert len(pods) == 2
    env = {e["name"]: e.get("value") for e in pods[1]["spec"]["containers"][0]["env"]}
    for pod in pods:
        assert selects(policy["spec"]["podSelector"], pod["metadata"]["labels"])
        for peer in pods:
            for port in (int(env["MASTER_PORT"]), 45821):  # the rendezvous, then gloo's ephemeral ports
                assert egress_admits(policy, "team-a", "team-a", peer["metadata"]["labels"], port)
        for protocol in ("UDP", "TCP"):
            assert egress_admits(policy, "team-a", "kube-system", {"k8s-app": "kube-dns"}, 53, protocol)
    assert not egress_admits(policy, "team-a", "team-a", {"app": "web"}, 8080), "a tenant's other pods stay closed"
    assert not egress_admits(policy, "team-a", "team-b", pods[0]["metadata"]["labels"], 29500), "another namespace's gangs too"
    assert not egress_admits(policy, "team-a", "kube-system", {"k8s-app": "kube-dns"}, 8080)


def test_the_documented_annotations_point_a_plain_prometheus_at_the_operator_and_trainer_metrics_ports():
    """A Prometheus without prometheus-operator scrapes by annotation, and the docs said nothing of it: the values
    they give now land on the operator's Service and each rendered trainer pod, naming the port each serves."""

    section = (ROOT / "docs" / "cluster.md").read_text().split("### Without prometheus-operator")[1].split("\n## ")[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)
    values = yaml.safe_load(block)
    objects = render(values)
    (service,) = of_kind(objects, "Service")
    _, container = operator_container(objects)
    metrics = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics)}
    defaults = poddefaults.parse(values["trainer"]["podDefaults"])  # as the operator reads what the chart hands it
    job = yaml.safe_load((ROOT / "manifests" / "examples" / "cartpole-ppo.yaml").read_text())
    pods = [poddefaults.apply(o, defaults) for o in render_job(job, "team-a", PLACEHOLDER_UID) if o["kind"] == "Pod"]
    assert pods
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        first = pod["spec"]["containers"][0]["ports"][0]
        assert annotations["prometheus.io/scrape"] == "true"
        assert (first["name"], str(first["containerPort"])) == (names.metrics_port_name(0), annotations["prometheus.io/port"])


def test_network_policy_admits_only_the_operator_ports():
    objects = render()
    (policy,) = of_kind(objects, "NetworkPolicy")
    workload, container = operator_container(objects)
    assert policy["spec"]["podSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert sorted(p["port"] for p in rule["ports"]) == sorted(p["name"] for p in container["ports"]) == ["health", "metrics"]
    assert of_kind(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy") == []


def test_network_policy_admits_the_helm_test_and_prometheus_and_no_tenant():
    """The operator's metrics name every tenant's jobs (labels namespace, rltj): a tenant's pod may not read them,
    as each job's NetworkPolicy admits only the operator's and Prometheus' namespaces to its trainers' metrics."""
    objects = render(ALL_FEATURES, "ops")
    (policy,) = of_kind(objects, "NetworkPolicy")
    (test_pod,) = [o for o in of_kind(objects, "Pod") if o["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    (service_monitor,) = of_kind(objects, "ServiceMonitor")
    assert admits(policy, test_pod["metadata"]["namespace"], "health")
    assert [e["port"] for e in service_monitor["spec"]["endpoints"]] == ["metrics"]
    assert admits(policy, "monitoring", "metrics", PROMETHEUS) and admits(policy, "ops", "metrics")
    assert not admits(policy, "team-a", "metrics") and not admits(policy, "team-a", "health")
    # Prometheus' pods, not every pod beside it (Grafana, Alertmanager, a dashboard's plugin)
    assert not admits(policy, "monitoring", "metrics", {"app.kubernetes.io/name": "grafana"})


PROMETHEUS = {"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"}  # as prometheus-operator labels its pods


def test_network_policy_admits_the_prometheus_pods_named_or_with_null_every_pod_of_its_namespace():
    vmagent = {"app.kubernetes.io/name": None, "app": "vmagent"}  # a key set to null drops the chart's default one
    (policy,) = of_kind(render({"monitoring": {"prometheusPodLabels": vmagent}}), "NetworkPolicy")
    assert admits(policy, "monitoring", "metrics", {"app": "vmagent"}) and not admits(policy, "monitoring", "metrics", PROMETHEUS)
    assert validate(policy) == []
    (anyone,) = of_kind(render({"monitoring": {"prometheusPodLabels": None}}), "NetworkPolicy")
    assert admits(anyone, "monitoring", "metrics", {"app.kubernetes.io/name": "grafana"})
    assert not admits(anyone, "team-a", "metrics", PROMETHEUS)
    assert "monitoring.prometheusPodLabels" in refusal({"monitoring": {"prometheusPodLabels": {"Bad Key": "x"}}})


def test_network_policy_follows_the_prometheus_namespace_and_takes_extra_peers():
    scraper = {"podSelector": {"matchLabels": {"app": "vmagent"}}, "namespaceSelector": {"matchLabels": {"team": "sre"}}}
    values = {"monitoring": {"prometheusNamespace": "observability"}, "networkPolicy": {"extraFrom": [scraper]}}
    (policy,) = of_kind(render(values), "NetworkPolicy")
    assert admits(policy, "observability", "metrics", PROMETHEUS) and not admits(policy, "monitoring", "metrics", PROMETHEUS)
    assert policy["spec"]["ingress"][0]["from"][-1] == scraper
    assert validate(policy) == []
    (alone,) = of_kind(render({"monitoring": {"prometheusNamespace": ""}}), "NetworkPolicy")
    assert [p["namespaceSelector"]["matchLabels"] for p in alone["spec"]["ingress"][0]["from"]] == [
        {"kubernetes.io/metadata.name": "kuberl-system"}]
    (same,) = of_kind(render({"monitoring": {"prometheusNamespace": "kuberl-system"}}), "NetworkPolicy")
    assert len(same["spec"]["ingress"][0]["from"]) == 1


@pytest.mark.parametrize("peer", [{}, {"ipBlock": {}}, {"podSelectors": {}}, {"namespaceSelector": {"matchLabel": {"team": "sre"}}}])
def test_network_policy_refuses_a_peer_kubernetes_would(peer):
    assert "networkPolicy" in refusal({"networkPolicy": {"extraFrom": [peer]}})


def matches(selector: dict, labels: dict) -> bool:
    """A LabelSelector of matchLabels only (what the chart writes) selects a pod whose labels hold them all."""
    assert set(selector) == {"matchLabels"}
    return selector["matchLabels"].items() <= labels.items()


def test_peering_replicas_spread_over_nodes_and_one_replica_is_not_constrained():
    """Standbys on the active replica's node die with it: the chart spreads replicas by hostname, softly
    (ScheduleAnyway: a one-node cluster still runs them all). The scheduler counts the pods the
    labelSelector matches in the pod's own namespace (k8s.io/api core/v1 TopologySpreadConstraint), so it must
    match the replicas' own labels and no other pod's, such as the helm test pod's."""
    objects = render({"operator": {"replicas": 3}})
    workload, _ = operator_container(objects)
    template = workload["spec"]["template"]
    (spread,) = template["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"], spread["maxSkew"]) == ("kubernetes.io/hostname", "ScheduleAnyway", 1)
    assert matches(spread["labelSelector"], template["metadata"]["labels"])
    (test_pod,) = of_kind(objects, "Pod")
    assert not matches(spread["labelSelector"], test_pod["metadata"]["labels"])
    assert validate(workload) == []
    single, _ = operator_container(render())
    assert "topologySpreadConstraints" not in single["spec"]["template"]["spec"]


def test_topology_spread_constraints_set_replace_the_default_and_an_empty_list_drops_it():
    zones = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}}}]
    workload, _ = operator_container(render({"operator": {"replicas": 2, "topologySpreadConstraints": zones}}))
    assert workload["spec"]["template"]["spec"]["topologySpreadConstraints"] == zones
    none, _ = operator_container(render({"operator": {"replicas": 2, "topologySpreadConstraints": []}}))
    assert "topologySpreadConstraints" not in none["spec"]["template"]["spec"]


@pytest.mark.parametrize("constraint", [
    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"},
    {"maxSkew": 0, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "Never"},
    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelectors": {}},
])
def test_a_topology_spread_constraint_kubernetes_would_refuse_is_refused(constraint):
    """Required fields, maxSkew >= 1 and whenUnsatisfiable's two values: pkg/apis/core/validation
    validateTopologySpreadConstraints."""
    assert "topologySpreadConstraints" in refusal({"operator": {"topologySpreadConstraints": [constraint]}})


OPERATOR_EXTRAS = {
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
            {"name": "NO_PROXY", "valueFrom": {"configMapKeyRef": {"name": "proxy", "key": "no_proxy"}}}],
    "envFrom": [{"configMapRef": {"name": "operator-extra"}, "prefix": "EXTRA_"}],
    "volumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
    "volumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
}


@pytest.mark.parametrize("replicas", [1, 3])
def test_operator_env_and_volumes_of_the_values_reach_its_container_after_the_charts_own(replicas):
    objects = render({"operator": {"replicas": replicas, **OPERATOR_EXTRAS}})
    workload, container = operator_container(objects)
    own, _ = operator_container(render({"operator": {"replicas": replicas}}))
    own_env = own["spec"]["template"]["spec"]["containers"][0]["env"]
    assert container["env"] == own_env + OPERATOR_EXTRAS["env"]
    assert container["envFrom"] == OPERATOR_EXTRAS["envFrom"]
    pod = workload["spec"]["template"]["spec"]
    assert pod["volumes"][1:] == OPERATOR_EXTRAS["volumes"] and container["volumeMounts"][1:] == OPERATOR_EXTRAS["volumeMounts"]
    # pkg/apis/core/validation ValidateVolumeMounts: a mount names a volume of the pod
    assert {m["name"] for m in container["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
    assert validate(workload) == []
    (test_pod,) = of_kind(objects, "Pod")
    assert "env" not in test_pod["spec"]["containers"][0] and "volumes" not in test_pod["spec"]


def own_env_names() -> list[str]:
    """Every environment variable the chart gives the operator, peering's included."""
    _, container = operator_container(render({"operator": {"replicas": 2}}))
    return [e["name"] for e in container["env"]]


@pytest.mark.parametrize("name", own_env_names())
def test_an_env_name_the_chart_sets_is_refused_naming_what_sets_it(name):
    message = refusal({"operator": {"env": [{"name": name, "value": "x"}]}})
    assert f"operator.env sets {name}, which the chart sets itself" in message


@pytest.mark.parametrize(("extras", "said"), [
    ({"volumes": [{"name": "tmp", "emptyDir": {}}]}, "operator.volumes names a volume tmp"),
    ({"volumes": [{"name": "scratch", "emptyDir": {}}], "volumeMounts": [{"name": "scratch", "mountPath": "/tmp/"}]},
     "operator.volumeMounts mounts at /tmp"),
    ({"volumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp"}]}, "mounts corp-ca, which is not a volume"),
    ({"volumes": [{"name": "corp-ca"}]}, "/operator/volumes/0"),
    ({"env": [{"name": "A", "valueFrom": {}}]}, "/operator/env/0/valueFrom"),
    ({"volumeMounts": [{"name": "tmp", "mountPath": "relative"}]}, "/operator/volumeMounts/0/mountPath"),
])
def test_operator_env_and_volumes_kubernetes_would_refuse_are_refused(extras, said):
    assert said in refusal({"operator": extras})


def outside(objects: list[dict], namespace: str) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objects
            if o["kind"] in CLUSTER_SCOPED or o["metadata"].get("namespace") != namespace]


@pytest.mark.parametrize("replicas", [1, 3])
def test_a_namespace_admin_can_install_it_for_their_namespace_alone(replicas):
    """KubeRay's singleNamespaceInstall: its own namespace watched, no user roles and the CRDs left to the
    cluster's admin (--skip-crds), the chart writes nothing outside the release's namespace, so a namespace's
    admin (Kubernetes' `admin` role, bound in that namespace) can install it."""
    values = {"operator": {"replicas": replicas, "watchNamespaces": ["team-a"]}, "rbac": {"userRoles": False}}
    assert outside(render(values, "team-a"), "team-a") == []
    assert "ClusterRole/kuberl" in outside(render({"operator": {"replicas": replicas}}, "team-a"), "team-a")


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar():
    (configmap,) = of_kind(render(ALL_FEATURES), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"]["grafana_folder"] == "kuberl"
    dashboard = json.loads(configmap["data"]["kuberl-system.kuberl.json"])
    source = json.loads((CHART / "dashboards" / "kuberl.json").read_text())
    # the variables take this release's operator and namespaces (test_chart_dashboard.py); the rest is the file's
    assert {**dashboard, "uid": "kuberl", "title": "kuberl", "templating": source["templating"]} == source
    assert [v["name"] for v in dashboard["templating"]["list"]] == [v["name"] for v in source["templating"]["list"]]


def rendered_dashboard(release: str, namespace: str) -> dict:
    out = helm("template", release, str(CHART), "--namespace", namespace, "--set", "monitoring.dashboard.enabled=true",
               "--show-only", "templates/dashboard.yaml")
    (dashboard,) = yaml.safe_load(out)["data"].values()
    return json.loads(dashboard)


def dashboard_uid(release: str, namespace: str) -> str:
    return rendered_dashboard(release, namespace)["uid"]


def test_each_release_names_its_dashboard_title():
    """Grafana's search and list show titles, not uids: two releases in one Grafana both showed 'kuberl'."""
    assert rendered_dashboard("kuberl", "team-a")["title"] == "kuberl (team-a/kuberl)"
    assert rendered_dashboard("kuberl", "team-b")["title"] == "kuberl (team-b/kuberl)"


def test_each_release_has_its_own_dashboard_uid_kept_across_upgrades():
    """Grafana keys dashboards by uid: two releases sharing a Grafana (kuberl in team-a and in team-b) wrote one
    `uid: kuberl`, and the sidecar kept whichever it read last. Grafana refuses a uid over 40 characters."""
    uids = [dashboard_uid(release, namespace) for release, namespace in
            [("kuberl", "team-a"), ("kuberl", "team-b"), ("kuberl-gpu", "team-a"), ("x" * 53, "y" * 63)]]
    assert len(set(uids)) == len(uids), uids
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", uid) for uid in uids), uids
    assert dashboard_uid("kuberl", "team-a") == uids[0], "an upgrade of the release keeps its dashboard's uid"


def test_two_releases_of_one_name_share_a_grafana_each_with_its_own_configmap_and_file():
    """kuberl in team-a and kuberl in team-b, both with the kube-prometheus-stack values (dashboard in monitoring):
    both wrote ConfigMap monitoring/kuberl-dashboard, so Helm refused the second install (the object is the first
    release's), and both keyed it kuberl.json, the file name Grafana's sidecar writes into one folder for every
    namespace it reads, so one dashboard overwrote the other even in two namespaces."""
    values = yaml.safe_load((CHART / "examples" / "kube-prometheus-stack.yaml").read_text())
    configmaps = [cm for namespace in ("team-a", "team-b") for cm in of_kind(render(values, namespace), "ConfigMap")]
    assert len({(cm["metadata"]["namespace"], cm["metadata"]["name"]) for cm in configmaps}) == 2
    files = [key for cm in configmaps for key in cm["data"]]
    assert len(set(files)) == 2 and all(re.fullmatch(r"[-._a-zA-Z0-9]+\.json", f) for f in files), files
    in_own_namespace = [cm for namespace in ("team-a", "team-b") for cm in of_kind(render(
        {"monitoring": {"dashboard": {"enabled": True}}}, namespace), "ConfigMap")]
    assert len({key for cm in in_own_namespace for key in cm["data"]}) == 2, "a sidecar reading every namespace"
    assert [cm["metadata"]["name"] for cm in in_own_namespace] == ["kuberl-dashboard"] * 2


# --- generated copies ---------------------------------------------------------------

def test_chart_crd_equals_manifests_crd_equals_kuberl_crd():
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert cli.main(["crd"]) == 0
    chart_copy = (CHART / "crds" / "rltrainingjobs.yaml").read_text()
    assert chart_copy == (ROOT / "manifests" / "crd.yaml").read_text() == printed.getvalue(), "run `make manifests`"


def test_install_yaml_is_fresh(tmp_path: Path):
    fresh = tmp_path / "install.yaml"
    subprocess.run(["make", "-s", "--no-print-directory", "install-yaml", f"INSTALL_YAML={fresh}", f"HELM={HELM}"],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    assert (ROOT / "manifests" / "install.yaml").read_text() == fresh.read_text(), "manifests/install.yaml is stale: run `make manifests`"


def test_install_yaml_applies_in_order_and_validates():
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "install.yaml").read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "Namespace" and kinds[1:4] == ["CustomResourceDefinition"] * 3
    assert "Pod" not in kinds, "helm test hooks do not belong in install.yaml"
    assert all(d["metadata"].get("namespace", "kuberl-system") == "kuberl-system" for d in docs)
    assert [(d["kind"], validate(d)) for d in docs if validate(d)] == []
