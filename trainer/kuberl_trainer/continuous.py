"""What SAC and TD3 share, beside them (as SB3's common/): ReLU MLPs of torch's default initialisation,
the twin Q critics both read, an action box's scale and centre (the actors map tanh's [-1, 1] onto
it), the refusal of an unbounded box, and a module frozen while another's loss reads it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import gymnasium as gym
import torch
from kuberl.core import envspaces
from torch import nn

from .envs import UnknownEnv


def mlp(n_in: int, hidden: list[int], n_out: int | None = None) -> nn.Sequential:
    """ReLU layers of torch's default initialisation, as CleanRL's and SB3's SAC and TD3 networks; a linear
    output layer of n_out units unless None (SAC's actor torso, which two heads read)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(n_in, width), nn.ReLU()]
        n_in = width
    return nn.Sequential(*layers, *([nn.Linear(n_in, n_out)] if n_out else []))


class Critics(nn.Module):
    """Twin Q networks: (observations (B, O), actions (B, A)) -> Q1, Q2, (B,) each."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: list[int]):
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, hidden, 1)
        self.q2 = mlp(obs_dim + action_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.cat([obs.flatten(1).float(), actions.float()], 1)
        return self.q1(inputs).squeeze(-1), self.q2(inputs).squeeze(-1)


def box_bounds(envs: gym.vector.VectorEnv, space: gym.spaces.Box, env_id: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The action box's (low, high) as float32 host tensors (an actor's buffers, moved by .to(device)); a box no
    squashing actor can act in (envspaces.squashed_box_problem: unbounded, empty, a dimension of no width, bounds
    past 1e9) closes `envs` and is refused naming spec.env.id."""
    if problem := envspaces.squashed_box_problem(space):
        envs.close()
        raise UnknownEnv(f"spec.env.id: {env_id!r} has {problem}")
    return (torch.as_tensor(space.low, dtype=torch.float32),  # host: the actor's buffers, moved by .to(device)
            torch.as_tensor(space.high, dtype=torch.float32))  # host: as low


@contextlib.contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """`module`'s parameters take no gradient inside (each one's flag restored after)."""
    flags = [(p, p.requires_grad) for p in module.parameters()]
    module.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
