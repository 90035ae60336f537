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
