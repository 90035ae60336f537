"""DQN under DDP, for discrete actions. Reads top to bottom: the Q network,
the maths (epsilon, TD targets, loss), the trainer (its model, its own
state, its exploration and gradient steps, its final model; seeding, envs,
checkpoint state and the loop are base.BaseAlgorithm's, the iteration and
the replay buffer's schedule base.OffPolicyAlgorithm's, as SAC's).

Each rank steps its own vectorised envs and fills and samples its OWN replay
buffer (`replay.ReplayBuffer`, n-step returns with gymnasium's autoreset rows
masked out). How the Q network learns and acts (DDP + Adam + autograd on
`q_loss`, or the CPU fast path for ReLU MLPs) is `learners.q_learner`'s
choice, which this file never asks about; gradients are averaged over
ranks either way; the target network is updated at the same
iterations on every rank (a function of the replicated counters), so it
stays identical everywhere. Counters, episode statistics and stop votes
travel in ONE all-reduce per iteration (plus, where learning is long, a stop
vote between gradient steps: base.LearningStop); evaluation, checkpoints and metrics
are the session's (session.py), as for every algorithm.

One iteration ("update" in counters and metrics) collects
ceil(trainFrequency / numEnvs) vector steps per rank, then runs gradient
steps in proportion, so the update-to-data ratio gradientSteps /
trainFrequency holds whatever numEnvs is. Defaults (spec.DQNConfig): 3-step
returns, double DQN, Huber loss, a hard target copy every 500 transitions per
rank, epsilon decaying linearly from 1 to 0.05 over the first 20% of
totalTimesteps (spec.dqn.loss: mse for CleanRL's squared error).

Checkpoints hold the online and target networks, the optimiser and the
counters. Replay contents are per rank and NOT checkpointed (a resumed run
refills learningStarts transitions before training again), except in
deterministic mode, whose per-rank state includes them.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from kuberl.core import envspaces, replaymemory
from kuberl.core.spec import DQNConfig
from torch import nn

from . import atari, budget, evaluation, learners, networks
from .base import OffPolicyAlgorithm
from .device import upload
from .distributed import Dist
from .networks import soft_update  # noqa: F401 — the maths, beside td_targets and dqn_loss, for readers and tests
from .replay import Batch
from .session import Vote
from .tensorboard import Renames

# --- The Q network ---------------------------------------------------------


class QNetwork(nn.Module):
    """An MLP from flat observations to one value per action. `forward` is
    the training path (through DDP); `greedy` acts on the bare module."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int]):
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(obs_dim, width), nn.ReLU()]
            obs_dim = width
        self.net = nn.Sequential(*layers, nn.Linear(obs_dim, num_actions))

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the layers read them: flat float32 (what q_values takes)."""
        return obs.flatten(1).float()

    def q_values(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.inputs(obs))

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.forward(obs).argmax(-1)


# --- The maths -------------------------------------------------------------


def epsilon(global_step: int, total_timesteps: int, hp: DQNConfig) -> float:
    """Linear decay from exploration_initial_eps to exploration_final_eps
    over the first exploration_fraction of total_timesteps, then flat."""
    progress = min(1.0, global_step / max(1.0, hp.exploration_fraction * total_timesteps))
    return hp.exploration_initial_eps + progress * (hp.exploration_final_eps - hp.exploration_initial_eps)


def td_targets(returns: torch.Tensor, discount: torch.Tensor, next_q_target: torch.Tensor,
               next_q_online: torch.Tensor | None) -> torch.Tensor:
    """returns + discount * Q_target(s', a'), (B,). a' = argmax of the online
    network's next_q_online (B, A) for double DQN, of the target's when None."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = next_q_target.gather(1, chooser.argmax(1, keepdim=True)).squeeze(1)
    return returns + discount * best


