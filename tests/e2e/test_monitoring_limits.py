"""One tenant's trainer cannot flood the Prometheus every tenant shares.

The chart's PodMonitor selects every pod labelled kuberl.dev/job in every namespace, and what a
trainer pod serves is the tenant's own (any image; `trainer: custom` brings its own exporter). A
real Prometheus, configured from the chart's PodMonitor as prometheus-operator configures it
(tests/e2e/test_dashboard.py), scrapes a hostile page (50,000 series) and a trainer-sized one in
another namespace: the hostile target fails its scrape and stores nothing, the other is kept.
Before the limits, all 50,000 series went into the shared TSDB, as would 5 million.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.e2e.test_dashboard import (
    PROMETHEUS,
    Prometheus,
    chart_pod_monitor,
    discovered_targets,
    scrape_config,
    stop,
)
from tests.operator.operatorkit import MetricsPage
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(120)

HOSTILE_SERIES = 50_000


def trainer_pod(name: str, namespace: str, port: int) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"kuberl.dev/job": name}},
            "spec": {"containers": [{"name": "trainer", "ports": [{"name": "metrics-0", "containerPort": port}]}]}}


@contextlib.contextmanager
def prometheus_scraping(tmp_path, pods: list[tuple[dict, str]], expected_targets: int) -> Iterator[Prometheus]:
    """A real Prometheus scraping `pods` as the chart's PodMonitor has prometheus-operator configure it, once it
    has scraped each target at least once."""
    assert PROMETHEUS.exists(), "Debian's prometheus is missing: `make prometheus` installs it"
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps(discovered_targets(pods)))
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape_config(chart_pod_monitor(), targets)]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with open(tmp_path / "prometheus.log", "w") as log:
        prometheus = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            api = Prometheus(f"http://127.0.0.1:{port}")
            deadline = time.monotonic() + 60
            scraped: list = []
            while time.monotonic() < deadline and len(scraped) < expected_targets:
                time.sleep(1)
                try:
                    scraped = api.query("up")
                except OSError:
                    continue
            assert len(scraped) == expected_targets, f"{scraped}\n{(tmp_path / 'prometheus.log').read_text()[-2000:]}"
            yield api
        finally:
            stop(prometheus)


@contextlib.contextmanager
def serving(*pages: str) -> Iterator[list[int]]:
    """Each page served on a port of its own while in the block: the ports, in order."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(MetricsPage(page)).port for page in pages]


def test_a_target_over_the_podmonitors_sample_limit_is_refused_and_its_neighbour_kept(tmp_path):
    assert chart_pod_monitor()["spec"]["sampleLimit"] < HOSTILE_SERIES
    flood = "".join(f'flood_series{{rltj="flood",n="{i}"}} 1\n' for i in range(HOSTILE_SERIES))
    modest = "".join(f'kuberl_trainer_modest_{i}{{rltj="modest",rank="0"}} {i}\n' for i in range(150))
    with serving(flood, modest) as (flood_port, modest_port):
        pods = [(trainer_pod("flood", "tenant-a", flood_port), "127.0.0.1"), (trainer_pod("modest", "tenant-b", modest_port), "127.0.0.1")]
        with prometheus_scraping(tmp_path, pods, 2) as api:
            up = {r["metric"]["namespace"]: r["value"][1] for r in api.query("up")}
            assert up == {"tenant-a": "0", "tenant-b": "1"}, up
            [target] = [t for t in api.get("/api/v1/targets")["activeTargets"] if t["labels"]["namespace"] == "tenant-a"]
            assert "sample limit exceeded" in target["lastError"]
            assert api.query("count(flood_series)") == []
            assert api.query('count({__name__=~"kuberl_trainer_modest_.*"})')[0]["value"][1] == "150"


def test_an_exporter_cannot_write_series_as_another_job_of_its_namespace(tmp_path):
    """A custom trainer's exporter labelled its series rltj="victim", and the victim job's dashboard and alerts
    (which select by namespace and rltj) showed them: its steps, its returns, a checkpoint-age alert. The job is
    now the pod's kuberl.dev/job label (the operator's), and the page's own rltj is dropped."""
    victim = 'kuberl_trainer_env_steps_total{rltj="victim",rank="0"} 5\n'
    spoofer = 'kuberl_trainer_env_steps_total{rltj="victim",rank="0"} 999999\nkuberl_trainer_custom_gauge 1\n'
    with serving(victim, spoofer) as (victim_port, spoofer_port):
        pods = [(trainer_pod("victim", "team", victim_port), "127.0.0.1"), (trainer_pod("spoofer", "team", spoofer_port), "127.0.0.1")]
        with prometheus_scraping(tmp_path, pods, 2) as api:
            steps = {r["metric"]["rltj"]: r["value"][1] for r in api.query("kuberl_trainer_env_steps_total")}
            assert steps == {"victim": "5", "spoofer": "999999"}, steps
            assert api.query("count({exported_rltj!=\"\"})") == []
            # a series the page did not label gets its job too (a custom exporter's own metrics)
            assert api.query("kuberl_trainer_custom_gauge")[0]["metric"]["rltj"] == "spoofer"
