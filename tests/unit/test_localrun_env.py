"""A pod's environment as the kubelet resolves it, for `kuberl run` and the
local node: $(VAR) expansion, the downward API, quantities, the sandbox."""

from __future__ import annotations

import os
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from kuberl.core import contract
from kuberl.core.render import Job, render_pod, render_service
from kuberl.local.containerenv import container_env, expand, quantity, resource_field
from kuberl.local.dns import host_interfaces, local_interfaces
from kuberl.local.process import launch
from kuberl.local.runner import DNSPod, apply_overrides, make_resolver
from kuberl.local.sandbox import LocalRunError, prepare_sandbox, trainer_container

from tests.support.jobs import make_job


def no_dns(name: str) -> str:
    raise AssertionError(f"unexpected lookup of {name}")


@pytest.mark.parametrize("text,expected", [
    ("$(A)", "alpha"),
    ("x-$(A)-$(B)", "x-alpha-beta"),
    ("$$(A)", "$(A)"),
    ("$(MISSING)", "$(MISSING)"),
    ("$(A", "$(A"),
    ("cost $5", "cost $5"),
    ("trailing $", "trailing $"),
    ("$$$(A)", "$alpha"),
    ("$()", "$()"),
])
def test_expansion_follows_kubernetes(text, expected):
    assert expand(text, {"A": "alpha", "B": "beta"}) == expected


@pytest.mark.parametrize("text,value", [
    ("2", 2), ("500m", Fraction(1, 2)), ("1.5", Fraction(3, 2)), ("2Gi", 2 * 2**30), ("1e3", 1000), ("100M", 10**8), (".5", Fraction(1, 2)),
    ("1e30", 2**63 - 1), ("1e99999999", 2**63 - 1),  # held to the kubelet's int64, never computed out
])
def test_quantities(text, value):
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["2 cores", "1e1.5"])
def test_a_bad_quantity_is_refused(text):
    with pytest.raises(LocalRunError):
        quantity(text)


def pod_with(env: list[dict], resources: dict | None = None) -> dict:
    container = {"name": "trainer", "command": ["python", "-c", "pass"], "env": env, "resources": resources or {}}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
            "spec": {"hostname": "p", "containers": [container]}}


@pytest.mark.parametrize("limits,requests,ref,expected", [
    ({"cpu": "1500m"}, {}, {"resource": "limits.cpu"}, "2"),
    ({"cpu": "2"}, {}, {"resource": "limits.cpu", "divisor": "1"}, "2"),
    ({}, {}, {"resource": "limits.cpu"}, "6"),  # no limit: the node's CPUs
    ({"cpu": "250m"}, {}, {"resource": "limits.cpu", "divisor": "1m"}, "250"),
    ({"memory": "2Gi"}, {}, {"resource": "limits.memory", "divisor": "1Mi"}, "2048"),
    ({"cpu": "4"}, {"cpu": "1100m"}, {"resource": "requests.cpu"}, "2"),
    ({}, {}, {"resource": "limits.memory", "divisor": "1Mi"}, "8192"),  # no limit: the node's memory
    ({}, {}, {"resource": "limits.ephemeral-storage", "divisor": "1Gi"}, "100"),  # and its disk
    ({}, {}, {"resource": "requests.memory"}, "0"),
])
def test_resource_field_refs_round_up(limits, requests, ref, expected):
    pod = pod_with([], {"limits": limits, "requests": requests})
    assert resource_field(pod, ref, node_cpus=6, node_memory=8 * 2**30, node_storage=100 * 2**30) == expected


