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
non-blocking sockets: 0.022 ms idle, about 0.1 ms between training ranks, on
the same machine (bench/sync_wait.py --transport tcp).

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

Ranks of one machine (`kuberl run`, or one pod's processes when they are
the whole gang) that see the same /dev/shm pass the floats through shared
memory instead (SharedSlots): each rank copies its gradient into its own
slot, publishes the sync number, and every rank adds all slots in rank
order. The kernel's socket path touched ~0.8 MB of memory per DQN sync and
left the next gradient step to run on cold caches. A 2-rank update's learning
phase (`make bench`, section 4) takes 17.1 ms through shared memory, 19.2
over TCP and 23.5 over gloo for PPO; 84, 126 and 201 ms for DQN. The TCP
connections stay: they tell a rank at once that a peer is gone.
"""

from __future__ import annotations

import contextlib
import hmac
import mmap
import os
import platform
import secrets
import select
import socket
import struct
import threading
import time

import numpy as np
import torch

MAX_LINK_RANKS = 8  # rank 0 moves 2 x (ranks - 1) gradients a sync: beyond a few ranks, gloo's ring wins
TRANSPORT_ENV = "KUBERL_GRADIENT_TRANSPORT"  # "gloo" keeps every sync in gloo, "tcp" the link off shared memory
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
SHARED_DIR = "/dev/shm"
SHARED_SLOT_BYTES = 1 << 20  # per rank and parity: sums up to 262,144 floats (DQN CartPole's: 67,586); larger ones go over TCP
SHARED_HEADER_BYTES = 4096  # the token, then each rank's sync line
SYNC_LINE_BYTES = 64  # one cache line per rank: its sync number and its payload size per parity
SHARED_SLEEP_SECONDS = 0.00005  # between looks at a late peer's sync number, past the busy poll


class LinkLost(RuntimeError):
    """A peer left, stayed silent past the timeout or fell out of step."""


TRANSPORTS = ("direct", "tcp", "gloo")  # direct: the link, through shared memory where the gang can; tcp: never


def check_transport(transport: str | None) -> str:
    """KUBERL_GRADIENT_TRANSPORT's value: 'direct' (the default), 'tcp' or 'gloo'."""
    if transport in (None, ""):
        return "direct"
    if transport not in TRANSPORTS:
        raise ValueError(f"environment variable {TRANSPORT_ENV}={transport[:64]!r}: expected one of {', '.join(TRANSPORTS)}")
    return transport


def wanted(world_size: int, backend: str | None, transport: str) -> bool:
    """Whether a gang sums its fused gradients over the link: CPU (gloo)
    gangs of 2..MAX_LINK_RANKS ranks, unless the environment asks for gloo."""
    return backend == "gloo" and 2 <= world_size <= MAX_LINK_RANKS and transport != "gloo"


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


def _map(path: str, size: int, token: bytes, create: bool) -> mmap.mmap:
    """The shared mapping at `path`: made (exclusively, 0600, every byte
    reserved) and stamped with the token, or opened and its token checked."""
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.posix_fallocate(fd, 0, size)
            os.pwrite(fd, token, 0)
        elif os.fstat(fd).st_size != size or os.pread(fd, len(token), 0) != token:
            raise ValueError(f"{path} is not this gang's")
        return mmap.mmap(fd, size)
    except BaseException:
        if create:  # made here (a full /dev/shm fails fallocate): not left behind
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    finally:
        os.close(fd)


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.numpy().view("B").reshape(-1))


def shared_memory_possible() -> bool:
    """Where a sync number published after the floats is seen after them by
    plain loads and stores: x86-64's total store order (with the fence of
    SharedSlots for any weakly ordered store). Elsewhere (arm64) the floats
    go over TCP."""
    return platform.machine().lower() in ("x86_64", "amd64") and os.path.isdir(SHARED_DIR)


