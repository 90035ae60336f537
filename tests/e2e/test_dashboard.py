"""The chart's Grafana dashboard against a real Prometheus that scraped a real
`kuberl run` (2 DDP ranks of PPO on CartPole).

Prometheus' scrape config is generated from the chart's PodMonitor the way
prometheus-operator generates it (its selector, its standard target labels,
then the chart's own relabelings), over targets that stand in for Kubernetes'
pod discovery: one per declared container port of each pod `kuberl run`
renders, carrying the `__meta_kubernetes_*` labels Kubernetes would. So a
label clash (a trainer label named `job`, `pod` or `namespace` would come back
as `exported_*`) or a port the PodMonitor misses fails here, not in production.

The operator is the real `kuberl operator` against the API stand-in, with one
job whose gang the test crashes once (so restarts have a reason), scraped
through a config generated from the chart's ServiceMonitor the same way.

Every panel query runs with the dashboard's variables substituted (their own
`label_values` queries give the values) and must return series with the
expected labels and plausible values."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from kuberl.core import metricnames as m
from kuberl.core import names
from kuberl.core.render import PLACEHOLDER_UID, Job, render_pod
from kuberl.core.rules import validate_job
from kuberl.local.runner import NAMESPACE, apply_overrides, pod_address

from tests.operator.operatorkit import (
    Operator,
    create_job,
    start_gang,
    terminated,
    wait_for,
)
from tests.support.apiserver import StandinServer
from tests.support.ports import free_port
from tests.support.rest import Rest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kuberl"
HELM = ROOT / ".tools" / "bin" / "helm"
PROMETHEUS = Path("/usr/bin/prometheus")
EXAMPLE = ROOT / "manifests" / "examples" / "cartpole-ppo.yaml"
# Long enough that the test, not the budget, ends the run; checkpoints early so their age shows.
# The target is out of CartPole's reach (500) so rank 0 keeps evaluating without ever stopping the run.
RUN_SETTINGS = ["totalTimesteps=2000000", "success.targetReturn=1000", "success.evalEvery=3", "success.evalEpisodes=2", "checkpoint.everyUpdates=3"]
SCRAPE_SECONDS = 1
OPERATOR_JOB = "dashboard-operator"
RATE_INTERVAL = "5s"
DASHBOARD = json.loads((CHART / "dashboards" / "kuberl.json").read_text())

pytestmark = pytest.mark.timeout(300)


# --- the scrape config, generated from the chart's PodMonitor -------------------

def sanitize(label: str) -> str:
    """Kubernetes service discovery's label-name sanitising."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def discovered_targets(pods: list[tuple[dict, str]]) -> list[dict]:
    """What Prometheus' `role: pod` discovery yields: a target per declared
    container port, with the pod's metadata as `__meta_kubernetes_*` labels."""
    targets = []
    for pod, ip in pods:
        pod_labels = {}
        for key, value in pod["metadata"].get("labels", {}).items():
            pod_labels[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
            pod_labels[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                targets.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": {
                    "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
                    "__meta_kubernetes_pod_name": pod["metadata"]["name"],
                    "__meta_kubernetes_pod_ip": ip,
                    "__meta_kubernetes_pod_phase": "Running",
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                    **pod_labels,
                }})
    return targets


def _relabel(rule: dict) -> dict:
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label", "regex": "regex",
            "replacement": "replacement", "separator": "separator", "modulus": "modulus", "action": "action"}
    out = {keys[k]: v for k, v in rule.items()}
    out["action"] = out.get("action", "replace").lower()
    return out


