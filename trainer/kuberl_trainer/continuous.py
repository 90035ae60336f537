"""What SAC and TD3 share, beside them (as SB3's common/): ReLU MLPs of torch's default initialisation,
the twin Q critics both read, an action box's scale and centre (the actors map tanh's [-1, 1] onto
it), the refusal of an unbounded box, and of a checkpoint's other box, and a module frozen while another's loss reads
it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

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


# An actor's action box, the env's half-width and centre: buffers among its weights, not learned
BOX_BUFFERS = ("action_scale", "action_bias")


def box_problem(actors: Mapping[str, nn.Module], state: Mapping[str, Any]) -> str | None:
    """Where a checkpoint's `state` gives one of `actors` (named by its key in the state) another action box than this
    job's env gives it; None where none does. The file is on the tenant's volume: one edited to a box of no width
    resumed acting at the box's centre alone, one of 1e30 in TD3's target actor trained on an infinite critic loss
    (kuberl eval refuses such a model too). Shapes are checkpoint.mismatch's, judged before."""
    for key, actor in actors.items():
        for name in BOX_BUFFERS:
            found, own = state[key][name].detach().cpu().double(), actor.get_buffer(name).detach().cpu().double()
            if not torch.allclose(found, own, rtol=1e-5, atol=1e-6):
                return f"state.{key}.{name} is {_listed(found)}, this job's env's action box gives {_listed(own)}"
    return None


def _listed(values: torch.Tensor, shown: int = 4) -> str:
    items = values.flatten().tolist()
    return "[" + ", ".join(f"{v:g}" for v in items[:shown]) + (", …" if len(items) > shown else "") + "]"


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
