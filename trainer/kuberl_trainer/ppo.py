"""PPO under DDP, for discrete and continuous actions. Reads top to bottom:
the agent, the maths (GAE, loss), the rollout buffer, the trainer (its
model, one update, its own state, its final model; seeding, envs,
checkpoint state and the loop are base.BaseAlgorithm's).

With spec.ppo.lstm the agent is a RecurrentAgent: each env carries an LSTM state, and learning
replays whole envs' sequences in order (recurrent.py holds the pieces, tested alone).

Each rank collects its own rollouts from its own vectorised envs; how the
network learns and acts (DDP + Adam + autograd on `ppo_loss`, or the CPU
fast path for small MLPs) is `learners.ppo_learner`'s choice, which this
file never asks about; gradients are averaged over ranks either way.
Counters, episode statistics, normaliser moments and stop votes travel in
ONE all-reduce per update, by name (base.BaseAlgorithm.sync_update). Plumbing
(process group, checkpoints, metrics, evaluation scheduling) lives in
`distributed`, `checkpoint`, `metrics` and `session`.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import torch
from kuberl.core import envspaces
from kuberl.core.spec import PPOConfig
from torch import nn

from . import atari, budget, checkpoint, evaluation, learners, networks, recurrent
from .base import BaseAlgorithm
from .device import CPU, host_zeros, stream_after_current, to_device, upload
from .distributed import Dist
from .divergence import named
from .normalize import RunningMeanStd, StepStatistics
from .ppo_terms import LOG_SQRT_2PI, STAT_NAMES, minibatch_table
from .session import UpdateReport, Vote

# --- The agent -------------------------------------------------------------


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(n_in: int, hidden: list[int], n_out: int, out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [layer(n_in, width), nn.Tanh()]
        n_in = width
    return nn.Sequential(*layers, layer(n_in, n_out, out_std))


class Agent(nn.Module):
    """Actor and critic heads on a shared `encoder` (networks.encoder: the
    Nature CNN for pixels, the identity for vectors, where the heads are
    separate MLPs). `forward(obs, action)` is the training path (through
    DDP); `act`, `value` and `greedy` are for acting, called on the bare
    module under no_grad so acting adds no collective. Heads return fp32,
    so log-probs and values stay fp32 under bf16 autocast."""

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: list[int], encoder: nn.Module | None = None):
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        n_out = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        self.encoder = encoder if encoder is not None else nn.Identity()
        self.critic = mlp(obs_dim, hidden, 1, out_std=1.0)
        self.actor = mlp(obs_dim, hidden, n_out, out_std=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(n_out))  # host: moves with the module's .to(device)

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.encoder(obs)
        return self.actor(features).float(), self.critic(features).float().squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.encoder(obs)).float().squeeze(-1)

    def _log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor,
                          entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log-prob of `action`, entropy, or None without `entropy`: acting never reads it)."""
        if self.discrete:
            log_p = torch.log_softmax(out, -1)
            log_prob = log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            return log_prob, -(log_p.exp() * log_p).sum(-1) if entropy else None
        log_std = self.log_std.expand_as(out)
        log_prob = (-0.5 * ((action - out) / log_std.exp()).square() - log_std - LOG_SQRT_2PI).sum(-1)
        return log_prob, (0.5 + LOG_SQRT_2PI + log_std).sum(-1) if entropy else None

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-prob of `action`, entropy, value), each (B,)."""
        out, value = self._heads(obs)
        log_prob, entropy = self._log_prob_entropy(out, action)
        return log_prob, entropy, value

    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (action, log-prob, value) for a batch of observations, from `generator` when
        given (evaluation, learnWhileCollecting's thread), else torch's default one."""
        out, value = self._heads(obs)
        if self.discrete:
            action = torch.multinomial(torch.softmax(out, -1), 1, generator=generator).squeeze(-1)
        else:
            action = out + self.log_std.exp() * torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device)
        log_prob, _ = self._log_prob_entropy(out, action, entropy=False)
        return action, log_prob, value

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.actor(self.encoder(obs)).float()
        return out.argmax(-1) if self.discrete else out


