"""Acting for small MLP agents on CPU, in numpy.

A rollout step's forward pass for 8 envs is a few microseconds of maths and
hundreds of microseconds of torch dispatch. `NumpyPolicy` runs the same
maths on numpy views of the bare module's parameters: the optimiser, DDP's
initial broadcast and load_state_dict all write those tensors in place, so
the views always hold the current weights, and acting adds no collective.
Sampling uses the rank's numpy generator, which checkpoints record.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .ppo_terms import LOG_SQRT_2PI


def supports(agent: nn.Module, device: torch.device, precision: str = "fp32") -> bool:
    """Plain tanh MLP heads on CPU in fp32 (pixels and GPUs act in torch)."""
    encoder = getattr(agent, "encoder", None)
    layers = [*agent.actor, *agent.critic]
    return (
        device.type == "cpu"
        and precision == "fp32"
        and (encoder is None or isinstance(encoder, nn.Identity))
        and all(isinstance(m, (nn.Linear, nn.Tanh)) for m in layers)
    )


def _views(sequential: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in sequential if isinstance(m, nn.Linear)]


def _forward(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for weight, bias in layers[:-1]:
        x = np.tanh(x @ weight + bias)
    weight, bias = layers[-1]
    return x @ weight + bias


class NumpyPolicy:
    def __init__(self, agent: nn.Module, rng: np.random.Generator):
        self.agent, self.discrete = agent, agent.discrete
        self.actor, self.critic = _views(agent.actor), _views(agent.critic)
        self.log_std = None if self.discrete else agent.log_std.detach().numpy()
        self.rng = rng

    def reseeded(self, seed: int) -> NumpyPolicy:
        return NumpyPolicy(self.agent, np.random.default_rng(seed))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return _forward(self.critic, obs)[:, 0]

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        out = _forward(self.actor, obs)
        return out.argmax(-1) if self.discrete else out

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample (action, log-prob, value), as Agent.act does in torch."""
        out = _forward(self.actor, obs)
        if self.discrete:
            shifted = out - out.max(-1, keepdims=True)
            log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
            cdf = np.exp(log_p).cumsum(-1)
            action = np.minimum((self.rng.random((len(obs), 1), np.float32) > cdf).sum(-1), out.shape[-1] - 1)
            log_prob = np.take_along_axis(log_p, action[:, None], -1)[:, 0]
        else:
            std = np.exp(self.log_std)
            action = out + std * self.rng.standard_normal(out.shape, np.float32)
            log_prob = (-0.5 * np.square((action - out) / std) - self.log_std - LOG_SQRT_2PI).sum(-1)
        return action, log_prob, self.value(obs)
