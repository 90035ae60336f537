"""Rank 0's rendezvous store listens on its loopback address alone under `kuberl run`.

TCPStore binds every interface whatever host it is given; `loopback_store` hands it a socket bound
to MASTER_ADDR first. The whole local run is checked with `ss -ltn` in tests/e2e/test_local_run.py."""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist
from kuberl_trainer.distributed import loopback_store

from tests.support.ports import free_port

TIMEOUT = timedelta(seconds=10)


def test_the_store_listens_on_the_masters_loopback_address_and_serves_clients():
    port = free_port()
    store, listener = loopback_store("127.0.0.7", str(port), 1, TIMEOUT)  # 1: no wait for other ranks
    try:
        assert listener.getsockname() == ("127.0.0.7", port)
        store.set("k", "v")
        client = dist.PrefixStore("default_pg", dist.TCPStore("127.0.0.7", port, is_master=False, timeout=TIMEOUT))
        assert client.get("k") == b"v"  # where init_process_group's env:// store puts a group's keys
        for elsewhere in ("127.0.0.8", "127.0.0.1"):  # not on another address of this machine
            with socket.socket() as probe:
                probe.settimeout(2)
                assert probe.connect_ex((elsewhere, port)) != 0, elsewhere
    finally:
        listener.close()


def test_elsewhere_torch_hosts_the_store_as_before(monkeypatch):
    assert loopback_store("10.1.2.3", "29500", 2, TIMEOUT) is None  # a cluster pod's own network namespace
    assert loopback_store("127.0.0.7", "not a port", 2, TIMEOUT) is None  # init_process_group reports it
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")  # under torchrun its agent hosts the store
    assert loopback_store("127.0.0.7", str(free_port()), 2, TIMEOUT) is None


def test_rank_0_hosts_its_store_again_when_an_attempt_at_the_rendezvous_fails(monkeypatch):
    """Rank 0 retries the rendezvous until its deadline, but the store of the failed attempt (its peer had not come
    within the store's wait: a pod started late, a rank frozen) still held the port: every retry failed with
    EADDRINUSE and the gang could not meet until the deadline ended it (bench/chaos.py, rank-freeze)."""
    from kuberl_trainer import distributed

    port = free_port()
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "MASTER_ADDR": "127.0.0.7", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    attempts = []

    def init_process_group(backend, rank, world_size, timeout, store):
        attempts.append(backend)
        if len(attempts) == 1:  # what torch raises when no peer reached the store in time
            raise dist.DistStoreError("Timed out after 11 seconds waiting for clients. 1/2 clients joined.")

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(distributed.time, "sleep", lambda _seconds: None)
    with distributed.process_group("gloo", collective_timeout_seconds=10, rendezvous_timeout_seconds=3) as ctx:
        assert ctx.world_size == 2
    assert len(attempts) == 2
