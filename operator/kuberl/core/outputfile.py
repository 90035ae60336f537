"""Why a file a command was asked to write (`kuberl plot -o`, `kuberl eval --video/--export`) could not be written,
said before any work is done: a wrong suffix was refused only after it, a missing directory in a traceback."""

from __future__ import annotations

import os


def output_problem(flag: str, path: str | None, suffix: str | None = None) -> str | None:
    """The refusal of `flag path` ("-o x.svg: only .png is written"), or None when `path` is None or can be written;
    `suffix`, where given, is the only one the command writes (compared without case)."""
    if path is None:
        return None
    if suffix is not None and not path.lower().endswith(suffix):
        return f"{flag} {path}: only {suffix} is written"
    if os.path.isdir(path):
        return f"{flag} {path}: is a directory; name a file"
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        return f"{flag} {path}: no directory {parent}"
    if not os.access(parent, os.W_OK):
        return f"{flag} {path}: {parent} is not writable"
    return None
