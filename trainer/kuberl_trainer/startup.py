"""How long a rank takes from its process's launch to its first env step, by phase.

A CartPole solve lasts seconds, so startup is a real share of it: one line per
rank says where it went (python and imports, rendezvous, CUDA context, envs,
networks, metrics server and resume), and `make bench` reports it beside SB3's.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import threading
import time
import typing
import warnings

from kuberl.core import safetext


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """A Python warning as one log line: its category, its text without colours (gymnasium colours its own), where
    it was raised. Python's own is two lines, the second the source line that raised it (`  logger.deprecation(`),
    and every rank of a `kuberl run` printed both, the colours as literal `\\x1b[33m`."""
    return f"{category.__name__}: {safetext.without_colours(str(message)).strip()} ({os.path.basename(filename)}:{lineno})\n"


def one_line_warnings() -> None:
    """Python's warnings shown as `warning_line`s on stderr (or the file a caller gives), for a pod's launch."""
    def show(message, category, filename, lineno, file=None, line=None):  # warnings.showwarning's signature
        with contextlib.suppress(OSError, ValueError):  # as Python's own: a closed stream loses the warning, not the rank
            (file if file is not None else sys.stderr).write(warning_line(message, category, filename, lineno))

    warnings.showwarning = show


def one_write_per_line(*streams: typing.TextIO) -> None:
    """Each line of `streams` written in one write: PYTHONUNBUFFERED (every pod's env) makes print() two writes,
    the text and its newline, and ranks sharing a pod's stdout (torchrun's) merged their lines between them."""
    for stream in streams:
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)


def process_age() -> float | None:
    """Seconds since this process was launched (Linux: /proc, 10 ms resolution); None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime in clock ticks since boot
    except (OSError, ValueError, IndexError):
        return None


class Startup:
    """Phase marks on one clock; the first phase runs from the process's launch."""

    def __init__(self) -> None:
        now = time.monotonic()
        age = process_age()
        self.launched = now - max(age, 0.0) if age is not None else now
        self.marks: list[tuple[str, float]] = [("python and imports", now)]
        self.done = False

    def mark(self, phase: str, at: float | None = None) -> None:
        """`phase` ended now, or at `at` (time.monotonic())."""
        self.marks.append((phase, time.monotonic() if at is None else at))

    def seconds(self) -> dict[str, float]:
        """Each phase's duration, in order, and "total": launch to the last mark."""
        durations, previous = {}, self.launched
        for phase, at in self.marks:
            durations[phase] = at - previous
            previous = at
        durations["total"] = previous - self.launched
        return durations

    def line(self, rank: int) -> str:
        seconds = self.seconds()
        total = seconds.pop("total")
        phases = ", ".join(f"{phase} {value:.2f}" for phase, value in seconds.items())
        return f"kuberl trainer: rank {rank} ready to step {total:.2f} s after launch ({phases})"


def import_in_background(module: str) -> threading.Thread:
    """Start importing `module` on a daemon thread. It makes progress while this
    thread waits outside the GIL (creating the CUDA context, ale-py's seeded reset
    on its pool threads); a later `import` of the same module waits
    for it instead of starting over (Python's per-module import lock). A failed
    import here is left to fail again, with its traceback, where it is needed."""

    def load() -> None:
        with contextlib.suppress(Exception):  # the importer on the main thread reports it
            importlib.import_module(module)

    thread = threading.Thread(target=load, name=f"import {module}", daemon=True)
    thread.start()
    return thread
