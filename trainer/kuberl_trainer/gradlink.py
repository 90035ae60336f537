"""The fused steps' gradient sum over direct TCP connections, driven by the
training thread itself.

Why not gloo's all-reduce for this one sync: a fused CartPole step computes
for ~0.7 ms, then sums ~9k (PPO) or ~68k (DQN) floats with the other ranks,
20 or 128 times an update. Gloo hands each all-reduce from the calling thread
to a worker thread, which sends; the peer's event-loop thread wakes on the
socket and hands the data to its worker, which wakes the caller: four thread
hand-offs a sync. Between two idle ranks that is 0.08 ms; between two
training ones (whose gloo threads have gone to sleep between syncs) 0.24-0.34
ms, plus gloo's threads' own CPU on the rank's core (bench/sync_wait.py). Here
the thread that computed the gradient sends it and polls for the peers' on
non-blocking sockets: 0.013 ms idle, 0.026 ms between training ranks, on
the same machine (bench/sync_wait.py).

Shape: a star through rank 0, for at most MAX_LINK_RANKS ranks. With two
ranks each sends its gradient to the other and adds the one it receives;
with more, rank 0 receives every gradient, adds them in rank order and sends
the sum back. Either way every rank ends with the same bits (float addition
is commutative, and one order is used), as with gloo. Larger gangs, other
devices and KUBERL_GRADIENT_TRANSPORT=gloo keep gloo.

Who may connect: rank 0 listens on an ephemeral port of the address the gang
reaches it by (MASTER_ADDR) and hands port and a fresh random token to the
other ranks through the process group; a connection that does not present
the token and a rank not yet linked is closed unheard. Every message carries
its sync number and size, so ranks out of step fail loudly instead of adding
the wrong floats; a peer that leaves or stays silent past the collective
timeout raises PeerLost, as a gloo collective would.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import select
import socket
import struct
import time

import torch

MAX_LINK_RANKS = 8  # rank 0 moves 2 x (ranks - 1) gradients a sync: beyond a few ranks, gloo's ring wins
TRANSPORT_ENV = "KUBERL_GRADIENT_TRANSPORT"  # "gloo" keeps every sync in gloo
HELLO = struct.Struct("!4sI16s")  # magic, rank, token
MAGIC = b"KRG1"
HEADER = struct.Struct("!QQ")  # sync number, payload bytes
HELLO_SECONDS = 2.0  # how long an accepted connection may take to say who it is
SETUP_SECONDS = 10.0  # how long rank 0 waits for every rank to connect before the gang keeps gloo
# How long a sync polls its sockets before it blocks in poll(): ranks in step arrive within it
# (a PPO step's sync waits ~0.1 ms), and a late peer costs a wake-up (~0.03 ms) rather than a core
# held or handed away: a thread that sched_yield()s gives a busier neighbour its core until the next
# scheduler tick, where one woken from poll() preempts it.
BUSY_POLL_SECONDS = 0.0002


class LinkLost(RuntimeError):
    """A peer left, stayed silent past the timeout or fell out of step."""


def check_transport(transport: str | None) -> str:
    """KUBERL_GRADIENT_TRANSPORT's value: 'direct' (the default) or 'gloo'."""
    if transport in (None, ""):
        return "direct"
    if transport not in ("direct", "gloo"):
        raise ValueError(f"environment variable {TRANSPORT_ENV}={transport[:64]!r}: expected 'direct' or 'gloo'")
    return transport


def wanted(world_size: int, backend: str | None, transport: str) -> bool:
    """Whether a gang sums its fused gradients over the link: CPU (gloo)
    gangs of 2..MAX_LINK_RANKS ranks, unless the environment asks for gloo."""
    return backend == "gloo" and 2 <= world_size <= MAX_LINK_RANKS and transport == "direct"


