"""Checkpoint files: atomic, checksummed, versioned, loadable without
running code, the newest K valid ones kept.

A file is `KUBERLCKPT<version> <sha256 of payload>\n<payload>`, written to a
temporary name, fsynced, renamed, and its directory fsynced: a reader sees a
whole checkpoint or none.

The checksum catches truncation and bit rot, not forgery (anyone who can
write the file can recompute it), so decoding never runs code either:

- version 2 (written today): the payload is `torch.save({"state": <JSON
  text>, "tensors": [tensor, ...]})`, read with `torch.load(weights_only=
  True)`. The JSON holds every counter, config value and RNG state; tensors
  and numpy arrays are references into the tensor list.
- version 1 (read only): a `torch.save` of the state with numpy arrays
  inside, read with `weights_only=True` plus exactly the numpy types it
  holds. Its per-rank env state was a pickle: it is dropped, never loaded.
- any other version fails loudly, naming the file (a newer trainer wrote
  it; skipping it would silently lose its progress).

A file that fails to decode for any other reason is skipped with a log line,
loading falls back to the next older one and moves it aside into `unreadable/`
at once, never deleted (it is the evidence of what went wrong, and perhaps
recoverable; the resumed run's next save would take its name), and pruning
never counts such a file among the K kept. `unreadable` must be a plain
directory of the checkpoint directory: a symlink (out of the volume, into
another job's directory), a file or a FIFO of that name is never followed or
replaced, and a file that should go there stays, said in the log. When checkpoints exist
and none is usable, loading fails with NoUsableCheckpoint naming them, unless
the caller opts in to starting over: training silently from zero would throw
away the run's progress. An I/O error (EIO, ESTALE on network storage) is no
verdict on a file: reads and saves are retried, then the error is raised (a
save's as CheckpointVolumeUnavailable: volume_failure), and pruning leaves a
file it cannot read alone. A permission error (EACCES, EPERM: the volume
belongs to another user) is no verdict either, nor healed by waiting: it is raised
at once as CheckpointVolumeForbidden, which fails the job naming who was refused
what. A killed writer's temp files are removed
when the next run starts (`remove_stale_temps`).

The directory is the tenant's, so reading is bounded too: a name that is not a
regular file (a FIFO, a device, a directory) is skipped and never deleted; a
file larger than half the memory this process may use fails loudly (loading
takes at least twice its size); a payload whose zip members are compressed or
claim more bytes than the file holds (a decompression bomb: torch inflates
deflated members) is not loaded.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import itertools
import json
import logging
import math
import os
import re
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from kuberl.core import contract, safetext

from . import paths

log = logging.getLogger(__name__)
_T = TypeVar("_T")

VERSION = 2
READABLE_VERSIONS = (1, 2)
NAME = contract.CHECKPOINT_NAME
TEMP_NAME = re.compile(r"^\.tmp-.*\.part$")  # write_atomic's temp files
ASIDE = "unreadable"  # subdirectory where files that do not decode are moved: evidence, never deleted
READ_RETRY_SECONDS = (0.5, 2.0, 5.0)  # waits between reads that fail with an I/O error (EIO, ESTALE)

# What version 1 files hold besides tensors: numpy arrays, scalars and their
# numeric dtypes (bool, ints, floats: never object, string or structured ones),
# under both names a file may record (numpy 2's `numpy._core`, numpy 1's `numpy.core`).
_multiarray = (getattr(np, "_core", None) or np.core).multiarray
NUMERIC_DTYPES = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                  np.float16, np.float32, np.float64)
V1_NUMPY_GLOBALS = [
    np.ndarray,
    np.dtype,
    *(type(np.dtype(scalar)) for scalar in NUMERIC_DTYPES),
    *((function, f"numpy.{core}.multiarray.{function.__name__}")
      for function in (_multiarray._reconstruct, _multiarray.scalar) for core in ("_core", "core")),
]


class CorruptCheckpoint(ValueError):
    """Not a loadable checkpoint: skipped, never counted among the kept."""


class NotAFile(CorruptCheckpoint):
    """A checkpoint name that is not a regular file: skipped, and never deleted (not ours)."""


class UnusableCheckpoint(ValueError):
    """A checkpoint this trainer can neither load nor skip (skipping would silently lose its
    progress): the run fails, naming the file; retrying cannot help. `reason` is the
    termination-log reason (kuberl.core.contract), a permanent one."""

    reason = "ConfigError"

    def __init__(self, path: str, why: str):
        super().__init__(f"checkpoint {path} {why}")
        self.path = path


class UnknownCheckpointFormat(UnusableCheckpoint):
    """A format version this trainer cannot read (a newer trainer wrote it)."""

    def __init__(self, path: str, version: int):
        super().__init__(
            path, f"has format version {version}; this trainer reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}. Run the trainer image that wrote it, or move the file away "
            "to resume from an older checkpoint"
        )
        self.version = version


class CheckpointTooLarge(UnusableCheckpoint):
    """Larger than this process could load (MAX_LOAD_FRACTION of its memory)."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(
            path, f"is {size} bytes, over the {limit} bytes this rank can load (half its memory limit): "
            "raise the pod's memory limit, or move the file away to resume from an older checkpoint"
        )


class NoUsableCheckpoint(UnusableCheckpoint):
    """Checkpoints exist and none can be resumed from: starting from zero would lose the run's
    progress in silence, so the run fails naming each file and why, unless told to start over."""

    reason = "NoUsableCheckpoint"

    def __init__(self, directory: str, unusable: list[tuple[str, str]]):
        listed = "; ".join(f"{os.path.basename(path)}: {why}" for path, why in unusable[:10])
        more = f"; and {len(unusable) - 10} more" if len(unusable) > 10 else ""
        ValueError.__init__(
            self, f"{directory} holds {len(unusable)} checkpoint(s) and none is usable ({listed}{more}); the files are "
            "kept. Move them away, or set spec.checkpoint.whenNoneUsable: StartOver to train from zero")
        self.path, self.unusable = directory, unusable


