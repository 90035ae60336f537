"""The chart's scrape and reconcile values reach `kuberl operator` as flags it
accepts, parsed by the real CLI; unset, no flag is rendered (the operator's own
defaults hold); the schema refuses 0, negatives and strings, naming the key."""

import argparse
import json

import pytest
from chart_support import (
    ALL_FEATURES,
    CHART,
    HelmError,
    helm,
    operator_container,
    parse_operator_args,
    render,
)
from kuberl import cli
from kuberl.operator.config import (
    MAX_WATCH_TIMEOUT,
    MIN_KUBE_API_QPS,
    OperatorConfig,
    operator_config,
)

FLAGS = ("--scrape-interval", "--scrape-timeout", "--max-concurrent-reconciles", "--watch-timeout", "--kube-api-qps", "--kube-api-burst")


def rendered_args(values: dict | None = None, *extra: str) -> list[str]:
    _, container = operator_container(render(values, "kuberl-system", *extra))
    return container["args"]


def refusal(values: dict) -> str:
    with pytest.raises(HelmError) as refused:
        helm("template", "kuberl", str(CHART), values=values)
    return str(refused.value)


def operator_option_strings() -> set[str]:
    (subparsers,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(subparsers.choices["operator"]._option_string_actions)


def test_defaults_render_no_flag_and_the_operator_keeps_its_own_defaults():
    args = rendered_args()
    assert [a for a in args if a.startswith(FLAGS)] == []
    config = operator_config(parse_operator_args(args))
    assert (config.scrape_interval, config.scrape_timeout, config.max_concurrent_reconciles) == (
        OperatorConfig.scrape_interval, OperatorConfig.scrape_timeout, OperatorConfig.max_concurrent_reconciles)
    assert (config.kube_api_qps, config.kube_api_burst) == (50.0, 100)


@pytest.mark.parametrize(("key", "value", "flag", "field"), [
    ("scrapeIntervalSeconds", 30, "--scrape-interval=30", "scrape_interval"),
    ("scrapeIntervalSeconds", 2.5, "--scrape-interval=2.5", "scrape_interval"),
    ("scrapeTimeoutSeconds", 0.5, "--scrape-timeout=0.5", "scrape_timeout"),
    ("scrapeTimeoutSeconds", 5, "--scrape-timeout=5", "scrape_timeout"),
    ("maxConcurrentReconciles", 8, "--max-concurrent-reconciles=8", "max_concurrent_reconciles"),
    # Helm reads -f numbers as floats: a large count must still render as an integer.
    ("maxConcurrentReconciles", 1_000_000, "--max-concurrent-reconciles=1000000", "max_concurrent_reconciles"),
    ("watchTimeoutSeconds", 120, "--watch-timeout=120", "watch"),
    ("kubeApiQps", 20, "--kube-api-qps=20", "kube_api_qps"),
    ("kubeApiQps", 2.5, "--kube-api-qps=2.5", "kube_api_qps"),
    ("kubeApiQps", 0, "--kube-api-qps=0", "kube_api_qps"),  # 0 is a value here (no limit), not "unset"
    # Helm writes a large -f number as 1e+06: the flag still parses to it.
    ("kubeApiQps", 1_000_000, "--kube-api-qps=1e+06", "kube_api_qps"),
    ("kubeApiBurst", 300, "--kube-api-burst=300", "kube_api_burst"),
    ("kubeApiBurst", 1_000_000, "--kube-api-burst=1000000", "kube_api_burst"),
])
def test_each_value_reaches_the_operator_as_its_flag(key, value, flag, field):
    args = rendered_args({"operator": {key: value}})
    assert flag in args
    assert [a for a in args if a.startswith(FLAGS)] == [flag]
    configured = getattr(operator_config(parse_operator_args(args)), field)
    assert (configured.server_timeout if field == "watch" else configured) == value


def test_set_on_the_command_line_works_too():
    args = rendered_args(None, "--set", "operator.maxConcurrentReconciles=4", "--set", "operator.scrapeIntervalSeconds=15",
                         "--set-json", "operator.scrapeTimeoutSeconds=0.25")
    parsed = parse_operator_args(args)
    assert (parsed.max_concurrent_reconciles, parsed.scrape_interval, parsed.scrape_timeout) == (4, 15.0, 0.25)


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["defaults", "all-features"])
def test_every_rendered_flag_is_one_kuberl_operator_defines(values):
    """Exact names: argparse would also take an abbreviation the CLI never meant to offer."""
    args = rendered_args(values)
    assert all(a.startswith("--") for a in args)
    assert {a.split("=", 1)[0] for a in args} <= operator_option_strings()
    assert {a.split("=", 1)[0] for a in rendered_args(ALL_FEATURES)} >= set(FLAGS)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("scrapeIntervalSeconds", 0, "exclusiveMinimum: got 0, want 0"),
    ("scrapeIntervalSeconds", -5, "exclusiveMinimum: got -5, want 0"),
    ("scrapeIntervalSeconds", "10s", "got string, want null or number"),
    ("scrapeTimeoutSeconds", 0, "exclusiveMinimum: got 0, want 0"),
    ("scrapeTimeoutSeconds", -0.5, "exclusiveMinimum: got -0.5, want 0"),
    ("scrapeTimeoutSeconds", "2", "got string, want null or number"),
    ("maxConcurrentReconciles", 0, "minimum: got 0, want 1"),
    ("maxConcurrentReconciles", -1, "minimum: got -1, want 1"),
    ("maxConcurrentReconciles", "many", "got string, want null or integer"),
    ("maxConcurrentReconciles", 1.5, "got number, want null or integer"),
    ("kubeApiQps", -1, "minimum: got -1, want 0"),
    ("kubeApiQps", 0.5, "minimum: got 0.5, want 1"),  # 0 (no limit) or --kube-api-qps' least, MIN_KUBE_API_QPS
    ("kubeApiQps", "fast", "got string, want null or number"),
    ("kubeApiBurst", 0, "minimum: got 0, want 1"),
    ("kubeApiBurst", 2.5, "got number, want null or integer"),
    ("watchTimeoutSeconds", 0, "exclusiveMinimum: got 0, want 0"),
    ("watchTimeoutSeconds", 2.5, "got number, want null or integer"),
    ("watchTimeoutSeconds", MAX_WATCH_TIMEOUT + 1, "maximum: got 9.223372037×10⁰⁹"),  # Helm writes large numbers so
])
def test_schema_refuses_a_bad_value_naming_the_key(key, value, expected):
    message = refusal({"operator": {key: value}})
    assert f"at '/operator/{key}': {expected}" in message