def dqn_loss(q: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor, kind: str = "huber") -> torch.Tensor:
    """Mean loss of Q(s, a) against the targets, spec.dqn.loss: huber (smooth L1, beta 1: SB3's DQN)
    or mse (CleanRL's dqn.py); q (B, A), the rest (B,)."""
    chosen = q.gather(1, actions.long().reshape(-1, 1)).squeeze(1)
    if kind == "huber":
        return nn.functional.smooth_l1_loss(chosen, targets)
    if kind == "mse":
        return nn.functional.mse_loss(chosen, targets)
    raise ValueError(f"spec.dqn.loss: expected huber or mse (got {kind!r})")


def q_loss(q: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor,
           next_q_target: torch.Tensor, next_q_online: torch.Tensor | None, kind: str = "huber") -> torch.Tensor:
    """dqn_loss against td_targets: the loss the learner (learners.q_learner) minimises."""
    return dqn_loss(q, actions, td_targets(returns, discount, next_q_target, next_q_online), kind)


# --- The trainer -----------------------------------------------------------

DRAW_BYTES = 32 * 2**20  # learn()'s drawn observations at once: CartPole's 128 x 64 take 0.26 MB


TARGET_CLOCK = "last_target_update_transitions"  # steps_per_rank at the last target copy
LEGACY_TARGET_CLOCK = "last_target_update"  # the same in replay rows per rank, before 3c20512


