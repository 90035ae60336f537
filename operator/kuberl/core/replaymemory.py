"""The bytes a rank's replay buffer (DQN's, SAC's, TD3's) takes, and whether they fit the memory its pod gives it.
One formula for the trainer (kuberl_trainer.replay.ReplayBuffer allocates exactly `Replay.layout`'s arrays,
and kuberl_trainer.budget weighs them before) and for `kuberl validate` and the operator, which know an Atari
id's frames (atarikwargs) and, with gymnasium, a registered env's spaces (envspaces) before any pod runs.
Pure: no numpy, no gymnasium (the operator's image has neither).

How the buffer lays transitions out (replay.py): one row per vector step, one column per env; the
observation the action was taken on only (a transition's next observation is the next row's), and of a
frame stack only the newest frame (stacks are rebuilt by index); the action, a float32 reward and four
bool flags beside. An Atari transition (84x84 uint8 frames, Discrete actions) is 7,056 + 8 + 4 + 4 =
7,072 bytes, whatever frameStack is.

Why a refusal, and before the buffer is made: numpy's zeros are reserved, not touched, so an oversized
buffer is not refused when it is made; the kernel OOM-kills the rank once the buffer has filled past the
container's limit, hours in, the gang restarts and is killed there again. What is weighed is what the run
can fill: the whole buffer, or less where totalTimesteps ends the run first (`budget_rows`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from . import atarikwargs
from .validation import Problem, quantity_value

GIB = 1 << 30
# What a rank holds besides its buffer when it weighs it (torch, gymnasium, its envs and networks): ~300 MiB for
# CartPole's DQN and Pendulum's SAC on CPU here, more with CUDA. `kuberl validate` and the operator, which cannot
# measure it, take less, so they refuse only what the trainer, which measures it, would refuse too.
RANK_BASELINE_BYTES = 256 << 20
BUFFER_FIELDS = {"dqn": "spec.dqn.bufferSize", "sac": "spec.sac.bufferSize", "td3": "spec.td3.bufferSize"}
FILLED_LATER = ("; it is reserved at start and filled as the run goes, its whole size in use once full: a run"
                " started with it would be OOM-killed then, hours in, and again after every gang restart")

Layout = dict[str, tuple[tuple[int, ...], str]]


def itemsize(dtype: str) -> int:
    """Bytes per element of a numpy dtype by its name (np.dtype(x).name: bool, uint8, float32, int64, ...)."""
    if dtype == "bool":
        return 1
    found = re.fullmatch(r"(?:u?int|float|complex)([0-9]+)", dtype)
    if found is None:
        raise ValueError(f"not a numeric dtype name: {dtype!r}")
    return int(found.group(1)) // 8


def nbytes(layout: Layout) -> int:
    """The bytes of a layout's arrays ((shape, dtype name) by array name)."""
    return sum(math.prod(shape) * itemsize(dtype) for shape, dtype in layout.values())


def gib(size: int) -> str:
    return f"{max(size, 0) / GIB:.1f} GiB"


