"""Absolute paths under a volume's mountPath in a container's command and args,
rewritten to that volume's directory here, word by word and inside `sh -c` lines."""

from __future__ import annotations

import os
import re

from .sandbox import LocalRunError, host_path

FILE_URL = "file://"  # init_method=file:///shared/pg: a path under a mount after it is the volume's too


# `--name=`, and Hydra's `key.sub=`, `+key=`, `~key=` (a path-free key): its value is a word of its own; `a=b=`
# chains them. One character class without '=': two that overlap ([-+~]*[\w-]*) backtracked quadratically over a
# word of dashes, and each `=` ends one key only one way, so the whole chain is matched in one linear pass.
_ASSIGNMENTS = re.compile(r"^(?:[-+~\w.@\[\]]*=)+")


def in_volumes(argument: str, root: str, mount_paths: list[str]) -> str:
    """Absolute paths under a volume's mountPath, as this host sees them: an argument
    that is a path, a `file://` URL (torch's file rendezvous) or a list of them
    (`/data/a.csv,/data/b.csv`, `/app:/lib`), alone or as an option's `--name=` or a
    Hydra override's `data.dir=` value. Other text (a `python -c` program) stays."""
    assignments = _ASSIGNMENTS.match(argument)  # `a=b=/x`: the keys, then the value
    keys = assignments.group(0) if assignments else ""
    value = argument[len(keys):]
    return keys + (in_volumes_of_words(value, root, mount_paths) if value.startswith(("/", FILE_URL)) else value)


SHELLS = ("sh", "bash", "dash", "ash", "zsh", "ksh")
_SHELL_BEFORE = "\\s'\"=:,;&|()<>`"  # what may precede a path in a shell line (a word's start)
_SAFE_IN_SHELL = re.compile(r"^[\w@%+=:,./-]+$")


def is_shell_line(argv: list[str], i: int) -> bool:
    """argv[i] is the line of `sh -c LINE` (or `bash -ec LINE`, ...)."""
    flag = argv[i - 1] if i >= 2 else ""
    return (os.path.basename(argv[0]) in SHELLS and flag.startswith("-") and not flag.startswith("--")
            and flag.endswith("c") and i == argv.index(flag) + 1)


def _mount_words(mount_paths: list[str]) -> re.Pattern | None:
    """A mountPath starting a word (after a shell's separators, or a `file://`), longest first."""
    mounts = sorted({m.rstrip("/") for m in mount_paths if m.rstrip("/")}, key=len, reverse=True)
    if not mounts:
        return None
    words = "|".join(re.escape(m) for m in mounts)
    return re.compile(rf"(?:(?<=[{_SHELL_BEFORE}])|^|(?<={FILE_URL}))({words})(?=[/{_SHELL_BEFORE}]|$)")


def in_volumes_of_words(value: str, root: str, mount_paths: list[str]) -> str:
    """Each path under a mountPath that starts a word of `value`, as this host sees it (one pass). So
    is an env value's: the manifest's own words, as its command's are (`PYTHONPATH=/app`,
    `OUTPUT_DIR=/shared/out`, `file:///shared/init`); left as written they named this machine's /app,
    or made /shared on it."""
    pattern = _mount_words(mount_paths)
    return value if pattern is None else pattern.sub(lambda found: host_path(root, found.group(1)), value)


def in_volumes_of_line(line: str, root: str, mount_paths: list[str]) -> str:
    """Each word of a shell line that is a path under a mountPath, as this host sees it (one pass:
    a host path put in is never rewritten again)."""
    pattern = _mount_words(mount_paths)
    if pattern is None:
        return line

    def one(found: re.Match) -> str:
        host = host_path(root, found.group(1))
        if not _SAFE_IN_SHELL.match(host):
            raise LocalRunError(f"the shell line {line!r} names {found.group(1)}, whose directory here ({host}) a"
                                " shell would split: run from a path of letters, digits and ._-/ only")
        return host

    return pattern.sub(one, line)
