"""The tests' port picker: a server started later in another process must still find its port free."""

import socket

from tests.support import ports


def test_ports_lie_below_the_kernels_ephemeral_range_and_are_never_handed_out_twice():
    low, high = ports.ephemeral_range()
    assert 1024 <= low <= high <= 65535
    handed = []
    for _ in range(50):
        base = ports.free_ports(3)
        handed.extend(range(base, base + 3))
        assert base + 3 <= low  # bind(port 0) and connect() never number a socket here
    assert len(handed) == len(set(handed))


def test_a_port_any_server_holds_is_skipped(monkeypatch):
    held_port = ports.free_port()
    after = list(range(held_port - 1, held_port - 50, -1))
    ports._handed_out.difference_update({held_port, *after})  # as if another process had picked them
    candidates = iter([held_port, *after])

    class FirstTheHeldPort:
        def randrange(self, start, stop):
            return next(candidates)

    monkeypatch.setattr(ports, "_pick", FirstTheHeldPort())
    with socket.socket() as server:
        server.bind(("127.0.0.1", held_port))
        picked = ports.free_ports(1)
    assert picked != held_port and picked in after


def test_each_xdist_worker_draws_from_its_own_slice(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for n in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
        slices.append(ports.worker_slice(10_000, 30_000))
    assert slices == [(10_000, 15_000), (15_000, 20_000), (20_000, 25_000), (25_000, 30_000)]
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    low, high = ports.worker_slice(ports._FLOOR, ports.ephemeral_range()[0] - 2)
    assert all(low <= ports.free_ports(2) < high for _ in range(20))
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports.worker_slice(10_000, 30_000) == (10_000, 30_000)
