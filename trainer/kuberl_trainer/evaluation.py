"""The one evaluation protocol: what "solved" means for kuberl and for every peer it is compared with.

`episodes` copies of the env step side by side from one vector reset with `seed`
(copy i gets seed + i); each copy counts its first episode only; the score is
the mean undiscounted return (an episode still running after MAX_EPISODE_STEPS
steps counts those, and a warning says so). The policy acts as it will be used, without
exploration noise: PPO samples its categorical (an argmax loops forever in
Acrobot and reaches CartPole's 500 by luck early on) and takes the mean of its
Gaussian; DQN takes the argmax of Q (epsilon 0); SAC the tanh-squashed mean of its actor; TD3 its
deterministic actor's action, without its exploration noise.

This module imports numpy (and logging) only, so `make bench` runs the same code for
Stable-Baselines3 in its own virtual environment (bench/sb3_run.py loads it by path).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# Steps after which an evaluation episode is cut: above every episode limit of gymnasium's registry and Atari's
# (108,000 frames, 27,000 steps), so none is cut there. Without it, spec.env.kwargs max_episode_steps 10**9 and a
# policy that never fails (Pendulum never ends by itself) held rank 0 in evaluation for good: the gang stalled.
MAX_EPISODE_STEPS = 100_000


class Interrupted(Exception):
    """`stop()` said so while `play` stepped: the evaluation was abandoned, its return unknown."""


def mean_return(envs: Any, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int,
                max_steps: int | None = None, stop: Callable[[], bool] | None = None) -> float:
    """Mean return of the first episode of each of `envs`' `episodes` copies, acting with `act(obs)`; an
    episode still running after `max_steps` steps (None: MAX_EPISODE_STEPS) counts those steps, and a warning
    says so. Interrupted when `stop()` is true before a step."""
    max_steps = MAX_EPISODE_STEPS if max_steps is None else max_steps
    totals, cut = play(envs, act, episodes, seed, max_steps, stop)
    if cut.any():
        log.warning("evaluation: %d of %d episode(s) had not ended after %d steps: their returns count those steps only"
                    " (the env lets an episode run longer: max_episode_steps in spec.env.kwargs or its registration)",
                    int(cut.sum()), episodes, max_steps)
    return float(totals.mean())


def returns(envs: Any, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int) -> np.ndarray:
    """The return of the first episode of each of `envs`' `episodes` copies, acting with `act(obs)`."""
    return play(envs, act, episodes, seed)[0]


def play(envs: Any, act: Callable[[np.ndarray], np.ndarray], episodes: int, seed: int,
         max_steps: int | None = None, stop: Callable[[], bool] | None = None,
         ended: Callable[[np.ndarray, np.ndarray], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`returns`, and which episodes were still running after `max_steps` steps (None: each to its end);
    those episodes' returns count their first `max_steps` steps only. Interrupted when `stop()` is true
    before a step. `ended(returns, running)` after each step that ended an episode."""
    obs, _ = envs.reset(seed=seed)
    totals = np.zeros(episodes)
    running = np.ones(episodes, bool)
    steps = 0
    while running.any() and (max_steps is None or steps < max_steps):
        if stop is not None and stop():
            raise Interrupted(f"after {steps} step(s) of its {episodes} episode(s)")
        obs, reward, terminated, truncated, _ = envs.step(act(obs))
        totals += reward * running
        before = int(running.sum())
        running &= ~(np.asarray(terminated) | np.asarray(truncated))
        steps += 1
        if ended is not None and int(running.sum()) < before:
            ended(totals, running)
    return totals, running
