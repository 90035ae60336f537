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