class CheckpointVolumeReadOnly(UnusableCheckpoint):
    """The checkpoint volume is mounted read-only: no restart can make it writable."""

    reason = "CheckpointVolumeReadOnly"

    def __init__(self, directory: str, error: OSError):
        ValueError.__init__(
            self, f"the checkpoint volume at {directory} is read-only ({error.strerror or error}): mount the claim "
            "read-write (check the PVC's accessModes and the volume's health), then rerun the job")
        self.path = directory


class CheckpointVolumeForbidden(UnusableCheckpoint):
    """The trainer's user may not read or write the checkpoint volume (EACCES, EPERM): a claim owned
    by another user, with no fsGroup to share it. The volume's owner or the pod's user must change;
    no restart does, nor waiting (so reads are not retried)."""

    reason = "CheckpointVolumeForbidden"

    def __init__(self, directory: str, error: OSError):
        # A temp file's name (mkstemp's) tells nothing: the directory it was to be made in does.
        named = error.filename if isinstance(error.filename, str) else None
        where = named if named and not TEMP_NAME.fullmatch(os.path.basename(named)) else directory
        ValueError.__init__(
            self, f"the checkpoint volume at {directory} denies this trainer (uid {os.getuid()}, gid {os.getgid()}) access "
            f"to {where} ({error.strerror or error}; {_ownership(where)}): let the trainer's user read and write it "
            "(spec.template.spec.securityContext.fsGroup, or the volume's owner and mode), then rerun the job")
        self.path = directory


class CheckpointDirectoryNotADirectory(UnusableCheckpoint):
    """The checkpoint directory's path is taken by something else (a file written over it, a symlink to a file, a
    file in place of a directory above it): no restart makes it a directory, so the run fails naming what is there.
    It was `FileExistsError: [Errno 17] File exists` at the next save and at each restart's start, a crash that
    spent backoffLimit."""

    def __init__(self, directory: str):
        ValueError.__init__(
            self, f"the checkpoint directory {directory} cannot be a directory: {_blocking(directory)}. Move that "
            "away so checkpoints can be kept there, then rerun the job")
        self.path = directory


def _blocking(directory: str) -> str:
    """What takes `directory`'s place: the first path from the root down to it that is not a directory."""
    path, on_the_way = os.path.abspath(directory), []
    while not on_the_way or path != on_the_way[-1]:
        on_the_way.append(path)
        path = os.path.dirname(path)
    for candidate in reversed(on_the_way):
        link = f" (a symlink to {os.readlink(candidate)!r})" if os.path.islink(candidate) else ""
        try:
            info = os.stat(candidate)
        except FileNotFoundError:
            return f"{candidate}{link} leads nowhere" if link else f"{candidate} went while it was looked at"
        except OSError as e:
            return f"{candidate}{link} cannot be looked at ({e.strerror or e})"
        if not stat.S_ISDIR(info.st_mode):
            kind = f"a regular file of {info.st_size} bytes" if stat.S_ISREG(info.st_mode) else "no directory"
            return f"{candidate}{link} is {kind}"
    return "it is a directory now"


