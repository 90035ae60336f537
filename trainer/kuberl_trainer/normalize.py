"""Running mean/variance shared by every rank.

Each rank sends its rollout's raw moments (count, sum, sum of squares) in
the update's one all-reduce; every rank then merges the same global moments,
so the normalisers stay identical without a collective of their own. Within
a rollout a rank acts with `StepStatistics`: those statistics plus its own
observations so far, added before they are normalised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunningMeanStd:
    shape: tuple[int, ...] = ()
    epsilon: float = 1e-8
    clip: float = 10.0
    mean: np.ndarray = field(init=False)
    var: np.ndarray = field(init=False)
    count: float = 0.0

    def __post_init__(self) -> None:
        self.mean = np.zeros(self.shape, np.float64)
        self.var = np.ones(self.shape, np.float64)

    @property
    def size(self) -> int:
        """Length of `moments()`: count, sums, sums of squares."""
        return 1 + 2 * int(np.prod(self.shape, dtype=np.int64))

    @staticmethod
    def moments(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Flat [count, sum..., sumsq...] of samples x (..., *shape), float64."""
        flat = x.reshape(-1, *shape).astype(np.float64)
        return np.concatenate([[flat.shape[0]], flat.sum(0).ravel(), np.square(flat).sum(0).ravel()])

    def merge(self, moments: np.ndarray) -> None:
        """Fold in global moments (already summed over ranks): Chan's parallel update."""
        n = int(np.prod(self.shape, dtype=np.int64))
        count = float(moments[0])
        if count <= 0:
            return
        batch_mean = (moments[1 : 1 + n] / count).reshape(self.shape)
        batch_var = np.maximum(moments[1 + n :].reshape(self.shape) / count - np.square(batch_mean), 0.0)
        total = self.count + count
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * count + np.square(delta) * self.count * count / total
        # arrays still when of shape () (the return normaliser): numpy's arithmetic on 0-d arrays gives scalars,
        # which a checkpoint keeps as such and the resume's check (checkpoint.mismatch) refused
        self.mean = np.asarray(self.mean + delta * count / total)
        self.var = np.asarray(m2 / total)
        self.count = total

    def normalize(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        scaled = (x - self.mean) / np.sqrt(self.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip, out=out)

    def scale(self, x: np.ndarray) -> np.ndarray:
        """Divide by the std only (rewards keep their sign and zero), clipped to +-clip as
        CleanRL's TransformReward and SB3's VecNormalize(clip_reward) clip them."""
        return np.clip(x / np.sqrt(self.var + self.epsilon), -self.clip, self.clip)

    def state_dict(self) -> dict:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean = np.array(state["mean"], np.float64)
        self.var = np.array(state["var"], np.float64)
        self.count = float(state["count"])


class StepStatistics:
    """A RunningMeanStd's statistics plus samples added one step at a time, each step's before it is
    normalised (SB3's VecNormalize and CleanRL's NormalizeObservation update, then normalise), as raw
    sums so a step costs a few small numpy calls; `restart` takes the merged statistics again."""

    def __init__(self, norm: RunningMeanStd):
        self.epsilon, self.clip = norm.epsilon, norm.clip
        self.restart(norm)

    def restart(self, norm: RunningMeanStd) -> None:
        self.count = norm.count
        self.sum = norm.mean * norm.count
        self.squares = (norm.var + np.square(norm.mean)) * norm.count
        self.mean, self.std = norm.mean.copy(), np.sqrt(norm.var + self.epsilon)

    def add(self, x: np.ndarray) -> None:
        """Fold in samples x (B, *shape)."""
        if len(x) == 0:
            return
        self.count += len(x)
        self.sum = self.sum + x.sum(0, dtype=np.float64)
        self.squares = self.squares + np.square(x, dtype=np.float64).sum(0)
        self.mean = self.sum / self.count
        self.std = np.sqrt(np.maximum(self.squares / self.count - np.square(self.mean), 0.0) + self.epsilon)

    def normalize(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.clip((x - self.mean) / self.std, -self.clip, self.clip, out=out)
