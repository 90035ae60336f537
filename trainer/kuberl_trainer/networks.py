"""Network torsos, chosen from the observation space and overridable.

`policy: auto` (the default of spec.ppo.policy and spec.dqn.policy) picks
the Nature DQN CNN for image observations (a uint8 Box of 2 or 3 dims, each
side at least MIN_SIDE) and an MLP for flat vectors and smaller uint8 grids
(MiniGrid's 7x7x3); `cnn` or `mlp` force one, and a forced torso that
cannot read the observations is a configuration error naming the field.

The CNN takes uint8 frames, channels first (Atari's stacks) or last
(CarRacing's (96, 96, 3): the smallest dimension last, as SB3's
VecTransposeImage decides), and scales them to [0, 1] itself, so
observations travel to the device as uint8 (4x fewer bytes) and become
floats there.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from kuberl.core import torsos
from kuberl.core.envspaces import frame_layout, is_image
from torch import nn

CNN_FEATURES = 512


class PolicyMismatch(ValueError):
    """A forced policy that cannot read the env's observations; the message
    starts with the field."""


def choose(space: gym.Space, requested: str, field: str) -> str:
    """"mlp" or "cnn" for this observation space; raises PolicyMismatch naming `field`
    (kuberl.core.torsos' rule, which `kuberl validate` and the operator apply before any pod starts)."""
    image = is_image(space)
    if problem := torsos.torso_problem(image, tuple(space.shape or ()), str(space), requested):
        raise PolicyMismatch(f"{field}: {problem}")
    return torsos.torso(image, requested)


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


def mlp(n_in: int, hidden: list[int], n_out: int, out_std: float, activation: type[nn.Module] = nn.Tanh) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [layer(n_in, width), activation()]
        n_in = width
    return nn.Sequential(*layers, layer(n_in, n_out, out_std))


def conv(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Conv2d:
    c = nn.Conv2d(c_in, c_out, kernel, stride)
    nn.init.orthogonal_(c.weight, math.sqrt(2))
    nn.init.zeros_(c.bias)
    return c


def scaled(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1], a new tensor: the cast makes it, the division
    happens in place (one float pass per frame, not two; always a copy, so a float
    argument is never changed under its caller)."""
    return frames.to(torch.float32, copy=True).div_(255.0)


class NatureCNN(nn.Module):
    """Mnih et al. 2015's torso: three convolutions and a 512-unit layer.
    (B, C, H, W), (B, H, W, C) or (B, H, W) uint8 frames -> (B, 512) features.
    `inputs` then `features` is `forward` in two halves, for a learner that
    feeds the same frames to two networks and converts them once."""

    def __init__(self, frame_shape: tuple[int, ...]):
        super().__init__()
        channels, height, width, self.channels_last = frame_layout(tuple(frame_shape))
        self.convs = nn.Sequential(
            conv(channels, 32, 8, 4), nn.ReLU(),
            conv(32, 64, 4, 2), nn.ReLU(),
            conv(64, 64, 3, 1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]  # host: at construction, before .to(device)
        self.fc = nn.Sequential(layer(flat, CNN_FEATURES), nn.ReLU())
        self.single_channel = len(frame_shape) == 2

    def inputs(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames as the convolutions read them: channels first, float32 in [0, 1]."""
        x = frames.unsqueeze(-3) if self.single_channel else frames
        if self.channels_last:
            x = x.movedim(-1, -3)
        return scaled(x)

    def features(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(inputs))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.features(self.inputs(frames))


def encoder(space: gym.Space, requested: str, field: str) -> tuple[nn.Module, int]:
    """(torso, feature width) for PPO's actor-critic: the CNN shared by both
    heads, or the identity (each head is then its own MLP, as before)."""
    width = encoder_width(space, requested, field)
    if choose(space, requested, field) == "cnn":
        return NatureCNN(tuple(space.shape)), width
    return (nn.Identity() if len(tuple(space.shape or ())) <= 1 else nn.Flatten()), width


def encoder_width(space: gym.Space, requested: str, field: str) -> int:
    """The width of what `encoder`'s torso gives, known without building it."""
    return CNN_FEATURES if choose(space, requested, field) == "cnn" else math.prod(tuple(space.shape or ()))


class QCNN(nn.Module):
    """The Nature DQN: the CNN torso and a linear layer to one value per action."""

    def __init__(self, frame_shape: tuple[int, ...], num_actions: int):
        super().__init__()
        self.torso = NatureCNN(frame_shape)
        self.head = layer(CNN_FEATURES, num_actions, 1.0)

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Frames as the layers read them (NatureCNN.inputs): what q_values takes."""
        return self.torso.inputs(obs)

    def q_values(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso.features(inputs)).float()  # Q-values and TD maths in fp32 under autocast

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.inputs(obs))

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.forward(obs).argmax(-1)


# Twin critics' own statistics (twin_critic_statistics), named as an update reports them (metricnames.LOSS_GAUGES)
TWIN_CRITIC_STATISTICS = ("q1_value", "q2_value", "q1_loss", "q2_loss")


def twin_critic_statistics(q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Each twin critic's mean Q(s, a) and mean squared error against the target (TWIN_CRITIC_STATISTICS' order), detached,
    one tensor on their device: summed over an update's steps there and read with its other losses, no host sync."""
    q1, q2 = q1.detach(), q2.detach()
    return torch.stack([q1.mean(), q2.mean(), nn.functional.mse_loss(q1, target), nn.functional.mse_loss(q2, target)])


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target (tau = 1: a hard copy)."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.lerp_(o, tau)
