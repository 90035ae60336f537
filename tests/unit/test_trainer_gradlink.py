"""gradlink: the fused steps' gradient sum over direct sockets. Ranks are
threads here, joined by socket pairs (the real processes and gloo's side by
side are in tests/distributed/test_ddp.py)."""

import contextlib
import socket
import threading
import time

import pytest
import torch
from kuberl_trainer import gradlink


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        return server.accept()[0], client


def star(world_size: int) -> list[dict[int, socket.socket]]:
    """Each rank's peers as open_link leaves them: rank 0 one socket per rank, the others one to rank 0."""
    peers: list[dict[int, socket.socket]] = [{} for _ in range(world_size)]
    for rank in range(1, world_size):
        peers[0][rank], peers[rank][0] = tcp_pair()
    return peers


def run_ranks(world_size: int, body, timeout: float = 5.0, busy_poll_seconds: float = gradlink.BUSY_POLL_SECONDS):
    """body(rank, link) on one thread per rank; each rank's result or exception."""
    links = [gradlink.GradientLink(r, world_size, p, timeout, busy_poll_seconds) for r, p in enumerate(star(world_size))]
    results: list[object] = [None] * world_size

    def target(rank: int) -> None:
        try:
            results[rank] = body(rank, links[rank])
        except Exception as e:  # noqa: BLE001 - any failure is the test's to report
            results[rank] = e

    threads = [threading.Thread(target=target, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for link in links:
        link.close()
    return results


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("numel", [9155, 67586])  # PPO's and DQN's CartPole gradients (DQN's over a socket buffer)
def test_every_rank_gets_the_same_bits_the_rank_order_sum(world_size, numel):
    grads = [[torch.randn(numel, generator=torch.Generator().manual_seed(100 * s + r)) for r in range(world_size)]
             for s in range(3)]

    def body(rank, link):
        out = []
        for sync in range(3):
            flat = grads[sync][rank].clone()
            assert link.sum_(flat) is flat
            out.append(flat)
        return out

    results = run_ranks(world_size, body)
    for sync in range(3):
        expected = grads[sync][0].clone()
        for r in range(1, world_size):
            expected += grads[sync][r]  # rank order, as gloo's result is one order's too
        for r in range(world_size):
            assert torch.equal(results[r][sync], expected), (sync, r)


def test_an_empty_tensor_is_an_empty_sum_not_a_closed_peer():
    def body(rank, link):
        empty = torch.empty(0)
        link.sum_(empty)
        return link.sum_(torch.full((3,), float(rank)))

    assert all(torch.equal(r, torch.full((3,), 1.0)) for r in run_ranks(2, body))


def test_a_peer_that_leaves_is_a_lost_link_not_a_hang():
    def body(rank, link):
        if rank == 1:
            link.close()
            return None
        started = time.monotonic()
        with pytest.raises(gradlink.LinkLost, match="closed|reset|Broken|sync 1"):
            link.sum_(torch.ones(1000))
        return time.monotonic() - started

    waited = run_ranks(2, body, timeout=30)[0]
    assert not isinstance(waited, Exception) and waited < 5, waited


@pytest.mark.parametrize("busy_poll_seconds", [0.0, 0.01])  # blocking in poll() at once, and after polling
def test_a_silent_peer_is_a_lost_link_at_the_collective_timeout(busy_poll_seconds):
    def body(rank, link):
        if rank == 1:
            time.sleep(1.0)  # says nothing
            return None
        started = time.monotonic()
        with pytest.raises(gradlink.LinkLost, match="timeout of 0.3s"):
            link.sum_(torch.ones(10))
        return time.monotonic() - started

    waited = run_ranks(2, body, timeout=0.3, busy_poll_seconds=busy_poll_seconds)[0]
    assert not isinstance(waited, Exception) and 0.3 <= waited < 1.0, waited


def test_ranks_out_of_step_fail_loudly_instead_of_adding_the_wrong_floats():
    """A rank summing a different tensor (another size, or a sync the other
    skipped) must not have its bytes read as the other's gradient."""
    def body(rank, link):
        mine, theirs = (40, 44) if rank == 0 else (44, 40)
        with pytest.raises(gradlink.LinkLost, match=f"out of step: expected sync 1 of {mine} bytes, got sync 1 of {theirs}"):
            link.sum_(torch.ones(mine // 4))

    assert run_ranks(2, body, timeout=2) == [None, None]


def test_the_transport_setting():
    assert gradlink.check_transport(None) == gradlink.check_transport("") == "direct"
    assert gradlink.check_transport("gloo") == "gloo"
    assert gradlink.check_transport("tcp") == "tcp"
    with pytest.raises(ValueError, match="KUBERL_GRADIENT_TRANSPORT='nccl': expected one of direct, tcp, gloo"):
        gradlink.check_transport("nccl")
    assert gradlink.wanted(2, "gloo", "tcp")
    assert gradlink.wanted(2, "gloo", "direct") and gradlink.wanted(gradlink.MAX_LINK_RANKS, "gloo", "direct")
    assert not gradlink.wanted(1, "gloo", "direct")  # no process group at all
    assert not gradlink.wanted(gradlink.MAX_LINK_RANKS + 1, "gloo", "direct")  # gloo's ring beats a star there
    assert not gradlink.wanted(2, "nccl", "direct")  # GPU tensors: NCCL
    assert not gradlink.wanted(2, "gloo", "gloo")


def hello(port: int, rank: int, token: bytes, magic: bytes = gradlink.MAGIC) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(gradlink.HELLO.pack(magic, rank, token))
    return sock


def test_rank_0_links_only_the_gangs_ranks_and_a_stranger_cannot_stall_it():
    """Who may join (rank 0's accept_peers): the token from the process group,
    a rank of the gang not linked yet. A wrong token, a wrong magic, a rank
    outside the gang, a second rank 1 and a connection that says nothing are
    closed; the silent one costs nothing (every hello is heard at once)."""
    token = b"t" * 16
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    strangers = [socket.create_connection(("127.0.0.1", port)),  # silent
                 hello(port, 1, b"x" * 16), hello(port, 1, token, magic=b"HTTP"), hello(port, 3, token)]
    real = [hello(port, 1, token), hello(port, 1, token), hello(port, 2, token)]  # the second rank 1 is an impostor
    started = time.monotonic()
    peers = gradlink.accept_peers(server, token, 3, time.monotonic() + 10)
    took = time.monotonic() - started
    assert sorted(peers) == [1, 2] and took < 1.0, took
    for sock in [*strangers[1:], real[1]]:  # closed unheard: the stranger reads EOF
        sock.settimeout(5)
        assert sock.recv(1) == b""
    for sock in [*strangers, *real, *peers.values(), server]:
        sock.close()


def test_a_stranger_saying_a_byte_now_and_then_costs_at_most_hello_seconds():
    """HELLO_SECONDS bounded each read, not the hello: a byte every second kept rank 0 on one stranger until
    the setup deadline, and the gang fell back to gloo."""
    token = b"t" * 16
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    dripper = socket.create_connection(("127.0.0.1", port))
    stop = threading.Event()

    def drip():
        for byte in gradlink.HELLO.pack(gradlink.MAGIC, 1, b"x" * 16):
            if stop.wait(0.5):
                return
            with contextlib.suppress(OSError):
                dripper.send(bytes([byte]))

    threading.Thread(target=drip, daemon=True).start()
    real = hello(port, 1, token)
    started = time.monotonic()
    peers = gradlink.accept_peers(server, token, 2, time.monotonic() + 8)
    took = time.monotonic() - started
    stop.set()
    assert sorted(peers) == [1] and took < 1.0, took
    for sock in [dripper, real, *peers.values(), server]:
        sock.close()


def test_many_silent_strangers_do_not_queue_the_gang_behind_them():
    """Six connections that say nothing, made before the ranks: heard one at a
    time for HELLO_SECONDS each, they used up the 10 s setup and the gang kept
    gloo. Heard at once, the ranks link in well under a second, and each
    stranger is closed after its own HELLO_SECONDS."""
    token = b"t" * 16
    server = socket.create_server(("127.0.0.1", 0), backlog=32)
    port = server.getsockname()[1]
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
    real = [hello(port, 1, token), hello(port, 2, token)]
    started = time.monotonic()
    peers = gradlink.accept_peers(server, token, 3, time.monotonic() + 10)
    assert sorted(peers) == [1, 2] and time.monotonic() - started < 1.0
    for sock in silent:  # not kept open past the setup
        sock.settimeout(5)
        assert sock.recv(1) == b""
    for sock in [*silent, *real, *peers.values(), server]:
        sock.close()


def test_rank_0_gives_up_at_the_deadline_when_a_rank_never_comes():
    server = socket.create_server(("127.0.0.1", 0))
    peer = hello(server.getsockname()[1], 1, b"k" * 16)
    started = time.monotonic()
    peers = gradlink.accept_peers(server, b"k" * 16, 3, time.monotonic() + 0.5)
    assert sorted(peers) == [1] and time.monotonic() - started < 2
    for sock in [peer, *peers.values(), server]:
        sock.close()


# --- through shared memory (ranks of one machine) ---------------------------------------------


@pytest.fixture
def shared_dir(tmp_path, monkeypatch):
    """SHARED_DIR in a test directory, so a test never touches the machine's /dev/shm."""
    monkeypatch.setattr(gradlink, "SHARED_DIR", str(tmp_path))
    if not gradlink.shared_memory_possible():
        pytest.skip("shared memory is x86-64 only (its sync numbers rely on total store order)")
    return tmp_path


def attached(body):
    """body(rank, link) after every rank attached the shared mapping; body gets (attached, result)."""
    def run(rank, link):
        ok = link.attach_shared_memory(b"k" * 16)
        return ok, body(rank, link)
    return run


@pytest.mark.parametrize("world_size", [2, 3])
def test_shared_memory_sums_are_the_rank_order_sum_and_leave_no_file(shared_dir, world_size):
    grads = [[torch.randn(67586, generator=torch.Generator().manual_seed(10 * s + r)) for r in range(world_size)]
             for s in range(4)]

    def body(rank, link):
        assert link.shared is not None
        out = [link.sum_(grads[s][rank].clone()) for s in range(4)]  # both parities, twice
        counters = link.sum_(torch.tensor([1.0, float(rank)], dtype=torch.float64))
        return out, counters

    results = run_ranks(world_size, attached(body))
    assert [ok for ok, _ in results] == [True] * world_size
    for s in range(4):
        expected = grads[s][0].clone()
        for r in range(1, world_size):
            expected += grads[s][r]
        for _, (out, _) in results:
            assert torch.equal(out[s], expected)
    for _, (_, counters) in results:
        assert counters.tolist() == [world_size, sum(range(world_size))]
    assert list(shared_dir.iterdir()) == []  # rank 0 removed the name once everyone had it mapped


def test_a_sum_larger_than_a_slot_goes_over_tcp_on_every_rank(shared_dir, monkeypatch):
    monkeypatch.setattr(gradlink, "SHARED_SLOT_BYTES", 4096)

    def body(rank, link):
        return link.sum_(torch.full((2048,), float(rank + 1))), link.sum_(torch.full((8,), float(rank + 1)))

    for ok, (large, small) in run_ranks(2, attached(body)):
        assert ok and torch.equal(large, torch.full((2048,), 3.0)) and torch.equal(small, torch.full((8,), 3.0))


def test_over_shared_memory_a_peer_that_leaves_is_a_lost_link(shared_dir):
    def body(rank, link):
        if rank == 1:
            link.close()
            return None
        started = time.monotonic()
        with pytest.raises(gradlink.LinkLost, match="closed"):
            link.sum_(torch.ones(100))
        return time.monotonic() - started

    (_, waited), _ = run_ranks(2, attached(body), timeout=30)
    assert not isinstance(waited, Exception) and waited < 5, waited


def test_over_shared_memory_ranks_out_of_step_fail_loudly(shared_dir):
    def body(rank, link):
        with pytest.raises(gradlink.LinkLost, match="out of step"):
            link.sum_(torch.ones(10 if rank == 0 else 11))

    assert [r for _, r in run_ranks(2, attached(body), timeout=2)] == [None, None]


def test_a_mapping_that_is_not_the_gangs_is_not_used(shared_dir):
    """Rank 1 finds a file under the name that does not hold the gang's token
    (or cannot open it): no rank uses shared memory, the sums go over TCP."""
    real_map = gradlink._map

    def forged(path, size, token, create):
        if not create:
            raise ValueError(f"{path} is not this gang's")
        return real_map(path, size, token, create)

    gradlink._map = forged
    try:
        results = run_ranks(2, attached(lambda rank, link: (link.shared, link.sum_(torch.full((4,), 1.0)))))
    finally:
        gradlink._map = real_map
    for ok, (shared, summed) in results:
        assert ok is False and shared is None and torch.equal(summed, torch.full((4,), 2.0))
    assert list(shared_dir.iterdir()) == []


def test_a_mapping_name_taken_already_is_never_opened_through(shared_dir):
    """Made exclusively and never through a symlink: a name planted first
    (the token is random, so only by someone who knows it) is refused."""
    token = b"t" * 16
    planted = shared_dir / f"kuberl-gradients-{token.hex()}"
    target = shared_dir / "elsewhere"
    target.write_bytes(b"")
    planted.symlink_to(target)
    with pytest.raises(OSError):
        gradlink._map(str(planted), gradlink.SharedSlots.size(2), token, create=True)
    with pytest.raises(OSError):
        gradlink._map(str(planted), gradlink.SharedSlots.size(2), token, create=False)
    assert target.read_bytes() == b""


def test_a_peer_lost_while_attaching_leaves_no_file_and_no_mapping(shared_dir):
    """Rank 0 made the mapping's name, then rank 1 went before saying whether
    it mapped it: rank 0 raises LinkLost and removes the name (left behind, it
    held 2 x ranks MiB of /dev/shm until the machine restarted)."""
    def body(rank, link):
        if rank == 1:
            link.close()
            return None
        with pytest.raises(gradlink.LinkLost):
            link.attach_shared_memory(b"k" * 16)
        return link.shared

    assert run_ranks(2, body, timeout=5) == [None, None]
    assert list(shared_dir.iterdir()) == []


def test_a_full_shared_directory_leaves_no_file_and_the_sums_go_over_tcp(shared_dir, monkeypatch):
    """posix_fallocate failing (a full /dev/shm, the case it is there for) left the name it had just made."""
    import errno

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gradlink.os, "posix_fallocate", full)
    for ok, summed in run_ranks(2, attached(lambda rank, link: link.sum_(torch.full((4,), 1.0)))):
        assert ok is False and torch.equal(summed, torch.full((4,), 2.0))
    assert list(shared_dir.iterdir()) == []


def test_rank_0_gone_after_making_the_mapping_is_cleaned_up_by_the_rank_that_sees_it_go(shared_dir):
    """Rank 0 killed between making the name and removing it (an OOM kill, say): the other rank, lost
    in setup, removes it."""
    token = b"k" * 16

    def body(rank, link):
        if rank == 0:  # what a kill leaves: the name made, the connections closed
            path = shared_dir / f"kuberl-gradients-{token.hex()}"
            gradlink._map(str(path), gradlink.SharedSlots.size(2), token, create=True).close()
            link.close()
            return
        with pytest.raises(gradlink.LinkLost):
            link.attach_shared_memory(token)

    assert run_ranks(2, body, timeout=5) == [None, None]
    assert list(shared_dir.iterdir()) == []