def test_the_schema_allows_the_watch_timeouts_the_operator_takes():
    schema = json.loads((CHART / "values.schema.json").read_text())
    watch = schema["properties"]["operator"]["properties"]["watchTimeoutSeconds"]
    assert (watch["exclusiveMinimum"], watch["maximum"]) == (0, MAX_WATCH_TIMEOUT)


def test_the_schema_allows_the_request_rates_the_operator_takes():
    """kubeApiQps: 0 (no limit) or MIN_KUBE_API_QPS and up, the flag's own range (cli.kube_api_qps)."""
    qps = json.loads((CHART / "values.schema.json").read_text())["properties"]["operator"]["properties"]["kubeApiQps"]
    assert (qps["minimum"], qps["anyOf"]) == (0, [{"const": 0}, {"minimum": MIN_KUBE_API_QPS}])


def test_a_misspelled_key_is_refused():
    assert "'scrapeTimeout'" in refusal({"operator": {"scrapeTimeout": 2}})


@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["defaults", "all-features"])
def test_the_operator_stops_within_its_pods_grace_period(values):
    """Whatever hangs at SIGTERM, the operator exits within --shutdown-timeout, saying what hung
    (tests/operator/test_operator_shutdown.py): the kubelet's SIGKILL must not come first and say nothing."""
    workload, container = operator_container(render(values, "kuberl-system"))
    grace = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)  # the API server's default
    assert parse_operator_args(container["args"]).shutdown_timeout + 5 <= grace