def _tune(sock: socket.socket) -> socket.socket:
    """No Nagle delay; non-blocking. Socket buffers stay the kernel's: setting
    them turns off its autotuning, which grows them past a DQN gradient's
    270 KB where net.core.rmem_max would cap a request."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    return sock


class _Transfer:
    """One message in flight on one socket, moved a piece at a time: a header
    (sync number, size) then the payload. A received header must equal the
    one this rank expects, or the ranks are out of step."""

    def __init__(self, sock: socket.socket, header: bytes, payload: memoryview, receive: bool):
        self.sock, self.expected, self.receiving = sock, header, receive
        self.header = bytearray(header) if receive else header
        self.parts, self.done = [memoryview(self.header)] + ([payload] if len(payload) else []), 0
        self.header_pending = True

    @property
    def finished(self) -> bool:
        return not self.parts

    def step(self) -> bool:
        """Move what the socket takes or holds now, header and payload in one
        system call; whether anything moved."""
        buffers = [self.parts[0][self.done:], *self.parts[1:]]
        try:
            if self.receiving:
                moved = self.sock.recvmsg_into(buffers)[0]
                if moved == 0:
                    raise ConnectionResetError("the peer closed the connection")
            else:
                moved = self.sock.sendmsg(buffers)
        except (BlockingIOError, InterruptedError):
            return False
        self.done += moved
        while self.parts and self.done >= len(self.parts[0]):
            self.done -= len(self.parts[0])
            self.parts.pop(0)
            if self.header_pending:
                self.header_pending = False
                if self.receiving and bytes(self.header) != self.expected:
                    (sync, size), (got_sync, got_size) = HEADER.unpack(self.expected), HEADER.unpack(bytes(self.header))
                    raise LinkLost(f"ranks out of step: expected sync {sync} of {size} bytes, "
                                   f"got sync {got_sync} of {got_size} bytes")
        return moved > 0


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.numpy().view("B").reshape(-1))


class GradientLink:
    """Sums a flat float tensor across the gang in place, over connected
    sockets: `peers[r]` is the socket to rank r (rank 0 holds one per other
    rank; the others hold only peers[0])."""

    def __init__(self, rank: int, world_size: int, peers: dict[int, socket.socket],
                 timeout_seconds: float, busy_poll_seconds: float):
        self.rank, self.world_size, self.peers = rank, world_size, {r: _tune(s) for r, s in peers.items()}
        self.timeout_seconds, self.busy_poll_seconds = timeout_seconds, busy_poll_seconds
        self.syncs = 0
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}

    def _buffer(self, peer: int, like: torch.Tensor) -> torch.Tensor:
        key = (peer, like.numel())
        if key not in self._buffers:
            self._buffers[key] = torch.empty_like(like)
        return self._buffers[key]

    def sum_(self, flat: torch.Tensor) -> torch.Tensor:
        """`flat` (a contiguous CPU float tensor) becomes the sum of every
        rank's, the same bits on every rank."""
        self.syncs += 1
        mine = _as_bytes(flat)
        header = HEADER.pack(self.syncs, mine.nbytes)

        def send(rank: int) -> _Transfer:
            return _Transfer(self.peers[rank], header, mine, receive=False)

        def receive(rank: int, into: torch.Tensor) -> _Transfer:
            return _Transfer(self.peers[rank], header, _as_bytes(into), receive=True)

        try:
            if self.world_size == 2:  # one exchange; each adds the other's
                peer = 1 - self.rank
                theirs = self._buffer(peer, flat)
                self._move([send(peer), receive(peer, theirs)])
                flat.add_(theirs)
            elif self.rank == 0:  # gather, add in rank order, send the sum back
                parts = {r: self._buffer(r, flat) for r in sorted(self.peers)}
                self._move([receive(r, part) for r, part in parts.items()])
                for part in parts.values():
                    flat.add_(part)
                self._move([send(r) for r in sorted(self.peers)])
            else:
                self._move([send(0)])
                self._move([receive(0, flat)])
        except OSError as e:
            raise LinkLost(f"gradient link, sync {self.syncs}: {e}") from e
        return flat

    def _move(self, transfers: list[_Transfer]) -> None:
        """Every transfer to its end: poll them all while nothing moves, for
        busy_poll_seconds, then block in poll() until something can; past the
        collective timeout, give up."""
        started = time.monotonic()
        while True:
            moved = False
            for transfer in transfers:
                if not transfer.finished:
                    moved |= transfer.step()
            pending = [t for t in transfers if not t.finished]
            if not pending:
                return
            if moved:
                continue
            waited = time.monotonic() - started
            if waited > self.timeout_seconds:
                raise LinkLost(f"no word from a peer within the collective timeout of {self.timeout_seconds:g}s")
            if waited >= self.busy_poll_seconds:  # poll(), not select(): a trainer may hold descriptors past 1024
                events: dict[int, int] = {}
                for t in pending:  # one socket may both send and receive
                    events[t.sock.fileno()] = events.get(t.sock.fileno(), 0) | (select.POLLIN if t.receiving else select.POLLOUT)
                poller = select.poll()
                for fd, mask in events.items():
                    poller.register(fd, mask)
                poller.poll(1000 * min(1.0, self.timeout_seconds - waited))

    def close(self) -> None:
        for sock in self.peers.values():
            with contextlib.suppress(OSError):
                sock.close()
        self.peers = {}