State = tuple[torch.Tensor, torch.Tensor]  # an LSTM's (h, c), each (B, hidden)


class RecurrentAgent(Agent):
    """The Agent with an LSTM (recurrent.LSTMCore, spec.ppo.lstm) between the encoder and the heads, whose
    MLPs read its output. Acting takes and returns each env's state (the caller resets it where an
    episode starts); training (`forward`, through DDP) replays env-major sequences from their first
    state with the steps' episode starts."""

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: list[int], hidden_size: int,
                 encoder: nn.Module | None = None):
        super().__init__(hidden_size, action_space, hidden, encoder)
        self.lstm = recurrent.LSTMCore(obs_dim, hidden_size)

    def _core(self, obs: torch.Tensor, state: State, starts: torch.Tensor | None = None,
              host_starts: np.ndarray | None = None) -> tuple[torch.Tensor, State]:
        starts = torch.zeros(obs.shape[0], device=obs.device) if starts is None else starts
        return self.lstm(self.encoder(obs).float(), state, starts, host_starts)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                starts: torch.Tensor, host_starts: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-prob of `action`, entropy, value), each (B * T,), for B envs' sequences of T steps (env-major)
        from their states (h, c) at the first step; `host_starts` the starts in host memory (LSTMCore.forward)."""
        features, _ = self._core(obs, (h, c), starts, host_starts)
        log_prob, entropy = self._log_prob_entropy(self.actor(features).float(), action)
        return log_prob, entropy, self.critic(features).float().squeeze(-1)

    def act(self, obs: torch.Tensor, state: State,  # type: ignore[override]
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """Agent.act for one step of each env from `state`; the state after it last."""
        features, state = self._core(obs, state)
        out, value = self.actor(features).float(), self.critic(features).float().squeeze(-1)
        if self.discrete:
            action = torch.multinomial(torch.softmax(out, -1), 1, generator=generator).squeeze(-1)
        else:
            action = out + self.log_std.exp() * torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device)
        log_prob, _ = self._log_prob_entropy(out, action, entropy=False)
        return action, log_prob, value, state

    def value(self, obs: torch.Tensor, state: State) -> torch.Tensor:  # type: ignore[override]
        """The values of one step of each env from `state` (the state is not advanced: a bootstrap)."""
        return self.critic(self._core(obs, state)[0]).float().squeeze(-1)

    def greedy(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:  # type: ignore[override]
        features, state = self._core(obs, state)
        out = self.actor(features).float()
        return (out.argmax(-1) if self.discrete else out), state


# --- The maths ---------------------------------------------------------------


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation under next-step autoreset.

    rewards, values, terminated, truncated, valid: (T, N); next_value: (N,),
    the value of the observation after the last step. Step t's successor is
    step t+1's observation, whose value is values[t+1]: after a truncation
    that observation is the episode's final one (gymnasium returns it and
    resets on the NEXT step), so truncated episodes bootstrap from it, while
    terminated ones do not. `valid` is False on autoreset steps: their
    advantage and return are 0 and nothing flows across an episode boundary.
    Returns (advantages, returns), both (T, N) float32.
    """
    steps = rewards.shape[0]
    advantages = np.zeros(rewards.shape, np.float32)
    last = np.zeros(rewards.shape[1:], np.float32)
    for t in reversed(range(steps)):
        successor = next_value if t == steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * successor * (1.0 - terminated[t]) - values[t]
        continues = 1.0 - np.maximum(terminated[t], truncated[t])
        last = (delta + gamma * gae_lambda * continues * last) * valid[t]
        advantages[t] = last
    return advantages, (advantages + values) * valid


