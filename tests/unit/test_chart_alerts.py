"""The chart's PrometheusRule (monitoring.prometheusRule): real Helm renders it, promtool checks
its rules and runs them over series named from kuberl.core.metricnames, labelled as the chart's
ServiceMonitor (operator: job = the Service's name, per-job series keep the job's namespace) and
PodMonitor (trainers: namespace, pod, rltj, rank) label them. Each alert fires where it should and
stays quiet beside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from chart_support import of_kind, promtool, render
from kuberl.core import metricnames as m
from test_chart import refusal
from test_chart_dashboard import metrics_in

ALERTING = {"monitoring": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
OPERATOR = 'job="kuberl", namespace="kuberl-system"'  # release kuberl in kuberl-system: the Service, so the scrape job, is "kuberl"


def rules(values: dict = ALERTING) -> list[dict]:
    (rule,) = of_kind(render(values), "PrometheusRule")
    return rule["spec"]["groups"]


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for group in rules() for r in group["rules"]}


def run_promtool_tests(tmp_path: Path, groups: list[dict], tests: list[dict]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    result = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def series(name: str, labels: str, values: str) -> dict:
    return {"series": f"{name}{{{labels}}}", "values": values}


def annotated(alert: str, labels: dict, value: str) -> dict:
    """The alert's annotations as Prometheus expands them for these labels and this value (the few
    template forms the rules use; any other form is left as is, and then fails the comparison)."""
    out = {}
    for key, text in alerts()[alert]["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda found: labels[found.group(1)], text)
        out[key] = re.sub(r"\{\{ \$value( \| humanizeDuration)? \}\}", value, text)
    return out


def firing(alert: str, at: str, *expected: tuple[dict, str]) -> dict:
    """The alerts named `alert` at `at`: exactly the expected (labels, $value as shown) pairs, severity added."""
    severity = alerts()[alert]["labels"]["severity"]
    return {"eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": {**labels, "severity": severity}, "exp_annotations": annotated(alert, labels, value)}
                           for labels, value in expected]}


def test_off_by_default_and_refused_without_the_service_monitor_naming_both_values():
    assert of_kind(render(), "PrometheusRule") == []
    message = refusal({"monitoring": {"prometheusRule": {"enabled": True}}})
    assert "monitoring.prometheusRule.enabled=true needs monitoring.serviceMonitor.enabled=true" in message


@pytest.mark.parametrize(("values", "key"), [
    ({"notRunningFor": "half an hour"}, "/monitoring/prometheusRule/notRunningFor"),
    ({"crashLoopRestarts": 0}, "/monitoring/prometheusRule/crashLoopRestarts"),
    ({"volumeFailureRestarts": 0}, "/monitoring/prometheusRule/volumeFailureRestarts"),
    ({"checkpointMaxAgeSeconds": "1h"}, "/monitoring/prometheusRule/checkpointMaxAgeSeconds"),
    ({"alertLabel": {"team": "ml"}}, "alertLabel"),
])
def test_a_bad_threshold_is_refused_naming_it(values, key):
    bad = {"monitoring": {**ALERTING["monitoring"], "prometheusRule": {"enabled": True, **values}}}
    assert key in refusal(bad)


def test_promtool_accepts_every_rule(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rules()}))
    result = promtool("check", "rules", str(tmp_path / "rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_reads_only_metrics_kuberl_exports_or_the_scrape_up():
    defined = {v for k, v in vars(m).items() if k.isupper() and isinstance(v, str) and v.startswith(("kuberl_trainer_", "kuberl_operator_"))}
    defined |= {m.PROCESS_START_TIME, m.PROCESS_RESIDENT_MEMORY}  # the operator's ProcessCollector
    for name, rule in alerts().items():
        used = metrics_in(rule["expr"]) - {"absent", "humanizeDuration", "changes"}
        assert used and used <= defined | {"up"}, f"{name}: {sorted(used - defined - {'up'})} not in kuberl.core.metricnames"


def test_the_alerts_cover_what_a_platform_team_is_paged_for():
    assert set(alerts()) == {"KuberlJobNotRunning", "KuberlJobFailed", "KuberlJobCrashLooping", "KuberlCheckpointsSkipped", "KuberlCheckpointOverdue",
                             "KuberlCheckpointVolumeFailing", "KuberlTrainerMetricsUnscraped", "KuberlOperatorDown", "KuberlOperatorRestarting",
                             "KuberlOperatorPeersSamePriority", "KuberlOperatorNamespaceRefused", "KuberlOperatorAPIErrors",
                             "KuberlOperatorThrottled"}
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"], name


def test_alert_labels_and_thresholds_reach_the_rules():
    values = {"monitoring": {**ALERTING["monitoring"], "prometheusRule": {
        "enabled": True, "alertLabels": {"team": "ml-platform"}, "notRunningFor": "2h", "crashLoopRestarts": 5, "checkpointMaxAgeSeconds": 7200}}}
    by_name = {r["alert"]: r for group in rules(values) for r in group["rules"]}
    assert all(r["labels"]["team"] == "ml-platform" for r in by_name.values())
    assert by_name["KuberlJobNotRunning"]["for"] == "2h"
    assert by_name["KuberlJobCrashLooping"]["expr"].rstrip().endswith(">= 5")
    assert "> 7200" in by_name["KuberlCheckpointOverdue"]["expr"] and "[7200s]" in by_name["KuberlCheckpointOverdue"]["expr"]


def test_job_alerts_fire_for_the_job_in_trouble_only(tmp_path):
    job_phase = m.OPERATOR_JOB_PHASE
    restarts = m.OPERATOR_JOB_RESTARTS
    operator_series = 'job="kuberl", namespace="{ns}", rltj="{job}", pod="kuberl-6d9f-abcde"'
    trainer = 'job="kuberl-system/kuberl-trainers", namespace="{ns}", rltj="{job}", pod="{job}-{rank}", rank="{rank}"'

    def op(ns: str, job: str, extra: str = "") -> str:
        return operator_series.format(ns=ns, job=job) + extra

    def rank(ns: str, job: str, r: int) -> str:
        return trainer.format(ns=ns, job=job, rank=r)

    tests = [
        {"interval": "1m", "input_series": [
            # Pending, then its next start-up attempt: Restarting, then Pending again; never Running.
            series(job_phase, op("team-a", "stuck", ', phase="Pending"'), "1x10 _x10 1x20"),
            series(job_phase, op("team-a", "stuck", ', phase="Restarting"'), "_x10 1x10 _x20"),
            # Pending ten minutes (an image pull), then Running; and one Running throughout.
            series(job_phase, op("team-b", "slow-start", ', phase="Pending"'), "1x10"),
            series(job_phase, op("team-b", "slow-start", ', phase="Running"'), "_x10 1x30"),
            series(job_phase, op("team-a", "fine", ', phase="Running"'), "1x40"),
            # Running for the active replica; the replica that handed over still exports the Pending it last saw
            # (until its loop stops: kopf stops a pausing operator's daemons).
            series(job_phase, op("team-c", "handed-over", ', phase="Running"'), "1x40"),
            series(job_phase, 'job="kuberl", namespace="team-c", rltj="handed-over", pod="kuberl-0", phase="Pending"', "1x40"),
        ], "alert_rule_test": [
            firing("KuberlJobNotRunning", "20m"),
            firing("KuberlJobNotRunning", "35m", ({"namespace": "team-a", "rltj": "stuck"}, "")),
        ]},
        {"interval": "1m", "input_series": [
            # Running, then Failed at 10 min (its backoffLimit spent); one that succeeded; one Failed for a replica
            # that handed over while the active one reports it Running (a job any replica reports otherwise is not judged).
            series(job_phase, op("team-a", "broken", ', phase="Running"'), "1x10"),
            series(job_phase, op("team-a", "broken", ', phase="Failed"'), "_x10 1x30"),
            series(job_phase, op("team-b", "done", ', phase="Succeeded"'), "1x40"),
            series(job_phase, op("team-c", "handed-over", ', phase="Running"'), "1x40"),
            series(job_phase, 'job="kuberl", namespace="team-c", rltj="handed-over", pod="kuberl-0", phase="Failed"', "1x40"),
        ], "alert_rule_test": [
            firing("KuberlJobFailed", "5m"),
            firing("KuberlJobFailed", "20m", ({"namespace": "team-a", "rltj": "broken"}, "")),
        ]},
        {"interval": "1m", "input_series": [
            series("up", 'job="kuberl", namespace="kuberl-system", pod="kuberl-6d9f-abcde"', "1x200"),
            # Five counted restarts long ago, one in the last hour.
            series(restarts, op("team-b", "old"), "5x100 6x100"),
            # Created at 120 min (its series starts at 0), a crash every 10 min from 130 min ("0x9" is ten samples).
            series(restarts, op("team-a", "loop"), "_x119 0x10 1x9 2x9 3x9 4x39"),
            # Created at 120 min, two crashes: under the threshold.
            series(restarts, op("team-a", "twice"), "_x119 0x10 2x69"),
        ], "alert_rule_test": [
            firing("KuberlJobCrashLooping", "145m"),
            firing("KuberlJobCrashLooping", "155m", ({"namespace": "team-a", "rltj": "loop"}, "3")),
            firing("KuberlJobCrashLooping", "165m", ({"namespace": "team-a", "rltj": "loop"}, "4")),
        ]},
        {"interval": "1m", "input_series": [
            # The operator pod replaced at 60 min (a new series of the same job): its count, from status, goes on.
            series("up", 'job="kuberl", namespace="kuberl-system", pod="kuberl-6d9f-abcde"', "1x60"),
            series("up", 'job="kuberl", namespace="kuberl-system", pod="kuberl-6d9f-fghij"', "_x60 1x100"),
            series(restarts, op("team-a", "steady"), "4x60"),
            series(restarts, 'job="kuberl", namespace="team-a", rltj="steady", pod="kuberl-6d9f-fghij"', "_x60 4x29 5x70"),
        ], "alert_rule_test": [
            firing("KuberlJobCrashLooping", "130m"),
        ]},
        {"interval": "1m", "input_series": [
            # Prometheus' first hour (it has not seen the operator an hour ago): a job restarted long before is no crash loop.
            series("up", 'job="kuberl", namespace="kuberl-system", pod="kuberl-6d9f-abcde"', "1x40"),
            series(restarts, op("team-b", "old"), "5x40"),
        ], "alert_rule_test": [
            firing("KuberlJobCrashLooping", "30m"),
        ]},
        {"interval": "1m", "input_series": [
            series(m.CHECKPOINTS_SKIPPED, rank("team-a", "redo", 0), "2x10"),
            series(m.CHECKPOINTS_SKIPPED, rank("team-a", "clean", 0), "0x10"),
            # The gauge is rank 0's: another rank's value is no signal.
            series(m.CHECKPOINTS_SKIPPED, rank("team-a", "clean", 1), "4x10"),
        ], "alert_rule_test": [
            firing("KuberlCheckpointsSkipped", "5m", ({"namespace": "team-a", "rltj": "redo"}, "2")),
        ]},
        {"interval": "1m", "input_series": [
            # Rank 0 wrote one checkpoint at 1 min and none since; one that checkpoints every minute.
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "overdue", 0), "60x100"),
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "current", 0), "0+60x100"),
            # None written yet (the gauge reads 0): running since 0 min (everyUpdates beyond its pace), since 30 min
            # (younger than the bound), and one that ended at 62 min without ever writing one.
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "none-yet", 0), "0x100"),
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "young", 0), "_x30 0x70"),
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "ended", 0), "0x62"),
            # Checkpointing every minute until its gang restarted at 41 min (a new pod: another instance), none since.
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "restarted", 0) + ', instance="10.0.0.1:9090"', "60+60x40"),
            series(m.LAST_CHECKPOINT_TIMESTAMP, rank("team-a", "restarted", 0) + ', instance="10.0.0.2:9090"', "_x41 0x70"),
        ], "alert_rule_test": [
            firing("KuberlCheckpointOverdue", "60m"),
            firing("KuberlCheckpointOverdue", "70m", ({"namespace": "team-a", "rltj": "overdue"}, "1h 9m 0s"),
                   ({"namespace": "team-a", "rltj": "none-yet"}, "1h 0m 0s")),
            firing("KuberlCheckpointOverdue", "100m", ({"namespace": "team-a", "rltj": "overdue"}, "1h 39m 0s"),
                   ({"namespace": "team-a", "rltj": "none-yet"}, "1h 0m 0s"), ({"namespace": "team-a", "rltj": "young"}, "1h 0m 0s")),
            firing("KuberlCheckpointOverdue", "110m", ({"namespace": "team-a", "rltj": "restarted"}, "1h 0m 0s")),
        ]},
    ]
    run_promtool_tests(tmp_path, rules(), tests)


def test_a_teams_release_alerts_on_its_own_jobs_only(tmp_path):
    """Release kuberl in ops-a watching team-a, routed team=a, beside release kuberl in ops-b watching team-b, one
    Prometheus: ops-a's rules fired for team-b's jobs and trainers too, labelled team=a, so team-b's pages went to
    team a (each operator's per-job series carry the job's namespace and the same scrape job, kuberl)."""
    values = {"operator": {"watchNamespaces": ["team-a"]}, "monitoring": {
        **ALERTING["monitoring"], "prometheusRule": {"enabled": True, "alertLabels": {"team": "a"}}}}
    (rule,) = of_kind(render(values, "ops-a"), "PrometheusRule")
    job_phase = 'job="kuberl", namespace="{}", rltj="stuck", phase="Pending", pod="kuberl-0"'
    skipped = 'job="{}/kuberl-trainers", namespace="{}", rltj="redo", rank="0", pod="redo-0"'
    tests = [{"interval": "1m", "input_series": [
        *[series(m.OPERATOR_JOB_PHASE, job_phase.format(team), "1x40") for team in ("team-a", "team-b")],
        *[series(m.CHECKPOINTS_SKIPPED, skipped.format(ops, team), "2x40") for ops, team in (("ops-a", "team-a"), ("ops-b", "team-b"))],
        # ops-b's operator refused its watch of team-b: ops-b's to fix, not team a's
        series(m.OPERATOR_NAMESPACE_REFUSED, 'job="kuberl", namespace="team-b", pod="kuberl-0"', "1x40"),
    ], "alert_rule_test": [
        firing("KuberlJobNotRunning", "35m", ({"namespace": "team-a", "rltj": "stuck", "team": "a"}, "")),
        firing("KuberlCheckpointsSkipped", "35m", ({"namespace": "team-a", "rltj": "redo", "team": "a"}, "2")),
        firing("KuberlOperatorNamespaceRefused", "35m"),
    ]}]
    run_promtool_tests(tmp_path, rule["spec"]["groups"], tests)


def test_a_trainer_prometheus_cannot_scrape_for_ten_minutes_is_named(tmp_path):
    target = 'job="kuberl-system/kuberl-trainers", namespace="team-a", pod="{}", container="trainer", endpoint="metrics-0"'
    tests = [{"interval": "1m", "input_series": [
        series("up", target.format("blocked-0"), "0x20"),  # a NetworkPolicy that does not admit Prometheus
        series("up", target.format("starting-0"), "0x3 1x16"),  # imports and rendezvous, then served
        series("up", target.format("fine-0"), "1x20"),
        series("up", 'job="other/app", namespace="team-a", pod="app-0"', "0x20"),  # not a trainer
    ], "alert_rule_test": [
        firing("KuberlTrainerMetricsUnscraped", "9m"),
        firing("KuberlTrainerMetricsUnscraped", "15m", ({"namespace": "team-a", "pod": "blocked-0"}, "")),
    ]}]
    run_promtool_tests(tmp_path, rules(), tests)


def test_without_the_pod_monitor_there_is_no_trainer_scrape_to_watch():
    values = {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
    assert "KuberlTrainerMetricsUnscraped" not in {r["alert"] for group in rules(values) for r in group["rules"]}


def test_operator_alerts_fire_when_it_is_down_frozen_or_failing_its_requests(tmp_path):
    up = f'{OPERATOR}, pod="kuberl-0", instance="10.0.0.5:8081"'
    tests = [
        {"interval": "1m", "input_series": [
            series("up", up, "1x5 0x20"),
            series("up", 'job="other", namespace="kuberl-system"', "0x25"),  # another release's target says nothing of this one
        ], "alert_rule_test": [
            firing("KuberlOperatorDown", "5m"),
            firing("KuberlOperatorDown", "15m", ({"namespace": "kuberl-system"}, "")),
        ]},
        {"interval": "1m", "input_series": [
            series("up", up, "1x5"),  # the pod is gone: its target, and so its `up`, disappear
        ], "alert_rule_test": [
            firing("KuberlOperatorDown", "20m", ({"namespace": "kuberl-system"}, "")),
        ]},
        {"interval": "1m", "input_series": [
            series("up", up, "1x30"),
            series(m.OPERATOR_PEERS_SAME_PRIORITY, f'{OPERATOR}, pod="kuberl-1"', "0x5 1x20"),
            series(m.OPERATOR_PEERS_SAME_PRIORITY, f'{OPERATOR}, pod="kuberl-0"', "0x25"),
            series(m.OPERATOR_API_ERRORS_TOTAL, f'{OPERATOR}, pod="kuberl-0", verb="list", resource="pods", code="403"', "0+1x30"),
            # a tenant's invalid child (422) fails that job, not the operator
            series(m.OPERATOR_API_ERRORS_TOTAL, f'{OPERATOR}, pod="kuberl-0", verb="create", resource="pods", code="422"', "0+1x30"),
            # kuberl-0's container restarted three times (each start a new start time); kuberl-1 once.
            series(m.PROCESS_START_TIME, f'{OPERATOR}, pod="kuberl-0"', "1000x5 1400x5 1800x5 2200x10"),
            series(m.PROCESS_START_TIME, f'{OPERATOR}, pod="kuberl-1"', "1000x10 1700x15"),
        ], "alert_rule_test": [
            firing("KuberlOperatorRestarting", "14m"),
            firing("KuberlOperatorRestarting", "20m", ({"job": "kuberl", "namespace": "kuberl-system", "pod": "kuberl-0"}, "3")),
            firing("KuberlOperatorDown", "25m"),
            firing("KuberlOperatorPeersSamePriority", "15m", ({"namespace": "kuberl-system", "pod": "kuberl-1"}, "1")),
            firing("KuberlOperatorAPIErrors", "10m"),
            firing("KuberlOperatorAPIErrors", "25m", ({"namespace": "kuberl-system", "verb": "list", "resource": "pods", "code": "403"}, "")),
        ]},
    ]
    run_promtool_tests(tmp_path, rules(), tests)


def test_a_job_restarting_on_a_failing_checkpoint_volume_is_named_though_backofflimit_does_not_count_it(tmp_path):
    """CheckpointVolumeUnavailable restarts leave status.restarts (KuberlJobCrashLooping's input) at 0."""
    def restarts(job: str, reason: str, values: str) -> dict:
        return series(m.OPERATOR_GANG_RESTARTS_TOTAL, f'job="kuberl", pod="kuberl-0", namespace="team", rltj="{job}", reason="{reason}"',
                      values)

    volume = "CheckpointVolumeUnavailable"
    tests = [{"interval": "1m", "input_series": [
        restarts("failing", volume, "0x5 1x5 2x5 3x80"),  # from the 0 the operator starts every job at
        series(m.OPERATOR_JOB_RESTARTS, 'job="kuberl", pod="kuberl-0", namespace="team", rltj="failing"', "0x95"),
        restarts("across", volume, "0x5 1x5 2x5 0x5 1x75"),  # the operator restarted between the second and the third (24m)
        restarts("rare", volume, "0x30 1x30 2x30"),  # one each half hour: storage that heals
        restarts("crashing", "Crashed", "0x5 1x5 2x5 3x80"),  # KuberlJobCrashLooping's
        series(m.OPERATOR_GANG_RESTARTS_TOTAL, f'job="other", namespace="team", rltj="elsewhere", reason="{volume}"',
               "0x5 1x5 2x5 3x80"),  # another release's operator
    ], "alert_rule_test": [
        firing("KuberlCheckpointVolumeFailing", "17m"),  # two so far
        firing("KuberlCheckpointVolumeFailing", "19m", ({"namespace": "team", "rltj": "failing"}, "")),
        firing("KuberlCheckpointVolumeFailing", "25m", ({"namespace": "team", "rltj": "across"}, ""),
               ({"namespace": "team", "rltj": "failing"}, "")),
        firing("KuberlCheckpointVolumeFailing", "90m"),  # an hour after the last, quiet again
        firing("KuberlJobCrashLooping", "30m"),  # which never sees these restarts
    ]}]
    run_promtool_tests(tmp_path, rules(), tests)


def test_a_namespace_rbac_refuses_the_operator_is_named_after_five_minutes(tmp_path):
    refused = 'job="kuberl", pod="kuberl-0", instance="10.0.0.5:8080"'
    tests = [{"interval": "1m", "input_series": [
        series(m.OPERATOR_NAMESPACE_REFUSED, f'{refused}, namespace="team-b"', "0x3 1x10 0x10"),  # refused, then granted
        series(m.OPERATOR_NAMESPACE_REFUSED, f'{refused}, namespace="team-a"', "0x25"),
        series(m.OPERATOR_NAMESPACE_REFUSED, 'job="other", pod="x", namespace="team-c"', "1x25"),  # another release's operator
    ], "alert_rule_test": [
        firing("KuberlOperatorNamespaceRefused", "6m"),
        firing("KuberlOperatorNamespaceRefused", "9m", ({"namespace": "team-b"}, "")),
        firing("KuberlOperatorNamespaceRefused", "20m"),
    ]}]
    run_promtool_tests(tmp_path, rules(), tests)


def test_an_operator_paced_by_its_request_budget_is_named_after_fifteen_minutes(tmp_path):
    """kuberl_operator_api_throttled_seconds_total grows by the seconds its requests waited (--kube-api-qps): 120 s a
    minute is two requests always waiting; 30 s a minute, a burst now and then, is the budget doing its work."""
    tests = [{"interval": "1m", "input_series": [
        series(m.OPERATOR_API_THROTTLED_SECONDS_TOTAL, f'{OPERATOR}, pod="kuberl-0"', "0+120x30"),
        series(m.OPERATOR_API_THROTTLED_SECONDS_TOTAL, f'{OPERATOR}, pod="kuberl-1"', "0+30x30"),
        series(m.OPERATOR_API_THROTTLED_SECONDS_TOTAL, 'job="other", namespace="kuberl-system", pod="x"', "0+600x30"),  # another release
    ], "alert_rule_test": [
        firing("KuberlOperatorThrottled", "10m"),
        firing("KuberlOperatorThrottled", "25m", ({"namespace": "kuberl-system", "pod": "kuberl-0"}, "2")),
    ]}]
    run_promtool_tests(tmp_path, rules(), tests)


def test_a_promtool_test_that_expects_a_wrong_alert_fails(tmp_path):
    """The harness itself can fail: an alert expected where none fires is reported."""
    tests = [{"interval": "1m", "input_series": [series(m.CHECKPOINTS_SKIPPED, 'namespace="a", rltj="j", rank="0"', "0x10")],
              "alert_rule_test": [firing("KuberlCheckpointsSkipped", "5m", ({"namespace": "a", "rltj": "j"}, "0"))]}]
    with pytest.raises(AssertionError, match="KuberlCheckpointsSkipped"):
        run_promtool_tests(tmp_path, rules(), tests)



def test_every_alert_has_a_row_in_troubleshooting():
    runbook = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    section = runbook[runbook.index("## Alerts"):]
    assert set(re.findall(r"^\| `(Kuberl\w+)` \|", section, re.MULTILINE)) == set(alerts())
