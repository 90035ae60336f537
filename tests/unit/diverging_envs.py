"""Envs whose rewards blow up after some steps, as an env with huge or broken rewards does: the trainer's
losses go non-finite and the optimiser would write NaN into the weights (tests/unit/test_trainer_divergence.py, tests/distributed/test_divergence.py)."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np


class _Diverging(gym.Env):
    """Reward 1 a step until this env instance has stepped `after` times, then `reward` (inf by default);
    episodes of 20 steps. With `rank`, only that rank's envs blow up (the RANK its pod was given)."""

    def __init__(self, after: int = 100, reward: float = float("inf"), rank: int | None = None):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.after, self.blown_reward, self.steps, self.t = after, reward, 0, 0
        if rank is not None and os.environ.get("RANK") != str(rank):
            self.blown_reward = 1.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        reward = 1.0 if self.steps <= self.after else self.blown_reward
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), reward, False, self.t >= 20, {}


class DivergingDiscrete(_Diverging):
    action_space = gym.spaces.Discrete(2)


class DivergingContinuous(_Diverging):
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