def test_a_memory_limit_the_pod_does_not_set_is_this_machines_memory():
    """A PyTorchJob manifest's `resourceFieldRef: limits.memory` with no memory
    limit gets the node's allocatable memory from a kubelet; here, this machine's."""
    pod = pod_with([{"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}])
    got = container_env(pod, trainer_container(pod), "127.5.0.9", {}, no_dns, node_cpus=1)
    assert int(got["MEM"]) == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_env_values_field_refs_and_configmap_keys():
    env = [
        {"name": "A", "value": "one"},
        {"name": "B", "value": "$(A)-two-$(C)"},  # C is defined later: left as written
        {"name": "C", "value": "three"},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
        {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}}},
    ]
    pod = pod_with(env, {"limits": {"cpu": "3"}})
    got = container_env(pod, trainer_container(pod), "127.5.0.9", {"cm": {"k": "v"}}, no_dns, node_cpus=8)
    assert got == {"A": "one", "B": "one-two-$(C)", "C": "three", "IP": "127.5.0.9", "NAME": "p", "NS": "ns",
                   "APP": "x", "CPUS": "3", "KEY": "v"}


@pytest.mark.parametrize("value,prefixes,expected", [
    ("eth0", False, "lo"),  # a pod's own interface; this laptop's card is wlp2s0
    ("eth0,eth1", False, "lo"),
    ("wlp2s0", False, "wlp2s0"),  # an interface this machine has stays
    ("eth1,wlp2s0", False, "eth1,wlp2s0"),
    ("eth", True, "lo"),  # NCCL: a prefix
    ("wl", True, "wl"),
    ("=wlp2s0", True, "=wlp2s0"),  # NCCL: exactly that one
    ("=wlp", True, "lo"),
    ("^docker,lo", True, "^docker,lo"),  # NCCL: every interface but these
    ("", False, ""),
])
def test_an_interface_this_machine_lacks_is_the_loopback_where_local_pods_live(value, prefixes, expected):
    assert local_interfaces(value, prefixes, present={"lo", "wlp2s0"}) == expected


def test_gloo_socket_ifname_eth0_of_a_pytorchjob_manifest_is_an_interface_here():
    """GLOO_SOCKET_IFNAME=eth0 (NCCL_SOCKET_IFNAME too), as many PyTorchJob manifests set it: on a machine
    without eth0 gloo failed 'Unable to find address for: eth0' in every local pod."""
    absent = next(f"eth{i}" for i in range(100) if f"eth{i}" not in host_interfaces())
    env = [{"name": "GLOO_SOCKET_IFNAME", "value": absent}, {"name": "NCCL_SOCKET_IFNAME", "value": absent},
           {"name": "OTHER", "value": absent}]
    pod = pod_with(env)
    got = container_env(pod, trainer_container(pod), "127.5.0.9", {}, no_dns, node_cpus=8)
    assert (got["GLOO_SOCKET_IFNAME"], got["NCCL_SOCKET_IFNAME"], got["OTHER"]) == ("lo", "lo", absent)
    assert "lo" in host_interfaces()


@pytest.mark.parametrize("source", [
    {"secretKeyRef": {"name": "s", "key": "k"}},
    {"fieldRef": {"fieldPath": "status.nothing"}},
    {"configMapKeyRef": {"name": "cm", "key": "missing"}},
])
def test_what_cannot_be_served_here_is_an_error(source):
    pod = pod_with([{"name": "X", "valueFrom": source}])
    with pytest.raises(LocalRunError):
        container_env(pod, trainer_container(pod), "127.5.0.9", {"cm": {}}, no_dns, node_cpus=1)


def test_an_optional_secret_is_missing_here_as_where_no_such_secret_exists():
    """`secretKeyRef: {name: wandb, key: api-key, optional: true}` left unset, as a kubelet leaves it without the
    Secret; kuberl run refused the whole job ('no Secrets here')."""
    pod = pod_with([{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k", "optional": True}}},
                    {"name": "Y", "value": "y"}])
    pod["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "extra", "optional": True}}]
    got = container_env(pod, trainer_container(pod), "127.5.0.9", {}, no_dns, node_cpus=1)
    assert "WANDB_API_KEY" not in got and got["Y"] == "y"


def rendered_env(procs: int = 1) -> tuple[dict, dict]:
    spec = make_job().minimal().with_spec(workers=2, procsPerWorker=procs, resources={"limits": {"cpu": "1500m"}}).spec()
    job = Job("cp", spec)
    pods = [DNSPod(render_pod(job, "default", "u", r, 3, target="local"), f"127.7.0.{r + 2}") for r in range(2)]
    resolver = make_resolver([render_service(job, "default")], pods)
    pod = pods[1].pod
    return pod, container_env(pod, trainer_container(pod), pods[1].ip, {}, resolver, node_cpus=2)


def test_the_rendered_contract_resolves_to_this_pods_address_and_limit():
    _, env = rendered_env()
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.7.0.2"
    assert env[contract.ENV_METRICS_ADDR] == "127.7.0.3"
    assert env["OMP_NUM_THREADS"] == "2"
    assert (env["RANK"], env["WORLD_SIZE"], env[contract.ENV_RESTART]) == ("1", "2", "3")


def test_the_launcher_command_is_expanded_and_python_is_this_interpreter(tmp_path):
    pod, env = rendered_env(procs=2)
    started = launch(pod, str(tmp_path), env, base_env={"PATH": "/bin"})
    assert started.argv[0] == sys.executable
    assert "--master-addr=127.7.0.2" in started.argv and "--node-rank=1" in started.argv
    assert started.env[contract.ENV_FS_ROOT] == str(tmp_path) and started.env["PATH"] == "/bin"
    assert started.env["HOSTNAME"] == "cp-1"


def test_the_sandbox_puts_every_mount_where_the_pod_expects_it(tmp_path):
    spec = make_job().minimal().spec()
    pod = render_pod(Job("cp", spec), "default", "u", 0, 0, target="local")
    claims = tmp_path / "claims"
    (tmp_path / "sandbox" / "stale").mkdir(parents=True)
    root = prepare_sandbox(str(tmp_path / "sandbox"), pod, trainer_container(pod),
                           {"cp-config": {"config.json": "{}"}}, lambda claim: str(claims / claim))
    assert Path(root, "etc/kuberl/config.json").read_text() == "{}"
    assert os.path.realpath(os.path.join(root, "checkpoints")) == str(claims / "cp-checkpoints")
    assert os.path.isfile(os.path.join(root, "dev/termination-log")) and os.path.isdir(os.path.join(root, "tmp"))
    assert not (tmp_path / "sandbox" / "stale").exists()


def test_overrides_set_nested_fields_as_yaml():
    job = {"metadata": {"name": "j"}, "spec": {"workers": 2, "runPolicy": {"backoffLimit": 3}}}
    out = apply_overrides(job, 4, ["runPolicy.restartBackoffSeconds=0.5", "success.targetReturn=null",
                                  "spec.ppo.hiddenSizes=[8, 8]", "metadata.name=k"])
    assert out == {"metadata": {"name": "k"}, "spec": {
        "workers": 4, "runPolicy": {"backoffLimit": 3, "restartBackoffSeconds": 0.5},
        "success": {"targetReturn": None}, "ppo": {"hiddenSizes": [8, 8]}}}
    assert job["spec"]["workers"] == 2


def test_overrides_read_numbers_as_kubectl_does():
    # PyYAML alone reads 1e-3 as a string, which the strict spec would refuse.
    out = apply_overrides({"spec": {}}, None, ["ppo.learningRate=1e-3", "totalTimesteps=5e5"])
    assert out["spec"] == {"ppo": {"learningRate": 0.001}, "totalTimesteps": 500000}


def test_a_taken_default_rendezvous_port_moves_but_a_chosen_one_stays(tmp_path, monkeypatch):
    import contextlib
    import socket

    from kuberl.core.rules import validate_job
    from kuberl.local.runner import with_free_rendezvous_port

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with socket.socket() as taken, contextlib.ExitStack() as held:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        default = make_job("j").env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).obj()
        spec = validate_job(default).model_copy(update={"rendezvous": validate_job(default).rendezvous.model_copy(update={"port": port})})
        moved = with_free_rendezvous_port(default, spec, held)
        assert moved["spec"]["rendezvous"]["port"] not in (port, None) and "rendezvous" not in default["spec"]
        chosen = {**default, "spec": {**default["spec"], "rendezvous": {"port": port}}}
        assert with_free_rendezvous_port(chosen, validate_job(chosen), held) == chosen


def test_a_port_another_kuberl_run_reserved_is_not_taken_though_nothing_listens_on_it_yet(tmp_path, monkeypatch):
    """Two runs started together both found the default port free before either's rank 0 bound it: the second's
    failed EADDRINUSE. The first run's reservation (a lock held while it runs) moves the second's default port on,
    and refuses a port the second chose, naming the run that holds it; once the first ends, the port is free again."""
    import contextlib
    import os

    from kuberl.core.rules import validate_job
    from kuberl.local.runner import reserve_port, with_free_rendezvous_port
    from kuberl.local.sandbox import LocalRunError

    from tests.support.ports import free_port

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    default = make_job("j").env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).obj()
    port = free_port()  # the default port, as a free one: this machine's 29500 may be another test's
    spec = validate_job(default).model_copy(update={"rendezvous": validate_job(default).rendezvous.model_copy(update={"port": port})})
    with contextlib.ExitStack() as first:
        assert reserve_port(port, first) is None
        with contextlib.ExitStack() as second:
            moved = with_free_rendezvous_port(default, spec, second)
            assert moved["spec"]["rendezvous"]["port"] > port
            chosen = {**default, "spec": {**default["spec"], "rendezvous": {"port": port}}}
            with pytest.raises(LocalRunError, match=f"port {port} is taken by another kuberl run here \\(pid {os.getpid()}\\)"):
                with_free_rendezvous_port(chosen, validate_job(chosen), second)
    with contextlib.ExitStack() as later:
        assert with_free_rendezvous_port(default, spec, later) is default


def test_a_one_pod_custom_job_gets_a_free_rendezvous_port_too():
    """One pod of the user's command may still listen on MASTER_PORT (init_process_group, torchrun's store):
    a port another run held failed it EADDRINUSE. kuberl's own trainer of one process forms no group."""
    from kuberl.local.runner import meets_at_master_port

    template = {"spec": {"containers": [{"name": "trainer", "command": ["python", "t.py"]}]}}
    assert meets_at_master_port(make_job().custom_trainer(template).workers(1).spec())
    assert meets_at_master_port(make_job().workers(2).spec())
    assert not meets_at_master_port(make_job().workers(1).spec())
