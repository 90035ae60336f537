"""Partially observed tasks, for recurrent policies (spec.ppo.lstm): an env id "kuberl_trainer.masked:Class".

`CartPoleNoVelocity` is CartPole-v1 observed through the cart's position and the pole's angle only (RL
Baselines3 Zoo's CartPoleNoVel): a policy that reads one observation cannot tell which way the pole
swings, while one that remembers the last few can, as the LSTM does.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SEEN = [0, 2]  # of CartPole's (x, x_dot, theta, theta_dot): the position and the angle


class CartPoleNoVelocity(gym.ObservationWrapper):
    """CartPole-v1 (its 500-step limit included) without the velocities; `kwargs` go to gymnasium.make."""

    def __init__(self, **kwargs):
        super().__init__(gym.make("CartPole-v1", **kwargs))
        full = self.env.observation_space
        self.observation_space = gym.spaces.Box(full.low[SEEN], full.high[SEEN], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[SEEN].astype(np.float32)
