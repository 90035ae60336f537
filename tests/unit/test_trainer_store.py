"""Rank 0's rendezvous store listens on its loopback address alone under `kuberl run`.

TCPStore binds every interface whatever host it is given; `rendezvous_store` (loopback_server) hands it a socket bound
to MASTER_ADDR first. The whole local run is checked with `ss -ltn` in tests/e2e/test_local_run.py."""

from __future__ import annotations

import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from kuberl_trainer.distributed import (
    BadEnvironment,
    PeerLost,
    check_in,
    check_in_key,
    rendezvous_store,
    rendezvous_timed_out,
)

from tests.support.ports import free_port

TIMEOUT = timedelta(seconds=10)


def test_the_store_listens_on_the_masters_loopback_address_and_serves_clients():
    port = free_port()
    store, listener = rendezvous_store("127.0.0.7", str(port), 0, 1, TIMEOUT)  # 1: no wait for other ranks
    try:
        assert listener.getsockname() == ("127.0.0.7", port)
        store.set("k", "v")
        client, no_listener = rendezvous_store("127.0.0.7", str(port), 1, 2, TIMEOUT)
        assert (client.get("k"), no_listener) == (b"v", None)
        for elsewhere in ("127.0.0.8", "127.0.0.1"):  # not on another address of this machine
            with socket.socket() as probe:
                probe.settimeout(2)
                assert probe.connect_ex((elsewhere, port)) != 0, elsewhere
    finally:
        listener.close()


def test_under_torchrun_rank_0_is_a_client_of_its_agents_store(monkeypatch):
    port = free_port()
    agent = dist.TCPStore("127.0.0.1", port, 2, is_master=True, timeout=TIMEOUT, wait_for_workers=False)
    agent.set("k", "agent's")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    store, listener = rendezvous_store("127.0.0.1", str(port), 0, 2, TIMEOUT)
    assert (store.get("k"), listener) == (b"agent's", None)


def test_a_master_port_that_is_no_port_is_a_configuration_error():
    with pytest.raises(BadEnvironment, match="MASTER_PORT='not a port'"):
        rendezvous_store("127.0.0.7", "not a port", 0, 2, TIMEOUT)


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

    def init_process_group(backend, rank, world_size, timeout, store, device_id):
        attempts.append(backend)
        if len(attempts) == 1:  # what torch raises when no peer reached the store in time
            raise dist.DistStoreError("Timed out after 11 seconds waiting for clients. 1/2 clients joined.")

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(distributed, "check_in", lambda *_args: None)  # no peer here: tests/distributed has real ones
    monkeypatch.setattr(distributed.time, "sleep", lambda _seconds: None)
    with distributed.process_group("gloo", collective_timeout_seconds=10, rendezvous_timeout_seconds=3) as ctx:
        assert ctx.world_size == 2
    assert len(attempts) == 2


def test_the_rendezvous_message_names_the_ranks_that_never_joined_and_how_long_it_waited():
    assert rendezvous_timed_out(600.04, 4, [1, 3]).startswith("rendezvous: ranks 1, 3 of 4 never joined in 600.0s")
    assert rendezvous_timed_out(3, 2, [1]).startswith("rendezvous: rank 1 of 2 never joined in 3.0s")
    assert "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 and 4 more of 21" in rendezvous_timed_out(1, 21, list(range(20)))
    assert rendezvous_timed_out(1, 8, None).startswith("rendezvous: not every rank of 8 joined in 1.0s")


def test_check_in_waits_for_every_rank_until_the_rendezvous_deadline_alone():
    """The store's own timeout is the collective one (long): the wait is the deadline's."""
    port = free_port()
    store, listener = rendezvous_store("127.0.0.7", str(port), 0, 3, timedelta(minutes=30))
    try:
        peer, _ = rendezvous_store("127.0.0.7", str(port), 2, 3, TIMEOUT)
        peer.set(check_in_key(2), "1")
        started = time.monotonic()
        with pytest.raises(PeerLost, match=r"rank 1 of 3 never joined in 0\.[0-9]s"):
            check_in(store, 0, 3, started + 0.5, started)
        assert time.monotonic() - started < 5
        peer.set(check_in_key(1), "1")
        check_in(store, 0, 3, time.monotonic() + 5, started)  # everyone is here: returns at once
    finally:
        listener.close()