def steps_per_draw(gradient_steps: int, batch_size: int, obs_shape: tuple[int, ...], obs_dtype) -> int:
    """How many gradient steps' batches learn() draws at once: all of them
    unless their observations and next observations pass DRAW_BYTES."""
    sample_bytes = 2 * math.prod(obs_shape) * np.dtype(obs_dtype).itemsize
    return max(1, min(gradient_steps, DRAW_BYTES // (sample_bytes * batch_size)))


class DQNTrainer(OffPolicyAlgorithm):
    ACTION_SPACES = envspaces.ACTION_SPACES["dqn"]
    TENSORBOARD_TAGS: ClassVar[Renames] = {"value_loss": ("losses/td_loss", 1.0)}  # CleanRL's dqn.py
    def __init__(self, ctx: Dist, hp: DQNConfig, env_id: str, num_envs: int, env_kwargs: dict,
                 total_timesteps: int, seed: int, restart: int, env_backend: str = "auto", fast: bool = True):
        self.hp, self.total_timesteps, self.fast_path = hp, total_timesteps, fast
        super().__init__(ctx, env_id, num_envs, env_kwargs, seed, restart, env_backend)

    def _setup_model(self, env_id: str, num_envs: int) -> None:
        """The online and target Q networks, the replay buffer, and how it learns and acts."""
        ctx, hp, space = self.ctx, self.hp, self.envs.single_observation_space
        # frame stacks: the buffer keeps only each step's newest uint8 frame; weighed before it is made
        planned = replaymemory.for_algorithm("dqn", hp, num_envs, self.obs_shape, space.dtype.name, (),
                                             atari.frame_stack(self.envs), self.total_timesteps, ctx.world_size)
        budget.check_replay(planned, "dqn", env_id, ctx)
        if networks.choose(space, hp.policy, "spec.dqn.policy") == "cnn":  # the Nature DQN
            self.agent = networks.QCNN(self.obs_shape, int(self.action_space.n)).to(ctx.device)
            self.target = networks.QCNN(self.obs_shape, int(self.action_space.n)).to(ctx.device)
        else:
            budget.check_networks("spec.dqn.hiddenSizes", "the Q network", lambda: QNetwork(
                int(np.prod(self.obs_shape)), int(self.action_space.n), list(hp.hidden_sizes)), ctx)
            self.agent = QNetwork(int(np.prod(self.obs_shape)), int(self.action_space.n), list(hp.hidden_sizes)).to(ctx.device)
            self.target = QNetwork(int(np.prod(self.obs_shape)), int(self.action_space.n), list(hp.hidden_sizes)).to(ctx.device)
        self.target.load_state_dict(self.agent.state_dict())
        self.target.requires_grad_(False)
        # cumulative seconds per phase, for the benchmark's per-update breakdown
        self.timings = dict.fromkeys(("act_forward", "env_step", "sample", "train_forward", "backward_optimizer"), 0.0)
        # how it learns and acts, rank 0's weights everywhere (fast=False: always DDP + Adam + torch)
        self.learner = learners.q_learner(self.agent, self.target, hp, ctx, q_loss, self.timings, self.fast_path)
        self.optimizer = self.learner.optimizer
        self._setup_replay(planned, num_envs)  # the buffer, vector_steps, batch_per_rank, gradient_steps
        self.steps_per_draw = steps_per_draw(self.gradient_steps, hp.batch_size, self.obs_shape, space.dtype)
        self.last_target_update = 0  # steps_per_rank at the last target update

    @property
    def learning_rate(self) -> float:
        return self.hp.learning_rate

    @property
    def update_to_data(self) -> float:
        """Gradient steps per env step, per rank."""
        return self.gradient_steps / self.batch_per_rank

    # -- state for checkpoints, beyond BaseAlgorithm's ----------------------------

    def _shared_extra(self) -> dict:
        # the key names the unit: a trainer that read it as rows (before 3c20512) refuses the file, naming the key
        return {"target": self.target.state_dict(), TARGET_CLOCK: self.last_target_update}

    def _load_shared_extra(self, state: dict) -> None:
        self.target.load_state_dict(state["target"])
        self.last_target_update = state[TARGET_CLOCK]

    def upgraded(self, shared: dict) -> tuple[dict, list[str]]:
        """A checkpoint written before 3c20512 holds its target-copy clock as replay rows per rank
        (updates x batch_per_rank, autoreset rows included) under LEGACY_TARGET_CLOCK; read as transitions
        it put the next copy off by every autoreset row of the run (many intervals on short episodes).
        The rows since that copy become transitions at the run's own ratio of transitions to rows (the
        exact count was never kept), so the next copy comes about when it would have."""
        legacy, counters = shared.get(LEGACY_TARGET_CLOCK), shared["counters"]
        saved_world = shared.get("world_size")
        if TARGET_CLOCK in shared or type(legacy) is not int or type(saved_world) is not int or saved_world < 1:
            return shared, []  # today's, or not a state to convert (the mismatch check names what is wrong)
        rows = counters["updates"] * self.batch_per_rank
        since = round(max(0, rows - legacy) * (counters["global_step"] // saved_world) / max(1, rows))
        now = counters["global_step"] // self.ctx.world_size
        upgraded = {k: v for k, v in shared.items() if k != LEGACY_TARGET_CLOCK} | {TARGET_CLOCK: max(0, now - since)}
        said = (f"the checkpoint counts its target-network copy in env steps per rank, autoreset steps included"
                f" (written before transitions were the unit): the last copy, {max(0, rows - legacy)} env steps"
                f" before it, is taken as {since} transitions")
        return upgraded, [said]

    # -- one iteration: its exploration and its gradient steps (base.OffPolicyAlgorithm.update runs them) --

    def collect(self, eps: float | None = None) -> int:
        """vector_steps epsilon-greedy steps into the replay buffer, epsilon from the schedule unless
        given; returns how many were real transitions (autoreset steps excluded)."""
        if eps is None:
            eps = epsilon(self.counters.global_step, self.total_timesteps, self.hp)
        num_envs, timings, clock = self.replay.num_envs, self.timings, time.perf_counter
        real = 0
        with torch.no_grad():
            for _ in range(self.vector_steps):
                obs = self.next_obs
                started = clock()
                greedy = self.learner.greedy(obs)
                acted = clock()
                explore = self.np_rng.random(num_envs) < eps
                actions = np.where(explore, self.np_rng.integers(0, self.action_space.n, num_envs), greedy)
                self.next_obs, reward, terminated, truncated, _ = self.envs.step(actions)
                timings["env_step"] += clock() - acted
                timings["act_forward"] += acted - started
                real += int(self.tracker.valid.sum())
                self.replay.add(obs, actions, atari.learning_rewards(self.envs, reward), terminated, truncated, self.tracker.valid)
                self.tracker.step(reward, terminated | truncated)
        return real

    def to_tensors(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        device = self.ctx.device
        return tuple(upload(a, device) for a in (batch.obs, batch.actions, batch.returns, batch.discount, batch.next_obs))

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
                      discount: torch.Tensor, next_obs: torch.Tensor,
                      next_q_target: torch.Tensor | None = None) -> torch.Tensor:
        """One optimiser step on a per-rank batch, its gradient the mean over
        every rank's batch. next_q_target: the target network's Q-values of
        next_obs when the caller has them already. Returns the step's statistics (2,): the loss and the mean
        Q of the batch's taken actions (learners.q_statistics)."""
        return self.learner.step(obs, actions, returns, discount, self.learner.inputs(next_obs), next_q_target)

    def maybe_update_target(self) -> bool:
        """At the first iteration boundary after every target_update_interval
        env steps per rank: the same iterations on every rank."""
        if self.steps_per_rank - self.last_target_update < self.hp.target_update_interval:
            return False
        self.learner.update_target(self.hp.tau)
        self.last_target_update = self.steps_per_rank
        return True

    def learn(self, stop_vote: Vote = False) -> tuple[dict[str, torch.Tensor], int]:
        """gradient_steps DDP steps on batches from this rank's replay buffer; the mean loss, the mean Q
        of the batches' taken actions (SB3's and CleanRL's q_values) and the steps run. The target network does not change during them, so batches are drawn (i.i.d.
        uniform, as one at a time would be) and their target Q-values computed a chunk of steps at
        a time: one large draw and one large forward instead of one small one per step. A stop
        (`stop_vote`) is read between steps (base.LearningStop, as PPO reads it between epochs: every
        rank's vote in one all-reduce, about every STOP_VOTE_SECONDS of learning) and ends them there."""
        self.maybe_update_target()
        stops = self.learning_stop
        stops.begin(self.gradient_steps, stop_vote)
        # the statistics (loss, mean Q) stay on the learner's device: one host sync per update, in update()
        total, size, done = torch.zeros(2, device=self.ctx.device), self.hp.batch_size, 0
        while done < self.gradient_steps and not stops.stopped:
            steps = min(self.steps_per_draw, self.gradient_steps - done)
            started = time.perf_counter()
            obs, actions, returns, discount, next_obs = self.to_tensors(self.replay.sample(size * steps, self.hp.gamma, self.np_rng))
            # the next frames become floats once, here, for the target network and (double DQN) the online one
            next_inputs = self.learner.inputs(next_obs)
            next_q_target = self.learner.target_q(next_inputs)
            self.timings["sample"] += time.perf_counter() - started
            drawn, at = (obs, actions, returns, discount, next_inputs, next_q_target), 0
            while at < steps and not stops.stopped:  # the draw's steps, in pieces that end at vote points
                take = min(steps - at, stops.units_to_next_vote(done))
                piece = drawn if take == steps else [t[at * size : (at + take) * size] for t in drawn]
                total += self.learner.learn_draw(tuple(piece[:5]), piece[5])
                at, done = at + take, done + take
                stops.vote(done)
        loss, q_value = (total / done).unbind()
        return {"value_loss": loss, "q_value": q_value}, done

    def final_model(self) -> dict:
        return {"agent": self.agent.state_dict(), "hidden_sizes": list(self.hp.hidden_sizes)}

    # -- evaluation (rank 0) -------------------------------------------------

    def evaluate(self, env_id: str, episodes: int, env_kwargs: dict, seed: int,
                 stop: Callable[[], bool] | None = None) -> float:
        """evaluation.mean_return, acting greedily (epsilon 0)."""
        with self.evaluation_envs(env_id, episodes, env_kwargs) as envs:
            return evaluation.mean_return(envs, self.learner.greedy, episodes, seed, stop=stop)

    def _freeze(self, frozen: DQNTrainer) -> None:
        frozen.agent = copy.deepcopy(self.agent)
        frozen.learner = learners.TorchGreedy(frozen.agent, self.ctx.device)  # evaluate() acts through learner.greedy
