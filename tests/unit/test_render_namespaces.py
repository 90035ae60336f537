"""The operator's namespace (downward API) and Prometheus' (a chart value)
reach each job's NetworkPolicy: installed in `ops` with Prometheus in
`observability`, both are admitted to the metrics ports and nothing else is."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from chart_support import ROOT, parse_operator_args, render
from kuberl import cli
from kuberl.core import contract, names
from kuberl.core.render import (
    DEFAULT_MONITORING_NAMESPACE,
    DEFAULT_MONITORING_POD_LABELS,
    DEFAULT_OPERATOR_NAMESPACE,
    render_networkpolicy,
)

from tests.support.jobs import make_job

ENTRYPOINT = json.loads(re.search(r"^ENTRYPOINT (.+)$", (ROOT / "dockerfiles" / "operator.Dockerfile").read_text(), re.MULTILINE).group(1))
JOB = make_job("cartpole").obj()


def operator_settings(release_namespace: str, values: dict) -> tuple[str, str]:
    """(operator namespace, monitoring namespace) as the chart's operator pod gets them."""
    return operator_monitoring(release_namespace, values)[:2]


def operator_monitoring(release_namespace: str, values: dict) -> tuple[str, str, dict]:
    """(operator namespace, monitoring namespace, Prometheus' pod labels) as the chart's operator pod gets them."""
    (workload,) = [o for o in render(values, release_namespace) if o["kind"] in ("Deployment", "StatefulSet")]
    container = workload["spec"]["template"]["spec"]["containers"][0]
    (pod_namespace,) = [e for e in container["env"] if e["name"] == contract.ENV_OPERATOR_POD_NAMESPACE]
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}  # the pod's own: the release's
    args = cli.build_parser().parse_args([*ENTRYPOINT[1:], *container["args"]])
    return release_namespace, args.monitoring_namespace, args.monitoring_pod_labels


def admitted(policy: dict) -> list[dict]:
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def test_operator_in_ops_and_prometheus_in_observability_are_admitted_and_no_one_else():
    operator_ns, monitoring_ns, pod_labels = operator_monitoring("ops", {"monitoring": {"prometheusNamespace": "observability"}})
    policy = render_networkpolicy(JOB, "team-a", operator_namespace=operator_ns, monitoring_namespace=monitoring_ns,
                                  monitoring_pod_labels=pod_labels)
    assert admitted(policy) == [
        {"podSelector": {"matchLabels": {names.LABEL_JOB: "cartpole"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
    ]
    assert policy["spec"]["ingress"][1]["ports"] == [{"protocol": "TCP", "port": 9090}]


def test_the_chart_defaults_are_the_renders_defaults_and_an_empty_value_admits_only_the_operator():
    assert operator_settings(DEFAULT_OPERATOR_NAMESPACE, {}) == (DEFAULT_OPERATOR_NAMESPACE, DEFAULT_MONITORING_NAMESPACE)
    operator_ns, monitoring_ns = operator_settings("ops", {"monitoring": {"prometheusNamespace": ""}})
    policy = render_networkpolicy(JOB, "team-a", operator_namespace=operator_ns, monitoring_namespace=monitoring_ns)
    assert admitted(policy)[1:] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}]


def test_prometheus_pod_labels_reach_each_jobs_policy_as_the_chart_sets_them_and_null_admits_the_namespace():
    """The chart's operator NetworkPolicy and each job's admit the same pods of Prometheus' namespace."""
    assert operator_monitoring(DEFAULT_OPERATOR_NAMESPACE, {})[2] == DEFAULT_MONITORING_POD_LABELS
    _, _, labels = operator_monitoring("ops", {"monitoring": {"prometheusPodLabels": {"app.kubernetes.io/name": None, "app": "vmagent",
                                                                                      "team": "sre"}}})
    assert labels == {"app": "vmagent", "team": "sre"}
    operator_ns, monitoring_ns, labels = operator_monitoring("ops", {"monitoring": {"prometheusPodLabels": None}})
    policy = render_networkpolicy(JOB, "team-a", operator_namespace=operator_ns, monitoring_namespace=monitoring_ns,
                                  monitoring_pod_labels=labels)
    assert labels == {} and admitted(policy)[2] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_of_the_operators_namespace_only_the_chart_operators_pods_reach_the_trainers_metrics():
    """The chart passes its operator pods' labels (--operator-pod-labels): the operator's own pods, a replica of a
    peering StatefulSet included, match each job's policy; `helm test`'s pod and anything else in that namespace do not."""
    from test_chart import admits

    for values in ({}, {"operator": {"replicas": 3, "podLabels": {"team": "platform"}}}):
        objects = render(values, "ops")
        (workload,) = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
        container = workload["spec"]["template"]["spec"]["containers"][0]
        args = parse_operator_args(container["args"])
        policy = render_networkpolicy(JOB, "team-a", operator_namespace="ops", monitoring_namespace=args.monitoring_namespace,
                                      monitoring_pod_labels=args.monitoring_pod_labels, operator_pod_labels=args.operator_pod_labels)
        operator_pod = workload["spec"]["template"]["metadata"]["labels"]
        (test_pod,) = [o for o in objects if o["kind"] == "Pod"]
        assert admits(policy, "ops", 9090, operator_pod)
        assert not admits(policy, "ops", 9090, test_pod["metadata"].get("labels") or {})
        assert not admits(policy, "ops", 9090, {"app": "anything-else"})
        assert admits(policy, "monitoring", 9090, {"app.kubernetes.io/name": "prometheus"})


def test_a_namespace_that_is_not_a_dns_label_is_refused_by_the_charts_schema():
    from chart_support import HelmError

    with pytest.raises(HelmError, match="prometheusNamespace"):
        render({"monitoring": {"prometheusNamespace": "Not A Namespace"}}, "ops")


def test_kuberl_render_takes_both_namespaces(tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(JOB))
    out = subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(tmp_path / "job.yaml"), "-n", "team-a",
                          "--operator-namespace", "ops", "--monitoring-namespace", "observability",
                          "--monitoring-pod-labels", "app=vmagent"],
                         capture_output=True, text=True, check=True).stdout
    (policy,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "NetworkPolicy"]
    assert [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in admitted(policy)[1:]] == ["ops", "observability"]
    assert admitted(policy)[2]["podSelector"] == {"matchLabels": {"app": "vmagent"}}