def make_directory(directory: str) -> None:
    """os.makedirs(directory, exist_ok=True); a file (or a link to one) where it or a directory above it should be
    raised as CheckpointDirectoryNotADirectory."""
    try:
        os.makedirs(directory, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise CheckpointDirectoryNotADirectory(directory) from e


def _ownership(path: str) -> str:
    for candidate in (path, os.path.dirname(path)):
        try:
            info = os.stat(candidate)
        except OSError:
            continue
        owner = f"owner uid {info.st_uid}, gid {info.st_gid}, mode 0o{stat.S_IMODE(info.st_mode):03o}"
        return owner if candidate == path else f"{candidate}: {owner}"
    return "its owner unreadable"


@contextlib.contextmanager
def volume_access(directory: str):
    """PermissionError (EACCES, EPERM) on the checkpoint volume raised as CheckpointVolumeForbidden."""
    try:
        yield
    except PermissionError as e:
        raise CheckpointVolumeForbidden(directory, e) from e


# How the checkpoint volume failed, by errno, and what that means for the job (kuberl.core.contract's reasons).
# A volume that fails under a running rank is the storage's fault, not the workload's: a lost network session
# or server (EIO, ESTALE; ENOTCONN: a FUSE mount whose daemon died; EHOSTDOWN, ETIMEDOUT), a device gone (ENXIO,
# ENODEV), or a filesystem the kernel remounted read-only after errors (EROFS on a volume this rank found
# writable at its start: ext4's errors=remount-ro). A new pod mounts the volume anew (CSI NodeStage: fsck, a
# fresh mount, maybe on another node), so the gang restarts, uncounted, as after a preemption.
UNAVAILABLE = contract.REASON_CHECKPOINT_VOLUME_UNAVAILABLE
FULL = contract.REASON_CHECKPOINT_VOLUME_FULL
READ_ONLY = contract.REASON_CHECKPOINT_READ_ONLY
FORBIDDEN = contract.REASON_CHECKPOINT_FORBIDDEN
VOLUME_FAILED_ERRNOS = frozenset({errno.EIO, errno.ESTALE, errno.ENOTCONN, errno.EHOSTDOWN, errno.ETIMEDOUT,
                                  errno.ENXIO, errno.ENODEV})


def volume_failure(error_number: int | None, writable_at_start: bool) -> str | None:
    """The reason an OSError of `error_number` on the checkpoint volume ends the rank with, or None (not the
    volume's: raised as it is, a Crashed). `writable_at_start`: this rank found the volume writable when it
    started (check_writable), so a read-only one now was remounted under it, not mounted so."""
    if error_number in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return FULL  # retryable and counted: the claim must grow, or keep shrink (EFBIG: the file cannot)
    if error_number in (errno.EACCES, errno.EPERM):
        return FORBIDDEN  # permanent: who may write does not change by waiting
    if error_number == errno.EROFS:
        return UNAVAILABLE if writable_at_start else READ_ONLY
    if error_number in VOLUME_FAILED_ERRNOS:
        return UNAVAILABLE
    return None


class CheckpointVolumeUnavailable(OSError):
    """The checkpoint volume failed under the running job (volume_failure: UNAVAILABLE): the rank ends, saying what
    it was doing to which path, the errno and the last good checkpoint; the gang restarts uncounted. Short, head
    first: the operator keeps a message's last 384 characters, so a longer one lost the path that failed."""

    reason = UNAVAILABLE

    def __init__(self, action: str, path: str, error: OSError, last_good: str | None = None, at_start: bool = False):
        name = errno.errorcode.get(error.errno, str(error.errno))
        why = "turned read-only" if error.errno == errno.EROFS else "failed"
        if last_good and os.path.dirname(last_good) in (path.rstrip(os.sep), os.path.dirname(path)):
            kept = f"last good checkpoint: {os.path.basename(last_good)} (same directory)"
        elif last_good:
            kept = f"last good checkpoint: {last_good}"
        else:
            kept = "its checkpoints are left as they are" if at_start else "no checkpoint saved yet by this run"
        super().__init__(error.errno, f"{action} {path} failed with {name} ({error.strerror or error}): the volume {why} "
                         f"under the job; {kept}. Restarted, not counted toward backoffLimit")
        self.path, self.last_good = path, last_good

    def __str__(self) -> str:
        return self.strerror or ""


class CheckpointVolumeFull(OSError):
    """No space left for a checkpoint (ENOSPC, or EDQUOT: the quota network filesystems such as CephFS
    and NFS set per claim), retryable (a claim can be expanded), with what one needs. Under `kuberl run`
    (paths.on_this_machine) the volume is a directory of this machine's disk: how many more bytes must be
    freed there is said instead of a claim to expand. `too_large`: EFBIG, a file past the largest the volume
    or the process may write (RLIMIT_FSIZE, `ulimit -f`), however much space is free."""

    def __init__(self, directory: str, need: int, volume: str, keep: int, quota: bool = False, too_large: bool = False):
        if too_large:
            limit = ("the file size limit (ulimit -f) of the shell that ran kuberl run, or the disk's largest file"
                     if paths.on_this_machine() else "the container's file size limit, or the volume's largest file")
            where = f"the disk holding {volume}" if paths.on_this_machine() else f"the checkpoint volume ({volume})"
            super().__init__(errno.EFBIG, f"{where} refuses a file of {need} bytes (EFBIG: past {limit})", directory)
            return
        try:
            fs = os.statvfs(directory)
            free = fs.f_bavail * fs.f_frsize
            space = f"{fs.f_blocks * fs.f_frsize} bytes in all, {free} free"
        except OSError:
            free, space = None, "its size unreadable"
        full = "is over its quota (EDQUOT)" if quota else "is full"
        if paths.on_this_machine():  # short, head first: a restart keeps the message's last 384 characters
            at = f"{free} bytes free" if free is not None else "its size unreadable"
            message = f"the disk holding {volume} {full} ({at}): {_to_free(directory, need, keep, free)}"
        else:
            room = (f"one checkpoint needs {need} bytes: spec.checkpoint.keep={keep} of them and one being written need"
                    f" {need * (keep + 1)}. Expand the claim or lower spec.checkpoint.keep" if keep else
                    f"the final model needs {need} bytes besides the checkpoints kept. Expand the claim")
            message = f"the checkpoint volume ({volume}; {space}) {full}: {room}"
        super().__init__(errno.EDQUOT if quota else errno.ENOSPC, message, directory)

    def __str__(self) -> str:
        # without the directory's repeat at the end: the operator keeps a message's last 384 characters, and the
        # claim and its size at the head were what a long job name pushed out
        return f"[Errno {self.errno}] {self.strerror}"


def _to_free(directory: str, need: int, keep: int, free: int | None) -> str:
    """What a full disk of this machine needs: the bytes to free so that `keep` checkpoints of `need` bytes and one
    being written fit beside what is free and what this job's checkpoints hold now (keep 0: the final model's)."""
    held = 0
    for path in list_checkpoints(directory) if keep else []:
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            held += info.st_size if stat.S_ISREG(info.st_mode) else 0
    wanted = need * (keep + 1) if keep else need
    what = (f"{keep + 1} checkpoints of {need} bytes (keep={keep}, one more being written) need {wanted}; those there hold"
            f" {held}" if keep else f"the final model needs {need} bytes")
    short = "space" if free is None else f"{max(wanted - held - free, need - free, 1)} bytes"
    lower = " (or lower spec.checkpoint.keep)" if keep else ""
    return f"{what}. Free {short} there{lower}, then rerun"


class CheckpointReadBackFailed(RuntimeError):
    """A checkpoint just written does not load: it is moved aside and no older one is removed (retryable)."""

    def __init__(self, path: str, why: str, moved: bool = True):
        super().__init__(f"checkpoint {path} was written but does not read back ({why}): it is "
                         f"{'moved aside' if moved else 'left where it is'} and no older checkpoint was removed")
        self.path = path


class CheckpointMismatch(UnusableCheckpoint):
    """Written for another algorithm, network or env than this job's; or, `written_for` this very job (its trained_as,
    described) with keys this trainer's state has not or lacks, by another version of the trainer."""

    def __init__(self, path: str, why: str, written_for: str | None = None):
        if written_for is None:
            super().__init__(path, f"was not written by this job's trainer ({why}): move it away to resume from an older checkpoint")
            return
        # every checkpoint that version wrote is alike: "move it away" set them all aside, one by one, and the run's work with them
        super().__init__(path, f"was written for this job ({written_for}) by another version of kuberl's trainer, whose state"
                               f" differs from this one's ({why}): resume it with the trainer that wrote it (the job's"
                               " recorded image; for kuberl run, the kuberl that ran it). Moving it away resumes from an"
                               " older checkpoint only if an older trainer, this one's version, wrote one")


def checkpoint_name(updates: int) -> str:
    return f"ckpt-{updates:010d}.pt"


def write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    make_directory(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


# A filesystem whose directories have no fsync answers EINVAL (Linux: vfs_fsync_range without
# f_op->fsync), or ENOTSUP: SMB/CIFS (Azure Files volumes), some Ceph and FUSE mounts. Write-back
# errors are EIO, ENOSPC or EDQUOT, never these, so nothing written is lost by going on.
NO_DIRECTORY_FSYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})
_no_directory_fsync: set[str] = set()  # directories already said to have none


