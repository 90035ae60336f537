"""A per-rank replay buffer: preallocated arrays, vectorised n-step sampling.

Storage is one row per vector step and one column per env, so each env's
transitions form a contiguous stream in time. Row t holds the observation
the action was taken on, the action, and what the step returned (reward,
terminated, truncated), plus `valid`: False on gymnasium's next-step
autoreset rows (the step after an episode ended, whose action is ignored).
No next observation is stored: the successor of row t is row t+1's
observation, which after an episode's last step is that episode's FINAL
observation (gymnasium returns it and resets one step later). So truncated
episodes bootstrap from their final observation, terminated ones do not
bootstrap, autoreset rows are never sampled, and nothing is stored twice.

Frame stacks (`frame_stack=k`, observations shaped (k, *frame)): only the
newest frame of each observation is kept (uint8 stays uint8) and stacks are
rebuilt by index, repeating an episode's first frame before its start, as
gymnasium's FrameStackObservation(padding_type="reset") does. Memory per
transition is then one frame plus a few bytes (see `bytes_per_transition`). The arrays and their sizes
are kuberl.core.replaymemory's `Replay.layout`, which the trainer weighs against the rank's memory before
allocating and `kuberl validate` against the pod's limit before any pod.

Buffer contents are per rank and are not part of the replicated checkpoint;
`state_dict` exists for deterministic mode, which gathers per-rank state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kuberl.core.replaymemory import Replay


@dataclass
class Batch:
    """Sampled n-step transitions, numpy arrays with a leading batch axis B.

    The TD target is `returns + discount * max/double-Q(next_obs)`; `discount`
    is gamma**m for m included rewards, or 0 when the episode terminated
    within them."""

    obs: np.ndarray  # (B, *obs_shape)
    actions: np.ndarray  # (B, *action_shape)
    returns: np.ndarray  # (B,) float32, discounted sum of up to n rewards
    discount: np.ndarray  # (B,) float32
    next_obs: np.ndarray  # (B, *obs_shape)


def n_step_returns(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns of the windows starting at each row's first column.

    rewards, terminated, truncated: (B, n), the n steps following each start
    (start included). Rewards stop after the first terminated or truncated
    step. Returns (returns, discount, steps): the discounted reward sum,
    gamma**steps or 0 if it ended by termination, and the number of steps
    included (the bootstrap observation is `steps` rows after the start)."""
    batch, n = rewards.shape
    returns = np.zeros(batch, np.float64)
    scale = np.ones(batch, np.float64)
    alive = np.ones(batch, bool)
    steps = np.zeros(batch, np.int64)
    ended_terminal = np.zeros(batch, bool)
    for k in range(n):
        returns += np.where(alive, scale * rewards[:, k], 0.0)
        steps += alive
        ended_terminal |= alive & terminated[:, k].astype(bool)
        scale = np.where(alive, scale * gamma, scale)
        alive &= ~(terminated[:, k].astype(bool) | truncated[:, k].astype(bool))
    discount = np.where(ended_terminal, 0.0, scale)
    return returns.astype(np.float32), discount.astype(np.float32), steps


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype | type = np.float32,
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | type = np.int64,
        n_step: int = 1,
        frame_stack: int = 1,
    ):
        if frame_stack > 1 and (not obs_shape or obs_shape[0] != frame_stack):
            raise ValueError(f"frame_stack={frame_stack} needs observations shaped ({frame_stack}, ...), got {obs_shape}")
        self.num_envs, self.n_step, self.frame_stack = num_envs, n_step, frame_stack
        self.obs_shape = tuple(obs_shape)
        planned = Replay(capacity, num_envs, self.obs_shape, np.dtype(obs_dtype).name, tuple(action_shape),
                         np.dtype(action_dtype).name, n_step, frame_stack)
        for name, (shape, dtype) in planned.layout().items():  # previous_valid zeros: the very first row counts as first
            setattr(self, name, np.zeros(shape, dtype))
        self.rows = self.obs.shape[0]
        self.added = 0  # vector steps ever added; the newest is row (added - 1) % rows
        self.real_added = 0  # real transitions ever added (autoreset rows are none): what learningStarts counts

    @classmethod
    def of(cls, planned: Replay) -> ReplayBuffer:
        """The buffer replaymemory's `planned` describes (and budget weighed)."""
        return cls(*planned.args)

    # -- writing ------------------------------------------------------------

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray) -> None:
        """One vector step: `obs` is what the actions were taken on, the rest
        is what the step returned; `valid` is False on autoreset steps."""
        row = self.added % self.rows
        self.obs[row] = obs[:, -1] if self.frame_stack > 1 else obs
        self.actions[row] = actions
        self.rewards[row] = rewards
        self.terminated[row] = terminated
        self.truncated[row] = truncated
        self.valid[row] = valid
        # an env starts an episode on the row after its autoreset row
        self.first[row] = ~self.previous_valid
        self.previous_valid = np.asarray(valid, bool).copy()
        self.added += 1
        self.real_added += int(self.previous_valid.sum())

    # -- reading ------------------------------------------------------------

    @property
    def oldest(self) -> int:
        return max(0, self.added - self.rows)

    def start_range(self) -> tuple[int, int]:
        """Logical rows [lo, hi) that may start a transition: the n rows after
        each are written and the frames before it are not overwritten."""
        return self.oldest + self.frame_stack - 1, self.added - self.n_step

    def __len__(self) -> int:
        """Transitions held (autoreset rows included)."""
        return (self.added - self.oldest) * self.num_envs

    def can_sample(self) -> bool:
        """A valid start exists. Called before every sample, so it must not
        scan the buffer: autoreset rows never follow each other in an env's
        stream (the step after a reset is a real one), so the first two start
        rows settle it; the full scan remains for hand-made contents only."""
        lo, hi = self.start_range()
        if hi <= lo:
            return False
        if self.valid[np.arange(lo, min(hi, lo + 2)) % self.rows].any():
            return True
        return bool(self.valid[np.arange(lo, hi) % self.rows].any())

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Uniform (logical row, env) pairs over valid starts, by rejection."""
        lo, hi = self.start_range()
        if not self.can_sample():
            raise ValueError("the replay buffer holds no sampleable transition yet")
        rows = np.empty(0, np.int64)
        envs = np.empty(0, np.int64)
        while len(rows) < batch_size:
            want = 2 * (batch_size - len(rows)) + 8
            r = rng.integers(lo, hi, size=want)
            e = rng.integers(0, self.num_envs, size=want)
            keep = self.valid[r % self.rows, e]
            rows, envs = np.concatenate([rows, r[keep]]), np.concatenate([envs, e[keep]])
        return rows[:batch_size], envs[:batch_size]

    def observations(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Observations at logical `rows`, stacks rebuilt for frame_stack > 1."""
        if self.frame_stack == 1:
            return self.obs[rows % self.rows, envs]
        k = self.frame_stack
        sources = np.empty((len(rows), k), np.int64)  # each stack's rows, oldest first
        source = sources[:, k - 1] = rows
        for j in range(k - 2, -1, -1):
            # step back a row unless the current source is its episode's first
            at_start = self.first[source % self.rows, envs]
            source = sources[:, j] = np.where(at_start, source, source - 1)
        # the frames in one gather (a draw's whole copy, on the learner's critical path on a GPU)
        return self.obs[sources % self.rows, envs[:, None]]

    def sample(self, batch_size: int, gamma: float, rng: np.random.Generator) -> Batch:
        return self.transitions(*self.sample_indices(batch_size, rng), gamma)

    def transitions(self, rows: np.ndarray, envs: np.ndarray, gamma: float) -> Batch:
        """The n-step transitions starting at logical `rows` of `envs`."""
        window = (rows[:, None] + np.arange(self.n_step)) % self.rows
        returns, discount, steps = n_step_returns(
            self.rewards[window, envs[:, None]],
            self.terminated[window, envs[:, None]],
            self.truncated[window, envs[:, None]],
            gamma,
        )
        # observations and next observations in one gather
        both = self.observations(np.concatenate([rows, rows + steps]), np.concatenate([envs, envs]))
        return Batch(
            obs=both[:len(rows)],
            actions=self.actions[rows % self.rows, envs],
            returns=returns,
            discount=discount,
            next_obs=both[len(rows):],
        )

    # -- size and state -----------------------------------------------------

    @property
    def nbytes(self) -> int:
        arrays = (self.obs, self.actions, self.rewards, self.terminated, self.truncated, self.valid, self.first,
                  self.previous_valid)
        return sum(a.nbytes for a in arrays)

    @property
    def bytes_per_transition(self) -> float:
        """The rows' bytes per transition (previous_valid, one flag per env, is not a transition's)."""
        return (self.nbytes - self.previous_valid.nbytes) / (self.rows * self.num_envs)

    def state_dict(self) -> dict:
        held = np.arange(self.oldest, self.added) % self.rows
        arrays = {name: getattr(self, name)[held].copy()
                  for name in ("obs", "actions", "rewards", "terminated", "truncated", "valid", "first")}
        return {"added": self.added, "real_added": self.real_added, "previous_valid": self.previous_valid.copy(),
                "arrays": arrays}

    def state_problem(self, state: object, where: str = "state.replay") -> str | None:
        """Why `state` (a checkpoint's state_dict, the tenant's file) cannot be loaded into this buffer; None where it
        can: a count that is no whole number from 0, or arrays other than its rows held (min(added, rows)) of this
        buffer's row shapes and dtypes. Weighed without making any array."""
        if not isinstance(state, dict) or not isinstance(state.get("arrays"), dict):
            return f"{where} is not a replay buffer's state"
        added, real = state.get("added"), state.get("real_added", 0)
        if type(added) is not int or added < 0 or type(real) is not int or real < 0:
            return f"{where}.added or real_added is not a whole number from 0"
        held = min(added, self.rows)
        previous = state.get("previous_valid")
        if not (isinstance(previous, np.ndarray) and previous.shape == self.previous_valid.shape):
            return f"{where}.previous_valid is not one flag per env ({self.num_envs})"
        names = ("obs", "actions", "rewards", "terminated", "truncated", "valid", "first")
        if sorted(state["arrays"]) != sorted(names):
            return f"{where}.arrays are not {', '.join(names)}"
        for name in names:
            own, found = getattr(self, name), state["arrays"][name]
            if not (isinstance(found, np.ndarray) and found.dtype == own.dtype and found.shape == (held, *own.shape[1:])):
                shown = f"{found.dtype}{list(found.shape)}" if isinstance(found, np.ndarray) else type(found).__name__
                return f"{where}.arrays.{name} is {shown}, this buffer's {held} rows held are {own.dtype}{[held, *own.shape[1:]]}"
        return None

    def load_state_dict(self, state: dict) -> None:
        self.added = state["added"]
        self.previous_valid = state["previous_valid"].copy()
        held = np.arange(self.oldest, self.added) % self.rows
        for name, values in state["arrays"].items():
            getattr(self, name)[held] = values
        # saved before the count existed: the rows held, each real one, and any rows already overwritten, whole
        self.real_added = state.get("real_added", int(self.valid[held].sum()) + self.oldest * self.num_envs)
