"""The Grafana dashboard in the chart: every query names only metrics that
kuberl.core.metricnames defines (trainer and operator), none is padded to look
alive, and every training panel follows the namespace and rltj variables.
tests/e2e/test_dashboard.py runs the same queries against a real Prometheus."""

from __future__ import annotations

import json
import re

import pytest
from chart_support import CHART, promtool, render
from kuberl.core import metricnames

DASHBOARD = json.loads((CHART / "dashboards" / "kuberl.json").read_text())
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right", "rate", "irate",
    "increase", "delta", "deriv", "time", "histogram_quantile", "clamp_min", "clamp_max", "topk", "bottomk", "le",
    "and", "or", "unless", "offset", "bool", "label_replace", "max_over_time", "min_over_time", "avg_over_time", "timestamp",
}
FORBIDDEN = [r"\bor\s+vector\(", r"\babsent(_over_time)?\(", r"^\s*up\s*$", r"\bup\{"]


def defined_metric_names() -> set[str]:
    return {value for name, value in vars(metricnames).items()
            if isinstance(value, str) and name.isupper() and value.startswith(("kuberl_trainer_", "kuberl_operator_"))
            and not name.endswith("PREFIX")}


def panel_targets() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in DASHBOARD["panels"] if panel["type"] != "row" for target in panel["targets"]]