def render_cli(tmp_path, job: dict, *flags: str) -> subprocess.CompletedProcess:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "render", str(tmp_path / "job.yaml"), *flags],
                          capture_output=True, text=True, check=False)


def test_kuberl_render_takes_the_jobs_own_namespace_as_kubectl_does(tmp_path):
    """A manifest that declares metadata.namespace rendered as `default` (MASTER_ADDR, PET_RDZV_ID and every
    object's namespace wrong); kubectl uses it, and refuses a different -n naming both."""
    job = make_job("cartpole", namespace="team-a").obj()
    for flags in ((), ("-n", "team-a")):
        out = render_cli(tmp_path, job, *flags)
        objects = [d for d in yaml.safe_load_all(out.stdout) if d]
        assert out.returncode == 0 and {o["metadata"]["namespace"] for o in objects} == {"team-a"}, out.stderr
        pod = next(o for o in objects if o["kind"] == "Pod")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["MASTER_ADDR"] == "cartpole-0.cartpole.team-a.svc" and env["PET_RDZV_ID"].startswith("team-a.")
    mismatch = render_cli(tmp_path, job, "-n", "team-b")
    assert mismatch.returncode == 1 and "'team-a' does not match the namespace 'team-b'" in mismatch.stderr
    assert "--namespace=team-a" in mismatch.stderr and "Traceback" not in mismatch.stderr
    plain = [d for d in yaml.safe_load_all(render_cli(tmp_path, JOB).stdout) if d]
    assert {o["metadata"]["namespace"] for o in plain} == {"default"}


@pytest.mark.parametrize("namespace", ["../Bad Namespace", "a" * 64, "UPPER", "-lead", 7])
def test_a_namespace_the_api_server_would_refuse_is_refused_naming_where_it_came_from(tmp_path, namespace):
    """It becomes part of MASTER_ADDR and PET_RDZV_ID: from the manifest it is a problem of the job
    (metadata.namespace), from the command line a usage error about --namespace; nothing is rendered."""
    job = make_job("cartpole").obj()
    job["metadata"]["namespace"] = namespace
    from_file = render_cli(tmp_path, job)
    assert from_file.returncode == 1 and "metadata.namespace: expected a namespace" in from_file.stderr, from_file.stderr
    assert from_file.stdout == "" and "Traceback" not in from_file.stderr
    if isinstance(namespace, str):
        from_flag = render_cli(tmp_path, JOB, f"--namespace={namespace}")
        # a flag's wrong value is a usage error, as --health-path's or --procs-per-worker's is: exit 2 under the usage
        assert from_flag.returncode == 2 and from_flag.stderr.startswith("usage: kuberl render"), from_flag.stderr
        assert from_flag.stderr.splitlines()[-1].startswith("kuberl render: error: argument --namespace/-n: expected a namespace")
        assert from_flag.stdout == ""
