"""A pod's trainer container as a local process: what a kubelet does, here.

`kuberl run` and the test suite's local node both run rendered pods with this
module, so a pod behaves the same under either:

- `container_env` resolves the container's env as the kubelet does: values
  with Kubernetes' `$(VAR)` expansion, the downward API (`status.podIP` is the
  pod's own 127.0.0.x, `limits.cpu` the container's CPU limit rounded up),
  ConfigMap keys; cluster DNS names are handed to a resolver the caller owns
  (cluster DNS is not the kubelet's business).
- `prepare_sandbox` lays out a directory that stands in for the container's
  filesystem root (each volumeMount a symlink to its volume's directory, a
  configMap volume projected afresh as the kubelet projects it, the
  termination-message file, /tmp), passed to the process as KUBERL_FS_ROOT so
  absolute paths in the rendered pod need no rewriting. Every path the pod
  names (mountPath, subPath, terminationMessagePath, workingDir, claimName)
  must stay inside that root: one that leaves it is refused, naming the field.
- `launch` starts the container as a container starts: from a clean
  environment (the image's essentials: PATH with this interpreter's directory,
  so `python`, `torchrun` and every console script of the trainer's
  environment resolve alike; HOME, LANG; what a GPU host needs) plus the pod's
  env, never the caller's shell; an absolute path in command/args under a
  volume's mountPath is that volume's file here.
- `PodProcess` starts the command in its own process group, prefixes its
  output, signals and reaps the whole group, and reports the exit code and the
  termination message (`FallbackToLogsOnError`: the log's tail when the file is
  empty and the exit code is not 0).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO

from ..core import contract, names, rootcause, safetext
from ..core.runrecords import open_regular
from .containerenv import container_env, expand
from .dns import resolve_names
from .sandbox import (
    LocalRunError,
    check_sources,
    host_path,
    prepare_sandbox,
    trainer_container,
    unmount,
    working_dir,
)
from .shellwords import (
    in_volumes,
    in_volumes_of_line,
    in_volumes_of_words,
    is_shell_line,
)

# What Kubernetes keeps of a log for FallbackToLogsOnError.
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
# containerd's max_container_log_line_size: a longer line is logged in pieces of this size, so one
# line without a newline (a progress bar, a binary dump) cannot take the runner's memory.
LOG_LINE_BYTES = 16 * 1024
TERMINATION_MESSAGE_LIMIT = 4096
PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")
# A container image's usual PATH, after the trainer environment's own bin directory.
IMAGE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# What a container gets from this host besides PATH: where the user's caches
# live, the locale, and what CUDA needs to find the GPUs the host offers.
HOST_ESSENTIALS = ("HOME", "LANG", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
_output_lock = threading.Lock()


# --- the container's filesystem ----------------------------------------------


def containers_not_run(pod: Mapping) -> list[str]:
    """The pod's containers a local node does not start, by field: it runs the trainer container's command
    alone, so an init container that fetches data, or a sidecar it talks to, is missing here (said, not silent)."""
    ours = trainer_container(pod)
    skipped = [f"spec.initContainers[{c.get('name')}]" for c in pod["spec"].get("initContainers") or [] if isinstance(c, dict)]
    return skipped + [f"spec.containers[{c.get('name')}]" for c in pod["spec"]["containers"] if isinstance(c, dict) and c is not ours]


@dataclass(frozen=True)
class Launch:
    """What starting the container means here: argv, full env, cwd (with `open_cwd`, the
    working directory opened without following a link, which the process enters by its fd)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    termination_log: str
    open_cwd: Callable[[], int] | None = None


def interpreter_bin() -> str:
    """Where this interpreter and its environment's console scripts (torchrun, ...) live."""
    return os.path.dirname(sys.executable)


