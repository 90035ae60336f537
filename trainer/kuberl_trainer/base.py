"""What every algorithm shares, written once, in the spirit of SB3's
BaseAlgorithm/OffPolicyAlgorithm: seeding, envs, the episode tracker and
counters, checkpoint state (the shared part and each rank's own), the
update's one all-reduce (statistics by name, not by position) and the loop.

An algorithm subclasses `BaseAlgorithm` and writes `_setup_model` (its
networks, buffers and `learners` seam), `update`, `budget_spent`,
`evaluate` and `final_model`; the extra state it keeps (normalisers, a
target network, a replay buffer) goes through the `_shared_extra` /
`_load_shared_extra` / `_rank_extra` / `_load_rank_extra` hooks.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import torch

from . import atari, distributed
from .distributed import Dist
from .envs import (
    EpisodeTracker,
    check_spaces,
    env_state,
    make_envs,
    rank_seed,
    restore_env_state,
)
from .session import Counters, Session, Vote, run_updates


def all_reduce_named(ctx: Dist, values: dict[str, float | np.ndarray]) -> dict[str, float | np.ndarray]:
    """Sum each named value (a number or an array) across ranks in ONE
    all-reduce; the same names back, numbers as floats, arrays in their
    shapes. Every rank passes the same names and shapes (same spec, same code)."""
    parts = [np.asarray(value, np.float64).ravel() for value in values.values()]
    flat = np.concatenate(parts) if parts else np.zeros(0)
    summed = distributed.all_reduce_sum(ctx, torch.from_numpy(flat)).numpy()
    totals: dict[str, float | np.ndarray] = {}
    offset = 0
    for (name, value), part in zip(values.items(), parts, strict=True):
        chunk = summed[offset : offset + part.size]
        offset += part.size
        totals[name] = float(chunk[0]) if np.ndim(value) == 0 else chunk.reshape(np.shape(value))
    return totals


class BaseAlgorithm:
    """Seeding, envs and the rank's bookkeeping. `_setup_model` must set
    `agent` (the network whose weights are the model), `learner` and
    `optimizer` (learners.py), `batch_per_rank` and `num_updates`."""

    agent: torch.nn.Module
    optimizer: object
    ACTION_SPACES: tuple[type[gym.Space], ...] = (gym.spaces.Discrete,)  # what the algorithm's networks emit
    batch_per_rank: int
    num_updates: int

    def __init__(self, ctx: Dist, env_id: str, num_envs: int, env_kwargs: dict, seed: int, restart: int,
                 env_backend: str = "auto", halves: int = 1):
        self.ctx, self.env_backend = ctx, env_backend
        self.seed = rank_seed(seed, ctx.rank, restart)  # distinct per rank and gang restart
        self.envs = make_envs(env_id, num_envs, env_kwargs, env_backend, halves=halves)
        check_spaces(self.envs, env_id, self.ACTION_SPACES)
        self.next_obs, _ = self.envs.reset(seed=self.seed)
        self.envs_ready_at = time.monotonic()  # startup's "envs" phase ends here, "networks" after _setup_model
        self.obs_shape = tuple(self.envs.single_observation_space.shape)
        self.action_space = self.envs.single_action_space
        self.counters = Counters()
        self.tracker = EpisodeTracker(num_envs)
        self.np_rng = np.random.default_rng(self.seed)  # this rank's numpy randomness, which checkpoints record
        torch.manual_seed(seed)  # the same initial weights everywhere (rank 0's are broadcast anyway)
        self._setup_model(env_id, num_envs)
        torch.manual_seed(self.seed)  # this rank's torch randomness (action sampling)
        # rank 0's Atari evaluation envs by what built them: a dict, so frozen copies share it
        self._evaluation_envs: dict[str, gym.vector.VectorEnv] = {}

    @contextlib.contextmanager
    def evaluation_envs(self, env_id: str, episodes: int, env_kwargs: dict) -> Iterator[gym.vector.VectorEnv]:
        """Rank 0's evaluation envs. Atari's are built once and kept: building
        is the slow part (ale-py makes each emulator's colour tables, 0.1-0.2 s,
        one after another) and a seeded reset, which each evaluation starts
        with, restarts every copy as a new one starts. Other envs are cheap to
        build and may keep state across resets (a user's own class): fresh ones."""
        if not atari.is_atari(env_id):
            envs = make_envs(env_id, episodes, env_kwargs, self.env_backend)
            try:
                yield envs
            finally:
                envs.close()
            return
        key = json.dumps([env_id, episodes, env_kwargs, self.env_backend], sort_keys=True)
        if key not in self._evaluation_envs:
            for old in self._evaluation_envs.values():
                old.close()
            self._evaluation_envs.clear()
            self._evaluation_envs[key] = make_envs(env_id, episodes, env_kwargs, self.env_backend)
        yield self._evaluation_envs[key]

    def frozen_copy(self) -> BaseAlgorithm:
        """This algorithm as it is now, for rank 0 to evaluate on another thread while
        training goes on (spec.success.evalWhileTraining): its evaluate() and final_model()
        read copies of the networks and normalisers and of the counters. It shares the rank's
        evaluation envs, which only one evaluation at a time uses."""
        frozen = copy.copy(self)
        frozen.counters = copy.copy(self.counters)
        self._freeze(frozen)
        return frozen

    def _setup_model(self, env_id: str, num_envs: int) -> None:
        raise NotImplementedError

    def _freeze(self, frozen: BaseAlgorithm) -> None:
        """Give `frozen` (a shallow copy) its own copies of what evaluate() and final_model() read."""
        raise NotImplementedError

    # -- the update's one all-reduce ------------------------------------------------

    def sync_update(self, local: dict[str, float | np.ndarray], stop_vote: Vote,
                    success_vote: bool) -> tuple[dict[str, float | np.ndarray], float]:
        """The update's one all-reduce, by name: this rank's `local` statistics
        ("steps", its real env steps, and the algorithm's own), the episodes it
        finished and their return sum, and the stop (read now, where it is a
        callable) and success votes. Advances
        the global counters; returns the totals and the seconds it took."""
        returns, _ = self.tracker.drain()
        values = {**local, "episodes": len(returns), "return_sum": sum(returns),
                  "stop_votes": float(stop_vote() if callable(stop_vote) else stop_vote), "success_votes": float(success_vote)}
        started = time.perf_counter()
        totals = all_reduce_named(self.ctx, values)
        self.counters.global_step += int(totals["steps"])
        self.counters.episodes += int(totals["episodes"])
        return totals, time.perf_counter() - started

    # -- state for checkpoints ------------------------------------------------------

    def shared_state(self) -> dict:
        """Replicated state: identical on every rank, so rank 0 alone can save it."""
        return {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict(), **self._shared_extra(),
                "counters": vars(self.counters).copy(), "world_size": self.ctx.world_size}

    def load_shared(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])
        self.learner.load_optimizer(state["optimizer"])
        self.counters = Counters(**state["counters"])
        self._load_shared_extra(state)

    def rank_state(self) -> dict | None:
        """This rank's own state (envs mid-episode, RNGs, the algorithm's own):
        only deterministic mode gathers and restores it. None when the envs'
        state cannot be taken as plain data (envs.env_state)."""
        envs = env_state(self.envs)
        if envs is None:
            return None  # an env whose state is not plain data: resumed without any of it
        return {
            "envs": envs,
            "next_obs": self.next_obs.copy(),
            "tracker": (self.tracker.returns.copy(), self.tracker.lengths.copy(), self.tracker.valid.copy()),
            **self._rank_extra(),
            "torch_rng": torch.get_rng_state(),
            "np_rng": self.np_rng.bit_generator.state,
        }

    def load_rank(self, state: dict) -> None:
        restore_env_state(self.envs, state["envs"])
        self.next_obs = state["next_obs"]
        self.tracker.returns, self.tracker.lengths, self.tracker.valid = state["tracker"]
        self._load_rank_extra(state)
        torch.set_rng_state(state["torch_rng"])
        self.np_rng.bit_generator.state = state["np_rng"]

    def upgraded(self, shared: dict) -> tuple[dict, list[str]]:
        """A checkpoint's shared state in today's terms, and a line for each thing an older trainer
        wrote otherwise (the session logs them); today's state comes back as it is."""
        return shared, []

    def _shared_extra(self) -> dict:
        return {}

    def _load_shared_extra(self, state: dict) -> None:
        pass

    def _rank_extra(self) -> dict:
        return {}

    def _load_rank_extra(self, state: dict) -> None:
        pass

    # -- the loop --------------------------------------------------------------------

    def train(self, session: Session) -> str:
        """Updates until the budget is spent, the target is met or a stop is
        voted (session.run_updates): "budget", "target" or "stopped"."""
        return run_updates(self, session)