# --- Setting it up: collective, over the process group ----------------------


def _listen(master_addr: str, backlog: int) -> socket.socket:
    """A listening socket on an ephemeral port of the address the gang knows
    rank 0 by (only loopback under `kuberl run`); every address when that one
    is not this host's (a Service's virtual IP)."""
    with contextlib.suppress(OSError):
        for family, _, _, _, address in socket.getaddrinfo(master_addr, 0, type=socket.SOCK_STREAM):
            with contextlib.suppress(OSError):
                return socket.create_server((address[0], 0), family=family, backlog=backlog)
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", 0), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True)
    return socket.create_server(("", 0), backlog=backlog)


def _read_hello(conn: socket.socket, deadline: float) -> tuple[bytes, int, bytes] | None:
    """An accepted connection's (magic, rank, token), or None if it says less in time."""
    data = b""
    while len(data) < HELLO.size:
        remaining = min(HELLO_SECONDS, deadline - time.monotonic())
        if remaining <= 0:
            return None
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(HELLO.size - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return HELLO.unpack(data)


def accept_peers(server: socket.socket, token: bytes, world_size: int, deadline: float) -> dict[int, socket.socket]:
    """Rank 0's side: connections until every other rank has said hello with
    the token, or the deadline. Anything else is closed unheard."""
    peers: dict[int, socket.socket] = {}
    while len(peers) < world_size - 1:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        server.settimeout(remaining)
        try:
            conn, _ = server.accept()
        except OSError:  # the deadline passed
            break
        hello = _read_hello(conn, deadline)
        if (hello is not None and hello[0] == MAGIC and hmac.compare_digest(hello[2], token)
                and 0 < hello[1] < world_size and hello[1] not in peers):
            conn.settimeout(None)
            peers[hello[1]] = conn
        else:
            conn.close()
    return peers


def open_link(rank: int, world_size: int, master_addr: str, timeout_seconds: float, busy_poll_seconds: float,
              setup_seconds: float | None = None) -> GradientLink | None:
    """Connect the gang (every rank calls this, after init_process_group):
    rank 0 listens and hands port and token to the others through the process
    group; they connect. None on every rank when any of them failed (a
    network that refuses the port): the gang then keeps gloo."""
    import torch.distributed as dist  # the process group exists by now

    server, peers, token = None, {}, secrets.token_bytes(16)
    if rank == 0:
        with contextlib.suppress(OSError):
            server = _listen(master_addr, backlog=world_size + 8)
        port = server.getsockname()[1] if server else 0
        offer = torch.frombuffer(bytearray(struct.pack("!H", port) + token), dtype=torch.uint8).clone()
    else:
        offer = torch.zeros(2 + len(token), dtype=torch.uint8)
    dist.broadcast(offer, src=0)
    port, token = struct.unpack("!H", offer[:2].numpy().tobytes())[0], offer[2:].numpy().tobytes()
    setup_seconds = SETUP_SECONDS if setup_seconds is None else setup_seconds
    deadline = time.monotonic() + setup_seconds
    if rank == 0:
        if server is not None:
            with server:
                peers = accept_peers(server, token, world_size, deadline)
        linked = len(peers) == world_size - 1
    else:
        linked = False
        if port:
            with contextlib.suppress(OSError):
                sock = socket.create_connection((master_addr, port), timeout=setup_seconds)
                try:
                    sock.sendall(HELLO.pack(MAGIC, rank, token))
                except OSError:
                    sock.close()
                    raise
                peers, linked = {0: sock}, True
    everyone = torch.tensor([int(linked)], dtype=torch.int64)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)
    if not int(everyone):
        for sock in peers.values():
            sock.close()
        return None
    return GradientLink(rank, world_size, peers, timeout_seconds, busy_poll_seconds)
