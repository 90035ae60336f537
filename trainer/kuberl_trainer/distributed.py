"""Distributed plumbing: the process group from the environment contract,
threads and device per rank, and the few collectives the trainer needs.

World size 1 skips the process group entirely (no port, no store), so many
one-worker jobs can share a machine. Every collective failure surfaces as
`PeerLost`, which the entry point turns into a quick retryable exit.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import threadpoolctl
import torch
import torch.distributed as dist
from kuberl.core import contract

from .startup import import_in_background

# How long a gradient all-reduce's caller yields in a loop before it blocks: a rank that yields
# is running when its sync completes, one that blocked must be woken first (PPO update with 2
# ranks, bench/sync_wait.py: 15.2-15.7 ms yielding, 16.5-16.7 blocking). A peer later than
# this is imbalance, not wake-up latency: block then.
GRADIENT_SPIN_SECONDS = 0.01


class PeerLost(RuntimeError):
    """A collective failed or timed out: a peer died or hangs."""


class BadEnvironment(ValueError):
    """An environment variable the trainer reads holds what it cannot use
    (set in spec.template, or by a launcher): a configuration error."""


class RendezvousPortTaken(RuntimeError):
    """Rank 0 cannot host the rendezvous store: another process holds MASTER_PORT. Retryable (it may free up),
    but not by waiting out the rendezvous timeout: no retry of this process binds a port another holds."""


CGROUP_ROOT = "/sys/fs/cgroup"  # a container's own cgroup files (memory.max, cpu.max; v1: memory/, cpu/)


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str | None  # None: a single process, no process group
    sync_yield_seconds: float = 0.0  # all_reduce_gradient's yielding wait (yield_window)
    cgroup: str = CGROUP_ROOT  # where this process's cgroup files are read (its memory limit: budget)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise BadEnvironment(f"environment variable {name}={value[:64]!r}: expected an integer") from None


def omp_threads(value: str | None, default: int) -> int:
    """OMP_NUM_THREADS as OpenMP reads it: a count, or a comma-separated list
    of counts per nesting level ("4,2"), whose first is the outer level's. Up to
    int64's most: the kubelet renders a pod's limits.cpu through the downward API
    as an int64, so a limit of 1e999 cores reads 9223372036854775807, a count
    `placement` bounds by the CPUs the rank may run on (it was refused, and the
    job crash-looped on a spec the API server had taken)."""
    if value in (None, ""):
        return default
    first = value.split(",")[0].strip()
    if not first.isdigit() or len(first) > 19 or not 1 <= int(first) < 2**63:  # 19 digits: int() stays cheap
        raise BadEnvironment(f"environment variable OMP_NUM_THREADS={value[:64]!r}: expected a positive integer "
                             f"or a comma-separated list of them (OpenMP's threads per nesting level)")
    return int(first)


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    return "nccl" if torch.cuda.is_available() else "gloo"


@dataclass(frozen=True)
class Placement:
    """Where one process of a pod computes (placement()): its device, torch's intra-op threads, and
    the CPUs it runs on; `split` when those are its own slice of the pod's set."""

    device: torch.device
    threads: int
    cpus: tuple[int, ...]
    split: bool

    @property
    def device_id(self) -> torch.device | None:
        """init_process_group's device_id: the rank's GPU under NCCL (its communicator formed at once,
        on that GPU; barrier and object collectives use it), None for gloo (which refuses a CPU one)."""
        return self.device if self.device.type == "cuda" else None