def _fsync_directory(directory: str) -> None:
    """Make a rename in `directory` durable; where its filesystem cannot, say so once and go on
    (the file itself is fsynced already): failing there failed every save after its rename."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError as e:
        if e.errno not in NO_DIRECTORY_FSYNC:
            raise
        if directory not in _no_directory_fsync:
            _no_directory_fsync.add(directory)
            log.warning("the filesystem of %s cannot fsync a directory (%s): checkpoints are renamed into place without it, "
                        "so a node that loses power just after a save may come back with the one before", directory,
                        e.strerror or e)
    finally:
        os.close(dir_fd)


# --- plain data: JSON for structure, a tensor list for arrays ----------------


def to_plain(state: object) -> tuple[object, list[torch.Tensor]]:
    """(JSON-able tree, tensors): tensors and numpy arrays and scalars become
    {"$tensor"|"$ndarray"|"$scalar": index}; tuples and dicts whose keys are
    not plain strings are tagged so they come back as they were. Anything
    else is refused naming where it sits, so nothing is saved that cannot
    be restored as data."""
    tensors: list[torch.Tensor] = []

    def walk(value: object, where: str) -> object:
        if isinstance(value, (np.ndarray, np.generic)):  # first: np.float64 is a float too
            array = np.asarray(value)
            if array.dtype.hasobject:
                raise TypeError(f"checkpoint state {where}: a numpy array of Python objects is not plain data")
            tensors.append(torch.from_numpy(np.array(array, copy=True)))
            return {("$ndarray" if isinstance(value, np.ndarray) else "$scalar"): len(tensors) - 1}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, torch.Tensor):
            tensors.append(value.detach())
            return {"$tensor": len(tensors) - 1}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {"$tuple": [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in value):
                return {k: walk(v, f"{where}.{k}") for k, v in value.items()}
            return {"$items": [[walk(k, f"{where} key"), walk(v, f"{where}[{k!r}]")] for k, v in value.items()]}
        raise TypeError(f"checkpoint state {where}: {type(value).__name__} is not plain data")

    return walk(state, "state"), tensors


def from_plain(tree: object, tensors: list[torch.Tensor]) -> object:
    def walk(value: object) -> object:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag == "$tensor":
                return tensors[inner]
            if tag == "$ndarray":
                return tensors[inner].numpy()
            if tag == "$scalar":
                return tensors[inner].numpy()[()]
            if tag == "$tuple":
                return tuple(walk(v) for v in inner)
            if tag == "$items":
                return {_hashable(walk(k)): walk(v) for k, v in inner}
        return {k: walk(v) for k, v in value.items()}

    try:
        return walk(tree)
    except (IndexError, TypeError, ValueError, AttributeError) as e:
        raise CorruptCheckpoint(f"state does not match its tensors: {e}") from e


def nonfinite(state: object) -> list[str]:
    """Where `state` (as to_plain takes it: a checkpoint's, a model file's) holds a NaN or an infinity, each by its
    path (`agent.critic.0.weight`, `optimizer.state.3.exp_avg_sq`), in the order found. Floating tensors are judged
    where they live, with one host read per device, not one per tensor: a GPU rank's weights stay on the GPU."""
    found: list[tuple[int, str]] = []  # (position in the walk, path)
    tensors: dict[torch.device, list[tuple[int, str, torch.Tensor]]] = {}
    position = itertools.count()

    def walk(value: object, where: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                tensors.setdefault(value.device, []).append((next(position), where, value.detach()))
        elif isinstance(value, (np.ndarray, np.generic)):
            array = np.asarray(value)
            if np.issubdtype(array.dtype, np.inexact) and not np.isfinite(array).all():
                found.append((next(position), where))
        elif isinstance(value, float):
            if not math.isfinite(value):
                found.append((next(position), where))
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, f"{where}.{key}" if where else str(key))
        elif isinstance(value, (list, tuple)):
            for index, inner in enumerate(value):
                walk(inner, f"{where}[{index}]")

    walk(state, "")
    for group in tensors.values():
        finite = torch.stack([tensor.isfinite().all() for _, _, tensor in group]).cpu().tolist()  # the one host read
        found += [(order, where) for (order, where, _), ok in zip(group, finite, strict=True) if not ok]
    return [where for _, where in sorted(found)]


def _hashable(key: object) -> object:
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


# --- encode and decode ---------------------------------------------------------


def encode(state: dict) -> bytes:
    tree, tensors = to_plain(state)
    buffer = io.BytesIO()
    torch.save({"state": json.dumps(tree, separators=(",", ":")), "tensors": tensors}, buffer)
    return _framed(VERSION, buffer.getvalue())


def _framed(version: int, payload: bytes) -> bytes:
    return f"KUBERLCKPT{version} ".encode() + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes, path: str = "<bytes>") -> dict:
    """The state in `data`; CorruptCheckpoint for anything not loadable,
    UnknownCheckpointFormat for a version this trainer does not read."""
    line, _, payload = data.partition(b"\n")
    header = contract.checkpoint_header(line)
    if header is None:
        raise CorruptCheckpoint(contract.NOT_A_CHECKPOINT)
    version, digest = header
    if version not in READABLE_VERSIONS:
        raise UnknownCheckpointFormat(path, version)
    if not contract.payload_matches(digest, [payload]):
        raise CorruptCheckpoint(contract.CHECKSUM_MISMATCH)
    try:
        state = _decode_v1(payload) if version == 1 else _decode_v2(payload)
    except CorruptCheckpoint:
        raise
    except Exception as e:  # whatever the payload does wrong, it is not a checkpoint
        raise CorruptCheckpoint(f"version {version} payload does not load: {_load_error(e)}") from e
    if not isinstance(state, dict):
        raise CorruptCheckpoint(f"version {version} payload is a {type(state).__name__}, not a state dict")
    return state


