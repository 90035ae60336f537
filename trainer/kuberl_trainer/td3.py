"""TD3 (twin delayed deep deterministic policy gradient, Fujimoto et al. 2018), for continuous (float Box)
actions. Reads top to bottom as CleanRL's td3_continuous_action.py: the network (a deterministic tanh actor;
the twin critics are continuous.py's, shared with SAC), the maths as pure functions (exploration noise,
target policy smoothing, the clipped double-Q target, the critic and actor losses, when the delayed steps
fall), then the trainer (its targets and learner, its own state, its exploration and gradient steps;
seeding, envs, checkpoint state and the loop are base.BaseAlgorithm's, the iteration and the replay
buffer's schedule base.OffPolicyAlgorithm's, as DQN's and SAC's; the actor and critics, weighed with the
buffer, and evaluation twincritic.TwinCriticTrainer's, as SAC's).

Each rank steps its own vectorised envs and fills and samples its OWN replay buffer
(`replay.ReplayBuffer`, one-step transitions, gymnasium's autoreset rows never sampled, truncated
episodes bootstrapped from their final observation). How the networks learn is `learners.td3_learner`'s:
each loss's gradient is averaged over ranks by one torch.distributed all-reduce, so every rank's weights
stay equal; the actor and target updates fall at the same critic steps on every rank (a replicated
counter). Counters, episode statistics and stop votes travel in the update's one all-reduce.

One iteration ("update") collects ceil(trainFrequency / numEnvs) vector steps per rank (uniformly random
actions for the first learningStarts transitions per rank, then the actor's plus Gaussian noise of
explorationNoise times the box's half-width, clipped to the box), then runs critic steps in proportion
(gradientSteps per trainFrequency env steps). The critics' target takes the smaller of the two target
critics at the target actor's next action plus clipped noise (target policy smoothing); after every
policyDelay-th critic step, ONE actor step (it ascends the first critic's Q) and a soft update by tau of
the target actor and both target critics (the paper's delayed update, as CleanRL and SB3).

An update reports its critics' loss as `value_loss`, their mean Q as `q_value` and its actor's loss as
`policy_loss` (metricnames.LOSS_GAUGES, the gauges SAC's statistics of the same meaning use).

Checkpoints hold the actor (the model), the critics, both targets, both optimisers and the counters; replay
contents are per rank and, as DQN's and SAC's, kept in deterministic mode only.
"""

from __future__ import annotations

import copy
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

# --- The network ---------------------------------------------------------------------


class Actor(nn.Module):
    """Observations (B, O) -> deterministic actions in [low, high] (B, A): tanh of an MLP mapped onto the
    box, as CleanRL's. `action_scale` (the box's half-width) and `action_bias` (its centre) are buffers:
    they travel with the module to its device."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, hidden: list[int]):
        super().__init__()
        self.net = mlp(obs_dim, hidden, int(low.numel()))
        self.register_buffer("action_scale", ((high - low) / 2).float().reshape(-1))
        self.register_buffer("action_bias", ((high + low) / 2).float().reshape(-1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs.flatten(1).float())) * self.action_scale + self.action_bias

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's action itself, no noise: evaluation's, (B, A)."""
        return self.forward(obs)


# --- The maths -----------------------------------------------------------------------


def explore(actions: np.ndarray, standard_normal: np.ndarray, sigma: float, scale: np.ndarray,
            low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Exploration: the actor's actions plus Gaussian noise of standard deviation sigma * scale (the box's
    half-width), clipped to [low, high]; actions and standard_normal (B, A), the rest (A,)."""
    return np.clip(actions + sigma * scale * standard_normal, low, high)


def smoothed_target_actions(target_actions: torch.Tensor, standard_normal: torch.Tensor, sigma: float,
                            noise_clip: float, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Target policy smoothing: a' = clip(mu'(s') + clip(sigma * eps, -c, c) * scale, low, high), eps the
    standard normal draw, the noise in units of the box's half-width (CleanRL's; SB3's in its [-1, 1]
    actions); (B, A), scale and bias (A,)."""
    noise = (sigma * standard_normal).clamp(-noise_clip, noise_clip) * scale
    return torch.clamp(target_actions + noise, bias - scale, bias + scale)


