"""An env that raises after some steps, as a user's env with a bug does deep into training: the trainer crashes
(tests/unit/test_trainer_wandb.py: the tracked runs end failed)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CrashingDiscrete(gym.Env):
    """Steps as a 3-observation, 2-action env until this instance has stepped `after` times, then raises."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, after: int = 100):
        self.after, self.steps = after, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps > self.after:
            raise RuntimeError("the env's own bug")
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), 1.0, False, self.steps % 20 == 0, {}
