"""Running mean/variance shared by every rank.

Each rank sends its rollout's raw moments (count, sum, sum of squares) in
the update's one all-reduce; every rank then merges the same global moments,
so the normalisers stay identical without a collective of their own.
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
        self.mean = self.mean + delta * count / total
        m2 = self.var * self.count + batch_var * count + np.square(delta) * self.count * count / total
        self.var = m2 / total
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