def clipped_double_q_target(rewards: torch.Tensor, discount: torch.Tensor, next_q1: torch.Tensor,
                            next_q2: torch.Tensor) -> torch.Tensor:
    """r + discount * min(Q1'(s', a'), Q2'(s', a')), all (B,); discount is gamma, or 0 where the episode
    terminated (a truncated one bootstraps from its final observation)."""
    return rewards + discount * torch.minimum(next_q1, next_q2)


def critic_loss(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Both critics' mean squared errors against the one target, summed (CleanRL's qf_loss)."""
    return nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)


def actor_loss(q1_pi: torch.Tensor) -> torch.Tensor:
    """-mean Q1(s, mu(s)), (B,): the actor ascends the first critic alone (the paper's, CleanRL's, SB3's)."""
    return -q1_pi.mean()


def delayed_step_due(critic_step: int, policy_delay: int) -> bool:
    """Whether critic step number `critic_step` (counted from 1) is followed by an actor step and the
    targets' soft update: every policy_delay-th is."""
    return critic_step % policy_delay == 0


def delayed_steps_between(first: int, last: int, policy_delay: int) -> int:
    """Actor steps taken with critic steps first+1 .. last."""
    return last // policy_delay - first // policy_delay


# --- The trainer -------------------------------------------------------------------


class TD3Trainer(TwinCriticTrainer):
    ACTION_SPACES = envspaces.ACTION_SPACES["td3"]
    # CleanRL's td3_continuous_action.py: qf_loss is written halved (the two critics' mean; value_loss is their sum)
    TENSORBOARD_TAGS: ClassVar[Renames] = {"value_loss": ("losses/qf_loss", 0.5), "policy_loss": ("losses/actor_loss", 1.0)}

    ALGORITHM, ACTOR = "td3", Actor

    def _setup_learning(self, low: torch.Tensor, high: torch.Tensor, action_dim: int) -> None:
        """The learner (rank 0's weights), the target actor and critics, and exploration's box."""
        self.learner = learners.td3_learner(self.agent, self.critics, self.hp, self.ctx)  # rank 0's weights
        self.optimizer = self.learner.optimizer
        self.target_actor = copy.deepcopy(self.agent).requires_grad_(False)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.box = (self.action_space.low, self.action_space.high, ((high - low) / 2).numpy())  # exploration's, on the host

    @property
    def learning_rate(self) -> float:
        return self.hp.learning_rate

    # -- state for checkpoints, beyond BaseAlgorithm's ----------------------------

    def _shared_extra(self) -> dict:
        return {"critics": self.critics.state_dict(), "target_actor": self.target_actor.state_dict(),
                "target_critics": self.target_critics.state_dict(), "critic_updates": self.critic_updates}

    def loaded_problem(self, state: dict) -> str | None:
        return box_problem({"agent": self.agent, "target_actor": self.target_actor}, state)

    def _load_shared_extra(self, state: dict) -> None:
        self.critics.load_state_dict(state["critics"])
        self.target_actor.load_state_dict(state["target_actor"])
        self.target_critics.load_state_dict(state["target_critics"])
        self.critic_updates = state["critic_updates"]

    # -- one iteration: its exploration and its gradient steps (base.OffPolicyAlgorithm.update runs them) --

    def collect(self) -> int:
        """vector_steps steps into the replay buffer, uniformly random before learningStarts transitions per
        rank, else the actor's with exploration noise; returns how many were real (autoreset steps excluded)."""
        space, num_envs, real = self.action_space, self.replay.num_envs, 0
        low, high, scale = self.box
        random = self.steps_per_rank < self.hp.learning_starts
        for _ in range(self.vector_steps):
            obs = self.next_obs
            if random:
                actions = self.np_rng.uniform(low, high, (num_envs, *space.shape))
            else:
                with torch.no_grad():
                    mean = self.agent(to_device(obs, self.ctx.device)).cpu().numpy()
                actions = explore(mean, self.np_rng.standard_normal(mean.shape), self.hp.exploration_noise, scale, low, high)
            actions = actions.astype(np.float32)
            self.next_obs, reward, terminated, truncated, _ = self.envs.step(actions)
            real += int(self.tracker.valid.sum())
            self.replay.add(obs, actions, reward, terminated, truncated, self.tracker.valid)
            self.tracker.step(reward, terminated | truncated)
        return real

    def gradient_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                      discount: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """One critic step on a per-rank batch, then, where due, one actor step and the targets' soft update.
        Returns (critic loss, the critics' mean Q(s, a), the actor loss or 0, then each critic's mean Q and loss:
        networks.twin_critic_statistics), detached, on the device."""
        hp, target = self.hp, self.target_actor
        with torch.no_grad():
            next_actions = target(next_obs)
            next_actions = smoothed_target_actions(next_actions, torch.randn_like(next_actions), hp.target_policy_noise,
                                                   hp.target_noise_clip, target.action_scale, target.action_bias)
            next_q1, next_q2 = self.target_critics(next_obs, next_actions)
            y = clipped_double_q_target(rewards, discount, next_q1, next_q2)
        q1, q2 = self.critics(obs, actions)
        qf_loss = critic_loss(q1, q2, y)
        self.learner.step_critics(qf_loss)
        self.critic_updates += 1
        policy = torch.zeros((), device=qf_loss.device)
        if delayed_step_due(self.critic_updates, hp.policy_delay):
            policy = self.policy_step(obs)
            networks.soft_update(self.target_actor, self.agent, hp.tau)
            networks.soft_update(self.target_critics, self.critics, hp.tau)
        q_mean = (q1.detach().mean() + q2.detach().mean()) / 2
        return torch.cat([torch.stack([qf_loss.detach(), q_mean, policy]), networks.twin_critic_statistics(q1, q2, y)])

    def policy_step(self, obs: torch.Tensor) -> torch.Tensor:
        """One actor step against the first critic, which it leaves alone; returns the actor loss, detached."""
        with frozen(self.critics):  # the actor's loss reads them; no gradient of theirs is wanted
            loss = actor_loss(self.critics(obs, self.agent(obs))[0])
        self.learner.step_policy(loss)
        return loss.detach()

    def learn(self, stop_vote: Vote = False) -> tuple[dict[str, torch.Tensor], int]:
        """gradient_steps critic steps (with their delayed actor steps) on batches from this rank's replay
        buffer; the mean losses and Q value, on the device, and the critic steps run. A stop (`stop_vote`)
        is read between steps (base.LearningStop: every rank's vote in one all-reduce) and ends them there."""
        stops, hp, device = self.learning_stop, self.hp, self.ctx.device
        stops.begin(self.gradient_steps, stop_vote)
        totals, done, first = torch.zeros(7, device=device), 0, self.critic_updates  # one host read per update, in update()
        while done < self.gradient_steps and not stops.stopped:
            totals += self.gradient_step(*self.to_tensors(self.replay.sample(hp.batch_size, hp.gamma, self.np_rng)))
            done += 1
            stops.vote(done)
        critic, q_value, actor, *twins = totals.unbind()
        losses = {"value_loss": critic / max(done, 1), "q_value": q_value / max(done, 1),
                  **{name: twin / max(done, 1) for name, twin in zip(networks.TWIN_CRITIC_STATISTICS, twins, strict=True)}}
        if actor_steps := delayed_steps_between(first, self.critic_updates, hp.policy_delay):
            losses["policy_loss"] = actor / actor_steps
        return losses, done

    def _freeze(self, frozen: TD3Trainer) -> None:
        frozen.agent = copy.deepcopy(self.agent)
