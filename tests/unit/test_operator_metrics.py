"""The operator's own metrics page, as Prometheus reads it: jobs by phase operator-wide, and one
series per job (namespace, rltj, phase) that alerts and per-namespace panels select on."""

from __future__ import annotations

from kuberl.core import metricnames as m
from kuberl.operator.metrics import OperatorMetrics
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families


def samples(metrics: OperatorMetrics, name: str) -> dict[tuple, float]:
    page = generate_latest(metrics.registry).decode()
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(page) for s in family.samples if s.name == name}


def test_each_job_has_one_phase_series_labelled_with_its_namespace_and_name():
    metrics = OperatorMetrics()
    metrics.job_phase("team-a", "ppo", "Pending")
    metrics.job_phase("team-b", "ppo", "Running")
    assert samples(metrics, m.OPERATOR_JOB_PHASE) == {
        (("namespace", "team-a"), ("phase", "Pending"), ("rltj", "ppo")): 1.0,
        (("namespace", "team-b"), ("phase", "Running"), ("rltj", "ppo")): 1.0,
    }


def test_a_job_that_changes_phase_keeps_one_series_and_a_deleted_job_none():
    metrics = OperatorMetrics()
    metrics.job_phase("team-a", "ppo", "Pending")
    metrics.job_phase("team-a", "ppo", "Running")
    assert list(samples(metrics, m.OPERATOR_JOB_PHASE)) == [(("namespace", "team-a"), ("phase", "Running"), ("rltj", "ppo"))]
    metrics.job_phase("team-a", "ppo", None)
    assert samples(metrics, m.OPERATOR_JOB_PHASE) == {}


def test_jobs_by_phase_still_counts_every_phase_operator_wide():
    metrics = OperatorMetrics()
    metrics.job_phase("team-a", "one", "Running")
    metrics.job_phase("team-b", "two", "Running")
    counts = {dict(labels)["phase"]: value for labels, value in samples(metrics, m.OPERATOR_JOBS).items()}
    assert counts == {"Pending": 0, "Running": 2, "Restarting": 0, "Suspended": 0, "Succeeded": 0, "Failed": 0}


def test_the_operator_page_carries_its_process_start_time_so_a_restart_shows():
    """The restart alert counts changes of it: the kubelet restarting a blind operator is otherwise invisible to Prometheus."""
    start = samples(OperatorMetrics(), m.PROCESS_START_TIME)
    assert list(start) == [()] and start[()] > 1e9


def test_each_job_exports_its_counted_restarts_from_zero_and_none_once_gone():
    metrics = OperatorMetrics()
    metrics.job_phase("team-a", "ppo", "Running")
    assert samples(metrics, m.OPERATOR_JOB_RESTARTS) == {(("namespace", "team-a"), ("rltj", "ppo")): 0.0}
    metrics.job_phase("team-a", "ppo", "Restarting", restarts=2)
    assert samples(metrics, m.OPERATOR_JOB_RESTARTS) == {(("namespace", "team-a"), ("rltj", "ppo")): 2.0}
    metrics.job_phase("team-a", "ppo", None)
    assert samples(metrics, m.OPERATOR_JOB_RESTARTS) == {}


def test_each_job_starts_its_storage_restarts_at_zero_so_the_first_one_is_seen_and_none_once_gone():
    """KuberlCheckpointVolumeFailing takes increase() over an hour: a series born at 1 would hide the first restart."""
    metrics = OperatorMetrics()
    restarts = m.OPERATOR_GANG_RESTARTS_TOTAL
    key = (("namespace", "team-a"), ("reason", "CheckpointVolumeUnavailable"), ("rltj", "ppo"))
    metrics.job_phase("team-a", "ppo", "Running")
    assert samples(metrics, restarts) == {key: 0.0}
    metrics.gang_restarted("team-a", "ppo", "CheckpointVolumeUnavailable")
    metrics.job_phase("team-a", "ppo", "Restarting")
    assert samples(metrics, restarts) == {key: 1.0}
    metrics.job_phase("team-a", "ppo", None)
    assert samples(metrics, restarts) == {}


def test_a_namespace_forgotten_drops_its_jobs_series_only():
    metrics = OperatorMetrics()
    metrics.job_phase("team-a", "ppo", "Running")
    metrics.job_phase("team-b", "ppo", "Running")
    metrics.forget_namespace("team-a")
    assert list(samples(metrics, m.OPERATOR_JOB_PHASE)) == [(("namespace", "team-b"), ("phase", "Running"), ("rltj", "ppo"))]
