"""The trainer frame SAC and TD3 share, beside them (SB3's OffPolicyAlgorithm, where SAC writes only
`_setup_model` and `train`): an actor squashed into the env's action box (the model) and twin critics,
weighed with the replay buffer before either is made, then each algorithm's own targets and learner
(`_setup_learning`); batches moved to the device; the final model; evaluation with the actor's `greedy`
action. Exploration (`collect`), the gradient steps (`learn`) and checkpoint extras stay in sac.py and
td3.py, which read top to bottom as CleanRL's."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from kuberl.core import replaymemory
from torch import nn

from . import budget, evaluation
from .base import OffPolicyAlgorithm
from .continuous import Critics, box_bounds
from .device import to_device, upload
from .distributed import Dist
from .replay import Batch


class TwinCriticTrainer(OffPolicyAlgorithm):
    """`ALGORITHM` names the spec block ("sac", "td3": its hiddenSizes, its replay plan); `ACTOR(obs_dim,
    low, high, hidden)` is the algorithm's actor, whose `greedy(obs)` is how it acts when evaluated."""

    ALGORITHM: ClassVar[str]
    ACTOR: ClassVar[type[nn.Module]]

    def __init__(self, ctx: Dist, hp, env_id: str, num_envs: int, env_kwargs: dict,
                 total_timesteps: int, seed: int, restart: int, env_backend: str = "auto", fast: bool = True):
        """`fast`: as the other algorithms take it; SAC and TD3 have the reference learner only."""
        self.hp, self.total_timesteps = hp, total_timesteps
        super().__init__(ctx, env_id, num_envs, env_kwargs, seed, restart, env_backend)

    def _setup_model(self, env_id: str, num_envs: int) -> None:
        """The actor (the model) and critics, the algorithm's targets and learner, the replay buffer."""
        ctx, hp, space = self.ctx, self.hp, self.envs.single_observation_space
        low, high = box_bounds(self.envs, self.action_space, env_id)  # the actor squashes into the box: it must have one
        action_shape = tuple(self.action_space.shape)
        planned = replaymemory.for_algorithm(self.ALGORITHM, hp, num_envs, self.obs_shape, space.dtype.name, action_shape,
                                             total_timesteps=self.total_timesteps, world_size=ctx.world_size)
        budget.check_replay(planned, self.ALGORITHM, env_id, ctx)  # weighed before it is made
        obs_dim, action_dim, hidden = int(np.prod(self.obs_shape)), int(np.prod(action_shape)), list(hp.hidden_sizes)
        budget.check_networks(f"spec.{self.ALGORITHM}.hiddenSizes", "the actor and twin critics", lambda: nn.ModuleList(
            [self.ACTOR(obs_dim, low, high, hidden), Critics(obs_dim, action_dim, hidden)]), ctx)
        self.agent = self.ACTOR(obs_dim, low, high, hidden).to(ctx.device)
        self.critics = Critics(obs_dim, action_dim, hidden).to(ctx.device)
        self._setup_learning(low, high, action_dim)
        self._setup_replay(planned, num_envs)  # the buffer, vector_steps, batch_per_rank, gradient_steps
        self.critic_updates = 0  # critic steps ever taken: when the actor and the targets update, alike on every rank

    def _setup_learning(self, low: torch.Tensor, high: torch.Tensor, action_dim: int) -> None:
        """The algorithm's own: its targets, its learner (`learner`, `optimizer`), what its exploration needs."""
        raise NotImplementedError

    def to_tensors(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        return tuple(upload(a, self.ctx.device) for a in (batch.obs, batch.actions, batch.returns, batch.discount, batch.next_obs))

    def final_model(self) -> dict:
        return {"agent": self.agent.state_dict(), "hidden_sizes": list(self.hp.hidden_sizes)}

    # -- evaluation (rank 0) -------------------------------------------------

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """The actor's `greedy` action (SAC's squashed mean, TD3's action without noise)."""
        with torch.no_grad():
            return self.agent.greedy(to_device(obs, self.ctx.device)).cpu().numpy()

    def evaluate(self, env_id: str, episodes: int, env_kwargs: dict, seed: int,
                 stop: Callable[[], bool] | None = None) -> float:
        """evaluation.mean_return, acting with `greedy`."""
        with self.evaluation_envs(env_id, episodes, env_kwargs) as envs:
            return evaluation.mean_return(envs, self.greedy, episodes, seed, stop=stop)