def ppo_loss(
    new_log_prob: torch.Tensor,
    entropy: torch.Tensor,
    new_value: torch.Tensor,
    old_log_prob: torch.Tensor,
    old_value: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    weight: torch.Tensor,
    hp: PPOConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped PPO loss. Every input is (B,); `weight` is 1/(real transitions
    in the minibatch) for real ones and 0 for autoreset steps, so weighted
    sums are minibatch means and micro-batch losses add up to the minibatch's."""
    log_ratio = new_log_prob - old_log_prob
    ratio = log_ratio.exp()
    negated = -advantages  # once: each expression below is an op (a kernel launch on a GPU)
    policy_loss = torch.max(negated * ratio, negated * ratio.clamp(1 - hp.clip_coef, 1 + hp.clip_coef))
    if hp.clip_value_loss:
        clipped = old_value + (new_value - old_value).clamp(-hp.clip_coef, hp.clip_coef)
        value_loss = 0.5 * torch.max((new_value - returns).square(), (clipped - returns).square())
    else:
        value_loss = 0.5 * (new_value - returns).square()
    policy_loss = (policy_loss * weight).sum()
    value_loss = (value_loss * weight).sum()
    entropy_mean = (entropy * weight).sum()
    loss = policy_loss - hp.ent_coef * entropy_mean + hp.vf_coef * value_loss
    with torch.no_grad():
        ratio_change = ratio - 1
        stats = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy_mean.detach(),
            "approx_kl": ((ratio_change - log_ratio) * weight).sum(),
            "clip_fraction": ((ratio_change.abs() > hp.clip_coef).float() * weight).sum(),
        }
    return loss, stats


# --- The rollout buffer -----------------------------------------------------


class Rollout:
    """Preallocated numpy arrays with zero-copy torch views: acting writes
    into them in place, the update reads them flat."""

    # per (step, env): discounted is for reward scaling, starts where a recurrent policy's state resets
    # (recurrent.episode_starts); the rest as named
    SCALARS = ("log_probs", "values", "rewards", "discounted", "terminated", "truncated", "valid", "starts")

    @classmethod
    def layout(cls, steps: int, num_envs: int, obs_shape: tuple, action_shape: tuple, discrete: bool,
               obs_dtype: type = np.float32) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Each array's (shape, dtype): what __init__ allocates and budget.check_fits weighs."""
        obs = ((steps, num_envs, *obs_shape), np.dtype(obs_dtype))
        arrays = {"obs": obs, "raw_obs": obs,  # raw: before normalisation, for its statistics
                  "actions": ((steps, num_envs, *action_shape), np.dtype(np.int64 if discrete else np.float32))}
        return arrays | {name: ((steps, num_envs), np.dtype(np.float32)) for name in cls.SCALARS}

    def __init__(self, steps: int, num_envs: int, obs_shape: tuple, action_shape: tuple, discrete: bool,
                 obs_dtype: type = np.float32, device: torch.device = CPU):
        for name, (shape, dtype) in self.layout(steps, num_envs, obs_shape, action_shape, discrete, obs_dtype).items():
            # as the policy saw it; uint8 frames stay uint8, pinned for async copies when on CUDA
            setattr(self, name, host_zeros(shape, dtype, device) if name == "obs" else np.zeros(shape, dtype))
        self.obs_t = torch.from_numpy(self.obs)
        self.actions_t = torch.from_numpy(self.actions)


# --- The trainer ---------------------------------------------------------


class CollectionAbandoned(Exception):
    """The rollout collected ahead (learnWhileCollecting) is given up: the run stops at this update."""


