"""The CPU seconds of one call, for a test that bounds a pathological cost no count of work stands for (a regular
expression backtracking inside the re module). Prefer a count (calls made, nodes walked, elements read) wherever
one exists: a timed bound is the last resort.

Measured as this thread's CPU time with the garbage collector off: a loaded machine stretches the wall clock, not
this; another thread of the pytest worker (torch's OpenMP pool spinning after an earlier test) counts in the
process's CPU time, and a collection of the worker's whole heap, triggered by the call's allocations, is no cost
of the call's own."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def cpu_seconds(call: Callable[..., T], *args: Any) -> tuple[T, float]:
    """What `call(*args)` returns, and the CPU seconds this thread spent in it, the garbage collector held off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.thread_time()
        result = call(*args)
        return result, time.thread_time() - started
    finally:
        if collecting:
            gc.enable()