@dataclass(frozen=True)
class Replay:
    """What one rank's replay buffer is made of: ReplayBuffer(*replay.args) allocates `layout()`."""

    capacity: int  # bufferSize, in transitions
    num_envs: int
    obs_shape: tuple[int, ...]  # one env's observation, as the env gives it (frame stacks whole)
    obs_dtype: str = "float32"
    action_shape: tuple[int, ...] = ()
    action_dtype: str = "int64"
    n_step: int = 1
    frame_stack: int = 1  # > 1: observations are (frame_stack, *frame) stacks, and one frame is stored
    most_rows: int | None = None  # the most rows the run can write (`budget_rows`); None: no bound known

    @property
    def args(self) -> tuple:
        return (self.capacity, self.num_envs, self.obs_shape, self.obs_dtype, self.action_shape, self.action_dtype,
                self.n_step, self.frame_stack)

    @property
    def min_rows(self) -> int:
        """Rows for one n-step window behind the frame-stacking margin, whatever the capacity."""
        return self.n_step + self.frame_stack + 1

    def layout(self, rows: int | None = None) -> Layout:
        """Each array's (shape, dtype name), at `rows` rows (else the capacity's); `first` marks an episode's
        first row, `previous_valid` is the last row's `valid`."""
        rows = max(math.ceil(self.capacity / self.num_envs), self.min_rows) if rows is None else rows
        stored = self.obs_shape[1:] if self.frame_stack > 1 else self.obs_shape
        flags = {name: ((rows, self.num_envs), "bool") for name in ("terminated", "truncated", "valid", "first")}
        return {"obs": ((rows, self.num_envs, *stored), self.obs_dtype),
                "actions": ((rows, self.num_envs, *self.action_shape), self.action_dtype),
                "rewards": ((rows, self.num_envs), "float32"), **flags,
                "previous_valid": ((self.num_envs,), "bool")}

    @property
    def rows(self) -> int:
        return self.layout()["obs"][0][0]

    @property
    def nbytes(self) -> int:
        """The bytes allocated (what numpy reserves)."""
        return nbytes(self.layout())

    @property
    def peak_bytes(self) -> int:
        """The bytes in use once the run has written all it can: the whole buffer, or the `most_rows` its budget
        fills (numpy's zeros are reserved, and a page is only taken when a row in it is first written)."""
        return self.nbytes if self.most_rows is None else nbytes(self.layout(min(self.rows, self.most_rows)))

    def what(self, env_id: str) -> str:
        """The buffer, for a refusal: its capacity, and where the budget fills less of it, how much."""
        said = f"a replay buffer of {self.capacity:,} transitions of {env_id}"
        if self.peak_bytes < self.nbytes:
            said += f", of which totalTimesteps fills at most {self.most_rows * self.num_envs:,} a rank,"
        return said

    def largest_within(self, budget: int) -> int:
        """The largest capacity (a whole number of rows) whose buffer takes at most `budget` bytes; 0 if none."""
        fixed = nbytes(self.layout(0))
        per_row = nbytes(self.layout(1)) - fixed
        rows = (budget - fixed) // per_row
        return rows * self.num_envs if rows >= self.min_rows else 0

    def describe(self) -> str:
        """The transition as stored, for a refusal: '7,072 bytes per transition (one (84, 84) uint8 frame of each stack of 4, …)'."""
        stored = self.obs_shape[1:] if self.frame_stack > 1 else self.obs_shape
        kind = f"one {stored} {self.obs_dtype} frame of each stack of {self.frame_stack}" if self.frame_stack > 1 \
            else f"a {self.obs_shape} {self.obs_dtype} observation"
        per_transition = nbytes(self.layout(1)) - nbytes(self.layout(0))
        return f"{per_transition // self.num_envs:,} bytes per transition ({kind}, its action, reward and flags)"


def budget_rows(total_timesteps: int, world_size: int, num_envs: int, train_frequency: int) -> int:
    """The most rows one rank writes before the run's budget is spent. Every rank takes the same vector steps
    (ceil(trainFrequency / numEnvs) an update, updates in lockstep), and at least about half of a row's transitions
    count toward totalTimesteps: an env's autoreset row (which counts none) only follows a step that ended an
    episode, never another autoreset row. So the updates before the last held fewer than 2 x totalTimesteps +
    numEnvs x worldSize transitions, and the last adds one update's rows."""
    vector_steps = math.ceil(train_frequency / num_envs)
    return math.ceil(2 * total_timesteps / (world_size * num_envs)) + 1 + vector_steps


def for_algorithm(algorithm: str, hp: Any, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: str,
                  action_shape: tuple[int, ...], frame_stack: int = 1, total_timesteps: int | None = None,
                  world_size: int = 1) -> Replay:
    """The replay buffer `algorithm`'s trainer makes (dqn: Discrete actions as int64, n-step windows;
    sac, td3: float32 action vectors, one-step), from its hyperparameters (spec.dqn / spec.sac / spec.td3); with the job's
    totalTimesteps and world size, bounded by the rows they can fill (`budget_rows`)."""
    most = None if total_timesteps is None else budget_rows(total_timesteps, world_size, num_envs, hp.train_frequency)
    if algorithm == "dqn":
        return Replay(hp.buffer_size, num_envs, tuple(obs_shape), obs_dtype, (), "int64", hp.n_step, frame_stack, most)
    if algorithm in ("sac", "td3"):
        return Replay(hp.buffer_size, num_envs, tuple(obs_shape), obs_dtype, tuple(action_shape), "float32", 1,
                      frame_stack, most)
    raise ValueError(f"{algorithm!r} keeps no replay buffer")


def too_large(field: str, what: str, planned: int, share: int, how: str, fits: int | None = None,
              filled_later: bool = False) -> str:
    """The refusal of a buffer of `planned` bytes over a rank's `share`, naming `field` first; `fits`: the largest
    value of the field that would fit (a replay buffer's capacity), 0 where none would."""
    if fits is None:
        remedy = f"lower {field} or raise the pod's resources.limits.memory"
    elif fits:
        remedy = f"at most {fits:,} would fit: lower {field} or raise the pod's resources.limits.memory"
    else:
        remedy = f"no {field} would fit: raise the pod's resources.limits.memory"
    return (f"{field}: {what} takes {gib(planned)} per rank, more than the {gib(share)} it may use ({how}); {remedy}"
            + (FILLED_LATER if filled_later else ""))