class SharedSlots:
    """The gang's slots in one shared mapping: a sync line per rank (its sync
    number, then the payload size it wrote for each parity) and, for each
    parity of the sync number, one slot per rank. A rank writes sync k into
    its slot of parity k % 2: by the time it writes sync k + 2 there, every
    peer has published k + 1, which each does only after reading sync k."""

    def __init__(self, mapping: mmap.mmap, rank: int, world_size: int):
        self.mapping, self.rank, self.world_size = mapping, rank, world_size
        lines = np.frombuffer(mapping, dtype=np.int64, count=world_size * SYNC_LINE_BYTES // 8,
                              offset=SHARED_HEADER_BYTES - world_size * SYNC_LINE_BYTES)
        self.lines = lines.reshape(world_size, SYNC_LINE_BYTES // 8)  # [sync, size of parity 0, size of parity 1, ...]
        self.slots = torch.frombuffer(mapping, dtype=torch.uint8, offset=SHARED_HEADER_BYTES,
                                      count=2 * world_size * SHARED_SLOT_BYTES).view(2, world_size, SHARED_SLOT_BYTES)
        # Acquiring and releasing a lock is a locked instruction: it orders every store before it
        # (non-temporal ones, which a large copy may use, included) before every store after it.
        self._fence = threading.Lock()
        self._views: dict[tuple[int, torch.dtype, int], list[torch.Tensor]] = {}

    def views(self, parity: int, dtype: torch.dtype, numel: int) -> list[torch.Tensor]:
        """Each rank's slot of `parity` as `numel` elements of `dtype`, made once
        (a view costs a few microseconds, a PPO sync ~25 in all)."""
        key = (parity, dtype, numel)
        if key not in self._views:
            nbytes = numel * torch.empty(0, dtype=dtype).element_size()
            self._views[key] = [self.slots[parity, r, :nbytes].view(dtype) for r in range(self.world_size)]
        return self._views[key]

    @staticmethod
    def size(world_size: int) -> int:
        return SHARED_HEADER_BYTES + 2 * world_size * SHARED_SLOT_BYTES

    def fence(self) -> None:
        with self._fence:
            pass

    def close(self) -> None:
        self._views.clear()
        del self.lines, self.slots
        with contextlib.suppress(BufferError, ValueError):  # a view still held elsewhere: the mapping goes with it
            self.mapping.close()


class GradientLink:
    """Sums a flat float tensor across the gang in place, over connected
    sockets: `peers[r]` is the socket to rank r (rank 0 holds one per other
    rank; the others hold only peers[0])."""

    def __init__(self, rank: int, world_size: int, peers: dict[int, socket.socket],
                 timeout_seconds: float, busy_poll_seconds: float):
        self.rank, self.world_size, self.peers = rank, world_size, {r: _tune(s) for r, s in peers.items()}
        self.timeout_seconds, self.busy_poll_seconds = timeout_seconds, busy_poll_seconds
        self.syncs = 0
        self.shared: SharedSlots | None = None  # set by attach_shared_memory
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
        if self.shared is not None and flat.numel() * flat.element_size() <= SHARED_SLOT_BYTES:
            return self._sum_shared(flat)
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

    def _sum_shared(self, flat: torch.Tensor) -> torch.Tensor:
        shared, sync, nbytes = self.shared, self.syncs, flat.numel() * flat.element_size()
        parity = sync % 2
        slots = shared.views(parity, flat.dtype, flat.numel())
        slots[self.rank].copy_(flat)
        shared.lines[self.rank, 1 + parity] = nbytes
        shared.fence()  # the floats and their size before the sync number
        shared.lines[self.rank, 0] = sync
        self._wait_shared(sync)
        for r in range(self.world_size):
            line = shared.lines[r]
            if line[0] > sync + 1 or line[1 + parity] != nbytes:
                raise LinkLost(f"ranks out of step: sync {sync} of {nbytes} bytes here, rank {r} at sync "
                               f"{int(line[0])} with {int(line[1 + parity])} bytes")
        if self.world_size == 2:  # a + b is b + a, bit for bit: add the other's to this rank's own
            flat.add_(slots[1 - self.rank])
        else:  # rank order, on every rank: the same bits everywhere
            torch.add(slots[0], slots[1], out=flat)
            for part in slots[2:]:
                flat.add_(part)
        return flat

    def _wait_shared(self, sync: int) -> None:
        """Until every rank has published `sync`: polled for busy_poll_seconds,
        then looked at every SHARED_SLEEP_SECONDS, each time asking the TCP
        connections whether a peer has gone (nothing else travels on them)."""
        lines, started = self.shared.lines, time.monotonic()
        while (lines[:, 0] < sync).any():
            waited = time.monotonic() - started
            if waited < self.busy_poll_seconds:
                continue
            if waited > self.timeout_seconds:
                raise LinkLost(f"no word from a peer within the collective timeout of {self.timeout_seconds:g}s")
            for sock in self.peers.values():
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        raise LinkLost(f"gradient link, sync {sync}: the peer closed the connection")
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as e:
                    raise LinkLost(f"gradient link, sync {sync}: {e}") from e
            time.sleep(SHARED_SLEEP_SECONDS)
        self.shared.fence()

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
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        for sock in self.peers.values():
            with contextlib.suppress(OSError):
                sock.close()
        self.peers = {}

    def attach_shared_memory(self, token: bytes) -> bool:
        """Collective, over the link itself: rank 0 creates a mapping in
        SHARED_DIR named by the gang's token (created exclusively, its memory
        reserved up front, so a full /dev/shm fails here and not as SIGBUS
        later) and writes the token into it; every other rank opens it and
        checks the token; rank 0 removes the name once all have it mapped.
        Every rank uses it only if every rank could (one machine, one /dev/shm)."""
        path = os.path.join(SHARED_DIR, f"kuberl-gradients-{token.hex()}")
        size, mapping, named = SharedSlots.size(self.world_size), None, False
        try:
            created = torch.zeros(self.world_size, dtype=torch.int64)
            if self.rank == 0 and shared_memory_possible():
                with contextlib.suppress(OSError):
                    mapping = _map(path, size, token, create=True)
                    named = True
                    created[0] = 1
            self.sum_(created)
            mapped = torch.zeros(self.world_size, dtype=torch.int64)
            if self.rank != 0 and created[0] and shared_memory_possible():
                with contextlib.suppress(OSError, ValueError):
                    mapping = _map(path, size, token, create=False)
            mapped[self.rank] = int(mapping is not None)
            self.sum_(mapped)
        except BaseException:
            # A peer lost mid-setup: the name must not outlive the gang in /dev/shm (it holds
            # 2 x ranks MiB until the machine restarts), nor the mapping this rank. Any rank removes
            # it: rank 0 may be the one that went (killed between making and removing it).
            if mapping is not None:
                mapping.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        finally:
            if named:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if int(mapped.sum()) != self.world_size:
            if mapping is not None:
                mapping.close()
            return False
        self.shared = SharedSlots(mapping, self.rank, self.world_size)
        return True


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


MAX_PENDING_HELLOS = 64  # connections heard at once; past that, the oldest is dropped


def accept_peers(server: socket.socket, token: bytes, world_size: int, deadline: float) -> dict[int, socket.socket]:
    """Rank 0's side: connections until every other rank has said hello with
    the token, or the deadline. Every pending connection is heard at once
    (a selector), each for at most HELLO_SECONDS and HELLO.size bytes, so
    silent or slow strangers cannot queue the gang's ranks behind them; a
    wrong hello is closed."""
    import selectors

    peers: dict[int, socket.socket] = {}
    pending: dict[socket.socket, tuple[bytearray, float]] = {}  # connection -> (hello so far, its own deadline)
    with selectors.DefaultSelector() as selector:
        server.setblocking(False)
        selector.register(server, selectors.EVENT_READ)

        def drop(conn: socket.socket) -> None:
            selector.unregister(conn)
            pending.pop(conn, None)
            conn.close()

        while len(peers) < world_size - 1:
            now = time.monotonic()
            for conn, (_, until) in list(pending.items()):
                if now >= until:
                    drop(conn)
            if now >= deadline:
                break
            wake = min([deadline, *(until for _, until in pending.values())])
            for key, _ in selector.select(max(0.0, wake - now)):
                if key.fileobj is server:
                    with contextlib.suppress(BlockingIOError, InterruptedError):
                        conn, _ = server.accept()
                        conn.setblocking(False)
                        if len(pending) >= MAX_PENDING_HELLOS:
                            drop(next(iter(pending)))
                        pending[conn] = (bytearray(), min(deadline, time.monotonic() + HELLO_SECONDS))
                        selector.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                data, _ = pending[conn]
                try:
                    chunk = conn.recv(HELLO.size - len(data))
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    drop(conn)
                    continue
                data += chunk
                if len(data) < HELLO.size:
                    continue
                magic, rank, offered = HELLO.unpack(bytes(data))
                if magic == MAGIC and hmac.compare_digest(offered, token) and 0 < rank < world_size and rank not in peers:
                    selector.unregister(conn)
                    del pending[conn]
                    conn.setblocking(True)
                    peers[rank] = conn
                else:
                    drop(conn)
        for conn in list(pending):
            drop(conn)
    return peers


def open_link(rank: int, world_size: int, master_addr: str, timeout_seconds: float, busy_poll_seconds: float,
              setup_seconds: float | None = None, shared_memory: bool = True) -> GradientLink | None:
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
    link = GradientLink(rank, world_size, peers, timeout_seconds, busy_poll_seconds)
    if shared_memory:
        try:
            link.attach_shared_memory(token)
        except BaseException:
            link.close()  # its sockets: the caller never holds a link to close
            raise
    return link