def _load_error(e: Exception) -> str:
    """Why torch.load refused a payload, on one line, escaped and cut: torch's own words carry ANSI bold and line
    breaks, and quote the file's pickle (a global's name is the file's to choose); the reason reaches the log and
    the termination message."""
    return safetext.one_line(f"{type(e).__name__}: {e}")[:300]


def _stored_zip(payload: bytes) -> None:
    """torch.save writes its zip uncompressed; torch.load would inflate a deflated member, so a
    small file could become many GiB of tensors. Members must be stored and fit in the payload."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise CorruptCheckpoint(f"payload is not a torch.save zip: {e}") from e
    if any(m.compress_type != zipfile.ZIP_STORED for m in members):
        raise CorruptCheckpoint("payload has compressed members (torch.save never compresses): not loaded")
    if sum(m.file_size for m in members) > len(payload):
        raise CorruptCheckpoint("payload's members claim more bytes than it holds: not loaded")


def overclaimed(loaded: object) -> None:
    """CorruptCheckpoint when a tensor in `loaded` claims more elements than its data holds: a view of
    one element with stride 0 and shape (2**40,) fits a file of 2 KB, and whatever copies it (numpy,
    `.to(dtype)`, `.clone()`) allocates the 8 TiB it claims. torch.save writes every tensor it saves
    whole, so one of ours never claims more than its storage."""
    pending, seen = [loaded], 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_LOADED_OBJECTS:
            raise CorruptCheckpoint(f"holds more than {MAX_LOADED_OBJECTS} objects: not loaded")
        if isinstance(value, torch.Tensor):
            # a sparse tensor's size is a claim too (its dense form), and one that breaks its invariants is
            # unsafe to touch: torch saves none of ours sparse, nested or quantized
            if value.layout != torch.strided or value.is_nested or value.is_quantized:
                kind = "nested" if value.is_nested else "quantized" if value.is_quantized else str(value.layout)
                raise CorruptCheckpoint(f"holds a {kind} tensor, not a dense one: not loaded")
            held = value.untyped_storage().nbytes()
            if value.numel() and value.numel() * value.element_size() > held:
                raise CorruptCheckpoint(f"a tensor claims {list(value.shape)} of {value.dtype}, more than the"
                                        f" {held} bytes it holds: not loaded")
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)


MAX_LOADED_OBJECTS = 10_000_000  # a checkpoint's values and containers: far more than any network's state


def _decode_v2(payload: bytes) -> object:
    _stored_zip(payload)
    loaded = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    if not (isinstance(loaded, dict) and set(loaded) == {"state", "tensors"} and isinstance(loaded["state"], str)
            and isinstance(loaded["tensors"], list) and all(isinstance(t, torch.Tensor) for t in loaded["tensors"])):
        raise CorruptCheckpoint("version 2 payload is not {state: JSON text, tensors: [tensor, ...]}")
    overclaimed(loaded["tensors"])
    return from_plain(json.loads(loaded["state"]), loaded["tensors"])


def _decode_v1(payload: bytes) -> object:
    _stored_zip(payload)
    with torch.serialization.safe_globals(V1_NUMPY_GLOBALS):
        state = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    overclaimed(state)
    if isinstance(state, dict) and state.get("per_rank") is not None:
        log.warning("a version 1 checkpoint's per-rank env state is a pickle: resuming without it")
        state["per_rank"] = None
    to_plain(state)  # what loads must be plain data, as version 2 is (rank 0 re-encodes it to broadcast)
    return state


# --- the directory -------------------------------------------------------------

MAX_LOAD_FRACTION = 0.5  # of the memory this process may use: loading holds the bytes and the tensors at once

# path -> (size, mtime_ns, valid): each file is decoded at most once per process
_verified: dict[str, tuple[int, int, bool]] = {}


def memory_limit(cgroup: str = "/sys/fs/cgroup") -> int:
    """Bytes this process may use: its cgroup's memory limit (v2 or v1) when set, else the machine's RAM."""
    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError), open(os.path.join(cgroup, name)) as f:
            limits.append(int(f.read(64).strip()))  # "max" (no limit) is a ValueError
    return min(limit for limit in limits if limit > 0)


def load_limit() -> int:
    """The largest checkpoint file this process reads."""
    return int(memory_limit() * MAX_LOAD_FRACTION)


def _signature(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_size, info.st_mtime_ns


def _remember(path: str, valid: bool) -> None:
    with contextlib.suppress(OSError):
        _verified[path] = (*_signature(path), valid)


def save(directory: str, updates: int, state: dict, keep: int, volume: str = "", last_good: str | None = None) -> str:
    """`_save`; an I/O error anywhere in it (the write, the read-back, the listing) raised as
    CheckpointVolumeUnavailable naming `last_good`, the newest checkpoint known to load."""
    path = os.path.join(directory, checkpoint_name(updates))
    try:
        return retrying(path, lambda: _save(directory, updates, state, keep, volume, last_good))
    except CheckpointVolumeUnavailable:
        raise
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.EEXIST) and not os.path.isdir(directory):
            # replaced by a file during this save (after make_directory found it a directory): the same end as
            # at its start, not a crash that restarts into it
            raise CheckpointDirectoryNotADirectory(directory) from e
        if volume_failure(e.errno, writable_at_start=True) != UNAVAILABLE:
            raise
        saved = _verified.get(path, (0, 0, False))[2]  # it read back: only pruning failed after it
        raise CheckpointVolumeUnavailable("saving", path, e, path if saved else last_good) from e


def retrying(path: str, write: Callable[[], _T]) -> _T:
    """`write()` (of `path`), tried again after each wait in WRITE_RETRY_SECONDS while it fails with an error
    retried_save allows, each retry said; the last error is raised."""
    for wait in (*WRITE_RETRY_SECONDS, None):
        try:
            return write()
        except OSError as e:
            if wait is None or not retried_save(e.errno):
                raise
            log.warning("writing %s failed with %s (%s): retrying in %.0fs", path, errno.errorcode.get(e.errno, e.errno),
                        os.strerror(e.errno), wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


# Waits between saves that fail with an I/O error: a network volume's hiccup (a server failing over, a session
# re-established) heals in seconds, with no gang restart; the other ranks wait at their next collective (its
# timeout, 30 minutes, outlasts these 20 s).
WRITE_RETRY_SECONDS = (1.0, 4.0, 15.0)


def retried_save(error_number: int | None) -> bool:
    """Whether a save that failed with `error_number` is tried again in place: an I/O error may heal in seconds;
    a read-only remount never does under the same mount (only a new pod's mount heals it), nor anything else."""
    return error_number != errno.EROFS and volume_failure(error_number, writable_at_start=True) == UNAVAILABLE


def _save(directory: str, updates: int, state: dict, keep: int, volume: str, last_good: str | None) -> str:
    """Write checkpoint `updates`; keep the newest `keep` valid ones and delete
    the older ones. Files that do not decode are moved aside (`ASIDE`), wherever
    they sort; what is not a regular file, what this trainer cannot judge and
    what cannot be read right now are left alone. A full volume raises
    CheckpointVolumeFull (naming `volume` and what one checkpoint needs), a
    read-only one CheckpointVolumeReadOnly, one this trainer may not write CheckpointVolumeForbidden
    (a file it may not remove is left, said in the log). The new file is read back before anything
    is removed: one that does not load raises CheckpointReadBackFailed, the older ones all kept."""
    path = os.path.join(directory, checkpoint_name(updates))
    write_on_volume(path, encode(state), volume, keep, last_good)
    # Read back before any older one goes: with keep=1, pruning on the word of a file that does not
    # load deleted the only valid checkpoint (85 ms for an Atari CNN's 20 MB; a save takes 200).
    _verified.pop(path, None)
    try:
        read(path)
    except CorruptCheckpoint as e:
        try:
            move_aside(path, f"written but does not read back: {e}")
        except OSError as unmoved:  # it stays under its name; a resume skips it, as any file that does not load
            log.warning("could not move %s aside (%s): it stays", path, unmoved.strerror or unmoved)
            raise CheckpointReadBackFailed(path, str(e), moved=False) from e
        raise CheckpointReadBackFailed(path, str(e)) from e
    kept = 0
    for candidate in list_checkpoints(directory):
        valid = is_valid(candidate)
        if valid is None:
            continue  # another format version, too large to read, not a file, or unreadable now: not ours to judge
        if valid and kept < keep:
            kept += 1
            continue
        try:
            if valid:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(candidate)
            else:
                move_aside(candidate, "not a valid checkpoint")
        except (PermissionError, AsideUnusable) as e:  # the checkpoint is saved: pruning is housekeeping
            log.warning("could not %s %s (%s): it stays", "remove" if valid else "move aside", candidate, e.strerror or e)
            continue
        _verified.pop(candidate, None)
    return path


def write_on_volume(path: str, data: bytes, volume: str = "", keep: int = 0, last_good: str | None = None) -> None:
    """write_atomic on a volume this rank found writable at its start (check_writable): a full volume raised as
    CheckpointVolumeFull (naming `volume` and what `data` needs; `keep` checkpoints of that size must fit
    besides), one this trainer may not write as CheckpointVolumeForbidden, and one that failed under the job
    (an I/O error, a read-only remount) as CheckpointVolumeUnavailable naming `last_good`."""
    directory = os.path.dirname(path) or "."
    try:
        with volume_access(directory):
            write_atomic(path, data)
    except OSError as e:
        failure = volume_failure(e.errno, writable_at_start=True)
        if failure == FULL:
            raise CheckpointVolumeFull(directory, len(data), volume or directory, keep, quota=e.errno == errno.EDQUOT,
                                       too_large=e.errno == errno.EFBIG) from e
        if failure == UNAVAILABLE:
            raise CheckpointVolumeUnavailable("writing", path, e, last_good) from e
        raise


MAX_ASIDE_NAMES = 1000  # numbered names tried per file in ASIDE: a directory the tenant filled is no endless loop


class AsideUnusable(OSError):
    """`ASIDE` is no directory of the checkpoint directory's own (a symlink, a file, a FIFO the tenant put there) or
    has no free name: nothing is moved, so a move never leaves the volume, follows a link or replaces a file."""

    def __init__(self, aside: str, what: str):
        super().__init__(errno.ENOTDIR, f"{aside} is {what}: remove it so files that do not load can be kept there", aside)


def move_aside(path: str, why: str) -> str | None:
    """Move `path` into its directory's `ASIDE` subdirectory (a new name when one is taken);
    the new path, or None when it was gone already. AsideUnusable when `ASIDE` is not a plain
    directory: the move never follows a symlink out of the volume, nor replaces what is there."""
    directory, name = os.path.split(path)
    aside = os.path.join(directory, ASIDE)
    with contextlib.suppress(FileExistsError):  # a file or a dangling link of that name: refused just below
        os.makedirs(aside, exist_ok=True)
    try:  # opened without following a link, and used through its descriptor: a swapped-in link changes nothing
        aside_fd = os.open(aside, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AsideUnusable(aside, "not a directory (a symlink or another file)") from e
        raise
    try:
        target = next((candidate for candidate in _aside_names(name) if not _exists_at(candidate, aside_fd)), None)
        if target is None:
            raise AsideUnusable(aside, f"full of names taken for {name} ({MAX_ASIDE_NAMES})")
        try:
            os.rename(path, target, dst_dir_fd=aside_fd)
        except FileNotFoundError:
            return None
    finally:
        os.close(aside_fd)
    moved = os.path.join(aside, target)
    log.warning("moved %s aside to %s: %s (kept for inspection; delete it when done)", path, moved, why)
    return moved


def _aside_names(name: str):
    yield name
    yield from (f"{name}.{n}" for n in range(1, MAX_ASIDE_NAMES))


def _exists_at(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def is_valid(path: str) -> bool | None:
    """Whether `path` decodes (None: not a regular file, gone, unreadable now, or one this
    trainer cannot judge)."""
    try:
        size, mtime = _signature(path)
    except OSError:
        return None
    known = _verified.get(path)
    if known is not None and known[:2] == (size, mtime):
        return known[2]
    try:
        read(path)
    except (UnusableCheckpoint, NotAFile):
        return None
    except CorruptCheckpoint:
        return False
    except OSError as e:  # an I/O error says nothing about the file's bytes
        log.warning("leaving checkpoint %s alone: %s", path, e)
        return None
    return True


def read(path: str, max_bytes: int | None = None) -> dict:
    """The state in checkpoint file `path`, reading at most `max_bytes` (default: load_limit())."""
    limit = load_limit() if max_bytes is None else max_bytes
    data = _read_bytes(path, limit)
    try:
        state = decode(data, path)
    except CorruptCheckpoint:
        _remember(path, False)
        raise
    _remember(path, True)
    return state


@contextlib.contextmanager
def _bounded_regular_file(path: str, limit: int, not_regular: str):
    """`path` opened for reading, and its size: anything but a regular file refused (NotAFile(not_regular)),
    and a file over `limit` bytes refused before a byte of it is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(not_regular)
        if info.st_size > limit:
            raise CheckpointTooLarge(path, info.st_size, limit)
        with os.fdopen(fd, "rb", closefd=False) as f:
            yield f, info.st_size
    finally:
        os.close(fd)


def _read_bytes(path: str, limit: int) -> bytes:
    with _bounded_regular_file(path, limit, "not a regular file: skipped, and left alone") as (f, size):
        head = f.readline(contract.CHECKPOINT_HEADER_BYTES)  # the header, so a file that is not a checkpoint is not read on
        data = head
        if contract.checkpoint_header(head.rstrip(b"\n")) is not None:  # no more than fstat said: a file that grew fails its checksum
            data += f.read(max(0, size - len(head)))
    return data


def read_retrying(path: str) -> dict:
    """`read`, retried after each wait in READ_RETRY_SECONDS while it fails with an I/O error
    (EIO, ESTALE: network storage heals); the last error is raised, never taken for corruption.
    A permission error is raised at once: waiting does not change who may read the file."""
    for wait in (*READ_RETRY_SECONDS, None):
        try:
            return read(path)
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as e:
            if wait is None:
                raise
            log.warning("reading checkpoint %s failed (%s): retrying in %.1fs", path, e, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def read_model(path: str, max_bytes: int | None = None) -> dict:
    """A final model file (a plain `torch.save` of a dict: `kuberl_trainer.policy`), bounded and decoded as a
    checkpoint's payload is: a regular file within the load limit, stored zip members, weights_only."""
    limit = load_limit() if max_bytes is None else max_bytes
    with _bounded_regular_file(path, limit, "not a regular file") as (f, size):
        payload = f.read(size)
    _stored_zip(payload)
    try:
        model = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    except Exception as e:  # torch raises many kinds for a file it cannot read; none may run code
        raise CorruptCheckpoint(f"does not load: {_load_error(e)}") from e
    if not isinstance(model, dict):
        raise CorruptCheckpoint(f"holds a {type(model).__name__}, not a model dict")
    overclaimed(model)
    return model


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint paths by name, newest first (valid or not)."""
    try:
        names = [n for n in os.listdir(directory) if NAME.fullmatch(n)]
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in sorted(names, reverse=True)]


def load_newest(directory: str, accept: Callable[[dict], str | None] = lambda _state: None,
                start_over: bool = False, skipped: list[tuple[str, str]] | None = None,
                set_aside: bool = False) -> tuple[str, dict] | None:
    """The newest checkpoint that decodes and that `accept` does not refuse
    (it returns why, or None); others are skipped with a warning naming them
    (and added to `skipped`, as (path, why), for the caller to count), and with
    `set_aside` (a trainer that will save here) moved aside at once.
    When some exist and none is usable: NoUsableCheckpoint, or None when
    `start_over` (and they are moved aside). A format version this trainer does not know raises
    UnknownCheckpointFormat; an I/O error that outlasts the retries is raised."""
    unusable: list[tuple[str, str]] = skipped if skipped is not None else []
    for path in list_checkpoints(directory):
        try:
            state = read_retrying(path)
        except (NotAFile, FileNotFoundError) as e:  # not a checkpoint of ours, or gone: nothing lost
            log.warning("skipping %s: %s", path, e)
            continue
        except CorruptCheckpoint as e:
            log.warning("skipping checkpoint %s: %s", path, e)
            unusable.append((path, str(e)))
            continue
        refused = accept(state)
        if refused is None:
            if set_aside:  # now: the resumed run's next save may take one's name (every everyUpdates)
                _set_aside(unusable)
            return path, state
        _remember(path, False)
        log.warning("skipping checkpoint %s: %s", path, refused)
        unusable.append((path, refused))
    if unusable and not start_over:
        raise NoUsableCheckpoint(directory, unusable)
    if unusable:
        log.warning("none of the %d checkpoint(s) in %s is usable: starting over from zero, as "
                    "spec.checkpoint.whenNoneUsable: StartOver asks", len(unusable), directory)
        _set_aside(unusable)  # now, before a new save of the same name could replace one
    return None


def _set_aside(unusable: list[tuple[str, str]]) -> None:
    """Move each aside; one that cannot be (a full volume, a directory the trainer may not write) stays, said:
    the run goes on from what it loaded, and this is housekeeping."""
    for path, why in unusable:
        try:
            move_aside(path, why)
        except OSError as e:
            log.warning("could not move %s aside (%s): it stays, and a save under its name would replace it", path,
                        e.strerror or e)
        _verified.pop(path, None)


UID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # the API server's metadata.uid


def same_named_jobs(directory: str, job: str) -> list[str]:
    """The newest checkpoint of each earlier job named `job` beside `directory` (their directories are
    `<job>-<uid>`: kuberl.core.names.checkpoint_subdir), newest first. A job deleted and created again
    (to change an immutable field) gets a new uid, so a directory of its own: it starts from zero."""
    parent, own = os.path.split(directory.rstrip(os.sep))
    pattern = re.compile(rf"{re.escape(job)}-{UID}")
    try:
        names = [n for n in os.listdir(parent) if n != own and pattern.fullmatch(n)]
    except OSError:
        return []
    newest = []
    for name in names:
        with contextlib.suppress(OSError):
            found = list_checkpoints(os.path.join(parent, name))
            if found:
                newest.append((os.stat(found[0]).st_mtime, found[0]))
    return [path for _, path in sorted(newest, reverse=True)]


def remove_stale_temps(directory: str) -> list[tuple[str, int]]:
    """Delete write_atomic's temp files in `directory`: at a run's start no writer of this job
    is alive (two generations never run at once), so each was left by a killed one, and each
    may be as large as a checkpoint. Only regular files are touched. Returns what was removed,
    with each one's size."""
    try:
        names = [n for n in os.listdir(directory) if TEMP_NAME.fullmatch(n)]
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                continue
            os.unlink(path)
            removed.append((path, info.st_size))
            log.warning("removed %s (%d bytes): a temp file left by a writer that was killed mid-write", path, info.st_size)
    return removed


def check_writable(directory: str, mountinfo: str = "/proc/self/mountinfo") -> None:
    """Create `directory` and a file in it. A read-only volume raises CheckpointVolumeReadOnly at once when it
    is mounted read-only (a readOnly volume, the claim's access mode: no restart changes it), but
    CheckpointVolumeUnavailable when only its filesystem is, under a read-write mount (the kernel remounted it
    after errors: a new pod re-stages it). Other OS errors are raised as they are."""
    try:
        make_directory(directory)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if e.errno == errno.EROFS:
            try:
                with open(mountinfo) as f:
                    table = f.read(1 << 20)
            except OSError:
                table = ""
            if read_only_by(table, directory) == "filesystem":
                raise CheckpointVolumeUnavailable("creating a file in", directory, e, at_start=True) from e
            raise CheckpointVolumeReadOnly(directory, e) from e
        raise


def read_only_by(mountinfo: str, path: str) -> str | None:
    """Who makes `path` read-only, from /proc/self/mountinfo's text (proc(5)): "mount" when the mount holding it
    is mounted read-only (the kubelet's bind mount of a readOnly volume: configuration), "filesystem" when only
    the filesystem under a read-write mount is (its superblock: what ext4's errors=remount-ro sets after an I/O
    error), None when neither or no mount holds it."""
    target = os.path.realpath(path)
    found = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 7:
            continue
        separator = fields.index("-", 6)
        if len(fields) < separator + 4:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (found is None or len(point) >= len(found[0])):  # the deepest; a later one is stacked on top
            found = (point, fields[5].split(","), fields[separator + 3].split(","))
    if found is None:
        return None
    _, mount_options, super_options = found
    if "ro" in mount_options:
        return "mount"
    return "filesystem" if "ro" in super_options else None


def mismatch(expected: object, found: object, where: str = "state") -> str | None:
    """Where a checkpoint's state `found` differs in kind from `expected` (what this job's
    algorithm holds): a key missing or extra, a tensor or array of another shape or dtype, a
    value of another type; None when alike. An empty dict or a None in `expected` (optimizer
    state before the first step, unset values) takes anything; lists are compared by type only,
    tuples (a record: the episode tracker's arrays, an LSTM's (h, c)) item by item."""
    if expected is None or (isinstance(expected, dict) and not expected):
        return None
    if isinstance(expected, np.ndarray) and expected.shape == () and isinstance(found, np.generic):
        found = np.asarray(found)  # one value: RunningMeanStd of shape () saved scalars until 2026-11-27
    if isinstance(expected, (torch.Tensor, np.ndarray)):
        if type(found) is not type(expected):
            return f"{where} is {type(found).__name__}, not {type(expected).__name__}"
        if tuple(found.shape) != tuple(expected.shape) or found.dtype != expected.dtype:
            return f"{where} is {found.dtype}{list(found.shape)}, this job's is {expected.dtype}{list(expected.shape)}"
        return None
    if isinstance(expected, dict):
        if not isinstance(found, dict):
            return f"{where} is {type(found).__name__}, not a mapping"
        if missing := [k for k in expected if k not in found]:
            return f"{where} lacks {', '.join(map(repr, missing[:5]))}"
        if extra := [k for k in found if k not in expected]:
            # the file's own keys: each shown cut (a 1 MB key made the CheckpointMismatch, and its log line, 1 MB)
            return f"{where} has {', '.join(safetext.one_line(repr(k))[:80] for k in extra[:5])}, which this job's has not"
        return next((m for k in expected if (m := mismatch(expected[k], found[k], f"{where}.{k}"))), None)
    if isinstance(expected, tuple):
        if not isinstance(found, tuple) or len(found) != len(expected):
            return f"{where} is {type(found).__name__}{f' of {len(found)}' if isinstance(found, tuple) else ''}, not a tuple of {len(expected)}"
        return next((m for i, (e, f) in enumerate(zip(expected, found)) if (m := mismatch(e, f, f"{where}[{i}]"))), None)
    numbers, counts = (int, float, np.integer, np.floating), (int, np.integer)
    if isinstance(expected, counts) and not isinstance(expected, (bool, np.bool_)):
        # a count (SAC's and TD3's critic steps, DQN's target clock) is whole: one of 1.5 or NaN in an edited file
        # never came round to TD3's delayed actor step, and the run trained on with its actor as loaded
        alike = isinstance(found, counts) and not isinstance(found, (bool, np.bool_))
    elif isinstance(expected, numbers) and not isinstance(expected, (bool, np.bool_)):
        alike = isinstance(found, numbers) and not isinstance(found, (bool, np.bool_))
    else:
        alike = isinstance(found, type(expected))
    return None if alike else f"{where} is {type(found).__name__}, not {type(expected).__name__}"
