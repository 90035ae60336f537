"""Chart values a new user meets first: common charts' keys refused with where they belong, the trainer's
default resources as values, and the chart README generated from values.yaml (stale: this fails)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import yaml
from chart_support import (
    CHART,
    ROOT,
    HelmError,
    helm,
    operator_container,
    parse_operator_args,
    pod_specs,
    render,
    validate,
)
from kuberl.core import names, validation
from kuberl.core import render as rendering
from kuberl.core.yamlreader import load_documents
from kuberl.operator.config import operator_config, per_process_from_env

from tests.support.jobs import make_job


def values_readme():
    spec = importlib.util.spec_from_file_location("values_readme", ROOT / "charts" / "values_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused(*set_args: str) -> str:
    with pytest.raises(HelmError) as e:
        helm("template", "kuberl", str(CHART), *[a for s in set_args for a in ("--set", s)])
    return str(e.value)


@pytest.mark.parametrize(("setting", "hint"), [
    ("image.repository=registry.example.com/op", "set operator.image.repository and operator.image.tag (the operator) and trainer.image.repository"),
    ("serviceAccount.create=false", "set operator.serviceAccount.create and operator.serviceAccount.name"),
    ("resources.limits.cpu=1", "trainer.resourcesPerProcess"),
    ("replicaCount=2", "set operator.replicas"),
])
def test_a_common_charts_key_is_refused_naming_where_it_belongs(setting, hint):
    message = refused(setting)
    assert "is not a value of this chart" in message and hint in message


def test_a_misspelled_key_is_still_refused_by_the_schema():
    assert "additional properties 'imagee' not allowed" in refused("imagee.repository=x")


def test_trainer_default_resources_are_values_that_reach_every_pod(monkeypatch):
    _, container = operator_container(render({"trainer": {"resourcesPerProcess": {"cpu": "500m", "memory": "3Gi"}}}))
    for e in container["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    per_process = per_process_from_env()
    assert per_process == rendering.PerProcess(cpu="500m", memory="3Gi")
    pod = rendering.render_pod(make_job("j").with_spec(procsPerWorker=2).obj(), "ns", rendering.PLACEHOLDER_UID, 0,
                               per_process=per_process)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "1000m", "memory": "6Gi"} and resources["limits"]["cpu"] == "1000m"
    # the default, and a job's own resources win
    assert rendering.render_pod(make_job("j").obj(), "ns", "u", 0)["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1", "memory": "2Gi"}
    own = make_job("j").with_spec(resources={"requests": {"memory": "1Gi"}}).obj()
    assert rendering.render_pod(own, "ns", "u", 0, per_process=per_process)["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "500m", "memory": "1Gi"}
    assert "trainer.resourcesPerProcess.memory" in refused("trainer.resourcesPerProcess.memory=lots").replace("/", ".")


PULL_SECRETS = [["corp-pull", "registry.example.com"], [{"name": "corp-pull"}, {"name": "registry.example.com"}]]


@pytest.mark.parametrize("secrets", PULL_SECRETS, ids=["names", "references"])
def test_pull_secrets_are_taken_as_names_or_as_kubernetes_own_references_with_a_dot_too(secrets, monkeypatch):
    """`imagePullSecrets: [{name: corp-pull}]`, a pod spec's and most charts' form, was refused (got object, want
    string), and so was a Secret named registry.example.com: a Secret's name is a DNS-1123 subdomain (Kubernetes'
    ValidateSecretName is NameIsDNSSubdomain), dots allowed."""
    objects = render({"operator": {"imagePullSecrets": secrets}, "trainer": {"imagePullSecrets": secrets}})
    _, container = operator_container(objects)
    pods = pod_specs(objects)  # the operator's and `helm test`'s
    assert len(pods) == 2 and all(spec["imagePullSecrets"] == [{"name": "corp-pull"}, {"name": "registry.example.com"}] for _, spec in pods)
    assert not [problem for o in objects for problem in validate(o)]
    for e in container["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    assert operator_config(parse_operator_args(container["args"])).trainer_pull_secrets == ("corp-pull", "registry.example.com")


@pytest.mark.parametrize("secret", [{"nam": "corp-pull"}, "Corp_Pull", {"name": "Corp_Pull"}, "x" * 254])
@pytest.mark.parametrize("who", ["operator", "trainer"])
def test_a_pull_secret_no_secret_can_be_named_is_refused_naming_the_value(who, secret):
    assert f"/{who}/imagePullSecrets/0" in helm_refusal({who: {"imagePullSecrets": [secret]}})


def test_more_pull_secrets_than_a_job_can_record_are_refused_at_helm_install():
    assert "/trainer/imagePullSecrets" in helm_refusal({"trainer": {"imagePullSecrets": [f"s{i}" for i in range(65)]}})


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("KUBERL_TRAINER_IMAGE_PULL_POLICY", "always", "expected one of Always, IfNotPresent, Never (chart value trainer.image.pullPolicy)"),
    ("KUBERL_TRAINER_IMAGE_PULL_SECRETS", "regcred,Corp_Pull", "'Corp_Pull': expected a Secret's name"),
    ("KUBERL_TRAINER_IMAGE_PULL_SECRETS", ",".join(f"s{i}" for i in range(65)), "65 Secrets: expected at most 64"),
])
def test_trainer_pull_settings_kubernetes_or_the_status_record_would_refuse_stop_the_operator_naming_them(
        variable, value, said, monkeypatch):
    """Without the chart (manifests/install.yaml edited by hand) nothing checked them: every job's pods were refused by
    the API server (core/v1 validation: a supported imagePullPolicy, a Secret's name a DNS-1123 subdomain), or its
    status write was (status.trainerDefaults.imagePullSecrets' maxItems)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stopped:
        operator_config(parse_operator_args([]))
    assert variable in str(stopped.value) and said in str(stopped.value)


def test_a_bad_per_process_default_stops_the_operator_naming_the_value(monkeypatch):
    monkeypatch.setenv("KUBERL_TRAINER_MEMORY_PER_PROCESS", "two gigs")
    with pytest.raises(SystemExit, match="trainer.resourcesPerProcess.memory"):
        per_process_from_env()


def test_quantities_multiply_by_the_process_count():
    assert [rendering.times(q, n) for q, n in (("1", 3), ("500m", 2), ("2Gi", 4), ("1.5", 2), ("0.25", 2))] == [
        "3", "1000m", "8Gi", "3", "0.5"]


def test_the_chart_readme_is_generated_from_values_and_lists_every_value():
    module = values_readme()
    text = (CHART / "values.yaml").read_text()
    assert (CHART / "README.md").read_text() == module.readme(text), "stale: run `make chart-readme`"
    keys = {key for key, _, _ in module.documented(text)}
    assert {"operator.image.repository", "trainer.image.repository", "trainer.resourcesPerProcess.cpu",
            "monitoring.podMonitor.sampleLimit"} <= keys
    assert len(keys) >= 60


def test_the_readme_says_what_deleting_a_job_keeps_and_chart_yaml_points_at_a_heading_that_exists():
    readme = (CHART / "README.md").read_text()
    assert "## Upgrading the CRD" in readme and "## Uninstalling" in readme
    assert "kubectl delete pvc" in readme and "retain" in readme
    chart = (CHART / "Chart.yaml").read_text()
    assert "Upgrading the CRD" in chart
    notes = helm("install", "kuberl", str(CHART), "--dry-run", "--namespace", "kuberl-system")
    assert "keeps its checkpoint PVC" in notes and "kubectl delete pvc" in notes
    # checkpoints live per job uid (kuberl.core.names.checkpoint_subdir): a job created again does not resume by itself
    assert names.checkpoint_subdir("j", "uid-1") != names.checkpoint_subdir("j", "uid-2")
    for text in (readme, notes):
        flat = " ".join(text.split())
        assert "can resume from it" not in flat and "starts from zero" in flat and "uid" in flat


def test_every_rendered_default_still_parses():
    assert yaml.safe_load((CHART / "values.yaml").read_text())["trainer"]["resourcesPerProcess"] == {"cpu": "1", "memory": "2Gi"}


# --- map keys and label values: refused at `helm install` naming the value, by Kubernetes' own rules -------------

ALERTING = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}


def values_with(path: str, mapping: dict) -> dict:
    """{"a": {"b": mapping}} for "a.b", with the alerts on (their values only render then)."""
    values: dict = {"monitoring": json.loads(json.dumps(ALERTING))}
    node = values
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = mapping
    return values


def helm_refusal(values: dict) -> str:
    with pytest.raises(HelmError) as refused:
        render(values)
    return str(refused.value)


LABEL_MAPS = ["commonLabels", "operator.podLabels", "operator.nodeSelector", "monitoring.serviceMonitor.labels",
              "monitoring.podMonitor.labels", "monitoring.prometheusRule.labels"]
ANNOTATION_MAPS = ["operator.podAnnotations", "operator.serviceAccount.annotations", "metrics.service.annotations"]


@pytest.mark.parametrize("path", LABEL_MAPS + ANNOTATION_MAPS)
@pytest.mark.parametrize("key", ["a/b/c", "bad key", "-team", "x" * 64, "example.com/" + "x" * 64])
def test_a_key_the_api_server_would_refuse_is_refused_naming_the_value(path, key):
    assert f'{path} has the key "{key}", which is not' in helm_refusal(values_with(path, {key: "x"}))


@pytest.mark.parametrize("path", LABEL_MAPS + ANNOTATION_MAPS)
def test_keys_kubernetes_takes_are_taken(path):
    keys = {"team": "rl", "kubernetes.io/os": "linux", "app.kubernetes.io/part-of": "ml", "a_b.c-d": "x"}
    if path in ANNOTATION_MAPS:
        keys["Example.com/Team"] = "any value at all, spaces included"
    render(values_with(path, keys))


@pytest.mark.parametrize("path", LABEL_MAPS)
@pytest.mark.parametrize("value", ["not ok", "x" * 64, "-lead"])
def test_a_label_value_the_api_server_would_refuse_is_refused_naming_it(path, value):
    assert "/" + path.replace(".", "/") + "/team" in helm_refusal(values_with(path, {"team": value}))


def test_the_chart_checks_keys_and_values_with_kuberls_own_kubernetes_rules():
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f"`{validation.LABEL_KEY.pattern}`" in helpers
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in LABEL_MAPS:
        node = schema
        for key in path.split("."):
            node = node["properties"][key]
        # a bool or a number (what --set makes of true or 2) is written as its string (kuberl.strings)
        assert node["additionalProperties"] == {"type": ["string", "number", "boolean"], "maxLength": 63, "pattern": validation.LABEL_VALUE}, path


@pytest.mark.parametrize(("labels", "expected"), [
    ({"team-name": "ml"}, 'monitoring.prometheusRule.alertLabels has the key "team-name", which is not a Prometheus label name'),
    ({"1st": "ml"}, 'has the key "1st"'),
    ({"severity": "page"}, "monitoring.prometheusRule.alertLabels sets severity or alertname"),
])
def test_an_alert_label_prometheus_would_refuse_is_refused_naming_it(labels, expected):
    assert expected in helm_refusal(values_with("monitoring.prometheusRule.alertLabels", labels))


@pytest.mark.parametrize("path", ["monitoring.serviceMonitor.labels", "monitoring.podMonitor.labels", "monitoring.prometheusRule.labels"])
def test_a_monitors_label_that_common_labels_set_too_is_written_once_with_the_monitors_value(path):
    """`release: kps` in commonLabels and in a monitor's labels (each for its own reason) wrote the key twice, which
    yaml.v3 (kustomize's helmCharts, yq) refuses; the monitor's own value wins, as a more specific setting."""
    values = values_with(path, {"release": "kps-monitors"})
    values["monitoring"].update({"podMonitor": {"enabled": True, **values["monitoring"].get("podMonitor", {})},
                                 "dashboard": {"enabled": True, "label": "release", "labelValue": "kps-dashboards"}})
    values["commonLabels"] = {"release": "kps", "team": "ml"}
    out = helm("template", "kuberl", str(CHART), "--namespace", "kuberl-system", values=values)
    objects = [o for o in load_documents(out) if o]
    kind = {"serviceMonitor": "ServiceMonitor", "podMonitor": "PodMonitor", "prometheusRule": "PrometheusRule"}[path.split(".")[1]]
    labels = {o["kind"] if o["kind"] != "ConfigMap" else "dashboard": o["metadata"]["labels"] for o in objects
              if o["kind"] in (kind, "ConfigMap", "Service")}
    assert labels[kind]["release"] == "kps-monitors" and labels[kind]["team"] == "ml"
    assert labels["dashboard"]["release"] == "kps-dashboards" and labels["dashboard"]["team"] == "ml"
    assert labels["Service"]["release"] == "kps"


@pytest.mark.parametrize(("dashboard", "expected"), [
    # the API server's ValidateLabels (apimachinery's IsQualifiedName, IsValidLabelValue) refuses the ConfigMap, mid-install
    ({"label": "grafana dashboard"}, 'monitoring.dashboard.label has the key "grafana dashboard", which is not a label key'),
    ({"label": "app.kubernetes.io/name"}, "monitoring.dashboard.label sets app.kubernetes.io/name, a label the chart writes itself"),
    ({"labelValue": "not ok"}, "/monitoring/dashboard/labelValue"),
    ({"namespace": "Monitoring_NS"}, "/monitoring/dashboard/namespace"),  # not a DNS label: no such namespace can exist
])
def test_a_dashboard_label_or_namespace_the_api_server_would_refuse_is_refused_naming_it(dashboard, expected):
    assert expected in helm_refusal({"monitoring": {"dashboard": {"enabled": True, **dashboard}}})


@pytest.mark.parametrize(("setting", "written"), [("1", "1"), ("true", "true")])
def test_a_dashboard_label_value_set_as_a_number_or_a_bool_is_taken_as_its_string(setting, written):
    """Grafana's sidecar matches `grafana_dashboard: "1"`; `--set monitoring.dashboard.labelValue=1` was refused (got number)."""
    out = helm("template", "kuberl", str(CHART), "--set", "monitoring.dashboard.enabled=true",
               "--set", f"monitoring.dashboard.labelValue={setting}")
    (configmap,) = [o for o in yaml.safe_load_all(out) if o and o["kind"] == "ConfigMap" and "default.kuberl.json" in o["data"]]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == written
    assert not validate(configmap)


KUBE_PROMETHEUS_STACK = CHART / "examples" / "kube-prometheus-stack.yaml"


def test_the_kube_prometheus_stack_values_give_objects_its_prometheus_and_grafana_pick_up():
    """kube-prometheus-stack's Prometheus selects monitors and rules by `release: <its release>`, and its
    Grafana sidecar reads its own namespace only: the documented values file sets both, and it renders valid."""
    values = yaml.safe_load(KUBE_PROMETHEUS_STACK.read_text())
    objects = render(values)
    assert {o["kind"]: validate(o) for o in objects if validate(o)} == {}
    selected = [o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
    assert sorted(o["kind"] for o in selected) == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]
    assert all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in selected)
    (dashboard,) = [o for o in objects if o["kind"] == "ConfigMap" and "kuberl-system.kuberl.json" in o.get("data", {})]
    assert dashboard["metadata"]["namespace"] == values["monitoring"]["prometheusNamespace"] == "monitoring"