class PPOTrainer(BaseAlgorithm):
    ACTION_SPACES = envspaces.ACTION_SPACES["ppo"]
    def __init__(self, ctx: Dist, hp: PPOConfig, env_id: str, num_envs: int, env_kwargs: dict,
                 total_timesteps: int, seed: int, restart: int, env_backend: str = "auto",
                 overlap: bool | None = None, fast: bool = True):
        self.hp, self.total_timesteps, self.fast_path = hp, total_timesteps, fast
        if overlap is None:  # a GPU acts on one half of the envs while the other steps; deterministic runs keep one order
            overlap = ctx.device.type == "cuda" and not torch.are_deterministic_algorithms_enabled()
        overlap = overlap and hp.lstm is None  # a recurrent policy steps every env's state together
        super().__init__(ctx, env_id, num_envs, env_kwargs, seed, restart, env_backend, halves=2 if overlap else 1)

    def _setup_model(self, env_id: str, num_envs: int) -> None:
        """The agent, its normalisers, the rollout buffer, and how it learns and acts."""
        ctx, hp, space = self.ctx, self.hp, self.envs.single_observation_space
        self.overlap = hasattr(self.envs, "send_half") and len(self.envs.parts) == 2
        cnn = networks.choose(space, hp.policy, "spec.ppo.policy") == "cnn"
        if cnn and hp.normalize_observation:
            raise networks.PolicyMismatch("spec.ppo.normalizeObservation: not for pixels (the CNN scales uint8 frames by 1/255)")
        encoder, features = networks.encoder(space, hp.policy, "spec.ppo.policy")
        # the CNN's heads are linear on its 512 features (Nature DQN / CleanRL); hiddenSizes shape MLPs
        heads = [] if cnn else list(hp.hidden_sizes)
        self.recurrent = hp.lstm is not None
        self.batch_per_rank = hp.num_steps * num_envs
        layout = (hp.num_steps, num_envs, self.obs_shape, tuple(self.action_space.shape or ()),
                  isinstance(self.action_space, gym.spaces.Discrete), np.uint8 if cnn else np.float32)
        rollouts = 2 if hp.learn_while_collecting else 1  # one filling while the update reads the other
        ranks, sharers = budget.sharing_ranks(ctx)
        budget.check_fits("spec.ppo.numSteps x spec.env.numEnvs",
                          f"a rollout of {self.batch_per_rank:,} steps of {env_id}"
                          + (", held twice for spec.ppo.learnWhileCollecting," if rollouts == 2 else ""),
                          rollouts * budget.nbytes(Rollout.layout(*layout)), ranks, cgroup=ctx.cgroup, sharers=sharers)

        def make() -> nn.Module:
            return (RecurrentAgent(features, self.action_space, heads, hp.lstm.hidden_size, encoder) if self.recurrent
                    else Agent(features, self.action_space, heads, encoder))

        budget.check_networks("spec.ppo.hiddenSizes", "the actor and critic", make, ctx)  # weighed before it is made
        self.agent = make().to(ctx.device)
        self.obs_norm = RunningMeanStd(self.obs_shape)  # merged over ranks at each update: checkpoints, evaluation
        # what this rank's rollout is normalised with: obs_norm plus each step's observations as they come
        # (SB3's VecNormalize, CleanRL's NormalizeObservation), so the first rollout is not normalised blind
        self.acting_norm = StepStatistics(self.obs_norm)
        self.ret_norm = RunningMeanStd(())
        self.buf = Rollout(*layout, ctx.device)
        self.discounted = np.zeros(num_envs, np.float32)
        self.next_value = np.zeros(num_envs, np.float32)  # the bootstrap value of each rollout, set as it ends (collect)
        self.next_starts = np.zeros(num_envs, np.float32)  # a recurrent policy's resets before the next step (collect)
        # how it learns and acts, rank 0's weights everywhere (fast=False: always DDP + Adam + torch)
        self.learner, self.actor = learners.ppo_learner(self.agent, hp, ctx, ppo_loss, self.np_rng, self.fast_path)
        self.optimizer = self.learner.optimizer
        # who acts in rollouts: the current weights, or (learnWhileCollecting) a copy of them taken
        # before each update, on a thread of its own, sampling from a generator of its own
        self.behaviour, self.rollout_ready = self.actor, False
        self.abandon_collecting = threading.Event()  # set: the rollout collected ahead ends at its next vector step
        if hp.learn_while_collecting:
            self.spare_buf = Rollout(*layout, ctx.device)
            self.acting_agent = copy.deepcopy(self.agent).requires_grad_(False)
            acting_rng = self.np_rng.spawn(1)[0]
            self.behaviour = learners.ppo_actor(self.acting_agent, hp, ctx, acting_rng, self.fast_path,
                                                generator=learners.own_generator(ctx.device, acting_rng))
            self.collector = ThreadPoolExecutor(1, thread_name_prefix="rollout")

    # -- state for checkpoints, beyond BaseAlgorithm's ----------------------------

    def _shared_extra(self) -> dict:
        return {"obs_norm": self.obs_norm.state_dict(), "ret_norm": self.ret_norm.state_dict()}

    def _load_shared_extra(self, state: dict) -> None:
        self.obs_norm.load_state_dict(state["obs_norm"])
        self.acting_norm.restart(self.obs_norm)
        self.ret_norm.load_state_dict(state["ret_norm"])

    def _rank_extra(self) -> dict:
        if not self.recurrent:
            return {"discounted": self.discounted.copy()}
        # restored with the envs mid-episode (deterministic mode); a resume without them starts fresh
        # episodes, and fresh states with them
        h, c = self.behaviour.current_state(self.envs.num_envs)
        return {"discounted": self.discounted.copy(), "next_starts": self.next_starts.copy(),
                "lstm_state": (h.cpu().numpy(), c.cpu().numpy())}

    def rank_state_problem(self, own: object) -> str | None:
        """BaseAlgorithm's, and PPO's own numbers finite: the discounted returns (a NaN reached the return
        normaliser and the first update's losses: the run ended Diverged), a recurrent rank's LSTM states, and its
        pending resets 0 or 1 (a NaN in either made every state NaN at the first step, and torch's sampling raised)."""
        problem = super().rank_state_problem(own)
        if problem is not None:
            return problem
        if bad := checkpoint.nonfinite({key: own[key] for key in ("discounted", "lstm_state") if key in own}):
            return f"{named([f'state.{path}' for path in bad])} not finite"
        if self.recurrent and not np.isin(own["next_starts"], (0.0, 1.0)).all():
            return "state.next_starts holds values other than 0 and 1"
        return None

    def _load_rank_extra(self, state: dict) -> None:
        self.discounted = state["discounted"]
        if self.recurrent:
            self.next_starts = state["next_starts"]
            self.behaviour.state = tuple(torch.as_tensor(a, device=self.ctx.device) for a in state["lstm_state"])

    # -- one update -------------------------------------------------------

    def collect(self) -> None:
        """num_steps vector steps into the buffer, acting with the actor (no collective)."""
        if self.overlap:
            self.collect_overlapped()
        else:
            if self.recurrent:  # the state each env's sequence is replayed from when learning
                self.buf.initial_state = tuple(x.clone() for x in self.behaviour.current_state(self.envs.num_envs))
            with torch.no_grad():
                for t in range(self.hp.num_steps):
                    if self.abandon_collecting.is_set():
                        raise CollectionAbandoned
                    self.buf.valid[t] = self.tracker.valid
                    if self.recurrent:  # where the step before was an autoreset step, a new episode's first observation
                        self.buf.starts[t] = self.next_starts
                        self.behaviour.reset(self.next_starts)
                        self.next_starts = 1.0 - self.buf.valid[t]
                    self.next_obs, reward, terminated, truncated, _ = self.envs.step(self.act(t, slice(None)))
                    self.account(t, reward, terminated, truncated)
            if self.recurrent:  # the bootstrap reads the next step's state
                self.behaviour.reset(self.next_starts)
        # valued now, as the rollout's observations were normalised: the update merges their moments first
        obs = self.acting_norm.normalize(self.next_obs) if self.hp.normalize_observation else self.next_obs
        self.next_value = self.behaviour.value(obs.astype(self.buf.obs.dtype, copy=False))  # as act() stores them

    def collect_overlapped(self) -> None:
        """collect(), with the envs in two halves: while one half steps (ale-py's
        threads), the GPU acts on the other. Each half steps synchronously, so
        every env's trajectory is what collect() would give for the same actions."""
        n = self.envs.num_envs
        halves = self.envs.parts
        reward, terminated, truncated = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        self.next_obs = np.array(self.next_obs)  # written half by half below
        with torch.no_grad():
            for t in range(self.hp.num_steps + 1):
                abandoned = t < self.hp.num_steps and self.abandon_collecting.is_set()  # once a step: both halves alike
                for half, cols in enumerate(halves):
                    if t > 0:  # this half's step t-1, sent while the other half was acted on
                        self.next_obs[cols], reward[cols], terminated[cols], truncated[cols], _ = self.envs.recv_half(half)
                    if t < self.hp.num_steps and not abandoned:  # an abandoned rollout leaves no step in flight
                        # what tracker.valid will say once step t-1 is accounted (after both halves)
                        self.buf.valid[t, cols] = self.tracker.valid[cols] if t == 0 else ~(terminated[cols] | truncated[cols])
                        self.envs.send_half(half, self.act(t, cols))
                if t > 0:
                    self.account(t - 1, reward, terminated, truncated)
                if abandoned:
                    raise CollectionAbandoned

    def act(self, t: int, cols: slice) -> np.ndarray:
        """Store the envs' (cols) current observations at step t, act on them;
        the actions as the envs take them."""
        hp, buf = self.hp, self.buf
        if hp.normalize_observation:
            np.copyto(buf.raw_obs[t, cols], self.next_obs[cols])
            # this step's observations join the statistics first (autoreset steps' final observations do not)
            valid = buf.valid[t, cols]
            self.acting_norm.add(buf.raw_obs[t, cols] if valid.all() else buf.raw_obs[t, cols][valid.astype(bool)])
            self.acting_norm.normalize(self.next_obs[cols], out=buf.obs[t, cols])
        else:
            np.copyto(buf.obs[t, cols], self.next_obs[cols])
        buf.actions[t, cols], buf.log_probs[t, cols], buf.values[t, cols] = self.behaviour.act(buf.obs[t, cols])
        if self.agent.discrete:
            return buf.actions[t, cols]
        return np.clip(buf.actions[t, cols], self.action_space.low, self.action_space.high)

    def account(self, t: int, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Step t's outcome into the buffer, the discounted return and the episode tracker."""
        buf = self.buf
        buf.rewards[t] = atari.learning_rewards(self.envs, reward)  # clipped for learning only
        buf.terminated[t] = terminated
        buf.truncated[t] = truncated
        self.discounted = self.discounted * self.hp.gamma * buf.valid[t] + buf.rewards[t]
        buf.discounted[t] = self.discounted
        self.tracker.step(reward, terminated | truncated)

    def local_statistics(self) -> dict[str, float | np.ndarray]:
        """What this rank adds to the update's all-reduce (sync_update): its
        real env steps and, where used, its normalisers' moments."""
        buf, valid = self.buf, self.buf.valid.astype(bool)
        local: dict[str, float | np.ndarray] = {"steps": float(valid.sum())}
        if self.hp.normalize_observation:
            local["obs_moments"] = RunningMeanStd.moments(buf.raw_obs[valid], self.obs_shape)
        if self.hp.normalize_reward:
            local["return_moments"] = RunningMeanStd.moments(buf.discounted[valid], ())
        return local

    def learn(self, advantages: np.ndarray, returns: np.ndarray, buf: Rollout | None = None,
              stop_vote: Vote = False) -> tuple[dict[str, float], int]:
        """update_epochs passes of num_minibatches DDP steps over the rollout (`buf`, else self.buf).
        A stop (`stop_vote`) is read between epochs (base.LearningStop: every rank's vote in one all-reduce,
        with target KL's, where epochs are long enough for it) and ends them after the epoch it came in, as
        target KL's rule would: the Pong example's epochs take 3-4 s each on a 2-core CPU, the four 13-18 s."""
        hp, device, stops = self.hp, self.ctx.device, self.learning_stop
        stops.begin(hp.update_epochs, stop_vote)
        buf = self.buf if buf is None else buf
        size = self.batch_per_rank
        # observations apart, in their own dtype (uint8 frames stay uint8 until on the device)
        all_obs = to_device(buf.obs_t.reshape(size, *self.obs_shape), device)
        scalars = np.stack([buf.log_probs, buf.values, advantages, returns, buf.valid], -1).reshape(size, -1)
        table = upload(minibatch_table(buf.actions_t.reshape(size, -1), torch.from_numpy(scalars)), device)
        totals = torch.zeros(len(STAT_NAMES), device=device)
        if self.recurrent:  # the starts on the device reset states; their host copy cuts each minibatch's LSTM calls
            host_starts = buf.starts.reshape(size)
            starts = upload(torch.from_numpy(host_starts), device)
            first_h, first_c = buf.initial_state
        epochs_run = 0
        for _ in range(hp.update_epochs):
            epochs_run += 1
            if self.recurrent:  # whole envs per minibatch, each env's steps in order from its first state
                for envs in recurrent.env_minibatches(buf.valid.shape[1], hp.num_minibatches, self.np_rng):
                    order = recurrent.sequence_rows(envs, hp.num_steps, buf.valid.shape[1])
                    rows, picked = upload(order, device), upload(envs, device)
                    sequences = learners.Sequences(first_h[picked], first_c[picked], starts[rows], host_starts[order])
                    last = self.learner.step(all_obs[rows], table[rows], sequences)
                    totals += last
            else:
                order = upload(self.np_rng.permutation(size), device)
                # every row, each epoch, in num_minibatches parts whose sizes differ by one at most
                # (CleanRL and SB3 learn from every row too, the remainder in a shorter last minibatch)
                for rows in order.tensor_split(hp.num_minibatches):
                    last = self.learner.step(all_obs[rows], table[rows])
                    totals += last
            # CleanRL's rule: the epoch's LAST minibatch's KL (taken before its step), the
            # furthest the epoch moved; all-reduced, so every rank runs as many backward passes
            kl = last[STAT_NAMES.index("approx_kl")] if hp.target_kl is not None else None
            kl_sum, stopped = stops.vote(epochs_run, kl)
            if stopped or (hp.target_kl is not None and kl_sum / self.ctx.world_size > hp.target_kl):
                break
        means = (totals / (epochs_run * hp.num_minibatches)).tolist()
        stops.end(epochs_run)  # after the host read: the device's work too
        return dict(zip(STAT_NAMES, means, strict=True)), epochs_run

    def advantages(self, scale_rewards: bool) -> tuple[np.ndarray, np.ndarray]:
        buf = self.buf
        rewards = self.ret_norm.scale(buf.rewards).astype(np.float32) if scale_rewards else buf.rewards
        return gae(rewards, buf.values, self.next_value, buf.terminated, buf.truncated, buf.valid, self.hp.gamma, self.hp.gae_lambda)

    def budget_spent(self) -> bool:
        """totalTimesteps counts real transitions (SB3's num_timesteps, CleanRL's global_step: their envs
        reset within a step), never gymnasium's autoreset steps, as DQN counts them."""
        return self.counters.global_step >= self.total_timesteps

    def update(self, stop_vote: Vote, success_vote: bool) -> UpdateReport:
        """One update: a rollout, the all-reduce, then (unless rank 0's
        evaluation of the current weights met the target) learning."""
        hp = self.hp
        # SB3's progress_remaining, over real transitions (CleanRL's per-iteration fraction where every step is one)
        frac = max(0.0, 1.0 - self.counters.global_step / self.total_timesteps)
        lr = hp.learning_rate * frac if hp.anneal_lr else hp.learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        started = time.perf_counter()
        if not self.rollout_ready:  # learnWhileCollecting collects it during the update before
            self.abandon_collecting.clear()  # (an update after one whose rollout ahead was abandoned collects whole)
            if hp.learn_while_collecting:  # the first update, or the first since a resume loaded weights
                self.copy_weights_for_acting()
            self.collect()
        self.rollout_ready = False
        rollout_seconds = time.perf_counter() - started

        totals, allreduce_seconds = self.sync_update(self.local_statistics(), stop_vote, success_vote)
        if hp.normalize_observation:
            self.obs_norm.merge(totals["obs_moments"])
            self.acting_norm.restart(self.obs_norm)  # every rank starts the next rollout alike
        if hp.normalize_reward:
            self.ret_norm.merge(totals["return_moments"])

        local_steps = int(self.buf.valid.sum())
        losses, epochs_run, update_seconds = {}, 0, 0.0
        if totals["success_votes"] == 0:
            started = time.perf_counter()
            advantages, returns = self.advantages(hp.normalize_reward)
            rollout = self.buf
            more = totals["stop_votes"] == 0 and self.counters.global_step < self.total_timesteps
            next_rollout = self.collect_ahead() if hp.learn_while_collecting and more else None
            learned = False
            try:
                losses, epochs_run = self.learn(advantages, returns, rollout, stop_vote)
                learned = True
            finally:  # the collecting thread never outlives its update
                update_seconds = time.perf_counter() - started
                if next_rollout is not None:
                    # a stop voted while learning ends the run at this update (every rank alike), as does an error:
                    # the rollout ahead would be thrown away, so it ends at its next step instead of its last
                    if not learned or self.learning_stop.stopped:
                        self.abandon_collecting.set()
                    self.rollout_ready = next_rollout.result()
                    rollout_seconds += time.perf_counter() - started - update_seconds  # waited for beyond the update
            self.counters.updates += 1
        return self.update_report(totals, local_steps=local_steps, learning_rate=lr, losses=losses,
                                  rollout_seconds=rollout_seconds, update_seconds=update_seconds,
                                  allreduce_seconds=allreduce_seconds, epochs_run=epochs_run)

    def collect_ahead(self) -> Future:
        """learnWhileCollecting: the next rollout, into the spare buffer on the collector
        thread, acting with a copy of the weights as they are before this update (one update
        of policy lag: PPO's ratio is taken against the log-probs that copy recorded). On a
        GPU its forward passes run on a stream of their own, beside the update's."""
        self.copy_weights_for_acting()
        self.buf, self.spare_buf = self.spare_buf, self.buf
        stream = stream_after_current(self.ctx.device)  # after the weights' copy, queued on this thread
        self.abandon_collecting.clear()

        def collect() -> bool:
            """Whether the rollout was collected whole (not abandoned)."""
            with stream:
                try:
                    self.collect()
                except CollectionAbandoned:
                    return False
            return True

        return self.collector.submit(collect)

    def copy_weights_for_acting(self) -> None:
        """learnWhileCollecting: the collecting copy takes the current weights (in place, so its actor's views stay valid)."""
        self.acting_agent.load_state_dict(self.agent.state_dict())

    def final_model(self) -> dict:
        return {
            "agent": self.agent.state_dict(),
            "obs_norm": _as_tensors(self.obs_norm.state_dict()) if self.hp.normalize_observation else None,
            "hidden_sizes": list(self.hp.hidden_sizes),
            "lstm_hidden_size": self.hp.lstm.hidden_size if self.recurrent else None,
        }

    # -- evaluation (rank 0) -------------------------------------------------

    def evaluate(self, env_id: str, episodes: int, env_kwargs: dict, seed: int,
                 stop: Callable[[], bool] | None = None) -> float:
        """evaluation.mean_return: discrete actions sampled from the policy,
        continuous ones its mean. Sampled from generators of its own, seeded with
        `seed`: training's randomness is untouched, also from another thread."""
        actor = self.actor.reseeded(seed)

        def act(obs: np.ndarray) -> np.ndarray:
            x = self.obs_norm.normalize(obs) if self.hp.normalize_observation else obs
            x = x.astype(self.buf.obs.dtype, copy=False)  # as training acted: uint8 frames, else float32
            action = actor.act(x)[0] if self.agent.discrete else actor.greedy(x)
            return action if self.agent.discrete else np.clip(action, self.action_space.low, self.action_space.high)

        with self.evaluation_envs(env_id, episodes, env_kwargs) as envs, torch.no_grad():
            return evaluation.mean_return(envs, act, episodes, seed, stop=stop)

    def _freeze(self, frozen: PPOTrainer) -> None:
        frozen.agent, frozen.obs_norm = copy.deepcopy(self.agent), copy.deepcopy(self.obs_norm)
        frozen.actor = learners.ppo_actor(frozen.agent, self.hp, self.ctx, np.random.default_rng(0), self.fast_path)


def _as_tensors(norm: dict) -> dict:
    """A normaliser's state with tensors for arrays, so the final model loads
    with torch.load(weights_only=True)."""
    return {"mean": torch.from_numpy(norm["mean"]), "var": torch.from_numpy(norm["var"]), "count": float(norm["count"])}
