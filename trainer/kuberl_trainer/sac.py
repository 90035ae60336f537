"""SAC (soft actor-critic), for continuous (float Box) actions. Reads top to bottom as CleanRL's
sac_continuous_action.py: the networks (a tanh-squashed Gaussian actor, twin soft Q critics (continuous.py's,
shared with TD3), the entropy coefficient), the maths as pure functions (the squashed Gaussian's log-probability, the soft
Q target, the critic, actor and temperature losses), then the trainer (its targets and learner, its own state,
its exploration and gradient steps; seeding, envs, checkpoint state and the loop are
base.BaseAlgorithm's, the iteration and the replay buffer's schedule base.OffPolicyAlgorithm's, as DQN's;
the actor and critics, weighed with the buffer, and evaluation twincritic.TwinCriticTrainer's, as TD3's).

Each rank steps its own vectorised envs and fills and samples its OWN replay buffer
(`replay.ReplayBuffer`, one-step transitions, gymnasium's autoreset rows never sampled, truncated
episodes bootstrapped from their final observation). How the networks learn is
`learners.sac_learner`'s: each loss's gradient is averaged over ranks by one torch.distributed
all-reduce, so every rank's weights stay equal; the policy and target updates fall at the same
critic steps on every rank (a replicated counter). Counters, episode statistics and stop votes travel
in the update's one all-reduce (base.sync_update), as DQN's.

One iteration ("update") collects ceil(trainFrequency / numEnvs) vector steps per rank (uniformly
random actions for the first learningStarts transitions per rank, as CleanRL), then runs critic
steps in proportion (gradientSteps per trainFrequency env steps); after every policyFrequency-th
critic step, policyFrequency actor steps (CleanRL's delayed update), and after every
targetNetworkFrequency-th, a soft target update by tau. Order as CleanRL's: the critics step first,
the actor then reads the stepped critics. The entropy coefficient's loss uses the actor loss's own
samples (SB3's, where CleanRL samples again), so one backward and one all-reduce serve both.

An update reports its critics' loss as `value_loss`, its actor's as `policy_loss` and `entropy`, its
critics' mean Q as `q_value` and the entropy coefficient it leaves as `entropy_coefficient`
(metricnames.LOSS_GAUGES: each a gauge, and a panel of the chart's dashboard).

Checkpoints hold the actor (the model), the critics, target critics, entropy coefficient, both
optimisers and the counters; replay contents are per rank and, as DQN's, kept in deterministic mode only.
"""

from __future__ import annotations

import copy
import math
from typing import ClassVar

import numpy as np
import torch
from kuberl.core import envspaces
from torch import nn

from . import learners, networks
from .continuous import (
    box_problem,
    frozen,
    mlp,
)
from .device import to_device
from .session import Vote
from .tensorboard import Renames
from .twincritic import TwinCriticTrainer

# --- The networks ------------------------------------------------------------------

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's bounds of the actor's log standard deviation


