"""Whether a rank's preallocated buffers (PPO's rollout, DQN's replay) and its
networks fit the memory it may use, checked before they are allocated.

Why before: numpy's zeros are only reserved, so an oversized buffer is not
refused when it is made; the kernel kills the rank once the buffer has
filled past the container's limit, minutes or hours in, and the operator
restarts it to be killed again. A spec that can never fit fails at once
instead, naming its fields (a ConfigError, exit 78, never retried); a
replay buffer's refusal also names the largest bufferSize that fits. Its
bytes are kuberl.core.replaymemory's formula, which `kuberl validate` and
the operator weigh against the pod's limit too, before any pod.

A rank's share is the container's memory limit (the cgroup's, read under
Dist.cgroup, else the machine's RAM) divided among the ranks the pod runs (LOCAL_WORLD_SIZE),
less what this process already holds (torch, the envs, the networks).
The check is a floor: the update's own temporaries come on top.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable

import numpy as np
import torch
from kuberl.core import replaymemory
from kuberl.core.replaymemory import Replay

from . import paths
from .checkpoint import memory_limit
from .distributed import CGROUP_ROOT, Dist

GIB = replaymemory.GIB


class BufferTooLarge(ValueError):
    """A buffer the spec asks for cannot fit this rank's memory; the message starts with the fields."""


def nbytes(layout: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
    """The bytes of the arrays a buffer's `layout()` names ((shape, dtype) by name)."""
    return sum(math.prod(shape) * dtype.itemsize for shape, dtype in layout.values())


def resident_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm); 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def sharing_ranks(ctx: Dist) -> tuple[int, str]:
    """(how many ranks share the memory this rank's limit bounds, who they are): its pod's processes; under
    `kuberl run` every rank of the run, whose pods are processes of this one machine (its RAM, or the cgroup
    kuberl run itself runs in)."""
    if paths.on_this_machine():
        return ctx.world_size, "the run's {} ranks on this machine (kuberl run)"
    return ctx.local_world_size, "the pod's {} ranks"


def rank_share(local_world_size: int, limit: int | None = None, resident: int | None = None,
               cgroup: str = CGROUP_ROOT, sharers: str = "the pod's {} ranks") -> tuple[int, str]:
    """(bytes this rank's buffers may take, how that was reckoned); the limit is read under `cgroup` unless given,
    split among `local_world_size` ranks (`sharers` says whose)."""
    limit = memory_limit(cgroup) if limit is None else limit
    resident = resident_bytes() if resident is None else resident
    ranks = max(1, local_world_size)
    share = limit // ranks - resident
    how = (f"{limit / GIB:.1f} GiB of memory, the container's limit or else the machine's"
           + (f", shared by {sharers.format(ranks)}" if ranks > 1 else "")
           + f", less the {resident / GIB:.2f} GiB this rank holds already")
    return share, how


def check_fits(fields: str, what: str, planned: int, local_world_size: int,
               limit: int | None = None, resident: int | None = None, cgroup: str = CGROUP_ROOT,
               sharers: str = "the pod's {} ranks") -> None:
    """Raise BufferTooLarge when `planned` bytes exceed this rank's share."""
    share, how = rank_share(local_world_size, limit, resident, cgroup, sharers)
    if planned > share:
        raise BufferTooLarge(replaymemory.too_large(fields, what, planned, share, how))


def check_replay(planned: Replay, algorithm: str, env_id: str, ctx: Dist, resident: int | None = None) -> None:
    """Raise BufferTooLarge, naming spec.<algorithm>.bufferSize and the largest that fits, when the replay buffer
    `planned`, as far as the run can fill it (Replay.peak_bytes), exceeds this rank's share of its container's
    memory (read under ctx.cgroup, split as `sharing_ranks` says)."""
    ranks, sharers = sharing_ranks(ctx)
    share, how = rank_share(ranks, None, resident, ctx.cgroup, sharers)
    if planned.peak_bytes > share:
        field = replaymemory.BUFFER_FIELDS[algorithm]
        raise BufferTooLarge(replaymemory.too_large(
            field, planned.what(env_id), planned.peak_bytes, share, f"{how}; {planned.describe()}",
            planned.largest_within(share), filled_later=True))


def check_networks(field: str, what: str, make: Callable[[], torch.nn.Module], ctx: Dist) -> None:
    """Raise BufferTooLarge, naming `field` (the algorithm's hiddenSizes), where the networks `make` builds cannot fit
    this rank's share of memory, weighed on torch's meta device (shapes, no memory) before they are made: torch writes
    each layer as it makes it, and hiddenSizes at its bounds (8 layers of 65,536) is 60 to 90 billion weights, for
    which the kernel killed the rank, restarted as a crash to be killed again. A floor: on the CPU each weight is held
    with its gradient and Adam's two moments (a target's copy comes on top); for a GPU they are made here first."""
    with torch.device("meta"):
        made = make()
    weights = sum(t.numel() for t in itertools.chain(made.parameters(), made.buffers()))
    on_host = ctx.device.type == "cpu"
    held = ", each with its gradient and Adam's two moments" if on_host else ", made here before they move to the GPU"
    ranks, sharers = sharing_ranks(ctx)
    check_fits(field, f"holding {what} ({weights:,} weights{held})", 4 * (4 if on_host else 1) * weights, ranks,
               cgroup=ctx.cgroup, sharers=sharers)