def test_backend_nccl_where_torch_sees_no_cuda_fails_at_once_naming_the_field(monkeypatch):
    """spec.rendezvous.backend nccl on a machine without GPUs: every rank refuses before the
    store (no rank waits for a peer until the rendezvous deadline), naming the field to change;
    the gpusPerWorker advice that a missing GPU among several gets would not help here."""
    from kuberl_trainer import distributed

    port = free_port()
    for rank in ("0", "1"):
        for name, value in {"RANK": rank, "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                            "MASTER_ADDR": "127.0.0.7", "MASTER_PORT": str(port)}.items():
            monkeypatch.setenv(name, value)
        started = time.monotonic()
        with pytest.raises(BadEnvironment, match=r"^spec.rendezvous.backend: nccl needs a CUDA device per process, "
                                                 r"but torch \S+ sees none here"), \
                distributed.process_group("nccl", collective_timeout_seconds=30, rendezvous_timeout_seconds=30):
            pass
        assert time.monotonic() - started < 5
        with socket.socket() as probe:  # rank 0 hosted no store
            probe.settimeout(2)
            assert probe.connect_ex(("127.0.0.7", port)) != 0


def test_a_gpu_rank_binds_the_gpu_its_local_rank_names_before_it_joins_the_nccl_group(monkeypatch):
    """Rank 6 of 8 (the second pod of two, 4 GPUs each, LOCAL_RANK 2) through the real store path: cuda:2,
    set as the current device before init_process_group (NCCL binds to it), backend auto choosing NCCL.
    This machine has no GPU: only torch.cuda's answers are stood in for; tests/gpu runs them on one GPU."""
    from kuberl_trainer import distributed

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(dist, "init_process_group",
                        lambda backend, rank, world_size, timeout, store, device_id:
                        calls.append(("init", backend, rank, world_size, device_id)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append(("destroy",)))
    port = free_port()
    rank_0 = dist.TCPStore("127.0.0.1", port, 8, is_master=True, timeout=TIMEOUT, wait_for_workers=False)
    for rank in (0, 1, 2, 3, 4, 5, 7):  # every other rank has checked in
        rank_0.set(check_in_key(rank), "1")
    for name, value in {"RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    with distributed.process_group("auto", collective_timeout_seconds=10, rendezvous_timeout_seconds=10) as ctx:
        assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.device, ctx.backend) == (6, 8, 2, torch.device("cuda", 2), "nccl")
    # device_id: NCCL's communicator formed in init_process_group, on cuda:2 (barrier and object collectives use it)
    assert calls == [("set_device", torch.device("cuda", 2)), ("init", "nccl", 6, 8, torch.device("cuda", 2)), ("destroy",)]
    assert rank_0.check([check_in_key(6)])


def test_nccl_failing_to_form_its_communicator_is_a_lost_peer_at_once_not_a_rendezvous_retried_to_its_deadline(monkeypatch):
    """init_process_group(device_id=...) forms NCCL's communicator there, after every rank checked in: its failure
    (DistBackendError: a peer's GPU fell off the bus, NCCL cannot reach a peer) ended the rendezvous only at its
    deadline, retried once a second as a store not yet up. As in the test above, only torch.cuda and NCCL's
    init are stood in for (a CPU build has neither); gloo's errors keep the retry (tests/distributed)."""
    from kuberl_trainer import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    attempts = []

    def init_process_group(backend, rank, world_size, timeout, store, device_id):
        attempts.append(device_id)
        raise dist.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp:1234, remote process exited or there was a network error")

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(distributed, "check_in", lambda *_args: None)
    port = free_port()
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.7", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(PeerLost, match=r"^rendezvous: NCCL could not form the group on cuda:1: NCCL error in: "
                                       r"ProcessGroupNCCL.cpp:1234, remote process exited"), \
            distributed.process_group("auto", rendezvous_timeout_seconds=30):
        pass
    assert attempts == [torch.device("cuda", 1)] and time.monotonic() - started < 5


@pytest.mark.parametrize("in_a_pod", [False, True])
def test_rank_0_whose_rendezvous_port_another_process_holds_fails_at_once_naming_the_port(monkeypatch, in_a_pod):
    """Another process (a sidecar, another run) bound MASTER_PORT: rank 0 retried hosting its store until
    rendezvousTimeoutSeconds (600 s by default) while its gang held every GPU, to fail as 'rendezvous did not
    complete'. Now it ends at once, retryable, saying the port is taken. `in_a_pod`: torch's TCPStore binds the
    port itself (no loopback MASTER_ADDR), and says EADDRINUSE in its own words."""
    from kuberl_trainer import distributed

    port = free_port()
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "MASTER_ADDR": "127.0.0.7", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    if in_a_pod:
        monkeypatch.setattr(distributed, "loopback_server", lambda *_args, **_kwargs: None)
    with socket.create_server(("0.0.0.0", port), reuse_port=False):
        started = time.monotonic()
        with pytest.raises(RuntimeError) as failed, distributed.process_group("gloo", rendezvous_timeout_seconds=8):
            pass
        assert time.monotonic() - started < 4, f"retried until the rendezvous timeout: {failed.value}"
    assert type(failed.value).__name__ == "RendezvousPortTaken", "retryable: the gang restarts (exit 1)"
    assert str(failed.value).startswith(f"rendezvous port {port} on 127.0.0.7 (MASTER_PORT, spec.rendezvous.port) is taken")