def metrics_in(expr: str) -> set[str]:
    """Identifiers that stand for series: not functions, keywords, label names or strings."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_matchers = re.sub(r"\{[^}]*\}", "{}", without_strings)
    without_groupings = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", without_matchers)
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", without_groupings))
    return {w for w in words - PROMQL_WORDS if not w.startswith("__") and not re.fullmatch(r"\d+[smhd]", w)}


def base_name(series: str) -> str:
    for suffix in HISTOGRAM_SERIES:
        if series.endswith(suffix) and series.removesuffix(suffix) in defined_metric_names():
            return series.removesuffix(suffix)
    return series


def test_metrics_in_parses_what_it_should():
    assert metrics_in('sum by (rltj) (rate(a_total{x=~"$y"}[$__rate_interval])) / on (pod) b{rank="0"}') == {"a_total", "b"}


@pytest.mark.parametrize(("title", "expr"), panel_targets())
def test_every_query_uses_only_defined_kuberl_metrics(title, expr):
    used = {base_name(m) for m in metrics_in(expr)}
    assert used, f"{title}: the query names no kuberl metric"
    assert used <= defined_metric_names(), f"{title}: {sorted(used - defined_metric_names())} not in kuberl.core.metricnames"


@pytest.mark.parametrize(("title", "expr"), panel_targets())
def test_no_query_is_padded_to_look_alive(title, expr):
    assert not [p for p in FORBIDDEN if re.search(p, expr)], f"{title}: {expr}"


@pytest.mark.parametrize(("title", "expr"), [(t, e) for t, e in panel_targets() if "kuberl_trainer_" in e])
def test_training_panels_follow_the_namespace_and_rltj_variables(title, expr):
    for selector in re.findall(r"kuberl_trainer_\w+\{([^}]*)\}", expr):
        assert 'namespace=~"$namespace"' in selector and 'rltj=~"$rltj"' in selector, f"{title}: {expr}"


# Operator series labelled with the job's namespace and name (kuberl.operator.metrics).
PER_JOB_OPERATOR_METRICS = (metricnames.OPERATOR_JOB_PHASE, metricnames.OPERATOR_GANG_RESTARTS_TOTAL, metricnames.OPERATOR_PODS_CREATED_TOTAL)


@pytest.mark.parametrize(("title", "expr"), [(t, e) for t, e in panel_targets() if any(n in e for n in PER_JOB_OPERATOR_METRICS)])
def test_per_job_operator_panels_follow_the_namespace_variable(title, expr):
    for name in PER_JOB_OPERATOR_METRICS:
        for selector in re.findall(rf"\b{name}\{{([^}}]*)\}}", expr):
            assert 'namespace=~"$namespace"' in selector and 'job=~"$operator_job"' in selector, f"{title}: {expr}"


# The operator's own series, labelled with its scrape target's namespace (kuberl.operator.metrics).
OWN_OPERATOR_METRICS = (metricnames.OPERATOR_RECONCILE_DURATION, metricnames.OPERATOR_API_ERRORS_TOTAL,
                        metricnames.OPERATOR_API_THROTTLED_SECONDS_TOTAL)


@pytest.mark.parametrize(("title", "expr"), [(t, e) for t, e in panel_targets() if any(n in e for n in OWN_OPERATOR_METRICS)])
def test_the_operators_own_panels_follow_the_operator_variables(title, expr):
    """Two releases sharing a Prometheus (a staging operator beside production's): each one's dashboard drew both."""
    for name in OWN_OPERATOR_METRICS:
        uses = re.findall(rf"\b{name}\w*(\{{[^}}]*\}})?", expr)
        assert all('job=~"$operator_job"' in u and 'namespace=~"$operator_namespace"' in u for u in uses), f"{title}: {expr}"


GRAFANA_SUBSTITUTES = {"$__rate_interval": "1m", "$__interval": "30s", "$namespace": ".+", "$rltj": ".+",
                       "$operator_job": ".+", "$operator_namespace": ".+"}


def grafana(expr: str) -> str:
    """The query as Grafana sends it with every namespace and job selected."""
    for variable, value in GRAFANA_SUBSTITUTES.items():
        expr = expr.replace(variable, value)
    return expr


def panel_expr(title: str) -> str:
    (expr,) = [e for t, e in panel_targets() if t == title]
    return grafana(expr)


def test_every_query_is_valid_promql_for_a_real_prometheus(tmp_path):
    """promtool parses each query (the dashboard's variables substituted as Grafana would) as a rule expression."""
    rules = [{"record": f"kuberl:panel_{i}", "expr": grafana(expr)} for i, (_, expr) in enumerate(panel_targets())]
    rule_file = tmp_path / "panels.yaml"
    rule_file.write_text(json.dumps({"groups": [{"name": "panels", "rules": rules}]}))
    result = promtool("check", "rules", str(rule_file))
    assert result.returncode == 0, result.stdout + result.stderr


def variable_selector(name: str) -> tuple[str, str]:
    """A query variable's label_values(SELECTOR, LABEL) as its selector and label."""
    (variable,) = [v for v in DASHBOARD["templating"]["list"] if v["name"] == name]
    match = re.fullmatch(r"label_values\((\{.*\}|\w+(?:\{[^}]*\})?), (\w+)\)", variable["query"]["query"])
    assert match, variable["query"]["query"]
    return match.group(1), match.group(2)


def test_template_variables_are_namespace_and_rltj_from_kuberl_metrics():
    for name in ("namespace", "rltj"):
        selector, label = variable_selector(name)
        assert label == name
        named = re.fullmatch(r'\{__name__=~"([\w|]+)"(, .*)?\}', selector)
        metrics = named.group(1).split("|") if named else [re.match(r"\w+", selector).group(0)]
        assert set(metrics) <= defined_metric_names(), selector


def test_a_job_that_never_ran_a_trainer_is_offered_in_the_namespace_and_job_lists(tmp_path):
    """KuberlJobNotRunning names team-c/stuck, Pending since it was created: the lists, read from trainer series
    only, offered neither team-c nor stuck, so the job paged for could not be selected. Grafana's label_values is a
    series query; count by (label) of the same selector is it, run by promtool."""
    series = [
        {"series": f'{metricnames.WORLD_SIZE}{{namespace="team-a", rltj="ppo", rank="0", pod="ppo-0"}}', "values": "2x5"},
        {"series": f'{metricnames.OPERATOR_JOB_PHASE}{{job="kuberl", namespace="team-a", rltj="ppo", phase="Running"}}',
         "values": "1x5"},
        {"series": f'{metricnames.OPERATOR_JOB_PHASE}{{job="kuberl", namespace="team-c", rltj="stuck", phase="Pending"}}',
         "values": "1x5"},
    ]
    selector, _ = variable_selector("namespace")
    evaluated(tmp_path, f"count by (namespace) ({grafana(selector)})", series, "5m",
              [{"labels": '{namespace="team-a"}', "value": 2}, {"labels": '{namespace="team-c"}', "value": 1}])
    selector, _ = variable_selector("rltj")
    evaluated(tmp_path, f"count by (rltj) ({selector.replace('$namespace', 'team-c')})", series, "5m",
              [{"labels": '{rltj="stuck"}', "value": 1}])


def test_the_dashboard_covers_what_a_platform_team_watches():
    text = " ".join(expr for _, expr in panel_targets())
    for needed in [metricnames.ENV_STEPS_TOTAL, metricnames.EPISODE_RETURN, metricnames.EVAL_RETURN, metricnames.ROLLOUT_DURATION,
                   metricnames.UPDATE_DURATION, metricnames.ALLREDUCE_DURATION, metricnames.POLICY_LOSS, metricnames.VALUE_LOSS,
                   metricnames.Q_VALUE, metricnames.ENTROPY_COEFFICIENT,
                   metricnames.LEARNING_RATE, metricnames.LAST_CHECKPOINT_TIMESTAMP, metricnames.WORLD_SIZE,
                   metricnames.OPERATOR_JOB_PHASE, metricnames.OPERATOR_GANG_RESTARTS_TOTAL, metricnames.CHECKPOINTS_SKIPPED,
                   metricnames.GPU_MEMORY_TOTAL, metricnames.GPU_MEMORY_RESERVED]:
        assert needed in text, needed
    restarts = [expr for _, expr in panel_targets() if metricnames.OPERATOR_GANG_RESTARTS_TOTAL in expr]
    assert restarts and all(re.search(r"by \([^)]*\brltj\b", expr) for expr in restarts), "which job is crash-looping"
    assert re.search(r'rank="0"', text) and "{{rank}}" in json.dumps(DASHBOARD), "per job and per rank"


def evaluated(tmp_path, expr: str, input_series: list[dict], at: str, expected: list[dict], interval: str = "1m") -> None:
    """promtool evaluates `expr` over `input_series` (one sample each `interval`) at `at` and must get exactly `expected`."""
    test = {"interval": interval, "input_series": input_series,
            "promql_expr_test": [{"expr": expr, "eval_time": at, "exp_samples": expected}]}
    (tmp_path / "tests.yaml").write_text(json.dumps({"rule_files": [], "tests": [test]}))
    result = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkpoint_age_leaves_out_a_job_that_has_not_checkpointed_yet(tmp_path):
    """Rank 0's timestamp gauge reads 0 until its first checkpoint: 56 years of age would flatten every other job's line."""
    rank0 = 'namespace="team-a", rltj="{}", rank="0", pod="{}-0"'
    evaluated(tmp_path, panel_expr("Checkpoint age"), [
        {"series": f"{metricnames.LAST_CHECKPOINT_TIMESTAMP}{{{rank0.format('saved', 'saved')}}}", "values": "60x10"},
        {"series": f"{metricnames.LAST_CHECKPOINT_TIMESTAMP}{{{rank0.format('fresh', 'fresh')}}}", "values": "0x10"},
    ], "10m", [{"labels": f"{{{rank0.format('saved', 'saved')}}}", "value": 540}])


def test_the_jobs_table_lists_each_job_once_with_its_phase_and_nothing_of_the_scrape(tmp_path):
    """One row per job: namespace, rltj, phase; not the operator pod's scrape labels, nor a row per replica."""
    scrape = 'job="kuberl", namespace="{ns}", rltj="{rltj}", phase="{phase}", pod="{pod}", instance="{pod}:8081", endpoint="metrics"'
    series = [
        {"series": f"{metricnames.OPERATOR_JOB_PHASE}{{{scrape.format(ns='team-a', rltj='ppo', phase='Running', pod=pod)}}}",
         "values": "1x5"} for pod in ("kuberl-0", "kuberl-1")  # a replica that reconciled it before a failover
    ] + [{"series": f"{metricnames.OPERATOR_JOB_PHASE}{{{scrape.format(ns='team-b', rltj='dqn', phase='Pending', pod='kuberl-0')}}}",
          "values": "1x5"}]
    evaluated(tmp_path, panel_expr("Jobs and their phase"), series, "5m", [
        {"labels": '{namespace="team-a", rltj="ppo", phase="Running"}', "value": 1},
        {"labels": '{namespace="team-b", rltj="dqn", phase="Pending"}', "value": 1},
    ])


def test_jobs_by_phase_counts_each_job_once_whichever_replicas_report_it(tmp_path):
    scrape = 'job="kuberl", namespace="team-a", rltj="{}", phase="Running", pod="{}"'
    series = [{"series": f"{metricnames.OPERATOR_JOB_PHASE}{{{scrape.format(job, pod)}}}", "values": "1x5"}
              for job, pod in (("ppo", "kuberl-0"), ("ppo", "kuberl-1"), ("dqn", "kuberl-1"))]
    evaluated(tmp_path, panel_expr("RLTrainingJobs by phase"), series, "5m", [{"labels": '{phase="Running"}', "value": 2}])


def test_gpu_panels_count_a_jobs_gpus_and_the_share_of_each_one_reserved(tmp_path):
    rank = 'namespace="team-a", rltj="{}", rank="{}", pod="{}-{}"'
    gpu = [(job, r) for job in ("ppo", "dqn") for r in range(2)]
    series = [{"series": f"{metricnames.GPU_MEMORY_TOTAL}{{{rank.format(job, r, job, r)}}}", "values": "80000000000x5"} for job, r in gpu]
    series += [{"series": f"{metricnames.GPU_MEMORY_RESERVED}{{{rank.format(job, r, job, r)}}}", "values": "20000000000x5"} for job, r in gpu]
    evaluated(tmp_path, panel_expr("GPUs per job"), series, "5m", [
        {"labels": '{namespace="team-a", rltj="ppo"}', "value": 2}, {"labels": '{namespace="team-a", rltj="dqn"}', "value": 2}])
    evaluated(tmp_path, panel_expr("GPU memory reserved per rank"), series, "5m",
              [{"labels": f"{{{rank.format(job, r, job, r)}}}", "value": 0.25} for job, r in gpu])


def test_gang_restarts_show_a_jobs_first_restart(tmp_path):
    """The counter of a (job, reason) is born at 1: increase() or rate() over it shows 0 for its first restart."""
    restarts = 'namespace="team-a", rltj="ppo", reason="Crashed", job="kuberl", pod="kuberl-0"'
    evaluated(tmp_path, panel_expr("Gang restarts by job and reason"),
              [{"series": f"{metricnames.OPERATOR_GANG_RESTARTS_TOTAL}{{{restarts}}}", "values": "_x5 1x5"}], "8m",
              [{"labels": '{namespace="team-a", rltj="ppo", reason="Crashed"}', "value": 1}])


def test_pods_created_show_a_jobs_first_gang(tmp_path):
    """The counter of a job is born at its first gang's size (created in one reconcile): a rate would show nothing."""
    created = 'namespace="team-a", rltj="ppo", job="kuberl", pod="kuberl-0"'
    evaluated(tmp_path, panel_expr("Pods created per job"),
              [{"series": f"{metricnames.OPERATOR_PODS_CREATED_TOTAL}{{{created}}}", "values": "_x5 4x5"}], "8m",
              [{"labels": '{namespace="team-a", rltj="ppo"}', "value": 4}])


# Counters every rank exports with the job's all-reduced total (trainer/kuberl_trainer/metrics.py): a line per rank
# drawn from them is the same line world-size times.
ALL_REDUCED_COUNTERS = (metricnames.ENV_STEPS_TOTAL, metricnames.EPISODES_TOTAL)


@pytest.mark.parametrize(("title", "target"), [(p["title"], t) for p in DASHBOARD["panels"] if p["type"] != "row" for t in p["targets"]
                                               if any(c in t["expr"] for c in ALL_REDUCED_COUNTERS)])
def test_a_panel_of_an_all_reduced_counter_draws_a_line_per_job_not_per_rank(title, target):
    assert "{{rank}}" not in target["legendFormat"], f"{title}: {target}"


def test_mean_env_steps_per_rank_is_the_jobs_rate_over_its_world_size(tmp_path):
    """Two ranks export the same all-reduced counter (4 steps/s for the job): one line of 2, not a line per rank."""
    rank = 'namespace="team-a", rltj="ppo", rank="{r}", pod="ppo-{r}"'
    series = [{"series": f"{metricnames.ENV_STEPS_TOTAL}{{{rank.format(r=r)}}}", "values": "0+60x40"} for r in (0, 1)]
    series += [{"series": f"{metricnames.WORLD_SIZE}{{{rank.format(r=r)}}}", "values": "2x40"} for r in (0, 1)]
    evaluated(tmp_path, panel_expr("Mean env steps/s per rank"), series, "10m",
              [{"labels": '{namespace="team-a", rltj="ppo"}', "value": 2}], interval="15s")


def test_api_errors_show_failures_per_window_the_first_of_a_kind_included(tmp_path):
    """A counter failing 4 times a minute for 10 minutes is 4 failures in a 1m window, not its running total of 40;
    a (verb, resource, code) born at 1 shows its one failure (increase() alone reads 0 for it). Scraped every 15s,
    so $__rate_interval (1m here) holds 4 samples, as Grafana makes it."""
    replica = 'job="kuberl", namespace="kuberl-system", pod="kuberl-0", verb="{}", resource="pods", code="{}"'
    series = [{"series": f"{metricnames.OPERATOR_API_ERRORS_TOTAL}{{{replica.format('create', '422')}}}", "values": "0+1x40"},
              {"series": f"{metricnames.OPERATOR_API_ERRORS_TOTAL}{{{replica.format('list', '403')}}}", "values": "_x38 1x2"}]
    evaluated(tmp_path, panel_expr("Operator API errors"), series, "10m", [
        {"labels": '{verb="create", resource="pods", code="422"}', "value": 4},
        {"labels": '{verb="list", resource="pods", code="403"}', "value": 1},
    ], interval="15s")


@pytest.mark.parametrize(("title", "legend"), [(p["title"], t["legendFormat"]) for p in DASHBOARD["panels"] if p["type"] != "row"
                                               for t in p["targets"] if "{{rltj}}" in t.get("legendFormat", "")])
def test_a_legend_that_names_a_job_names_its_namespace(title, legend):
    """Teams copy the examples: two namespaces each running cartpole-ppo must not draw two lines of one name."""
    assert "{{namespace}}/{{rltj}}" in legend, f"{title}: {legend}"


def test_api_budget_waits_show_how_many_requests_wait_at_once_per_replica(tmp_path):
    """Seconds waited per second: 120 s a minute is two requests always waiting (KuberlOperatorThrottled's input)."""
    series = [{"series": 'kuberl_operator_api_throttled_seconds_total{job="kuberl", namespace="kuberl-system", pod="kuberl-0"}',
               "values": "0+120x10"},
              {"series": 'kuberl_operator_api_throttled_seconds_total{job="kuberl", namespace="kuberl-system", pod="kuberl-1"}',
               "values": "0x10"}]
    evaluated(tmp_path, panel_expr("Operator requests waiting for its API budget"), series, "10m",
              [{"labels": '{pod="kuberl-0"}', "value": 2}, {"labels": '{pod="kuberl-1"}', "value": 0}])


def release_dashboard(namespace: str, values: dict) -> dict:
    (configmap,) = [o for o in render(values, namespace) if o["kind"] == "ConfigMap"]
    (text,) = configmap["data"].values()
    return json.loads(text)


def as_grafana_sends(dashboard: dict, expr: str) -> str:
    """Every variable at the value Grafana gives it with "All" selected: a constant its query, a query its allValue."""
    values = {v["name"]: v["query"] if v["type"] == "constant" else v.get("allValue") for v in dashboard["templating"]["list"]}
    for name in sorted(values, key=len, reverse=True):
        if values[name] is not None:
            expr = expr.replace(f"${name}", values[name])
    return expr.replace("$__rate_interval", "1m")


def test_a_releases_dashboard_draws_its_own_operator_and_the_namespaces_it_watches(tmp_path):
    """Release kuberl in ops-a watching team-a, beside release kuberl in ops-b watching team-b, one Prometheus: each
    release's dashboard (its own title and uid) drew both operators' requests and both teams' jobs and trainers."""
    values = {"operator": {"watchNamespaces": ["team-a"]}, "monitoring": {
        "serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}}}
    dashboard = release_dashboard("ops-a", values)
    panel = {p["title"]: p["targets"][0]["expr"] for p in dashboard["panels"] if p["type"] != "row"}
    operator = 'job="kuberl", namespace="{}", pod="kuberl-{}"'
    waits = [{"series": f"{metricnames.OPERATOR_API_THROTTLED_SECONDS_TOTAL}{{{operator.format(ns, ns)}}}", "values": "0+120x10"}
             for ns in ("ops-a", "ops-b")]
    evaluated(tmp_path, as_grafana_sends(dashboard, panel["Operator requests waiting for its API budget"]), waits, "10m",
              [{"labels": '{pod="kuberl-ops-a"}', "value": 2}])
    phase = 'job="kuberl", namespace="{}", rltj="ppo", phase="Running", pod="kuberl-{}"'
    jobs = [{"series": f"{metricnames.OPERATOR_JOB_PHASE}{{{phase.format(team, ops)}}}", "values": "1x10"}
            for team, ops in (("team-a", "ops-a"), ("team-b", "ops-b"))]
    evaluated(tmp_path, as_grafana_sends(dashboard, panel["Jobs and their phase"]), jobs, "10m",
              [{"labels": '{namespace="team-a", rltj="ppo", phase="Running"}', "value": 1}])
    rank0 = 'namespace="{}", rltj="ppo", rank="0", pod="ppo-0"'
    steps = [{"series": f"{metricnames.ENV_STEPS_TOTAL}{{{rank0.format(team)}}}", "values": "0+60x10"} for team in ("team-a", "team-b")]
    evaluated(tmp_path, as_grafana_sends(dashboard, panel["Env steps/s per job"]), steps, "10m",
              [{"labels": '{namespace="team-a", rltj="ppo"}', "value": 1}])
    namespace = next(v for v in dashboard["templating"]["list"] if v["name"] == "namespace")
    assert namespace["regex"] == "/^(team-a)$/", "the namespace list offers the watched namespaces only"


def test_without_the_service_monitor_the_dashboard_takes_any_operator_scrape_job():
    """Scraped another way (annotations, a hand-written scrape config), the operator's series carry another job label:
    the release's would match none of them."""
    dashboard = release_dashboard("ops-a", {"monitoring": {"dashboard": {"enabled": True}}})
    constants = {v["name"]: v["query"] for v in dashboard["templating"]["list"] if v["type"] == "constant"}
    assert constants == {"operator_job": ".+", "operator_namespace": ".+"}
    assert "regex" not in next(v for v in dashboard["templating"]["list"] if v["name"] == "namespace")
