"""Free TCP ports for servers a test starts in another process.

A port taken from bind(port 0) lies in the kernel's ephemeral range, the range
every connect() and every other bind(port 0) on the machine draws from too:
between the test closing its probe and the server binding, gloo's
connections, the gradient link's listener or a scrape may take it (CI run of
stop 23: a rank's metrics server failed with EADDRINUSE). So ports come from
below that range, where the kernel never numbers a socket on its own, and one
test process never hands out the same port twice. Under pytest-xdist each
worker draws from its own slice of that range, so two workers never hand out
the same port either.
"""

from __future__ import annotations

import os
import random
import socket

_FLOOR = 10_000  # above the well-known and registered ports a developer's machine may run
_handed_out: set[int] = set()
_pick = random.Random()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it chooses (ip(7), ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port: int) -> bool:
    """Free on every address: rank 0's store and `kuberl run` listen on 0.0.0.0."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def worker_slice(floor: int, ceiling: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of [floor, ceiling) (all of it outside xdist):
    the workers are separate processes, so `_handed_out` cannot keep them apart."""
    worker, workers = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and workers.isdigit()):
        return floor, ceiling
    share = (ceiling - floor) // int(workers)
    start = floor + int(worker[2:]) * share
    return start, start + share


def free_ports(count: int = 1) -> int:
    """A base port with `count` consecutive ports after it, all free now,
    below the ephemeral range and never handed out before by this process."""
    low, high = ephemeral_range()
    floor, ceiling = (_FLOOR, low - count) if low - count > _FLOOR else (high + 1, 65536 - count)
    floor, ceiling = worker_slice(floor, ceiling)
    for _ in range(500):
        base = _pick.randrange(floor, ceiling)
        ports = range(base, base + count)
        if _handed_out.isdisjoint(ports) and all(_bindable(port) for port in ports):
            _handed_out.update(ports)
            return base
    raise RuntimeError(f"no {count} consecutive free ports between {floor} and {ceiling}")


def free_port() -> int:
    return free_ports(1)