def test_the_notes_say_which_namespace_grafana_must_read_the_dashboard_from():
    values = yaml.safe_load(KUBE_PROMETHEUS_STACK.read_text())
    notes = helm("install", "kuberl", str(CHART), "--dry-run", "--namespace", "kuberl-system", values=values)
    assert "ConfigMap kuberl-system.kuberl-dashboard in namespace monitoring" in notes
    (configmap,) = [o for o in render(values) if o["kind"] == "ConfigMap"]
    (dashboard,) = configmap["data"].values()
    # the title Grafana lists it by (NOTES said "kuberl", which no dashboard of the chart is titled)
    assert f'The Grafana dashboard "{json.loads(dashboard)["title"]}" is in' in notes


def test_the_quickstarts_point_at_the_kube_prometheus_stack_values():
    for doc in (ROOT / "README.md", ROOT / "docs" / "cluster.md"):
        assert "-f charts/kuberl/examples/kube-prometheus-stack.yaml" in doc.read_text(), doc


def test_the_comparison_with_peers_names_only_values_and_fields_kuberl_has():
    """docs/cluster.md's "Compared with": each chart value (or spec field) its kuberl column names exists, so a
    renamed value cannot leave the table pointing at nothing."""
    from kuberl.core.crd import crd

    def paths(tree: dict, prefix: str = "") -> set[str]:
        found = set()
        for key, value in tree.items():
            path = f"{prefix}.{key}" if prefix else key
            found |= {path} | (paths(value, path) if isinstance(value, dict) else set())
        return found

    section = (ROOT / "docs" / "cluster.md").read_text().split("## Compared with", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    assert len(rows) >= 10
    named = [n for row in rows for n in re.findall(r"`([A-Za-z]+(?:\.[A-Za-z]+)*)`", row.rstrip(" |").rsplit(" | ", 1)[1])]
    values = paths(yaml.safe_load((CHART / "values.yaml").read_text()))
    spec = {f"spec.{k}" for k in crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]}
    assert named and [n for n in named if n not in values | spec] == []