def container_base_env(host: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a container has before the pod's env: its image's PATH, led by
    the trainer environment's bin directory, and HOST_ESSENTIALS that are set."""
    host = os.environ if host is None else host
    env = {"PATH": os.pathsep.join((interpreter_bin(), *IMAGE_PATH)), "LANG": "C.UTF-8"}
    env.update({name: host[name] for name in HOST_ESSENTIALS if host.get(name)})
    return env


# One entry per GPU the NVIDIA driver has found (Linux): how many a machine offers, without CUDA or torch here.
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"


def host_gpus(host: Mapping[str, str] | None = None, driver_dir: str = NVIDIA_GPUS_DIR) -> list[str] | None:
    """The GPUs this machine offers its pods, each as CUDA_VISIBLE_DEVICES names it: the entries of the host's own
    CUDA_VISIBLE_DEVICES where it is set (up to the first CUDA stops at: an empty or negative one), else one index
    per GPU the NVIDIA driver lists; None when that cannot be known (no NVIDIA driver: no GPU, or another OS)."""
    host = os.environ if host is None else host
    visible = host.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = []
        for entry in (e.strip() for e in visible.split(",")):
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    try:
        return [str(i) for i in range(len(os.listdir(driver_dir)))]
    except OSError:
        return None


def pod_gpus(offered: list[str] | None, rank: int, gpus_per_worker: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES of pod `rank` here, as a device plugin gives a cluster pod GPUs of its own: its
    slice of the machine's GPUs (`offered`, host_gpus), and none for a pod that asks for none. Without it every pod
    saw every GPU, and ranks of two pods took the same (cuda:LOCAL_RANK in each), which NCCL refuses. None (the host's
    value, if any, passes through) where the machine cannot say; "" where it offers none (the caller's
    CUDA_VISIBLE_DEVICES="" hides them from the pods too: an empty value was dropped, and they saw every GPU)."""
    if offered is None:
        return None
    return ",".join(offered[rank * gpus_per_worker:(rank + 1) * gpus_per_worker])


def gpus_short(offered: list[str] | None, workers: int, gpus_per_worker: int) -> str | None:
    """Why pods of `gpus_per_worker` GPUs each cannot have GPUs of their own on this machine, or None. One pod
    short of GPUs is left to the trainer, which names spec.gpusPerWorker when its ranks start."""
    if not offered or workers < 2 or gpus_per_worker == 0 or len(offered) >= workers * gpus_per_worker:
        return None
    return (f"this machine offers {len(offered)} GPU(s), and {workers} pods of spec.gpusPerWorker {gpus_per_worker} take "
            f"{workers * gpus_per_worker}: each pod is given GPUs of its own, as a device plugin gives them (two ranks on one"
            f" GPU are refused by NCCL); --set workers=..., or --set gpusPerWorker=... (0: train on the CPU)")


def executable(name: str) -> str:
    """`python` (by any path) is this interpreter; a bare name found beside it (torchrun and
    every other console script of the trainer's environment) is that file, and so is an
    image's absolute path to one that this machine lacks (`/opt/conda/bin/torchrun`, as
    `/opt/conda/bin/python` is this interpreter); anything else is looked up on the container's PATH."""
    base = os.path.basename(name)
    if base in PYTHONS:
        return sys.executable
    beside = os.path.join(interpreter_bin(), base)
    if base and os.path.isfile(beside) and ("/" not in name or (os.path.isabs(name) and not os.path.lexists(name))):
        return beside
    return name


def launch(pod: Mapping, root: str, container_environment: Mapping[str, str], base_env: Mapping[str, str] | None = None,
           resolve: Callable[[str], str] | None = None) -> Launch:
    """The container's command and args, `$(VAR)`-expanded with its env, with
    the trainer environment's executables, the volumes' paths and (given
    `resolve`) the cluster names written in them resolved here; the process
    sees `base_env` (default: `container_base_env()`) under the pod's env."""
    container = trainer_container(pod)
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not command:
        raise LocalRunError(f"container {container['name']!r} has no command: a local node has no image entrypoint")
    if not container.get("command"):  # Kubernetes runs the image's ENTRYPOINT with these args
        raise LocalRunError(f"spec.containers[{container['name']}].command: unset, so a cluster runs the image's ENTRYPOINT with"
                            f" args {container['args']!r}; a local node has no image: set command to that ENTRYPOINT to run it here")
    mount_paths = [os.path.normpath(m["mountPath"]) for m in container.get("volumeMounts") or []]
    argv = [expand(part, container_environment) for part in command]
    argv = [in_volumes_of_line(part, root, mount_paths) if is_shell_line(argv, i) else in_volumes(part, root, mount_paths)
            for i, part in enumerate(argv)]
    if resolve is not None:
        argv = [resolve_names(part, resolve, strict=False) for part in argv]
    argv[0] = executable(argv[0])
    env = {
        **(container_base_env() if base_env is None else base_env),
        "TMPDIR": host_path(root, names.TMP_MOUNT_DIR),
        **{k: v if contract.is_reserved_env(k) else in_volumes_of_words(v, root, mount_paths) for k, v in container_environment.items()},
        "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        contract.ENV_FS_ROOT: root,
    }
    cwd = host_path(root, container["workingDir"]) if container.get("workingDir") else os.getcwd()
    log = host_path(root, container.get("terminationMessagePath") or names.TERMINATION_LOG)
    opened = functools.partial(working_dir, root, container, create=False) if container.get("workingDir") else None
    return Launch(argv, env, cwd, log, opened)


# --- the process --------------------------------------------------------------


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGTERM it when the process that started it dies, so no
    trainer outlives `kuberl run` (looked up before the fork: the child only calls it)."""
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class PodProcess:
    """One container's command in its own process group.

    Start it from a thread that lives as long as the process should: on Linux
    the child is signalled when that thread ends."""

    def __init__(self, spec: Launch, prefix: str, out: IO[str] | None = None, log_path: str | None = None):
        self.spec = spec
        self.prefix = prefix
        self.out = out if out is not None else sys.stdout
        self.log_path = log_path
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.rank_lines: dict[int, str] = {}  # each torch rank's last `[rankN]:` line (rootcause.completed)
        self.started_at = time.time()
        self.finished_at: float | None = None
        self.output_ended_at: float | None = None  # its stdout closed: when it exited, unless something it started kept it
        self._seen_running_at = self.started_at  # the last poll that found it running
        self.kill_at: float | None = None
        self.killed_at_grace = False  # SIGKILLed because its grace period ended, as a kubelet does
        self._kill_asked = False  # kill(): at once, as asked (a second Ctrl-C), no grace period ran out
        self.start_error: str | None = None
        self._exit_code: int | None = None
        self._reader: threading.Thread | None = None
        opened = None
        try:
            opened = spec.open_cwd() if spec.open_cwd else None
            # the child changes into the very directory checked, by its fd: a link swapped in since is not followed
            cwd = f"/proc/self/fd/{opened}" if opened is not None and os.path.isdir("/proc/self/fd") else spec.cwd
            self.popen: subprocess.Popen | None = subprocess.Popen(
                spec.argv, env=spec.env, cwd=cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,
                # the child calls one libc function looked up before the fork: no lock to inherit
                preexec_fn=_die_with_parent if _PRCTL else None,  # noqa: PLW1509
            )
        except (OSError, ValueError, LocalRunError) as e:  # the runtime could not start the container (a NUL in argv or env: ValueError)
            self.popen = None
            self.start_error = f"StartError: {e}"
            self._exit_code = 128
            self.finished_at = self.started_at
            return
        finally:
            if opened is not None:
                os.close(opened)
        self._reader = threading.Thread(target=self._pump, name=f"output {prefix}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def _pump(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        try:
            opened = open_to_write(self.log_path, append=True) if self.log_path else contextlib.nullcontext()
        except OSError:  # a link where the log goes: the output still reaches the terminal
            opened = contextlib.nullcontext()
        with opened as log:
            for raw in iter(lambda: self.popen.stdout.readline(LOG_LINE_BYTES), b""):
                line = raw.decode(errors="replace").rstrip("\n")
                self.tail.append(line)
                rootcause.remember(line, self.rank_lines)
                if log:
                    log.write(line + "\n")
                with _output_lock, contextlib.suppress(OSError, ValueError):  # our stdout may be gone
                    self.out.write(f"{self.prefix} {safetext.escape(line)}\n")  # the log file keeps it raw
                    self.out.flush()
        self.output_ended_at = time.time()

    def poll(self, now: float | None = None) -> int | None:
        """The exit code once the process has ended (128 + signal when killed),
        else None; kills the group when its grace period is over."""
        if self._exit_code is not None or self.popen is None:
            return self._exit_code
        code = self.popen.poll()
        if code is None:
            self._seen_running_at = time.time()
            if self.kill_at is not None and (now or time.time()) >= self.kill_at:
                self.killed_at_grace = not self._kill_asked
                self.signal(signal.SIGKILL)
            return None
        self.signal(signal.SIGKILL)  # the container is gone: so is everything it started
        self._kill_escaped()
        root = self.spec.env.get(contract.ENV_FS_ROOT)
        if root:  # ... and its volumes are unmounted
            unmount(root)
        if self._reader is not None:
            self._reader.join(timeout=2)
        # which of two ranks failed first (the cause, not its echo) even when one poll sees both ended; never
        # before a poll that saw it running (a process may close its stdout long before it exits)
        self.finished_at = max(self._seen_running_at, min(time.time(), self.output_ended_at or math.inf))
        self._exit_code = 128 - code if code < 0 else code
        return self._exit_code

    @property
    def running(self) -> bool:
        return self.poll() is None

    def signal(self, signum: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)

    def terminate(self, grace_seconds: float, now: float | None = None) -> float:
        """SIGTERM the group now and SIGKILL it when the grace period ends (at
        the next poll after it); returns when that is."""
        now = now or time.time()
        if self.kill_at is None:
            self.kill_at = now + grace_seconds
            self.signal(signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL)
        else:
            self.kill_at = min(self.kill_at, now + grace_seconds)
        return self.kill_at

    def kill(self) -> None:
        self._kill_asked = True
        self.kill_at = time.time()
        self.signal(signal.SIGKILL)
        self._kill_escaped()

    def _kill_escaped(self) -> None:
        """What left the group (setsid, a daemonised helper) is still in the
        container: a kubelet kills it too. It carries the pod's root in its env;
        once this process is reaped (and escapees with it), a pod of the same name may own that root."""
        root = self.spec.env.get(contract.ENV_FS_ROOT)
        if self.popen is None or not root or self._exit_code is not None:
            return
        for pid in processes_under(os.path.dirname(os.path.normpath(root))):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int | None:
        deadline = time.time() + timeout
        while self.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        return self.poll()

    def termination_message(self) -> str | None:
        """The file's content, else (the process failed) the tail of its log."""
        if self.start_error:
            return self.start_error
        text = read_termination_log(self.spec.termination_log)
        if text or not self._exit_code:
            return text or None
        tail = "\n".join(self.tail)[-LOG_TAIL_BYTES:].strip()
        return rootcause.completed(tail, self.rank_lines) or None


_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def private_network() -> str | None:
    """Move this process (and every pod it starts after) into a network namespace of its own, with
    only a loopback interface, brought up: no listener of the run, a custom torchrun's store on
    every address included, can be reached from outside it, and the pods reach no other host.
    A user namespace mapping this user to itself makes it possible without privileges. Returns
    why it could not (another platform, a kernel or container that forbids it), None when done."""
    import fcntl
    import struct

    if _PRCTL is None:
        return "network namespaces are Linux's"
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNET if uid == 0 else _CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"unshare: {os.strerror(ctypes.get_errno())}"
    if uid != 0:  # this user, mapped to itself: files the pods write keep their owner
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name, flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
    return None


def open_to_write(path: str, append: bool = False) -> IO[str]:
    """A file of the run's own (a log, status.json's temporary), opened without following a link:
    any run's pods can leave one in runs/ pointing anywhere this user may write."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o644), "a" if append else "w", buffering=1 if append else -1)


def read_regular_tail(path: str, limit: int) -> tuple[str, int] | None:
    """The last `limit` bytes of a regular file a container wrote, from the first whole line on, and
    the file's size; None as for `read_regular_file`. A run's progress.jsonl grows for as long as the
    run lasts (or is a 3 GiB sparse file a process put there): it is never read whole."""
    f = open_regular(path)
    if f is None:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size <= limit:
            return f.read(limit).decode(errors="replace"), size
        f.seek(size - limit - 1)  # one byte more: whether the tail starts a line
        tail = f.read(limit + 1)
        start = tail.find(b"\n") + 1  # 0: no whole line in it
        return (tail[start:].decode(errors="replace") if start else ""), size


def read_termination_log(path: str) -> str:
    """The termination-message file, as the regular file a kubelet mounts there, read as the kubelet reads it: its
    LAST TERMINATION_MESSAGE_LIMIT bytes (pkg/kubelet/kuberuntime getTerminationMessage, tail.ReadAtMost). Read from
    the start, a long message kept its first line here and lost it in a cluster (a marked reason among them)."""
    f = open_regular(path)
    if f is None:
        return ""
    with f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - TERMINATION_MESSAGE_LIMIT))
        return f.read(TERMINATION_MESSAGE_LIMIT).decode(errors="replace").strip()


def start_pod(
    pod: Mapping,
    pod_ip: str,
    sandbox: str,
    configmaps: Mapping[str, Mapping[str, str]],
    claim_dir: Callable[[str], str],
    resolve: Callable[[str], str],
    prefix: str,
    out: IO[str] | None = None,
    log_path: str | None = None,
    base_env: Mapping[str, str] | None = None,
    node_cpus: int | None = None,
    roots: str | None = None,
) -> PodProcess:
    """Everything a kubelet does to start a pod's trainer container here; configMap volumes are
    projected from `configmaps` into the pod's own sandbox."""
    container = trainer_container(pod)
    check_sources(pod, container)
    env = container_env(pod, container, pod_ip, configmaps, resolve, node_cpus)
    root = prepare_sandbox(sandbox, pod, container, configmaps, claim_dir, roots)
    return PodProcess(launch(pod, root, env, base_env, resolve), prefix, out, log_path)



def processes_under(sandboxes: str) -> list[int]:
    """PIDs of live processes whose pod root is under `sandboxes` (KUBERL_FS_ROOT
    is inherited by everything a container starts): a previous runner's leftovers."""
    prefix = os.path.abspath(sandboxes).encode() + b"/"
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            marker = contract.ENV_FS_ROOT.encode() + b"="
            if any(v.startswith(marker) and v[len(marker):].startswith(prefix) for v in environ):
                found.append(int(entry))
    return sorted(found)