def scrape_config(pod_monitor: dict, sd_file: Path) -> dict:
    """prometheus-operator's scrape config for one PodMonitor endpoint."""
    spec, meta = pod_monitor["spec"], pod_monitor["metadata"]
    (endpoint,) = spec["podMetricsEndpoints"]
    relabel = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for key, value in spec["selector"].get("matchLabels", {}).items():
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{sanitize(key)}",
                        f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"], "regex": f"({value});true"})
    for expression in spec["selector"].get("matchExpressions", []):
        assert expression["operator"] == "Exists", "only Exists is emulated here"
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_pod_labelpresent_{sanitize(expression['key'])}"], "regex": "true"})
    relabel.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"})
    if endpoint.get("port"):
        relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": endpoint["port"]})
    relabel += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{meta['namespace']}/{spec.get('jobLabel') or meta['name']}"},
    ]
    if endpoint.get("port"):
        relabel.append({"target_label": "endpoint", "replacement": endpoint["port"]})
    relabel += [_relabel(r) for r in endpoint.get("relabelings", [])]
    job = _scrape_job("podMonitor", meta, endpoint, relabel, sd_file)
    if endpoint.get("metricRelabelings"):
        job["metric_relabel_configs"] = [_relabel(r) for r in endpoint["metricRelabelings"]]
    # prometheus-operator's generatePodMonitorConfig (pkg/prometheus/promcfg.go) writes the spec's limits as these keys.
    limits = {"sampleLimit": "sample_limit", "labelLimit": "label_limit", "labelNameLengthLimit": "label_name_length_limit",
              "labelValueLengthLimit": "label_value_length_limit", "bodySizeLimit": "body_size_limit"}
    job.update({key: spec[field] for field, key in limits.items() if spec.get(field)})
    return job


def discovered_endpoint(address: str, service: dict, pod_name: str, container: str, port_name: str) -> dict:
    """What `role: endpoints` discovery yields for one ready endpoint of the chart's Service."""
    labels = {"__meta_kubernetes_namespace": service["metadata"]["namespace"],
              "__meta_kubernetes_service_name": service["metadata"]["name"],
              "__meta_kubernetes_endpoint_port_name": port_name,
              "__meta_kubernetes_endpoint_ready": "true",
              "__meta_kubernetes_endpoint_address_target_kind": "Pod",
              "__meta_kubernetes_endpoint_address_target_name": pod_name,
              "__meta_kubernetes_pod_name": pod_name,
              "__meta_kubernetes_pod_container_name": container,
              "__meta_kubernetes_pod_phase": "Running"}
    for key, value in service["metadata"].get("labels", {}).items():
        labels[f"__meta_kubernetes_service_label_{sanitize(key)}"] = value
        labels[f"__meta_kubernetes_service_labelpresent_{sanitize(key)}"] = "true"
    return {"targets": [address], "labels": labels}


