"""What every implementation of PPO shares, defined once: the autograd path
(ppo.py with learners.AutogradPPOLearner), the hand-fused step (fused.py) and
numpy acting (fastpolicy.py) read their constants and the rollout table's
layout from here."""

from __future__ import annotations

import math

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)  # the Gaussian head's log-density constant
STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")  # a step's statistics, in order
SCALAR_COLUMNS = ("log_prob", "value", "advantage", "return", "valid")  # after the action columns, per row


def minibatch_table(actions: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
    """One row per transition, so a minibatch is one gather: the action
    columns (B, A) as floats, then SCALAR_COLUMNS (B, 5)."""
    return torch.cat([actions.float(), scalars], 1)


def minibatch_columns(rows: torch.Tensor, norm_advantage: bool) -> tuple[torch.Tensor, ...]:
    """A minibatch's rows (minibatch_table) as (actions, old log-prob, old value, advantages,
    returns, weight): `valid` turned into each row's weight in the mean (padding rows weigh 0);
    advantages normalised over the valid rows when asked, as CleanRL and SB3 do per minibatch:
    (a - mean) / (std + 1e-8), std with Bessel's correction (torch's Tensor.std)."""
    actions = rows[:, :-len(SCALAR_COLUMNS)]
    old_log_prob, old_value, advantages, returns, valid = rows[:, -len(SCALAR_COLUMNS):].unbind(1)
    real = valid.sum()
    weight = valid / real.clamp(min=1.0)
    if norm_advantage:
        mean = (advantages * weight).sum()
        centred = advantages - mean
        std = ((centred.square() * valid).sum() / (real - 1).clamp(min=1.0)).sqrt()
        advantages = centred / (std + 1e-8)
    return actions, old_log_prob, old_value, advantages, returns, weight
