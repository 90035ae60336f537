"""Checkpoint files: atomic, checksummed, the newest K kept.

A file is `KUBERLCKPT1 <sha256 of payload>\n<torch.save payload>`, written
to a temporary name, fsynced, renamed, and its directory fsynced: a reader
sees a whole checkpoint or none. A truncated or corrupted file fails its
checksum and is skipped, so loading falls back to the previous one.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import tempfile

import torch

log = logging.getLogger(__name__)

MAGIC = b"KUBERLCKPT1 "
NAME = re.compile(r"^ckpt-(\d{10})\.pt$")


class CorruptCheckpoint(ValueError):
    pass


def checkpoint_name(updates: int) -> str:
    return f"ckpt-{updates:010d}.pt"


def write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
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
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def encode(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes) -> dict:
    header, _, payload = data.partition(b"\n")
    if not header.startswith(MAGIC):
        raise CorruptCheckpoint("not a kuberl checkpoint (bad header)")
    if hashlib.sha256(payload).hexdigest().encode() != header[len(MAGIC):]:
        raise CorruptCheckpoint("checksum mismatch (truncated or corrupted)")
    return torch.load(io.BytesIO(payload), weights_only=False)


def save(directory: str, updates: int, state: dict, keep: int) -> str:
    """Write checkpoint `updates` and delete all but the newest `keep`."""
    path = os.path.join(directory, checkpoint_name(updates))
    write_atomic(path, encode(state))
    for old in list_checkpoints(directory)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old)
    return path


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint paths, newest first."""
    try:
        names = [n for n in os.listdir(directory) if NAME.match(n)]
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in sorted(names, reverse=True)]


def load_newest(directory: str) -> tuple[str, dict] | None:
    """The newest checkpoint that passes its checksum; corrupt ones are
    skipped with a warning naming them."""
    for path in list_checkpoints(directory):
        try:
            with open(path, "rb") as f:
                return path, decode(f.read())
        except (CorruptCheckpoint, OSError, RuntimeError, EOFError) as e:
            log.warning("skipping checkpoint %s: %s", path, e)
    return None