def placement(backend: str, local_rank: int, local_world_size: int, visible_gpus: int, cpu_limit: int,
              allowed: Iterable[int]) -> Placement:
    """Where process `local_rank` of a pod of `local_world_size` computes, from what the pod gives it:
    the CUDA devices it sees (`visible_gpus`: the device plugin's, numbered from 0 inside the
    container, or every GPU of a machine that hides none), its CPU limit (OMP_NUM_THREADS, rendered
    from limits.cpu) and the CPUs it may run on (its affinity, the kubelet's cpuset). Pure.

    Under NCCL the rank's GPU is its LOCAL_RANK among those it sees (cuda_device). Its CPU limit is
    split into torch threads, limit / processes each (at least 1, never more than CPUs to run on), so
    the ranks of a pod never oversubscribe it. CPU ranks sharing a pod also take a slice of its CPUs
    each: in its own slice a rank's gloo threads wake on the core its training thread yields while it
    waits for a sync (all_reduce_gradient), never on another rank's busy core (with gloo's event loop
    calmed, calm_gloo_loop, a PPO update measures about the same either way: bench/sync_wait.py with
    and without --separate-pods). One process per pod keeps the whole set, and so do GPU ranks: NCCL
    places its own threads near each GPU, and no GPU was here to measure a split against."""
    allowed = sorted(allowed)
    if backend == "nccl":
        if visible_gpus == 0:  # only a spec's explicit nccl gets here: auto picks gloo without CUDA
            raise BadEnvironment(
                f"spec.rendezvous.backend: nccl needs a CUDA device per process, but torch {torch.__version__} sees "
                f"none here (a CPU build of torch, or no GPU on this machine): use auto (gloo without CUDA) or gloo")
        device = cuda_device(local_rank, local_world_size, visible_gpus)
    else:
        device = torch.device("cpu")
    threads = min(len(allowed), max(1, cpu_limit // max(1, local_world_size)))
    split = (backend != "nccl" and local_world_size > 1 and len(allowed) >= local_world_size
             and 0 <= local_rank < local_world_size)
    if not split:
        return Placement(device, threads, tuple(allowed), False)
    share = len(allowed) // local_world_size
    mine = tuple(allowed[local_rank * share:(local_rank + 1) * share])
    return Placement(device, min(threads, len(mine)), mine, True)


def pin_threads(where: Placement, task_dir: str = "/proc/self/task") -> int:
    """This process takes `where`'s CPUs (its slice, where split) and torch thread count; a sandbox
    that forbids setting the affinity keeps the whole set. Returns the thread count. The slice is set
    on every thread already running, not only the calling one (Linux's affinity is a thread's):
    numpy's import starts OpenBLAS's workers, OMP_NUM_THREADS - 1 of them, and they kept the pod's
    whole set; threads started later inherit the slice. numpy's BLAS takes the same thread count as
    torch (blas_threads)."""
    if where.split:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, where.cpus)
            try:
                others = [int(tid) for tid in os.listdir(task_dir) if tid.isdigit()]
            except OSError:  # no /proc (another OS, a locked-down sandbox): the calling thread's alone
                others = []
            for tid in others:
                with contextlib.suppress(OSError):  # it ended meanwhile
                    os.sched_setaffinity(tid, where.cpus)
    torch.set_num_threads(where.threads)
    blas_threads(where.threads)
    with contextlib.suppress(RuntimeError):  # only settable before first use
        torch.set_num_interop_threads(1)
    return where.threads


def blas_threads(threads: int | None = None) -> dict[str, int]:
    """numpy's BLAS threads, per BLAS library loaded (threadpoolctl, which scikit-learn and joblib use for
    this), after setting them to `threads` where given. OpenBLAS sizes its pool from OMP_NUM_THREADS when
    numpy is imported: the pod's whole limit, not the rank's share (placement's threads), so each rank of a
    2-CPU pod of 2 processes split a (20, 256) by (256, 256) product (DQN's greedy evaluation of 20
    episodes) between two threads on its one core: 38 ms a product instead of 0.04 ms on one thread (3.3 ms
    with the worker left on the other rank's core, before pin_threads set every thread's slice; 2-core
    machine at load average 9)."""
    if threads is not None:
        threadpoolctl.threadpool_limits(limits=threads, user_api="blas")  # kept: not used as a context manager
    return {info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"}


def cpu_quota_cores(cpu_max: str | None, cfs_quota_us: str | None = None, cfs_period_us: str | None = None) -> float | None:
    """The container's CPU limit in cores from its cgroup files (v2 cpu.max:
    "QUOTA PERIOD" or "max PERIOD"; v1 cpu.cfs_quota_us, -1 for none, and
    cpu.cfs_period_us), or None when there is none or the text is not that."""
    try:
        if cpu_max is not None:
            quota, period = cpu_max.split()
            if quota == "max":
                return None
        elif cfs_quota_us is not None and cfs_period_us is not None:
            quota, period = cfs_quota_us, cfs_period_us
        else:
            return None
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None  # v1 writes -1 for none


def yield_window(quota_cores: float | None, local_world_size: int) -> float:
    """How long a rank yields its core while waiting for a gradient sync
    (GRADIENT_SPIN_SECONDS), or 0 (block at once) when its container's CPU
    quota gives each of its processes less than a whole core: time spent
    yielding counts against the quota its computation needs."""
    if quota_cores is not None and quota_cores / max(1, local_world_size) < 1:
        return 0.0
    return GRADIENT_SPIN_SECONDS


def read_cpu_quota(root: str = CGROUP_ROOT) -> float | None:
    def text(path: str) -> str | None:
        try:
            with open(os.path.join(root, path)) as f:
                return f.read().strip()
        except OSError:
            return None

    return cpu_quota_cores(text("cpu.max"), text("cpu/cpu.cfs_quota_us"), text("cpu/cpu.cfs_period_us"))


# gloo's TCP event loop thread (one per device; torch names it) handles a socket's event only
# if it gets the pair's lock at once (gloo's Pair::handleEvents, try_to_lock); if not, epoll
# hands it the same event again and it spins. Woken onto the core of the gloo worker holding
# that lock, it preempted the worker and spun until the next scheduler tick let the worker
# finish: 4 ms lost in about 1 sync in 5 here (bench/sync_wait.py). A SCHED_BATCH thread
# never preempts on waking, keeps its share of the CPU, and needs no privilege.
GLOO_LOOP_THREAD = "gloo_tcp_loop"


def threads_named(name: str, task_dir: str = "/proc/self/task") -> list[int]:
    """Ids of this process's threads whose name (comm) is `name`; none where
    there is no readable /proc (another OS, a locked-down sandbox)."""
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    found = []
    for tid in tids:
        with contextlib.suppress(OSError), open(os.path.join(task_dir, tid, "comm")) as f:  # OSError: it ended meanwhile
            if f.read().strip() == name:
                found.append(int(tid))
    return found


def calm_gloo_loop() -> int:
    """Make gloo's event loop threads SCHED_BATCH (see GLOO_LOOP_THREAD);
    returns how many were changed (0 where the kernel refuses or a torch
    names them otherwise: the old behaviour)."""
    changed = 0
    if not hasattr(os, "SCHED_BATCH"):  # not Linux
        return changed
    for tid in threads_named(GLOO_LOOP_THREAD):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            changed += 1
    return changed


def _wait_for_master(addr: str, deadline: float) -> None:
    """Rank 0's DNS name may resolve only once its pod exists: retry."""
    while True:
        try:
            socket.getaddrinfo(addr, None)
            return
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def tcp_port(text: str | None) -> int | None:
    """A TCP port number from an environment value, or None when it is not one."""
    if not (text and text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) < 65536):
        return None
    return int(text)


def wait_for_store(addr: str, port_text: str | None, deadline: float, poll_seconds: float = 0.01) -> bool:
    """Until rank 0's rendezvous store accepts a connection, probing its port
    every poll_seconds. torch's own client backs off ~0.5 s after a refused
    connect, so a rank up before rank 0 slept through the store's start
    (a 2-rank rendezvous took 0.1-0.5 s instead of 0.01). False at the
    deadline or for a port that is not one: init_process_group then reports."""
    port = tcp_port(port_text)
    if port is None:
        return False
    while True:
        try:
            with socket.create_connection((addr, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_seconds)


def loopback_server(master: str, port_text: str | None, world_size: int, timeout: timedelta,
                    multi_tenant: bool = False) -> tuple[dist.TCPStore, socket.socket] | None:
    """A rendezvous store's server listening on MASTER_ADDR alone, when that is a loopback address
    (`kuberl run`: each pod its own 127.x); None elsewhere (a cluster pod's own network namespace).
    TCPStore binds every interface whatever host it is given (`TCPStore('127.0.0.5', p,
    is_master=True)` listens on *:p), so anyone on the network could join or break a local run and,
    in deterministic mode, have rank 0 unpickle what it sends. A socket bound here first is handed
    over instead (master_listen_fd, which libuv's server does not take: torch owns and closes the
    duplicate it gets; the caller keeps the returned socket open for the store's life)."""
    port = tcp_port(port_text)
    if port is None:
        return None
    family, _, _, _, address = socket.getaddrinfo(master, port, type=socket.SOCK_STREAM)[0]
    if not ipaddress.ip_address(address[0]).is_loopback:
        return None
    listener = socket.create_server((address[0], port), family=family)
    try:
        store = dist.TCPStore(address[0], port, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                              multi_tenant=multi_tenant, master_listen_fd=os.dup(listener.fileno()), use_libuv=False)
    except BaseException:
        listener.close()
        raise
    return store, listener


def cuda_device(local_rank: int, local_world_size: int, visible: int) -> torch.device:
    """The GPU a rank computes on: its LOCAL_RANK among the devices its pod sees. A pod
    that sees fewer GPUs than it runs processes (a template's own limits, or `kuberl run`
    on a machine with fewer GPUs than the spec asks) is a configuration error naming the
    field, not an "invalid device ordinal" crash every restart meets again."""
    if local_rank >= visible:
        raise BadEnvironment(
            f"spec.gpusPerWorker: this pod runs {local_world_size} process(es), one per GPU, but sees {visible} "
            f"CUDA device(s) (LOCAL_RANK {local_rank}); give each pod as many GPUs as processes "
            f"(on one machine: kuberl run ... --set gpusPerWorker={visible})")
    return torch.device("cuda", local_rank)


# Where each rank checks in on the rendezvous store (apart from init_process_group's "default_pg/").
CHECK_IN_PREFIX = "kuberl_rendezvous"


def check_in_key(rank: int, agent_restart: str | None = None) -> str:
    """The store key a rank sets when it reaches the rendezvous; under torchrun each agent
    restart (TORCHELASTIC_RESTART_COUNT) keeps its own, should its store outlive a round."""
    return f"{CHECK_IN_PREFIX}/{agent_restart or 0}/rank/{rank}"


def rendezvous_timed_out(waited_seconds: float, world_size: int, missing: list[int] | None) -> str:
    """PeerLost's message when not every rank joined in time; `missing` None when unknowable
    (the store itself failed)."""
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (f" and {len(missing) - 16} more" if len(missing) > 16 else "")
        who = f"rank{'s' if len(missing) > 1 else ''} {shown} of {world_size} never joined"
    else:
        who = f"not every rank of {world_size} joined"
    return (f"rendezvous: {who} in {waited_seconds:.1f}s (runPolicy.rendezvousTimeoutSeconds; a rank that runs "
            f"but never joins is hung before its rendezvous, e.g. in CUDA set-up)")


def store_host(master: str, port_text: str | None) -> str:
    """Who hosts the rendezvous store every rank meets on, and where, for a message that says it is gone: rank 0, or
    under torchrun the launcher (agent) of worker 0's pod."""
    host = "worker 0's torchrun agent" if os.environ.get(contract.ENV_TORCH_AGENT_STORE) == "True" else "rank 0"
    return f"{host} (it hosts the rendezvous store at {master}:{port_text})"


def hosts_store(rank: int) -> bool:
    return rank == 0 and os.environ.get(contract.ENV_TORCH_AGENT_STORE) != "True"


@dataclass(frozen=True)
class Gang:
    """The store a formed process group met on, kept to say who left when a collective fails."""

    store: dist.Store
    rank: int
    world_size: int
    host: str  # store_host()
    prefix: str  # this round's keys (check_in_key's)

    @property
    def left_key(self) -> str:
        return f"{self.prefix}/left"

    @property
    def asked_key(self) -> str:
        return f"{self.prefix}/asked"


GANG: Gang | None = None  # while process_group's group exists
STORE_PROBE_SECONDS = 3.0  # a store whose host's machine vanished (no reset) would not answer for the collective timeout
STORE_LINGER_SECONDS = 2.0  # how long the store's host, failing, keeps it up for its peers to read who left
LEFT_MESSAGE_LIMIT = 200  # characters of a leaving rank's reason kept on the store


def _on_store(call, seconds: float = STORE_PROBE_SECONDS) -> tuple[bool, object]:
    """(answered, what `call()` returned or raised) within `seconds`, from a thread of its own: a store call has no
    timeout of its own short enough for a rank that is already failing."""
    result: list[tuple[bool, object]] = []

    def ask() -> None:
        try:
            result.append((True, call()))
        except Exception as e:  # noqa: BLE001 — the store failing is the answer
            result.append((False, e))

    asker = threading.Thread(target=ask, name="kuberl-store-probe", daemon=True)
    asker.start()
    asker.join(seconds)
    return result[0] if result else (False, TimeoutError(f"no answer in {seconds:g}s"))


def announce_leaving(gang: Gang | None, error: BaseException) -> None:
    """A rank ending on its own failure says so on the store, before its peers' collectives fail on its absence:
    their PeerLost then names it (who_left). Best effort, bounded: the store may be gone too."""
    if gang is None:
        return
    said = safe_line(f"{type(error).__name__}: {error}")[:LEFT_MESSAGE_LIMIT]
    _on_store(lambda: gang.store.append(gang.left_key, f"{gang.rank}\t{said}\n"))


def who_left(gang: Gang | None, error: BaseException) -> str:
    """PeerLost's message for a collective that failed with `error` (gloo's "Connection closed by peer [addr]:port"
    names an address, not a rank): the store's host gone when the store no longer answers; else the ranks that said
    they left (announce_leaving); else the error alone (collective_failure)."""
    line = collective_failure(error)
    if gang is None:
        return line
    cause = line.split(": another rank exited or was killed", 1)[0]  # the guess, where the cause is named instead

    def ask() -> bytes:
        said = gang.store.get(gang.left_key) if gang.store.check([gang.left_key]) else b""
        if not hosts_store(gang.rank):
            with contextlib.suppress(Exception):  # the store's host may go now (linger), before this call's answer comes
                gang.store.add(gang.asked_key, 1)
        return said

    answered, value = _on_store(ask)
    if not answered and not hosts_store(gang.rank):
        if isinstance(value, TimeoutError):  # no reset: its machine or network went, or the whole process hangs
            return f"{gang.host} is gone or hangs: the store did not answer in {STORE_PROBE_SECONDS:g}s; {cause}"
        return f"{gang.host} left: the store is gone; {cause}"
    if answered and value:
        left = []
        for entry in bytes(value).decode(errors="replace").splitlines():
            rank, _, said = entry.partition("\t")
            if rank.isdigit() and int(rank) != gang.rank:
                left.append(f"rank {rank} ({said})")
        if left:
            shown = ", ".join(left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
            return f"{shown} left first; {cause}"
    return line


def linger(gang: Gang | None) -> None:
    """The store's host, ending on a failure (its own, or a peer's it saw first), keeps the store up until every
    peer that has not said it left has asked who did (who_left), for at most STORE_LINGER_SECONDS: gone at once, it
    left its peers' messages saying only that it went, whoever went first (a peer blocked on a receive from it
    alone fails only once it goes)."""
    if gang is None or not hosts_store(gang.rank):
        return

    def accounted() -> int:  # peers that said they left (failing alike, as a ConfigError on every rank) or asked
        said = gang.store.get(gang.left_key) if gang.store.check([gang.left_key]) else b""
        leavers = {line.partition("\t")[0] for line in bytes(said).decode(errors="replace").splitlines()} - {str(gang.rank)}
        return len(leavers) + int(gang.store.add(gang.asked_key, 0))

    give_up = time.monotonic() + STORE_LINGER_SECONDS
    while time.monotonic() < give_up:
        answered, count = _on_store(accounted)
        if not answered or int(count) >= gang.world_size - 1:
            return
        time.sleep(0.02)


def safe_line(text: str) -> str:
    return " ".join(text.split())


def port_taken(error: BaseException) -> bool:
    """Whether binding a port failed because another socket holds it: Python's bind (loopback_server) says
    EADDRINUSE in errno, torch's TCPStore server in its message (c10d's socket.cpp: 'name: EADDRINUSE')."""
    return (isinstance(error, OSError) and error.errno == errno.EADDRINUSE) or "EADDRINUSE" in str(error)


def rendezvous_store(master: str, port_text: str | None, rank: int, world_size: int,
                     timeout: timedelta) -> tuple[dist.Store, socket.socket | None]:
    """The store every rank meets on, as init_process_group's env:// would make it (torch's
    _create_c10d_store): under torchrun every rank a client of its agent's; else rank 0 hosts it
    (on loopback alone where MASTER_ADDR is one: loopback_server) and the others are clients."""
    port = tcp_port(port_text)
    if port is None:
        raise BadEnvironment(f"environment variable {contract.ENV_MASTER_PORT}={(port_text or '')[:64]!r}: "
                             f"expected a TCP port")
    if rank == 0 and os.environ.get(contract.ENV_TORCH_AGENT_STORE) != "True":
        hosted = loopback_server(master, port_text, world_size, timeout)
        if hosted:
            return hosted
        return dist.TCPStore(master, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False), None
    return dist.TCPStore(master, port, world_size, is_master=False, timeout=timeout), None


def check_in(store: dist.Store, rank: int, world_size: int, deadline: float, waited_from: float,
             host: str | None = None) -> None:
    """Announce this rank on the store and wait, until the rendezvous deadline, for every rank to
    have announced itself; PeerLost naming the ranks that did not, or the store's `host` (store_host; None on
    the rank that hosts it) when the store itself stops answering. init_process_group's own wait for
    its peers lasts the collective timeout (the store's), 30 minutes by default, while a gang whose
    peer hung before joining holds every GPU with nothing to show."""
    agent_restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    store.set(check_in_key(rank, agent_restart), "1")
    keys = [check_in_key(r, agent_restart) for r in range(world_size)]
    try:
        store.wait(keys, timedelta(seconds=max(0.001, deadline - time.monotonic())))
    except (dist.DistError, RuntimeError) as e:
        missing = None
        with contextlib.suppress(dist.DistError, RuntimeError):  # the store may be gone too (rank 0 left)
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
        if missing is None and host is not None:  # the store no longer answers: its host left, whoever else is missing
            raise PeerLost(f"rendezvous: {host} left before every rank joined ({time.monotonic() - waited_from:.1f}s in): "
                           f"{collective_failure(e)}") from e
        message = rendezvous_timed_out(time.monotonic() - waited_from, world_size, missing)
        raise PeerLost(message if missing else f"{message}: {collective_failure(e)}") from e


@contextlib.contextmanager
def process_group(
    backend: str = "auto",
    collective_timeout_seconds: float = 1800,
    rendezvous_timeout_seconds: float = 600,
    background_imports: tuple[str, ...] = (),
) -> Iterator[Dist]:
    """Join the process group described by RANK/WORLD_SIZE/LOCAL_RANK/
    MASTER_ADDR/MASTER_PORT; always destroy it on the way out. Every rank
    joining is bounded by the rendezvous timeout (check_in), each
    collective afterwards by the collective timeout.

    `background_imports` start importing (startup.import_in_background) at once for one rank, and only
    once the group is formed for several: init_process_group reads torch._dynamo when its import has
    begun, and so waited for the whole import (two gloo ranks of a Pong job: 5 s of rendezvous)."""
    rank = _int_env(contract.ENV_RANK, 0)
    world_size = _int_env(contract.ENV_WORLD_SIZE, 1)
    local_rank = _int_env(contract.ENV_LOCAL_RANK, 0)
    local_world_size = _int_env(contract.ENV_LOCAL_WORLD_SIZE, _int_env(contract.ENV_NPROC_PER_NODE, 1))
    if world_size == 1:  # no group to form: the imports overlap setting the device too
        for module in background_imports:
            import_in_background(module)
    chosen = choose_backend(backend)
    where = placement(chosen, local_rank, local_world_size, torch.cuda.device_count() if chosen == "nccl" else 0,
                      omp_threads(os.environ.get("OMP_NUM_THREADS"), os.cpu_count() or 1), os.sched_getaffinity(0))
    device = where.device
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before the group: NCCL binds to it
    pin_threads(where)
    if world_size == 1:
        yield Dist(rank, 1, local_rank, local_world_size, device, None)
        return
    started = time.monotonic()
    deadline = started + rendezvous_timeout_seconds
    master = os.environ.get(contract.ENV_MASTER_ADDR, "127.0.0.1")
    port_text = os.environ.get(contract.ENV_MASTER_PORT)
    _wait_for_master(master, deadline)
    if rank != 0:  # rank 0 hosts the store
        wait_for_store(master, port_text, deadline)
    timeout = timedelta(seconds=collective_timeout_seconds)
    listener = None
    host = None if hosts_store(rank) else store_host(master, port_text)
    hosted_before = False  # a store of this process held the port: a later attempt may find it not yet released
    while True:
        reached = False  # the store answered this attempt
        try:
            left = timedelta(seconds=max(1.0, deadline - time.monotonic()))  # a client's connect retries this long
            try:
                store, listener = rendezvous_store(master, port_text, rank, world_size, left)
            except (RuntimeError, OSError) as e:
                if host is None and not hosted_before and port_taken(e):
                    raise RendezvousPortTaken(
                        f"rendezvous port {port_text} on {master} (MASTER_PORT, spec.rendezvous.port) is taken: another"
                        f" process or container holds it, so rank 0 cannot host the rendezvous store; choose another"
                        f" spec.rendezvous.port") from None
                raise
            hosted_before = host is None
            reached = True
            check_in(store, rank, world_size, deadline, started, host)
            store.set_timeout(timeout)  # everyone is here: from now on a wait is a collective's
            dist.init_process_group(chosen, rank=rank, world_size=world_size, timeout=timeout,
                                    store=dist.PrefixStore("default_pg", store),  # where env:// puts its keys
                                    device_id=where.device_id)
            break
        except (PeerLost, BadEnvironment, RendezvousPortTaken):
            if listener is not None:
                listener.close()
            raise
        except (RuntimeError, ValueError, OSError) as e:  # store not up yet, name flapping, port still held
            if listener is not None:
                listener.close()
            if chosen == "nccl" and isinstance(e, dist.DistBackendError):
                # device_id forms NCCL's communicator here (every rank has checked in): a failure is the gang's,
                # not the store's, and a second init_process_group in this process would not mend it
                raise PeerLost(f"rendezvous: NCCL could not form the group on {device}: {collective_failure(e)}") from e
            # the failed attempt's store serves the port until it is released: rank 0 could never host it again
            store = listener = None
            if time.monotonic() > deadline:
                waited = time.monotonic() - started
                if not reached and host is not None:  # rank 0 never answered: it never started, or left, or hangs
                    raise PeerLost(f"rendezvous: {host} did not answer for {waited:.1f}s (runPolicy.rendezvousTimeoutSeconds"
                                   f" {rendezvous_timeout_seconds}): it never started, or left: {e}") from e
                raise PeerLost(f"rendezvous did not complete in {waited:.1f}s "
                               f"(runPolicy.rendezvousTimeoutSeconds {rendezvous_timeout_seconds}): {e}") from e
            time.sleep(1.0)
    for module in background_imports:
        import_in_background(module)
    if chosen == "gloo":
        calm_gloo_loop()
    global GANG
    GANG = Gang(store, rank, world_size, host or store_host(master, port_text),
                f"{CHECK_IN_PREFIX}/{os.environ.get('TORCHELASTIC_RESTART_COUNT') or 0}")
    gang, failed = GANG, False
    try:
        yield Dist(rank, world_size, local_rank, local_world_size, device, chosen,
                   yield_window(read_cpu_quota(), local_world_size))
    except Exception as e:
        failed = True
        if not isinstance(e, PeerLost):  # its own failure, not the echo of a peer's: said before its peers see it gone
            announce_leaving(gang, e)
        raise
    finally:
        GANG = None
        with contextlib.suppress(Exception):  # a dead peer must not block exit
            dist.destroy_process_group()
        if failed:  # after the group is gone: a peer blocked on this rank alone fails now, and asks who left
            linger(gang)
        if listener is not None:
            listener.close()


@contextlib.contextmanager
def collectives() -> Iterator[None]:
    """Turn torch's collective errors (timeouts, closed connections) into PeerLost."""
    try:
        yield
    except PeerLost:
        raise
    except (dist.DistError, RuntimeError) as e:
        if isinstance(e, dist.DistError) or _looks_like_comm_error(e):
            raise PeerLost(who_left(GANG, e)) from e
        raise


# gloo's source location ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] ") and its
# advice, which ends in an emoji, reached the pod's termination message and the job's status verbatim
_SOURCE_LOCATION = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h|hpp|cu):\d+\]\s*")
_GLOO_ADVICE = " This is typically caused by a remote worker"  # "crashing." after a close, "hanging or bugs …" after a reset
_PEER_CLOSED = re.compile(r"^Connection closed by peer \[([^\]]*)\]:(\d+)")
_PEER_RESET = re.compile(r"^Read error \[([^\]]*)\]:(\d+): Connection reset by peer")  # a killed peer's socket, data unread


def collective_failure(e: BaseException) -> str:
    """A failed collective's error as one line a person reads: its first line, without the C++ source location
    and gloo's advice; a closed connection says what closes one."""
    text = str(e).splitlines()[0].strip() if str(e).strip() else type(e).__name__
    text = _SOURCE_LOCATION.sub("", text)
    text = text.split(_GLOO_ADVICE)[0].rstrip(". ") if _GLOO_ADVICE in text else text
    if closed := _PEER_CLOSED.match(text) or _PEER_RESET.match(text):
        return (f"a peer's connection closed ({closed[1]}:{closed[2]}): another rank exited or was killed; its own"
                " log, and the job's status, say why")
    return text


def _looks_like_comm_error(e: BaseException) -> bool:
    text = str(e).lower()
    return any(
        word in text
        for word in ("gloo", "nccl", "connection", "timed out", "timeout", "peer", "socket", "broken pipe")
    )


def take_rank0_parameters(ctx: Dist, flat: torch.Tensor) -> None:
    """What DDP's constructor does to a module (refuse differing parameter
    shapes across ranks, then broadcast rank 0's values), for the fused
    steps' one flat parameter vector, without constructing DDP: in torch 2.13
    its constructor imports torch._dynamo, 0.8 s of a CartPole run's start."""
    if not ctx.distributed:
        return
    sizes = torch.tensor([flat.numel(), -flat.numel()], dtype=torch.int64, device=flat.device)
    with collectives():
        dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    # raised outside collectives(): its message must not be read as a lost peer. A crash, as
    # DDP's own check is: the next gang start reads one config again
    if (int(sizes[0]), -int(sizes[1])) != (flat.numel(), flat.numel()):
        raise RuntimeError(f"ranks hold networks of different sizes (from {-int(sizes[1])} to {int(sizes[0])} "
                           f"parameters; this rank {flat.numel()}): every rank must run the same spec")
    with collectives():
        dist.broadcast(flat, src=0)


def all_reduce_gradient(ctx: Dist, flat: torch.Tensor) -> None:
    """Sum a flat gradient across ranks in place (the fused steps' one sync
    per gradient step) with torch.distributed's all-reduce, launched
    asynchronously; on gloo waited for by yielding the CPU for at most
    ctx.sync_yield_seconds before blocking (a rank that yields is running
    when the sum lands, one that blocked must be woken first)."""
    if not ctx.distributed:
        return
    with collectives():
        work = dist.all_reduce(flat, async_op=True)
        if ctx.backend == "gloo" and ctx.sync_yield_seconds > 0:
            give_up = time.perf_counter() + ctx.sync_yield_seconds
            while not work.is_completed() and time.perf_counter() < give_up:
                os.sched_yield()
        work.wait()  # raises the collective's own error (timeout, closed peer)


def all_reduce_sum(ctx: Dist, values: torch.Tensor) -> torch.Tensor:
    """Sum a flat tensor across ranks, in place and returned (one collective
    for every counter and normaliser moment of an update)."""
    if ctx.distributed:
        with collectives():
            on_device = values.to(ctx.device)
            dist.all_reduce(on_device, op=dist.ReduceOp.SUM)
            values.copy_(on_device)
    return values


def broadcast_object(ctx: Dist, obj: object, src: int = 0) -> object:
    """Rank `src`'s object on every rank (checkpoint state, decisions)."""
    if not ctx.distributed:
        return obj
    with collectives():
        box = [obj if ctx.rank == src else None]
        dist.broadcast_object_list(box, src=src, device=ctx.device if ctx.backend == "nccl" else None)
        return box[0]


def gather_objects(ctx: Dist, obj: object) -> list[object] | None:
    """Every rank's object on rank 0 (None elsewhere), pickled: rank 0 runs what a peer sends, so the
    trainer gathers its per-rank state with gather_bytes instead."""
    if not ctx.distributed:
        return [obj]
    with collectives():
        box: list[object] | None = [None] * ctx.world_size if ctx.is_main else None
        if ctx.backend == "nccl":  # gather_object is unsupported there: all-gather instead
            full: list[object] = [None] * ctx.world_size
            dist.all_gather_object(full, obj)
            return full if ctx.is_main else None
        dist.gather_object(obj, box, dst=0)
        return box


def gather_bytes(ctx: Dist, data: bytes) -> list[bytes] | None:
    """Every rank's bytes on rank 0 (None elsewhere), sent as uint8 tensors: what is gathered is never
    unpickled (gather_object's pickle would run whatever a peer that passed for a rank sent rank 0)."""
    if not ctx.distributed:
        return [data]
    with collectives():
        size = torch.tensor([len(data)], dtype=torch.int64, device=ctx.device)
        sizes = [torch.zeros_like(size) for _ in range(ctx.world_size)]
        dist.all_gather(sizes, size)
        lengths = [int(s.item()) for s in sizes]
        payload = torch.zeros(max(lengths), dtype=torch.uint8)  # host: filled from the bytes, then sent to the device
        if data:
            payload[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        payload = payload.to(ctx.device)
        parts = [torch.empty_like(payload) for _ in range(ctx.world_size)]
        dist.all_gather(parts, payload)  # gloo and NCCL alike (NCCL has no gather); a rank's state is small
        if not ctx.is_main:
            return None
        return [part[:length].cpu().numpy().tobytes() for part, length in zip(parts, lengths, strict=True)]


def broadcast_bytes(ctx: Dist, data: bytes | None, src: int = 0) -> bytes | None:
    """Rank `src`'s bytes (or None) on every rank, sent as uint8 tensors:
    what travels is never unpickled (a loaded checkpoint, re-encoded)."""
    if not ctx.distributed:
        return data
    with collectives():
        size = torch.tensor([-1 if data is None else len(data)], dtype=torch.int64, device=ctx.device)
        dist.broadcast(size, src=src)
        length = int(size.item())
        if length <= 0:
            return None if length < 0 else b""
        if ctx.rank == src:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(ctx.device)
        else:
            payload = torch.empty(length, dtype=torch.uint8, device=ctx.device)
        dist.broadcast(payload, src=src)
        return payload.cpu().numpy().tobytes()
