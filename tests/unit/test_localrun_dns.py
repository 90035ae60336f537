"""`kuberl run` resolves rendered names by the cluster's DNS rules: a render
bug that would leave a name unresolved in a cluster fails here too."""

from __future__ import annotations

import copy

import pytest
from kuberl.core import names
from kuberl.core.render import Job, render_pod, render_service
from kuberl.local.containerenv import container_env
from kuberl.local.process import launch
from kuberl.local.runner import (
    DNSPod,
    dns_records,
    explain_unresolved,
    make_resolver,
    pod_address,
    resolve,
)
from kuberl.local.sandbox import LocalRunError, trainer_container

from tests.support.jobs import make_job

SPEC = make_job().env("CartPole-v1").workers(3).spec()
JOB = Job("cartpole", SPEC)
UID = "uid-1"


def rendered(namespace: str = "default") -> tuple[dict, list[DNSPod]]:
    service = render_service(JOB, namespace)
    pods = [DNSPod(render_pod(JOB, namespace, UID, r, 0, target="local"), f"127.9.0.{r + 2}") for r in range(3)]
    return service, pods


def test_rendered_pods_resolve_by_hostname_and_subdomain():
    service, pods = rendered()
    records = dns_records([service], pods)
    assert records["cartpole-1.cartpole.default.svc.cluster.local"] == ["127.9.0.3"]
    assert records["cartpole.default.svc.cluster.local"] == ["127.9.0.2", "127.9.0.3", "127.9.0.4"]
    assert resolve(names.master_addr("cartpole", "default"), records) == "127.9.0.2"


@pytest.mark.parametrize("name,namespace,expected", [
    ("cartpole-2.cartpole", "default", "127.9.0.4"),  # search list: <ns>.svc.cluster.local
    ("cartpole-2.cartpole.default", "other", "127.9.0.4"),  # svc.cluster.local
    ("cartpole-2.cartpole.default.svc.cluster.local.", "other", "127.9.0.4"),  # absolute
    ("cartpole-2.cartpole", "other", None),  # another namespace's search list
    ("cartpole-2", "default", None),  # a bare hostname is not a cluster name
    ("cartpole-3.cartpole.default.svc", "default", None),  # no such rank
])
def test_the_search_list_of_a_pod_in_a_namespace(name, namespace, expected):
    service, pods = rendered()
    assert resolve(name, dns_records([service], pods), namespace) == expected


def _broken(mutate) -> tuple[list[dict], list[DNSPod]]:
    service, pods = rendered()
    service, pods = copy.deepcopy(service), [DNSPod(copy.deepcopy(p.pod), p.ip) for p in pods]
    mutate(service, pods[0].pod)
    return [service], pods


@pytest.mark.parametrize("mutate,why", [
    (lambda s, p: s["spec"].update(clusterIP="10.0.0.1"), "not headless"),
    (lambda s, p: s["spec"].update(selector={names.LABEL_JOB: "other"}), "does not select"),
    (lambda s, p: p["spec"].update(subdomain="cartpole-svc"), "no Service has that name"),
    (lambda s, p: p["spec"].pop("hostname"), "no pod has spec.hostname"),
    (lambda s, p: s["spec"].pop("publishNotReadyAddresses"), "not-ready addresses"),
    (lambda s, p: p["metadata"].update(namespace="elsewhere"), "does not match"),
])
def test_each_rule_a_render_can_break_fails_with_its_reason(mutate, why):
    services, pods = _broken(mutate)
    master = names.master_addr("cartpole", "default")
    assert resolve(master, dns_records(services, pods)) is None
    with pytest.raises(LocalRunError, match=why):
        make_resolver(services, pods)(master)


def test_without_published_not_ready_addresses_only_ready_pods_resolve():
    services, pods = _broken(lambda s, p: s["spec"].pop("publishNotReadyAddresses"))
    ready = [DNSPod(p.pod, p.ip, ready=True) for p in pods]
    assert resolve("cartpole-0.cartpole.default.svc", dns_records(services, ready)) == "127.9.0.2"


def test_a_render_bug_in_master_addr_fails_before_any_process_starts():
    service, pods = rendered()
    pod = copy.deepcopy(pods[1].pod)
    for item in trainer_container(pod)["env"]:
        if item["name"] == "MASTER_ADDR":
            item["value"] = "cartpole-0.cartpole-headless.default.svc"
    with pytest.raises(LocalRunError, match="cartpole-0.cartpole-headless.default.svc does not resolve"):
        container_env(pod, trainer_container(pod), pods[1].ip, {}, make_resolver([service], pods), node_cpus=4)


def test_explanations_name_the_pod():
    service, pods = rendered()
    assert "no pod has spec.hostname 'x'" in explain_unresolved("x.cartpole.default.svc", [service], pods)


def test_pod_addresses_are_loopback_distinct_and_never_the_hosts():
    a = {pod_address("/runs/a", r) for r in range(1024)}
    b = {pod_address("/runs/b", r) for r in range(4)}
    assert len(a) == 1024 and not a & b
    assert all(ip.startswith("127.") and ip != "127.0.0.1" for ip in a | b)
    assert pod_address("/runs/a", 0) == pod_address("/runs/a", 0)


def with_user_env(pod: dict, env: list[dict], args: list[str] | None = None) -> dict:
    pod = copy.deepcopy(pod)
    trainer_container(pod)["env"] += env
    if args is not None:
        trainer_container(pod)["args"] = args
    return pod


def test_a_cluster_name_inside_a_value_resolves_as_a_pods_resolver_would():
    """`tcp://$(MASTER_ADDR):$(MASTER_PORT)` is a cluster name inside a URL: a
    script's init_method, resolved in a cluster by its DNS, here by the same rules."""
    service, pods = rendered()
    pod = with_user_env(pods[1].pod, [
        {"name": "INIT", "value": "tcp://$(MASTER_ADDR):$(MASTER_PORT)"},
        {"name": "PEERS", "value": "cartpole-1.cartpole.default.svc.cluster.local:1,cartpole-2.cartpole.default.svc:2"},
        {"name": "ELSEWHERE", "value": "http://db.other.svc:5432/x"},  # not the job's: a cluster resolves it, not us
        {"name": "LOOKALIKE", "value": "cartpole-0.cartpole.default.svc.example.com"},
    ])
    env = container_env(pod, trainer_container(pod), pods[1].ip, {}, make_resolver([service], pods), node_cpus=4)
    assert env["INIT"] == f"tcp://127.9.0.2:{env['MASTER_PORT']}"
    assert env["PEERS"] == "127.9.0.3:1,127.9.0.4:2"
    assert env["ELSEWHERE"] == "http://db.other.svc:5432/x"
    assert env["LOOKALIKE"] == "cartpole-0.cartpole.default.svc.example.com"


def test_a_cluster_name_written_into_the_command_resolves_too(tmp_path):
    service, pods = rendered()
    pod = with_user_env(pods[1].pod, [], ["--rdzv-endpoint=cartpole-0.cartpole.default.svc:29500", "sh -c 'x cartpole-2.cartpole.default.svc'"])
    resolver = make_resolver([service], pods)
    env = container_env(pod, trainer_container(pod), pods[1].ip, {}, resolver, node_cpus=4)
    argv = launch(pod, str(tmp_path), env, {}, resolver).argv
    assert argv[-2:] == ["--rdzv-endpoint=127.9.0.2:29500", "sh -c 'x 127.9.0.4'"]
