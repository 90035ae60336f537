"""SAC (soft actor-critic), for continuous (float Box) actions. Reads top to bottom as CleanRL's
sac_continuous_action.py: the networks (a tanh-squashed Gaussian actor, twin soft Q critics),
then the maths as pure functions (the squashed Gaussian's log-probability, the soft Q target,
the critic, actor and temperature losses).
"""

from __future__ import annotations

import math

import torch
from torch import nn

# --- The networks ------------------------------------------------------------------

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's bounds of the actor's log standard deviation


def mlp(n_in: int, hidden: list[int], n_out: int | None = None) -> nn.Sequential:
    """ReLU layers of torch's default initialisation, as CleanRL's and SB3's SAC networks; a linear
    output layer of n_out units unless None (the actor's torso, which two heads read)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    return nn.Sequential(*layers, *([nn.Linear(n_in, n_out)] if n_out else []))


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

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean: evaluation's action, (B, A)."""
        return squash(self.distribution(obs)[0], self.action_scale, self.action_bias)


class Critics(nn.Module):
    """Twin soft Q networks: (observations (B, O), actions (B, A)) -> Q1, Q2, (B,) each."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int]):
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, hidden, 1)
        self.q2 = mlp(obs_dim + action_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.cat([obs.flatten(1).float(), actions.float()], 1)
        return self.q1(inputs).squeeze(-1), self.q2(inputs).squeeze(-1)


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
