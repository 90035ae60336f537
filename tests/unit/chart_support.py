"""Real Helm over charts/kuberl, and validators for every kind it renders.

Core kinds go through kubernetes-validate (strict). ServiceMonitor and
PodMonitor go through prometheus-operator's own models from npm: their compiled
JSON-schema validators for types, enums and required fields, plus their
TypeScript declarations for unknown keys (the compiled validators let those
pass; the API server refuses them). CRD-backed kinds of our own (RLTrainingJob,
kopf's peerings) go through the openAPIV3Schema in the chart's crds/.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from kuberl import cli

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kuberl"
HELM = ROOT / ".tools" / "bin" / "helm"
PROM_MODELS = ROOT / ".tools" / "prometheus-operator-models"
PROM_MODELS_PKG = PROM_MODELS / "node_modules" / "@kubernetes-models" / "prometheus-operator"
K8S_VERSION = "1.33"
# Debian's prometheus package (`make prometheus`) brings promtool: PromQL and alerting rules are checked by it.
PROMTOOL = Path("/usr/bin/promtool")

# The operator image's entrypoint (dockerfiles/operator.Dockerfile).
ENTRYPOINT = json.loads(re.search(r"^ENTRYPOINT (.+)$", (ROOT / "dockerfiles" / "operator.Dockerfile").read_text(), re.MULTILINE).group(1))
assert ENTRYPOINT[0] == "kuberl"

# Every optional feature on at once.
ALL_FEATURES = {
    "operator": {
        "replicas": 3,
        "imagePullSecrets": ["regcred"],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.com/team": "rl"},
        "podLabels": {"team": "rl"},
        "logLevel": "debug",
        "scrapeIntervalSeconds": 30,
        "scrapeTimeoutSeconds": 0.5,
        "maxConcurrentReconciles": 8,
        "watchTimeoutSeconds": 240,
        "kubeApiQps": 20,
        "kubeApiBurst": 40,
        "serviceAccount": {"annotations": {"iam.example.com/role": "kuberl"}},
    },
    "trainer": {"imagePullSecrets": ["regcred"], "podDefaults": {
        "labels": {"cost-center": "rl"}, "annotations": {"sidecar.istio.io/inject": "false"},
        "env": [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}], "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"pool": "gpu"}, "priorityClassName": "ml-batch"}},
    "gangScheduling": {"podGroupApis": ["volcano", "coscheduling"]},
    "commonLabels": {"cost-center": "research"},
    "metrics": {"service": {"annotations": {"example.com/scrape": "true"}}},
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboard": {"enabled": True, "folder": "kuberl"},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, "alertLabels": {"team": "ml-platform"}},
    },
}
NAMESPACED = {**ALL_FEATURES, "operator": {**ALL_FEATURES["operator"], "watchNamespaces": ["team-a", "team-b"]}}


# Built-in kinds `kubectl api-resources --namespaced=false` lists that a chart could render (rbac.authorization.k8s.io,
# apiextensions.k8s.io, scheduling.k8s.io, admissionregistration.k8s.io, core), plus the chart's own cluster-scoped CRDs.
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition", "PriorityClass",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "PersistentVolume", "StorageClass"} | {
    c["spec"]["names"]["kind"] for f in (CHART / "crds").glob("*.yaml") for c in yaml.safe_load_all(f.read_text())
    if c and c["spec"]["scope"] == "Cluster"}


class HelmError(Exception):
    pass


def helm(*args: str, values: dict | None = None) -> str:
    """Run the real Helm binary; values go in as a file, like a user's -f."""
    assert HELM.exists(), f"{HELM} is missing: run `make tools`"
    command = [str(HELM), *args]
    if values is not None:
        command += ["--values", "-"]
    result = subprocess.run(command, check=False, input=yaml.safe_dump(values or {}), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise HelmError(result.stderr)
    return result.stdout


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: run `make prometheus`"
    return subprocess.run([str(PROMTOOL), *args], check=False, capture_output=True, text=True, timeout=120, cwd=cwd)


@cache
def _render(values_json: str, namespace: str, extra: tuple[str, ...]) -> tuple[dict, ...]:
    out = helm("template", "kuberl", str(CHART), "--namespace", namespace, *extra, values=json.loads(values_json))
    return tuple(d for d in yaml.safe_load_all(out) if d)


def render(values: dict | None = None, namespace: str = "kuberl-system", *extra: str) -> list[dict]:
    """Every object `helm template` renders (deep copies: tests may poke at them)."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True), namespace, extra)))


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def operator_container(objects: list[dict]) -> tuple[dict, dict]:
    """The operator's workload (Deployment or StatefulSet) and its container."""
    (workload,) = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    return workload, workload["spec"]["template"]["spec"]["containers"][0]


def parse_operator_args(args: list[str], pod_index: int = 0) -> argparse.Namespace:
    """What `kuberl operator` (the image's entrypoint) makes of the rendered
    args, after the kubelet's $(VAR) expansion; argparse exits on a flag it
    does not accept."""
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: {"KUBERL_POD_INDEX": str(pod_index)}.get(m.group(1), m.group(0)), a) for a in args]
    return cli.build_parser().parse_args([*ENTRYPOINT[1:], *expanded])


def pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    """(description, pod spec) of every pod template and bare pod."""
    found = []
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            found.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif o["kind"] == "Pod":
            found.append((f"Pod/{o['metadata']['name']}", o["spec"]))
    return found


# --- validators -------------------------------------------------------------

def _structural_to_jsonschema(node):
    """A Kubernetes structural schema as JSON schema: nullable becomes a null
    type, and objects without preserve-unknown-fields refuse unknown keys (the
    API server's strict field validation)."""
    if isinstance(node, list):
        return [_structural_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for bound in ("Minimum", "Maximum"):  # OpenAPI 3.0's boolean exclusive bounds, as draft 7 numbers
        if out.pop(f"exclusive{bound}", False) is True:
            out[f"exclusive{bound}"] = out.pop(bound.lower())
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


@cache
def _crd_validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    validators = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _structural_to_jsonschema(version["schema"]["openAPIV3Schema"])
                schema.setdefault("properties", {}).update(
                    apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
                schema["additionalProperties"] = False
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return validators


def validate_against_chart_crds(obj: dict) -> list[str]:
    validator = _crd_validators()[(obj["apiVersion"], obj["kind"])]
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(obj)]


_IMPORT = re.compile(r'^import \{ (\w+) \} from "([^"]+?)(?:\.js)?";$', re.MULTILINE)
_PROPERTY = re.compile(r'^    "([^"]+)"\??: (.+?);?$')


@cache
def _declared_class(dts: Path) -> tuple[dict[str, str], dict[str, Path]] | None:
    """Properties (name -> type) of the class a .d.ts declares, and where its
    imported types live; None when the file declares no model class."""
    text = dts.read_text()
    start = text.find("export declare class ")
    if start < 0:
        return None
    props = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("}"):
            break
        if m := _PROPERTY.match(line):
            props[m.group(1)] = m.group(2)
    imports = {}
    for name, source in _IMPORT.findall(text):
        base = dts.parent if source.startswith(".") else PROM_MODELS / "node_modules"
        imports[name] = (base / f"{source}.d.ts").resolve()
    return props, imports


def _unknown_keys(value, dts: Path, path: str) -> list[str]:
    declared = _declared_class(dts) if dts.exists() else None
    if declared is None:
        return []
    props, imports = declared
    if isinstance(value, list):
        return [e for i, item in enumerate(value) for e in _unknown_keys(item, dts, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    problems = []
    for key, item in value.items():
        if key not in props:
            problems.append(f"{path}.{key}: unknown field (not in {dts.name.removesuffix('.d.ts')})")
            continue
        type_name = re.sub(r"^Array<(.+)>$", r"\1", props[key])
        if type_name in imports:
            problems += _unknown_keys(item, imports[type_name], f"{path}.{key}")
    return problems


def validate_prometheus_operator(obj: dict) -> list[str]:
    """ServiceMonitor/PodMonitor/PrometheusRule against prometheus-operator's models."""
    module = PROM_MODELS_PKG / "monitoring.coreos.com" / "v1" / f"{obj['kind']}.js"
    assert module.exists(), f"{module} is missing: run `make test-unit` (it installs prometheus-operator's models from npm)"
    script = (
        f"import {{ {obj['kind']} }} from {json.dumps(module.as_uri())};\n"
        "const data = JSON.parse(process.argv[1]);\n"
        f"try {{ new {obj['kind']}(data).validate(); }} catch (e) {{ console.log(e.message); process.exit(1); }}\n"
    )
    result = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(obj)], check=False, capture_output=True, text=True, timeout=60)
    problems = [result.stdout.strip() or result.stderr.strip()] if result.returncode else []
    return problems + _unknown_keys(obj, module.with_suffix(".d.ts"), obj["kind"])


PROMETHEUS_OPERATOR_KINDS = {("monitoring.coreos.com/v1", kind) for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")}


def validate(obj: dict) -> list[str]:
    """Problems with one rendered object, by its own kind's schema."""
    key = (obj["apiVersion"], obj["kind"])
    if key in PROMETHEUS_OPERATOR_KINDS:
        return validate_prometheus_operator(obj)
    if key in _crd_validators():
        return validate_against_chart_crds(obj)
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    return []