# --- the pod's limit, as a spec states it (kuberl validate, the operator) ----------------------------------


def memory_limit(spec: Any) -> tuple[int, str] | None:
    """(bytes, field) of the trainer container's memory limit, as render lays it out: a `trainer` container in
    spec.template.spec.containers that sets `resources` replaces ours (spec.resources) whole; None where neither
    sets limits.memory, or it is not a quantity read here."""
    limits, field = dict(spec.resources.limits), "spec.resources.limits.memory"
    template_spec = spec.template.get("spec") if isinstance(spec.template, Mapping) else None
    containers = template_spec.get("containers") if isinstance(template_spec, Mapping) else None
    for i, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, Mapping) and container.get("name") == "trainer" and "resources" in container:
            resources = container.get("resources")
            given = resources.get("limits") if isinstance(resources, Mapping) else None
            limits = dict(given) if isinstance(given, Mapping) else {}
            field = f"spec.template.spec.containers[{i}].resources.limits.memory"
    value = limits.get("memory")
    if value is None or isinstance(value, bool):
        return None
    try:
        size = quantity_value(value if isinstance(value, int) else str(value))
    except (AttributeError, ValueError, ArithmeticError):  # not a quantity: its own rule says so
        return None
    return (int(size), field) if size.is_finite() and size > 0 and size < Decimal(2) ** 80 else None


def job_replay(spec: Any) -> Replay | None:
    """The replay buffer a parsed job's trainer would make where it is known without making the env: an Atari id's
    frames (atarikwargs.observation); None for other envs (envspaces makes a gymnasium one to tell), an algorithm
    that keeps none, or kwargs the trainer would refuse (their own rule says so)."""
    if spec.trainer != "kuberl" or spec.algorithm not in BUFFER_FIELDS or spec.env is None:
        return None
    if not atarikwargs.is_ale_id(spec.env.id) or atarikwargs.kwargs_problem(dict(spec.env.kwargs), spec.env.backend):
        return None
    observation = atarikwargs.observation(dict(spec.env.kwargs), spec.env.backend)
    if observation is None:
        return None
    shape, dtype = observation
    return for_algorithm(spec.algorithm, spec.hyperparameters, spec.env.num_envs, shape, dtype, (), shape[0],
                         spec.total_timesteps, spec.world_size)


def iteration(train_frequency: int, gradient_steps: int, num_envs: int) -> tuple[int, int, int]:
    """An off-policy iteration's size (the trainer's OffPolicyAlgorithm): ceil(trainFrequency / numEnvs) vector
    steps, the env steps they are per rank, and gradient steps in proportion, so the update-to-data ratio
    gradientSteps / trainFrequency holds whatever numEnvs is."""
    vector_steps = max(1, math.ceil(train_frequency / num_envs))
    env_steps = vector_steps * num_envs
    return vector_steps, env_steps, max(1, round(gradient_steps * env_steps / train_frequency))


def weighed(spec: Any) -> tuple:
    """What `spec_problem` weighs of a parsed job (the buffer its trainer makes, the memory limit and the processes
    sharing it), as plain values: two specs alike in these are judged alike."""
    replay = job_replay(spec)
    limit = memory_limit(spec) if replay is not None else None
    return (spec.algorithm, None if replay is None else (*replay.args, replay.most_rows),
            None if limit is None else limit[0], spec.procs)


def spec_problem(spec: Any, replay: Replay | None) -> Problem | None:
    """A job's replay buffer (`replay`, from the env's spaces as the trainer will see them) over what each of its
    pod's processes may use: its trainer container's memory limit (`memory_limit`) over spec.procs, less
    RANK_BASELINE_BYTES; None where it fits, there is no buffer, or the spec sets no limit."""
    limit = memory_limit(spec) if replay is not None else None
    if limit is None:
        return None
    field, (size, limit_field) = BUFFER_FIELDS[spec.algorithm], limit
    procs = max(1, spec.procs)
    share = size // procs - RANK_BASELINE_BYTES
    planned = replay.peak_bytes
    if planned <= share:
        return None
    how = (f"{limit_field} {gib(size)}" + (f" shared by the pod's {procs} processes" if procs > 1 else "")
           + f", less the {RANK_BASELINE_BYTES >> 20} MiB at least that a rank holds besides (torch, its envs); "
           + replay.describe())
    message = too_large(field, replay.what(spec.env.id), planned, share, how, replay.largest_within(share), filled_later=True)
    return Problem(field, message.removeprefix(f"{field}: "))