def service_monitor_scrape_config(service_monitor: dict, sd_file: Path) -> dict:
    """prometheus-operator's scrape config for one ServiceMonitor endpoint."""
    spec, meta = service_monitor["spec"], service_monitor["metadata"]
    (endpoint,) = spec["endpoints"]
    relabel = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for key, value in spec["selector"].get("matchLabels", {}).items():
        relabel.append({"action": "keep", "source_labels": [f"__meta_kubernetes_service_label_{sanitize(key)}",
                        f"__meta_kubernetes_service_labelpresent_{sanitize(key)}"], "regex": f"({value});true"})
    relabel += [
        {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": endpoint["port"]},
        {"source_labels": ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"],
         "separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
        {"source_labels": ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"],
         "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
    ]
    relabel += [_relabel(r) for r in endpoint.get("relabelings", [])]
    return _scrape_job("serviceMonitor", meta, endpoint, relabel, sd_file)


def _scrape_job(kind: str, meta: dict, endpoint: dict, relabel: list, sd_file: Path) -> dict:
    """The scrape job prometheus-operator writes for one monitor endpoint."""
    return {
        "job_name": f"{kind}/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": endpoint.get("honorLabels", False),
        "metrics_path": endpoint.get("path", "/metrics"),
        # The chart's interval is for clusters; a test cannot wait 15 s per sample.
        "scrape_interval": f"{SCRAPE_SECONDS}s",
        "scrape_timeout": f"{SCRAPE_SECONDS}s",
        "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
        "relabel_configs": relabel,
    }


def chart_objects(*settings: str) -> list[dict]:
    out = subprocess.run([str(HELM), "template", "kuberl", str(CHART), "--namespace", "kuberl-system",
                          *[a for s in settings for a in ("--set", s)]], capture_output=True, text=True, check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def chart_pod_monitor() -> dict:
    out = subprocess.run([str(HELM), "template", "kuberl", str(CHART), "--namespace", "kuberl-system",
                          "--set", "monitoring.podMonitor.enabled=true"], capture_output=True, text=True, check=True, timeout=60).stdout
    (pod_monitor,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "PodMonitor"]
    return pod_monitor


# --- processes ------------------------------------------------------------------

class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{path} {params}: {e.code} {e.read().decode()}") from e
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        data = self.get("/api/v1/query", query=expr, **({"time": at} if at else {}))
        assert data["resultType"] == "vector", data
        return data["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        return self.get(f"/api/v1/label/{label}/values", **{"match[]": match})


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 30) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def start_operator_with_a_restarted_job(work: Path, stack: contextlib.ExitStack):
    """The real operator against the API stand-in, one job whose gang crashed once and runs again."""
    (work / "standin").mkdir()
    standin = stack.enter_context(StandinServer(workdir=work / "standin"))
    standin.apply_crd(ROOT / "manifests" / "crd.yaml")
    operator = Operator(standin, work).start()
    stack.callback(operator.stop)
    rest = Rest(standin.url)
    create_job(rest, OPERATOR_JOB, workers=2)
    gang = start_gang(standin, OPERATOR_JOB, 2)
    terminated(standin, gang[1], 1, "Crashed: RuntimeError: a crash for the dashboard")
    start_gang(standin, OPERATOR_JOB, 2, generation=1)
    wait_for(lambda: any(line.startswith(f'{m.OPERATOR_GANG_RESTARTS_TOTAL}{{') and 'reason="Crashed"' in line and line.endswith(" 1.0")
                         for line in operator.metrics().splitlines()), 60, "the restart in the operator's metrics")
    return operator


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory):
    """A running `kuberl run`, a running operator, and a Prometheus scraping both; yields
    once rank 0 has evaluated and checkpointed, so every panel has something to show."""
    assert PROMETHEUS.exists(), "Debian's prometheus is missing: `make prometheus` installs it"
    assert HELM.exists(), "helm is missing: `make tools`"
    work = tmp_path_factory.mktemp("dashboard")
    runs = work / "runs"
    document = apply_overrides(yaml.safe_load(EXAMPLE.read_text()), None, RUN_SETTINGS)
    job = Job(document["metadata"]["name"], validate_job(document))
    run_dir = str(runs / job.name)
    pods = [(render_pod(job, NAMESPACE, PLACEHOLDER_UID, rank, 0, target="local"), pod_address(run_dir, rank))
            for rank in range(job.spec.workers)]
    with contextlib.ExitStack() as stack:
        operator = start_operator_with_a_restarted_job(work, stack)
        objects = chart_objects("monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true",
                                "monitoring.prometheusRule.enabled=true")
        (pod_monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
        (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
        (work / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        (service_monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
        (service,) = [o for o in objects if o["kind"] == "Service"]
        trainers, operators = work / "trainers.json", work / "operators.json"
        trainers.write_text(json.dumps(discovered_targets(pods)))
        operators.write_text(json.dumps([discovered_endpoint(f"127.0.0.1:{operator.metrics_port}", service, "kuberl-0", "operator", "metrics")]))
        config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                  "rule_files": [str(work / "rules.yml")],
                  "scrape_configs": [scrape_config(pod_monitor, trainers), service_monitor_scrape_config(service_monitor, operators)]}
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        prometheus_log = stack.enter_context(open(work / "prometheus.log", "w"))
        prometheus = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=prometheus_log, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(stop, prometheus)
        run_log = stack.enter_context(open(work / "run.log", "w"))
        run = subprocess.Popen(
            [sys.executable, "-m", "kuberl.cli", "run", str(EXAMPLE), "--dir", str(runs), *[a for s in RUN_SETTINGS for a in ("--set", s)]],
            stdout=run_log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
        stack.callback(stop, run, signal.SIGINT)
        api = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120
        ready = False
        while time.monotonic() < deadline and run.poll() is None:
            time.sleep(2)
            try:
                ready = (len(api.query(f"{m.ENV_STEPS_TOTAL} > 0")) == job.spec.world_size
                         and api.query(f"{m.EVAL_RETURN} > 0") and api.query(f"{m.LAST_CHECKPOINT_TIMESTAMP} > 0")
                         and api.query(f"{m.ROLLOUT_DURATION}_count > 2") and api.query(f"{m.OPERATOR_RECONCILE_DURATION}_count > 0"))
            except OSError:
                continue
            if ready:
                break
        targets = api.get("/api/v1/targets")["activeTargets"] if run.poll() is None else "run ended"
        assert ready, f"no complete scrape: run {run.poll()}, targets {targets}\n{(work / 'run.log').read_text()[-2000:]}"
        time.sleep(3 * SCRAPE_SECONDS)  # a few more samples, so rates span several of them
        yield api, job


# --- the panels -------------------------------------------------------------------

def promql_regex_literal(value: str) -> str:
    """A label value as a regex inside a PromQL string, as Grafana escapes multi-value variables."""
    return re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\\\1", value)


def substitute(expr: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        expr = expr.replace(f"${name}", value).replace(f"${{{name}}}", value)
    return expr.replace("$__rate_interval", RATE_INTERVAL)


@pytest.fixture(scope="module")
def variables(scraped_run):
    """The dashboard's own variable queries, run in order; each takes every value it finds."""
    api, _ = scraped_run
    values: dict[str, str] = {}
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "constant":  # as the file is imported by hand: any operator
            values[variable["name"]] = variable["query"]
            continue
        if variable["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"]).groups()
        found = api.label_values(label, substitute(metric, values))
        assert found, f"variable {variable['name']}: {variable['query']['query']} found nothing"
        values[variable["name"]] = "|".join(promql_regex_literal(v) for v in found)
    return values


def panels() -> list[tuple[str, str, str]]:
    return [(p["title"], t["refId"], t["expr"]) for p in DASHBOARD["panels"] if p["type"] != "row" for t in p["targets"]]


RANKS = {"0", "1"}
finite = math.isfinite


def plausible(metric: str, value: float) -> bool:
    """What a healthy 2-rank CartPole PPO run shows, by the metric the query is about."""
    checks = {
        m.ENV_STEPS_TOTAL: lambda v: 50 < v < 1e6,
        m.EPISODES_TOTAL: lambda v: 0 < v < 1e5,
        m.POLICY_UPDATES_TOTAL: lambda v: 0 < v < 1e3,
        m.EPISODE_RETURN: lambda v: 0 < v <= 500,
        m.EVAL_RETURN: lambda v: 0 < v <= 500,
        m.WORLD_SIZE: lambda v: v == 2,
        m.ROLLOUT_DURATION: lambda v: 0 < v < 30,
        m.UPDATE_DURATION: lambda v: 0 < v < 30,
        m.ALLREDUCE_DURATION: lambda v: 0 < v < 30,
        m.POLICY_LOSS: finite,
        m.VALUE_LOSS: lambda v: finite(v) and v >= 0,
        m.ENTROPY: lambda v: 0 <= v <= math.log(2) + 1e-6,
        m.APPROX_KL: lambda v: finite(v) and abs(v) < 1,
        m.Q_VALUE: lambda v: v == 0,  # SAC's: PPO reports none, so its gauge reads 0
        m.ENTROPY_COEFFICIENT: lambda v: v == 0,  # SAC's, as Q_VALUE
        m.LEARNING_RATE: lambda v: 0 < v <= 0.0025,
        m.LAST_CHECKPOINT_TIMESTAMP: lambda v: 0 <= v < 300,
        m.CHECKPOINTS_TOTAL: lambda v: v >= 1,
        m.CHECKPOINTS_SKIPPED: lambda v: v == 0,  # a fresh run skips nothing
        m.GPU_MEMORY_TOTAL: lambda v: v >= 1,  # GPUs of a job
        m.GPU_MEMORY_RESERVED: lambda v: 0 <= v <= 1,  # share of a GPU's memory
        m.OPERATOR_JOB_PHASE: lambda v: v == 1,  # one series per job, or their count by phase: one job
        m.OPERATOR_JOBS: lambda v: v in (0, 1),  # one job, counted in exactly one phase
        m.OPERATOR_GANG_RESTARTS_TOTAL: lambda v: 0 <= v <= 1,
        m.OPERATOR_PODS_CREATED_TOTAL: lambda v: 0 <= v < 100,
        m.OPERATOR_RECONCILE_DURATION: lambda v: 0 < v < 10,
        m.OPERATOR_API_ERRORS_TOTAL: lambda v: v >= 0,
        m.OPERATOR_API_THROTTLED_SECONDS_TOTAL: lambda v: 0 <= v < 1,  # one small job: its requests wait for no budget
    }
    return checks[metric](value)


def metric_of(expr: str) -> str:
    found = [name for name in sorted(vars(m).values(), key=lambda v: -len(str(v)))
             if isinstance(name, str) and name.startswith("kuberl_") and name in expr]
    assert found, expr
    return found[0]


@pytest.mark.parametrize(("title", "ref", "expr"), panels())
def test_panel_query_returns_plausible_series(scraped_run, variables, title, ref, expr):
    api, job = scraped_run
    metric = metric_of(expr)
    if metric in (m.GPU_MEMORY_TOTAL, m.GPU_MEMORY_RESERVED) and not api.query(metric):
        pytest.skip(f"{title}: the run computes on the CPU, which exports no GPU series (tests/gpu checks them on a GPU)")
    if metric == m.OPERATOR_API_ERRORS_TOTAL and not api.query(metric):
        pytest.skip(f"{title}: the operator made no failed API request in this run, so the counter has no series yet")
    if metric in (m.OPERATOR_GANG_RESTARTS_TOTAL, m.OPERATOR_PODS_CREATED_TOTAL, m.OPERATOR_JOB_PHASE):
        # per-job operator series: the job the operator restarted (the scraped run never restarts)
        variables = {**variables, "namespace": "default", m.LABEL_RLTJ: OPERATOR_JOB}
    query = substitute(expr, variables)
    series = api.query(query)
    assert series, f"{title} [{ref}]: no series for {query}"
    legend = next(t["legendFormat"] for p in DASHBOARD["panels"] if p["title"] == title for t in p["targets"] if t["refId"] == ref)
    for s in series:
        labels = s["metric"]
        assert not [k for k in labels if k.startswith("exported_")], f"{title}: label clash {labels}"
        assert set(re.findall(r"\{\{(\w+)\}\}", legend)) <= set(labels), f"{title}: the legend names labels the series lack: {labels}"
        value = float(s["value"][1])
        assert plausible(metric, value), f"{title} [{ref}]: implausible {value} for {labels}"
    if metric.startswith("kuberl_operator_"):
        return
    for s in series:
        assert s["metric"].get(m.LABEL_RLTJ) == job.name and s["metric"].get("namespace") == NAMESPACE, f"{title}: {s['metric']}"
    ranks = {s["metric"].get(m.LABEL_RANK) for s in series}
    if "{{rank}}" in legend:
        assert ranks == RANKS, f"{title}: one series per rank, got {ranks}"
    else:
        assert len(series) == 1, f"{title}: one series per job, got {[s['metric'] for s in series]}"


def test_operator_series_carry_the_servicemonitor_labels_and_the_restart(scraped_run):
    api, _ = scraped_run
    series = api.query(m.OPERATOR_JOBS)
    assert {s["metric"]["phase"] for s in series} >= {"Pending", "Running", "Succeeded", "Failed"}
    for s in series:
        assert (s["metric"]["job"], s["metric"]["namespace"], s["metric"]["service"], s["metric"]["endpoint"]) == (
            "kuberl", "kuberl-system", "kuberl", "metrics")
    assert [float(s["value"][1]) for s in series if s["metric"]["phase"] == "Running"] == [1.0]
    (restarts,) = api.query(f'{m.OPERATOR_GANG_RESTARTS_TOTAL}{{reason="Crashed"}}')
    assert float(restarts["value"][1]) == 1
    # per job: the job's namespace (honoured over the operator's own) and name, as the dashboard filters them
    assert (restarts["metric"]["namespace"], restarts["metric"][m.LABEL_RLTJ]) == ("default", OPERATOR_JOB)
    assert float(api.query(m.OPERATOR_PODS_CREATED_TOTAL)[0]["value"][1]) >= 4


def test_trainer_targets_carry_the_podmonitor_labels(scraped_run):
    api, job = scraped_run
    series = api.query(f"{m.WORLD_SIZE}")
    assert {s["metric"]["pod"] for s in series} == {names.pod_name(job.name, r) for r in range(job.spec.workers)}
    for s in series:
        assert s["metric"]["job"] == "kuberl-system/kuberl-trainers"
        assert s["metric"]["container"] == names.TRAINER_CONTAINER
        assert re.fullmatch(r"metrics-\d+", s["metric"]["endpoint"])


def test_steps_keep_increasing(scraped_run):
    api, _ = scraped_run
    before = float(api.query(f'{m.ENV_STEPS_TOTAL}{{rank="0"}}')[0]["value"][1])
    time.sleep(3 * SCRAPE_SECONDS)
    after = float(api.query(f'{m.ENV_STEPS_TOTAL}{{rank="0"}}')[0]["value"][1])
    assert after > before > 0


# --- the alerts ---------------------------------------------------------------------

def test_the_charts_alerts_load_and_stay_quiet_over_a_healthy_run(scraped_run):
    """The chart's PrometheusRule, loaded by the real Prometheus beside the chart's scrape configs: every rule
    evaluates without error, none matches a healthy run (not even pending), and the operator selector the
    operator alerts use matches the series the ServiceMonitor's scrape really carries (KuberlOperatorDown
    would otherwise fire on a healthy operator)."""
    api, _ = scraped_run
    wait_for(lambda: all(not r.get("lastEvaluation", "0001").startswith("0001")  # Go's zero time: never evaluated
                         for g in api.get("/api/v1/rules")["groups"] for r in g["rules"]), 30, "every rule evaluated")
    rules = [r for g in api.get("/api/v1/rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} >= {"KuberlOperatorDown", "KuberlJobNotRunning", "KuberlJobCrashLooping"}
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    assert api.query("ALERTS") == [], "a healthy run raised an alert"
    down = next(r["query"] for r in rules if r["name"] == "KuberlOperatorDown")
    selector = re.search(r"up(\{[^}]*\})", down).group(1)
    assert api.query(f"up{selector} == 1") and api.query(f"{m.PROCESS_START_TIME}{selector}"), selector
    assert api.query(f'{m.OPERATOR_JOB_PHASE}{{job="kuberl", rltj="{OPERATOR_JOB}"}}')
    (counted,) = api.query(f'{m.OPERATOR_JOB_RESTARTS}{{job="kuberl", rltj="{OPERATOR_JOB}"}}')
    assert float(counted["value"][1]) == 1, "the crash the fixture made, counted toward backoffLimit"