class Actor(nn.Module):
    """Observations (B, O) -> a tanh-squashed Gaussian over actions in [low, high] (B, A).
    `action_scale` and `action_bias` are buffers: they travel with the module to its device."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: list[int]):
        super().__init__()
        action_dim = int(low.numel())
        self.torso = mlp(obs_dim, hidden)
        self.mean = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Linear(hidden[-1], action_dim)
        self.register_buffer("action_scale", ((high - low) / 2).float().reshape(-1))
        self.register_buffer("action_bias", ((high + low) / 2).float().reshape(-1))

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the pre-squash Gaussian, (B, A) each; log_std squashed into
        [LOG_STD_MIN, LOG_STD_MAX] by tanh as CleanRL's (smooth, where SB3 clamps)."""
        features = self.torso(obs.flatten(1).float())
        log_std = torch.tanh(self.log_std(features))
        return self.mean(features), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def forward(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample (gradients flow through it) and its log-probability: (B, A), (B,)."""
        mean, log_std = self.distribution(obs)
        noise = torch.randn(mean.shape, device=mean.device, dtype=mean.dtype, generator=generator)
        pre_tanh = mean + log_std.exp() * noise
        log_prob = squashed_log_prob(pre_tanh, mean, log_std, self.action_scale)
        return squash(pre_tanh, self.action_scale, self.action_bias), log_prob

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean: evaluation's action, (B, A)."""
        return squash(self.distribution(obs)[0], self.action_scale, self.action_bias)


class Temperature(nn.Module):
    """The entropy coefficient alpha = exp(log_alpha): learned from 1 (autotune), or fixed."""

    def __init__(self, alpha: float, learned: bool):
        super().__init__()
        start = torch.tensor(0.0 if learned else math.log(alpha))  # host: at construction, moved by .to(device)
        self.log_alpha = nn.Parameter(start, requires_grad=learned)

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


# --- The maths -----------------------------------------------------------------------


def squash(pre_tanh: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """tanh(u) mapped onto the action box: (B, A)."""
    return torch.tanh(pre_tanh) * scale + bias


def squashed_log_prob(pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor,
                      scale: torch.Tensor) -> torch.Tensor:
    """log pi(a | s) of a = tanh(u) * scale + bias with u ~ N(mean, exp(log_std)), all (B, A) but
    scale (A,): the Gaussian's log-density of u minus the log of the change of variables,
    log(scale * (1 - tanh(u)^2)), summed over action dimensions; (B,). 1 - tanh(u)^2 is taken as
    4 exp(-2u) / (1 + exp(-2u))^2, exact where the 1e-6 CleanRL and SB3 add to it is not (|u| > 7)."""
    gaussian = -0.5 * ((pre_tanh - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_jacobian = torch.log(scale) + 2 * (math.log(2) - pre_tanh - nn.functional.softplus(-2 * pre_tanh))
    return (gaussian - log_jacobian).sum(-1)


def soft_q_target(rewards: torch.Tensor, discount: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
                  next_log_prob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """r + discount * (min(Q1', Q2') - alpha * log pi(a' | s')), all (B,); discount is gamma, or 0
    where the episode terminated (a truncated one bootstraps from its final observation)."""
    return rewards + discount * (torch.minimum(next_q1, next_q2) - alpha * next_log_prob)


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Both critics' mean squared errors against the soft target, summed (CleanRL's qf_loss)."""
    return nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)


def actor_loss(log_prob: torch.Tensor, q1_pi: torch.Tensor, q2_pi: torch.Tensor,
               alpha: torch.Tensor | float) -> torch.Tensor:
    """mean(alpha * log pi(a | s) - min(Q1(s, a), Q2(s, a))) over the actor's own samples a, (B,) each."""
    return (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-mean(log_alpha * (log pi + target_entropy)), log pi held fixed (SB3's form: its gradient,
    the policy's entropy short of the target, does not shrink with alpha as CleanRL's alpha-scaled
    one does): alpha rises while the entropy is below the target, falls while above."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


# --- The trainer -------------------------------------------------------------------


class SACTrainer(TwinCriticTrainer):
    ACTION_SPACES = envspaces.ACTION_SPACES["sac"]
    # CleanRL's sac_continuous_action.py: qf_loss is written halved (the two critics' mean; value_loss is their sum)
    TENSORBOARD_TAGS: ClassVar[Renames] = {"value_loss": ("losses/qf_loss", 0.5), "policy_loss": ("losses/actor_loss", 1.0)}

    ALGORITHM, ACTOR = "sac", Actor

    def _setup_learning(self, low: torch.Tensor, high: torch.Tensor, action_dim: int) -> None:
        """The entropy coefficient, the learner (rank 0's weights) and the target critics."""
        ctx, hp = self.ctx, self.hp
        self.temperature = Temperature(hp.alpha, hp.autotune).to(ctx.device)
        self.target_entropy = -float(action_dim)  # minus the action dimensions (CleanRL, SB3)
        self.learner = learners.sac_learner(self.agent, self.critics, self.temperature, hp, ctx)  # rank 0's weights
        self.optimizer = self.learner.optimizer
        self.target = copy.deepcopy(self.critics).requires_grad_(False)

    @property
    def learning_rate(self) -> float:
        return self.hp.policy_learning_rate

    # -- state for checkpoints, beyond BaseAlgorithm's ----------------------------

    def _shared_extra(self) -> dict:
        return {"critics": self.critics.state_dict(), "target": self.target.state_dict(),
                "temperature": self.temperature.state_dict(), "critic_updates": self.critic_updates}

    def loaded_problem(self, state: dict) -> str | None:
        return box_problem({"agent": self.agent}, state)

    def _load_shared_extra(self, state: dict) -> None:
        self.critics.load_state_dict(state["critics"])
        self.target.load_state_dict(state["target"])
        self.temperature.load_state_dict(state["temperature"])
        self.critic_updates = state["critic_updates"]

    # -- one iteration: its exploration and its gradient steps (base.OffPolicyAlgorithm.update runs them) --

    def collect(self) -> int:
        """vector_steps steps into the replay buffer, uniformly random before learningStarts transitions
        per rank, else sampled from the actor; returns how many were real (autoreset steps excluded)."""
        space, num_envs, real = self.action_space, self.replay.num_envs, 0
        random = self.steps_per_rank < self.hp.learning_starts
        for _ in range(self.vector_steps):
            obs = self.next_obs
            if random:
                actions = self.np_rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32)
            else:
                with torch.no_grad():
                    actions = self.agent(to_device(obs, self.ctx.device))[0].cpu().numpy()
            self.next_obs, reward, terminated, truncated, _ = self.envs.step(actions)
            real += int(self.tracker.valid.sum())
            self.replay.add(obs, actions, reward, terminated, truncated, self.tracker.valid)
            self.tracker.step(reward, terminated | truncated)
        return real

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                      discount: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """One critic step on a per-rank batch, then the delayed actor steps and the target update where
        due. Returns (critic loss, the critics' mean Q(s, a), actor losses' sum, entropy estimates' sum,
        then each critic's mean Q and loss: networks.twin_critic_statistics), detached, on the device."""
        hp = self.hp
        alpha = self.temperature().detach()
        with torch.no_grad():
            next_actions, next_log_prob = self.agent(next_obs)
            next_q1, next_q2 = self.target(next_obs, next_actions)
            target = soft_q_target(rewards, discount, next_q1, next_q2, next_log_prob, alpha)
        q1, q2 = self.critics(obs, actions)
        qf_loss = critic_loss(q1, q2, target)
        self.learner.step_critics(qf_loss)
        self.critic_updates += 1
        policy = torch.zeros(2, device=qf_loss.device)
        if self.critic_updates % hp.policy_frequency == 0:
            for _ in range(hp.policy_frequency):
                policy += self.policy_step(obs)
        if self.critic_updates % hp.target_network_frequency == 0:
            networks.soft_update(self.target, self.critics, hp.tau)
        q_mean = (q1.detach().mean() + q2.detach().mean()) / 2
        return torch.cat([qf_loss.detach().reshape(1), q_mean.reshape(1), policy, networks.twin_critic_statistics(q1, q2, target)])

    def policy_step(self, obs: torch.Tensor) -> torch.Tensor:
        """One actor step (and the entropy coefficient's, autotuned) against the critics, which it leaves
        alone; returns (actor loss, entropy estimate -mean log pi), detached."""
        actions, log_prob = self.agent(obs)
        with frozen(self.critics):  # the actor's loss reads them; no gradient of theirs is wanted
            q1_pi, q2_pi = self.critics(obs, actions)
        loss = actor_loss(log_prob, q1_pi, q2_pi, self.temperature().detach())
        total = loss + alpha_loss(self.temperature.log_alpha, log_prob, self.target_entropy) if self.hp.autotune else loss
        self.learner.step_policy(total)
        return torch.stack([loss.detach(), -log_prob.detach().mean()])

    def actor_steps(self, first: int, last: int) -> int:
        """Actor steps taken with critic steps first+1 .. last: policyFrequency at each multiple of it."""
        frequency = self.hp.policy_frequency
        return (last // frequency - first // frequency) * frequency

    def learn(self, stop_vote: Vote = False) -> tuple[dict[str, torch.Tensor], int]:
        """gradient_steps critic steps (with their actor steps) on batches from this rank's replay
        buffer; the mean losses and Q value, the entropy coefficient they leave, on the device, and the
        critic steps run. A stop (`stop_vote`) is read between steps (base.LearningStop: every rank's
        vote in one all-reduce) and ends them there."""
        stops, hp, device = self.learning_stop, self.hp, self.ctx.device
        stops.begin(self.gradient_steps, stop_vote)
        totals, done, first = torch.zeros(8, device=device), 0, self.critic_updates  # one host read per update, in update()
        while done < self.gradient_steps and not stops.stopped:
            totals += self.gradient_step(*self.to_tensors(self.replay.sample(hp.batch_size, hp.gamma, self.np_rng)))
            done += 1
            stops.vote(done)
        critic, q_value, actor, entropy, *twins = totals.unbind()
        losses = {"value_loss": critic / max(done, 1), "q_value": q_value / max(done, 1),
                  "entropy_coefficient": self.temperature().detach(),
                  **{name: twin / max(done, 1) for name, twin in zip(networks.TWIN_CRITIC_STATISTICS, twins, strict=True)}}
        if actor_steps := self.actor_steps(first, self.critic_updates):
            losses |= {"policy_loss": actor / actor_steps, "entropy": entropy / actor_steps}
        return losses, done

    def _freeze(self, frozen: SACTrainer) -> None:
        frozen.agent = copy.deepcopy(self.agent)
