"""What every algorithm shares, written once, in the spirit of SB3's
BaseAlgorithm/OffPolicyAlgorithm: seeding, envs, the episode tracker and
counters, checkpoint state (the shared part and each rank's own), the
update's one all-reduce (statistics by name, not by position) and the loop.

An algorithm subclasses `BaseAlgorithm` and writes `_setup_model` (its
networks, buffers and `learners` seam), `update`, `budget_spent`,
`evaluate` and `final_model`; the extra state it keeps (normalisers, a
target network, a replay buffer) goes through the `_shared_extra` /
`_load_shared_extra` / `_rank_extra` / `_load_rank_extra` hooks.
An off-policy algorithm (DQN, SAC, TD3) subclasses `OffPolicyAlgorithm`, whose
`update` is the iteration they share, and writes `collect` and `learn`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
from collections.abc import Iterator, Mapping

import gymnasium as gym
import numpy as np
import torch
from kuberl.core.replaymemory import Replay, iteration

from . import atari, checkpoint, distributed
from .distributed import Dist
from .envs import (
    EpisodeTracker,
    check_spaces,
    env_state,
    make_envs,
    rank_seed,
    restore_env_state,
)
from .replay import ReplayBuffer
from .session import Counters, Session, UpdateReport, Vote, run_updates


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


STOP_VOTE_SECONDS = 0.5  # learning reads a stop once per this much of it: a vote's all-reduce (3 ms, two loaded gloo ranks) is under 1%
UNMEASURED_VOTES = 4  # votes in a learning whose units no update has timed yet (PPO's four epochs: one each)


def own_state_problem(expected: dict | None, own: object) -> str | None:
    """Why a checkpoint's state of a rank (`own`) differs in kind from what the rank would save now (`expected`,
    checkpoint.mismatch); a rank that keeps none (its envs' state is no plain data) takes none."""
    if expected is None:
        return f"state is {type(own).__name__}, where this rank keeps none: its envs' state is no plain data"
    return checkpoint.mismatch(expected, own)


class LearningStop:
    """A stop read while an algorithm learns, between its units of work (PPO's epochs, DQN's gradient
    steps), every rank's vote in one all-reduce (beside any value the algorithm all-reduces there, as
    PPO's target KL), so every rank runs as many backward passes and ends with the same weights.

    Votes come every `interval` units, chosen from the ranks' mean seconds per unit in the update before
    (carried in the update's all-reduce, so every rank chooses alike) so that votes are STOP_VOTE_SECONDS
    apart: a learning shorter than that reads none and the stop waits for the next update's all-reduce.
    Until a learning is timed, UNMEASURED_VOTES spread over it; one rank alone reads the flag, no collective,
    every unit. Deterministic mode reads it after the last unit only: the update learns whole (a resume of
    a cut update would differ from the uninterrupted run) and the run stops there."""

    def __init__(self, ctx: Dist):
        self.ctx = ctx
        self.own_unit_seconds = math.inf  # this rank's last learning, seconds per unit; unknown (inf) until timed
        self.unit_seconds = math.inf  # the ranks' mean of them, from the update's all-reduce
        self.stopped = False  # the last learning ended early on a stop vote
        self.interval, self.units, self.cuttable, self.stop_vote, self.started = 0, 0, False, None, 0.0

    def begin(self, units: int, stop_vote: Vote) -> None:
        """A learning of `units` units starts; `stop_vote` is read at its vote points."""
        self.stopped, self.units, self.started = False, units, time.perf_counter()
        self.stop_vote = stop_vote if callable(stop_vote) else None
        if self.stop_vote is None:
            self.interval = units + 1  # nothing to read
        elif self.ctx.world_size == 1:
            self.interval = 1
        elif math.isinf(self.unit_seconds):
            self.interval = math.ceil(units / UNMEASURED_VOTES)
        else:
            self.interval = max(1, math.ceil(STOP_VOTE_SECONDS / max(self.unit_seconds, 1e-9)))
        self.cuttable = self.interval <= units and not torch.are_deterministic_algorithms_enabled()

    def units_to_next_vote(self, done: int) -> int:
        """Units from `done` to the next vote point, or to the end of the learning."""
        if self.cuttable:
            return min(self.interval - done % self.interval, self.units - done)
        return self.units - done

    def asks(self, done: int) -> bool:
        """Whether the ranks vote after `done` units (every rank answers alike: the plan is replicated)."""
        if self.interval > self.units:
            return False
        return (self.cuttable and done % self.interval == 0) or done == self.units

    def vote(self, done: int, value: torch.Tensor | None = None) -> tuple[float, bool]:
        """After `done` units: the ranks' sum of `value` (a scalar, None: 0.0) and whether any rank's vote
        is to stop, in one all-reduce where `asks(done)`, else the value's alone (where given). Sets stopped."""
        ask = self.asks(done)
        if value is None and not ask:
            return 0.0, False
        if self.ctx.world_size == 1:  # the flag alone: no tensor, no collective (DQN may vote every step)
            stops = ask and bool(self.stop_vote())
            self.stopped = self.stopped or stops
            return 0.0 if value is None else float(value), stops
        value_host = torch.zeros(1, dtype=torch.float64) if value is None else value.detach().double().reshape(1).cpu()  # host: gloo's or all_reduce_sum's copy
        stop = torch.tensor([float(ask and bool(self.stop_vote()))], dtype=torch.float64)  # host: as value_host
        total = distributed.all_reduce_sum(self.ctx, torch.cat([value_host, stop]))  # host: as value_host
        stops = ask and bool(total[1] > 0)
        self.stopped = self.stopped or stops
        return float(total[0]), stops

    def end(self, done: int) -> None:
        """The learning ran `done` units; call after its host read, so the device's work is timed too."""
        if done:
            self.own_unit_seconds = (time.perf_counter() - self.started) / done

    def merge(self, totals: dict) -> None:
        """The ranks' mean seconds per unit from the update's all-reduce (sync_update's "learn_unit_seconds")."""
        self.unit_seconds = totals["learn_unit_seconds"] / self.ctx.world_size


class BaseAlgorithm:
    """Seeding, envs and the rank's bookkeeping. `_setup_model` must set
    `agent` (the network whose weights are the model), `learner` and
    `optimizer` (learners.py) and `batch_per_rank`."""

    agent: torch.nn.Module
    optimizer: object
    divergence_vote = False  # this rank saw a non-finite loss or state (the session's, set before each update)
    ACTION_SPACES: tuple[type[gym.Space], ...] = (gym.spaces.Discrete,)  # what the algorithm's networks emit
    TENSORBOARD_TAGS: Mapping[str, tuple[str, float]] = {}  # its statistics' CleanRL tags where not PPO's (tensorboard.Renames)
    batch_per_rank: int

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
        self.learning_stop = LearningStop(ctx)  # a stop read between learning's units (PPO's epochs, DQN's steps)
        self.tracker = EpisodeTracker(num_envs)
        self.finished_episodes: list[tuple[int, float, int]] = []  # the last update's, rank 0's own (sync_update)
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
        finished and their return sum, the seconds per unit of its last learning (LearningStop), and the
        stop (read now, where it is a callable), success and divergence votes. Advances
        the global counters; returns the totals and the seconds it took."""
        returns, lengths, at = self.tracker.drain_episodes()
        values = {**local, "episodes": len(returns), "return_sum": sum(returns),
                  "learn_unit_seconds": self.learning_stop.own_unit_seconds,
                  "stop_votes": float(stop_vote() if callable(stop_vote) else stop_vote), "success_votes": float(success_vote),
                  "divergence_votes": float(self.divergence_vote)}
        started = time.perf_counter()
        totals = all_reduce_named(self.ctx, values)
        # rank 0's own episodes (TensorBoard's charts/episodic_return, one point each as CleanRL writes them), each at
        # the global step it ended at: where in this update's steps, of every rank's, counted from the update's start
        self.finished_episodes = [(self.counters.global_step + max(1, round(fraction * int(totals["steps"]))), ret, length)
                                  for ret, length, fraction in zip(returns, lengths, at, strict=True)] if self.ctx.is_main else []
        self.counters.global_step += int(totals["steps"])
        self.counters.episodes += int(totals["episodes"])
        self.learning_stop.merge(totals)
        return totals, time.perf_counter() - started

    def update_report(self, totals: dict[str, float | np.ndarray], *, local_steps: int, learning_rate: float,
                      losses: dict[str, float], rollout_seconds: float, update_seconds: float,
                      allreduce_seconds: float, epochs_run: int) -> UpdateReport:
        """The update's report: the episodes and the ranks' stop, success and divergence votes as `sync_update`'s
        totals hold them (a stop when learning stopped early too), beside what the algorithm measured."""
        return UpdateReport(
            counters=self.counters,
            local_steps=local_steps,
            episode_return_sum=totals["return_sum"],
            episode_return_count=int(totals["episodes"]),
            learning_rate=learning_rate,
            losses=losses,
            rollout_seconds=rollout_seconds,
            update_seconds=update_seconds,
            allreduce_seconds=allreduce_seconds,
            epochs_run=epochs_run,
            episodes=self.finished_episodes,
            stop=totals["stop_votes"] > 0 or self.learning_stop.stopped,
            target_met=totals["success_votes"] > 0,
            diverged=totals["divergence_votes"] > 0,
        )

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

    def rank_state_problem(self, own: object) -> str | None:
        """Why a checkpoint's state of this rank (`own`) differs in kind from the state it would save now
        (checkpoint.mismatch); None where alike. A rank that keeps none (its envs' state is no plain data) takes none:
        whatever a file held there was loaded, and failed at every start."""
        return own_state_problem(self.rank_state(), own)

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

    def loaded_problem(self, state: dict) -> str | None:
        """Why a checkpoint's shared state, alike in kind (checkpoint.mismatch), cannot be this job's: a value that
        is not learned but this job's own (SAC's and TD3's action box); None where it can."""
        return None

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


class OffPolicyAlgorithm(BaseAlgorithm):
    """What DQN, SAC and TD3 share, as SB3's OffPolicyAlgorithm: each rank's own replay buffer, an iteration's
    size, when learning starts, and the iteration itself (`update`). `_setup_model` calls `_setup_replay`;
    the algorithm writes `collect` (vector_steps steps of its exploration into the buffer) and `learn`
    (its gradient steps, with its target updates), and names the rate it reports in `learning_rate`.
    `hp` is its spec block: train_frequency, gradient_steps, learning_starts and batch_size are read here."""

    hp: object
    total_timesteps: int
    replay: ReplayBuffer

    def _setup_replay(self, planned: Replay, num_envs: int) -> None:
        """The rank's replay buffer (as replaymemory planned it and budget weighed it) and an iteration's size:
        ceil(trainFrequency / numEnvs) vector steps, then gradient steps in proportion, so the
        update-to-data ratio gradientSteps / trainFrequency holds whatever numEnvs is."""
        hp = self.hp
        self.replay = ReplayBuffer.of(planned)
        # env steps per rank per iteration (batch_per_rank), and gradient steps in proportion
        self.vector_steps, self.batch_per_rank, self.gradient_steps = iteration(hp.train_frequency, hp.gradient_steps, num_envs)
        self.replay_real_mean = 0  # the ranks' replay.real_added, their mean, as of the update's all-reduce

    @property
    def steps_per_rank(self) -> int:
        """Real transitions per rank (autoreset steps are none), the ranks' mean: identical on every rank."""
        return self.counters.global_step // self.ctx.world_size

    @property
    def learning_rate(self) -> float:
        """The rate the update reports (the metrics' learning rate)."""
        raise NotImplementedError

    def collect(self) -> int:
        """vector_steps steps into the replay buffer; how many were real transitions (autoreset steps excluded)."""
        raise NotImplementedError

    def learn(self, stop_vote: Vote = False) -> tuple[dict[str, torch.Tensor], int]:
        """gradient_steps steps on batches from this rank's buffer, a stop (`stop_vote`) read between them
        (LearningStop); the statistics by name, on the device, and the steps run."""
        raise NotImplementedError

    def _rank_extra(self) -> dict:
        return {"replay": self.replay.state_dict()}  # deterministic mode only: buffers are per rank and large

    def _load_rank_extra(self, state: dict) -> None:
        self.replay.load_state_dict(state["replay"])

    def rank_state_problem(self, own: object) -> str | None:
        """As BaseAlgorithm's, the replay buffer's state weighed by the buffer (its arrays are as long as it was full,
        which a fresh one is not)."""
        expected = self.rank_state()
        if expected is None or not isinstance(own, dict) or "replay" not in own:
            return own_state_problem(expected, own)
        return (checkpoint.mismatch({k: v for k, v in expected.items() if k != "replay"},
                                    {k: v for k, v in own.items() if k != "replay"})
                or self.replay.state_problem(own["replay"]))

    def replay_transitions(self) -> float:
        """Real transitions the replay buffers took since they began filling (autoreset steps are none), the
        ranks' mean as of the update's all-reduce, so identical on every rank; one rank's own at once."""
        return self.replay.real_added if self.ctx.world_size == 1 else self.replay_real_mean

    def learning(self) -> bool:
        """learningStarts transitions per rank taken (SB3's num_timesteps, a count of transitions) and a
        batch's worth: decided from replicated counts alone, identical on every rank (a rank-dependent
        answer would leave the all-reduces unmatched). Two start rows always hold a real transition
        (autoreset rows never follow each other). After a resume the buffer, empty, refills first."""
        lo, hi = self.replay.start_range()
        return self.replay_transitions() >= max(self.hp.learning_starts, self.hp.batch_size) and hi - lo >= 2

    def budget_spent(self) -> bool:
        return self.counters.global_step >= self.total_timesteps

    def update(self, stop_vote: Vote, success_vote: bool) -> UpdateReport:
        """One iteration: `collect` into the replay buffer, the all-reduce, then (unless rank 0's evaluation
        of the current weights met the target) `learn` once the buffers hold enough."""
        started = time.perf_counter()
        local_steps = self.collect()
        rollout_seconds = time.perf_counter() - started
        totals, allreduce_seconds = self.sync_update({"steps": local_steps, "replay_real": self.replay.real_added},
                                                     stop_vote, success_vote)
        self.replay_real_mean = totals["replay_real"] / self.ctx.world_size
        losses, steps_run, update_seconds = {}, 0, 0.0
        self.learner.allreduce_seconds.clear()
        self.learning_stop.stopped = False
        if totals["success_votes"] == 0:
            started = time.perf_counter()
            if self.learning():
                learned, steps_run = self.learn(stop_vote)
                # one host read for them all: a read per statistic waits on a GPU rank's queue as often
                read = torch.cat([loss.detach().reshape(1).double() for loss in learned.values()]).tolist()
                losses = dict(zip(learned, read, strict=True))
                self.learning_stop.end(steps_run)  # after the host read: the device's work too
            update_seconds = time.perf_counter() - started
            self.counters.updates += 1
        return self.update_report(totals, local_steps=local_steps, learning_rate=self.learning_rate,
                                  losses=losses, rollout_seconds=rollout_seconds, update_seconds=update_seconds,
                                  allreduce_seconds=allreduce_seconds + sum(self.learner.allreduce_seconds),
                                  epochs_run=steps_run)
