"""The seam between an algorithm and how its network learns and acts.

An algorithm asks once for "a learner and an actor for this network on this
device" (`ppo_learner`, `q_learner`) and never asks which it got, as SB3's
algorithms talk only to `self.policy`:

- the reference: DDP (when distributed) + torch.optim.Adam + autograd on the
  algorithm's own loss, acting in torch on the bare module under no_grad;
- on CUDA in fp32, the reference's steps replayed from CUDA graphs (GraphedQLearner,
  GraphedPPOLearner: the same maths on fixed tensors, the gradient summed between two graphs);
- SAC's and TD3's (sac_learner, td3_learner): the reference's Adam on flat gradients summed by one
  torch.distributed all-reduce per loss (GraphedOptimizerStep, eager), no DDP wrapper;
- the CPU fast path, for small MLPs on CPU in fp32: fused.py's hand-written
  step (the same maths; its flat gradient summed by one torch.distributed
  all-reduce; rank 0's weights broadcast once instead of by DDP's
  constructor, which imports torch._dynamo) and numpy acting (fastpolicy,
  or the fused Q step's own greedy).

A recurrent PPO agent (spec.ppo.lstm: ppo.RecurrentAgent) always gets the reference learner and
a torch actor that carries each env's LSTM state (RecurrentTorchPolicy): none of the faster paths
holds a state between steps.

`fast=False` switches the fast path off; tests/unit/test_trainer_fused.py
holds both paths to the same weights.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import distributed, fastpolicy, fused, networks, recurrent
from .device import autocast, to_device
from .distributed import Dist
from .ppo_terms import STAT_NAMES, minibatch_columns


class Sequences(NamedTuple):
    """A recurrent minibatch's whole env sequences beyond their rows: each env's first state, its steps' episode
    starts (rows' order) on the device, and the same starts in host memory, where a rollout collects them: the
    LSTM's calls are cut from those without a host read of the device's (a numpy array, which DDP passes on
    as it is, where a host tensor would be moved to the GPU)."""

    first_h: torch.Tensor
    first_c: torch.Tensor
    starts: torch.Tensor
    host_starts: np.ndarray


def is_recurrent(agent: nn.Module) -> bool:
    """A PPO agent with an LSTM (ppo.RecurrentAgent): it learns and acts in torch only, the reference path,
    since the fused step, numpy acting and CUDA graphs hold no state between steps."""
    return isinstance(getattr(agent, "lstm", None), recurrent.LSTMCore)


class PPOLearner(Protocol):
    optimizer: torch.optim.Optimizer | fused.AdamState  # its param groups carry the learning rate

    def step(self, obs: torch.Tensor, rows: torch.Tensor, sequences: Sequences | None = None) -> torch.Tensor:
        """One optimiser step on a minibatch (ppo_terms.minibatch_table's rows); the summed STAT_NAMES.
        A recurrent agent's minibatch is whole env sequences (recurrent.sequence_rows) and their `sequences`."""

    def load_optimizer(self, state: dict) -> None: ...


class PPOActor(Protocol):
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled (action, log-prob, value) for a batch of observations."""

    def value(self, obs: np.ndarray) -> np.ndarray: ...

    def greedy(self, obs: np.ndarray) -> np.ndarray: ...

    def reseeded(self, seed: int) -> PPOActor:
        """The same policy sampling from generators of its own seeded with `seed` (evaluation,
        apart from training's randomness, on any thread)."""


class QLearner(Protocol):
    optimizer: torch.optim.Optimizer | fused.AdamState
    allreduce_seconds: list[float]  # each gradient all-reduce's launch to completion, since last cleared

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations on the device as the Q network's layers read them (uint8 frames as
        floats in [0, 1], vectors flat float32): next observations become these once per
        draw, for target_q and for step/learn_draw (double DQN's online argmax)."""

    def target_q(self, next_inputs: torch.Tensor) -> torch.Tensor: ...

    def step(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, discount: torch.Tensor,
             next_inputs: torch.Tensor, next_q_target: torch.Tensor | None = None) -> torch.Tensor:
        """One optimiser step; its statistics (2,) on the learner's device: the loss and the mean Q of the
        batch's taken actions before the step (SB3's and CleanRL's q_values)."""

    def learn_draw(self, drawn: tuple[torch.Tensor, ...], next_q_target: torch.Tensor) -> torch.Tensor:
        """A step per batch of a draw; the sum of their statistics (2,), on the learner's device."""

    def update_target(self, tau: float) -> None: ...

    def greedy(self, obs: np.ndarray) -> np.ndarray: ...

    def load_optimizer(self, state: dict) -> None: ...


# --- the seam ----------------------------------------------------------------------


def ppo_learner(agent: nn.Module, hp, ctx: Dist, loss: Callable, rng: np.random.Generator,
                fast: bool = True) -> tuple[PPOLearner, PPOActor]:
    """A learner and an actor for PPO's `agent` (a ppo.Agent on ctx.device) with `loss`
    (ppo.ppo_loss's signature); rank 0's weights on every rank. A numpy actor samples
    from `rng` (the rank's generator, which checkpoints record), a torch one from torch's."""
    if is_recurrent(agent):
        learner: PPOLearner = AutogradPPOLearner(agent, hp, ctx, loss)
    elif fast and fused.supports(agent, ctx.device, hp.precision):
        learner = fused.FusedPPOStep(agent, hp, fused.AdamState(agent.parameters(), lr=hp.learning_rate, eps=1e-5),
                                                 _gradient_sum(ctx), ctx.world_size)
        distributed.take_rank0_parameters(ctx, learner.flat)
    elif fast and graphs(ctx.device, hp.precision):
        # beside learnWhileCollecting's thread too: a capture takes torch's default CUDA generator, so that
        # thread samples from a generator of its own (own_generator; sampling from the default one during a
        # capture failed the GPU tier on an H200: "Offset increment outside graph capture")
        learner = GraphedPPOLearner(agent, hp, ctx, loss)
    else:
        learner = AutogradPPOLearner(agent, hp, ctx, loss)
    return learner, ppo_actor(agent, hp, ctx, rng, fast)


def ppo_actor(agent: nn.Module, hp, ctx: Dist, rng: np.random.Generator, fast: bool = True,
              generator: torch.Generator | None = None) -> PPOActor:
    """An actor for PPO's `agent`: numpy for small MLPs on CPU (sampling from `rng`), else torch
    (sampling from `generator`, else torch's default one); a recurrent agent's carries each env's state."""
    if is_recurrent(agent):
        return RecurrentTorchPolicy(agent, ctx.device, generator)
    if fast and fastpolicy.supports(agent, ctx.device, hp.precision):
        torch.set_num_threads(1)  # on layers this small, intra-op threads cost more in synchronisation than they save
        return fastpolicy.NumpyPolicy(agent, rng)
    return TorchPolicy(agent, ctx.device, generator)


def own_generator(device: torch.device, rng: np.random.Generator) -> torch.Generator | None:
    """A torch generator on `device` seeded from `rng`, for a thread that samples while the main thread
    learns: a CUDA graph capture takes the device's default generator, which nothing else may advance
    meanwhile. None where torch has no generator (the meta device of the fake-CUDA tests)."""
    if device.type not in ("cpu", "cuda"):
        return None
    return torch.Generator(device).manual_seed(int(rng.integers(2**63)))


def q_learner(agent: nn.Module, target: nn.Module, hp, ctx: Dist, loss: Callable, timings: dict[str, float],
              fast: bool = True) -> QLearner:
    """A learner (which also acts: greedy) for DQN's online `agent` and its `target` network
    with `loss` (dqn.q_loss's signature); rank 0's weights on every rank, the target equal to
    them. `timings` accumulates seconds under "train_forward" and "backward_optimizer"."""
    if fast and fused.supports_q(agent, ctx.device, hp.precision):
        return FusedQLearner(agent, target, hp, ctx, timings)
    if fast and graphs(ctx.device, hp.precision):
        return GraphedQLearner(agent, target, hp, ctx, loss, timings, graph=True)
    return AutogradQLearner(agent, target, hp, ctx, loss, timings)


def q_statistics(loss: torch.Tensor, q: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """A DQN step's statistics (2,), read without a host sync: its loss and the mean Q(s, a) of the taken actions."""
    taken = q.detach().gather(1, actions.long().reshape(-1, 1)).mean()
    return torch.stack([loss.detach(), taken])


def graphs(device: torch.device, precision: str) -> bool:
    """Whether the learners' steps replay from CUDA graphs: on CUDA in fp32. DQN's batch-32 step of
    the Nature CNN is ~100 kernels of microseconds each, so eager it waits on Python and launches
    (make gpu-check's graphs section, H100: 3.13 ms eager, 0.52 ms replayed; PPO's 512-sample
    minibatch 5.12 ms, 1.72 ms). bf16 stays eager: autocast's cast cache and graph capture do not
    mix without care, and the GPU examples are fp32 (bf16 was slower at these sizes)."""
    return device.type == "cuda" and precision == "fp32"


def imports_torch_dynamo(pixels: bool, gpu: bool, hp) -> bool:
    """Whether the learner will be the reference path, whose torch.optim.Adam (and DDP)
    import torch._dynamo on first use (1.1 s on the build machine, more on a GPU node),
    as far as the spec tells before any network exists: the fast path takes only
    MLPs on CPU in fp32 (fused.supports, supports_q), and only for the algorithms that
    have one (their blocks name a precision and a policy; SAC's and TD3's, none). A wrong False costs
    nothing over not knowing; a wrong True, a second of CPU on an import nobody uses."""
    fast_path_possible = getattr(hp, "precision", None) == "fp32" and getattr(hp, "policy", None) in ("auto", "mlp")
    return pixels or gpu or not fast_path_possible


def _gradient_sum(ctx: Dist, seconds: list[float] | None = None) -> Callable[[torch.Tensor], None] | None:
    """The fused steps' one gradient sync: torch.distributed's all-reduce of the flat gradient."""
    if not ctx.distributed:
        return None

    def allreduce(flat: torch.Tensor) -> None:
        started = time.perf_counter()
        distributed.all_reduce_gradient(ctx, flat)
        if seconds is not None:
            seconds.append(time.perf_counter() - started)

    return allreduce


def ddp(agent: nn.Module, ctx: Dist, seconds: list[float] | None = None) -> nn.Module:
    """`agent` wrapped in DDP when distributed (the bare module otherwise), with a comm hook
    that times each gradient all-reduce (launch to completion) into `seconds` when given."""
    if not ctx.distributed:
        return agent
    model = DDP(agent, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    if seconds is not None:
        def timed_allreduce(_state, bucket):  # unannotated: torch checks a real GradBucket annotation
            started = time.perf_counter()
            tensor = bucket.buffer().div_(torch.distributed.get_world_size())
            future = torch.distributed.all_reduce(tensor, async_op=True).get_future()

            def done(f):
                seconds.append(time.perf_counter() - started)
                return f.value()[0]

            return future.then(done)

        model.register_comm_hook(None, timed_allreduce)
    return model


def adam(agent: nn.Module, device: torch.device, lr: float, **kwargs) -> torch.optim.Adam:
    """torch's fused Adam kernel on CPU and CUDA (one launch a step instead of a
    dozen foreach ones: on a GPU, DQN's batch-32 step is bound by launches)."""
    return torch.optim.Adam(agent.parameters(), lr=lr, fused=device.type in ("cpu", "cuda") or None, **kwargs)


# --- PPO: the reference ---------------------------------------------------------------


class AutogradPPOLearner:
    """DDP + Adam + autograd on the algorithm's loss: grad_accumulation
    micro-batches per minibatch, all but the last under no_sync() so DDP
    all-reduces the summed gradient once."""

    def __init__(self, agent: nn.Module, hp, ctx: Dist, loss: Callable):
        self.agent, self.hp, self.ctx, self.loss = agent, hp, ctx, loss
        self.weights = list(agent.parameters())  # listed once: agent.parameters() walks every submodule
        self.model = ddp(agent, ctx)
        self.optimizer = adam(agent, ctx.device, hp.learning_rate, eps=1e-5)

    def load_optimizer(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)

    def step(self, obs: torch.Tensor, rows: torch.Tensor, sequences: Sequences | None = None) -> torch.Tensor:
        stats = ppo_backward(self.model, self.agent.discrete, self.hp, self.ctx, self.loss, obs, rows, sequences)
        nn.utils.clip_grad_norm_(self.weights, self.hp.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats


def ppo_backward(model: nn.Module, discrete: bool, hp, ctx: Dist, loss: Callable, obs: torch.Tensor,
                 rows: torch.Tensor, sequences: Sequences | None = None) -> torch.Tensor:
    """A minibatch's gradient accumulated by backward over grad_accumulation micro-batches (a DDP
    `model` all-reduces the last one's only: no_sync() before); its summed STAT_NAMES. With `sequences`
    (a recurrent agent's) the micro-batches are whole env sequences (recurrent.micro_slices)."""
    actions, old_log_prob, old_value, advantages, returns, weight = minibatch_columns(rows, hp.norm_advantage)
    actions = actions.squeeze(-1) if discrete else actions
    size = rows.shape[0]
    if sequences is None:
        micro = -(-size // hp.grad_accumulation)
        parts = [slice(start, start + micro) for start in range(0, size, micro)]
    else:
        first_h, first_c, starts, host_starts = sequences
        envs = first_h.shape[0]
        parts = recurrent.micro_slices(envs, size // envs, hp.grad_accumulation)
    stats = torch.zeros(len(STAT_NAMES), device=rows.device)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        sync = model.no_sync() if isinstance(model, DDP) and not last else contextlib.nullcontext()
        if sequences is None:
            inputs: tuple[torch.Tensor, ...] = (obs[part], actions[part])
        else:
            steps = size // envs
            own = slice(part.start // steps, part.stop // steps)  # the part's envs
            inputs = (obs[part], actions[part], first_h[own], first_c[own], starts[part], host_starts[part])
        with sync:
            with autocast(ctx.device, hp.precision):  # the forward only: the loss below is fp32
                new_log_prob, entropy, new_value = model(*inputs)
            part_loss, part_stats = loss(new_log_prob, entropy, new_value, old_log_prob[part], old_value[part],
                                         advantages[part], returns[part], weight[part], hp)
            with distributed.collectives():
                part_loss.backward()
        stats += torch.stack([part_stats[name] for name in STAT_NAMES])
    return stats


class TorchPolicy:
    """PPO acting in torch on the bare module (no collective), numpy in and out;
    sampling from `generator`, else torch's default one."""

    def __init__(self, agent: nn.Module, device: torch.device, generator: torch.Generator | None = None):
        self.agent, self.device, self.generator = agent, device, generator
        self.frames = isinstance(agent.encoder, networks.NatureCNN)  # the CNN takes uint8 frames; MLPs float32

    def _on_device(self, obs: np.ndarray) -> torch.Tensor:
        """Frames travel as uint8 (a quarter of the bytes) and become floats on the device, once."""
        return torch.as_tensor(obs, dtype=torch.uint8 if self.frames else torch.float32, device=self.device)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        action, log_prob, value = self.agent.act(to_device(obs, self.device), self.generator)
        return _on_host(self.agent.discrete, action, log_prob, value)

    @torch.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.value(self._on_device(obs)).cpu().numpy()

    @torch.no_grad()
    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.greedy(self._on_device(obs)).cpu().numpy()

    def reseeded(self, seed: int) -> TorchPolicy:
        # the stream torch.manual_seed(seed) would give the default generator, without touching it
        return TorchPolicy(self.agent, self.device, torch.Generator(self.device).manual_seed(seed))


def _on_host(discrete: bool, action: torch.Tensor, log_prob: torch.Tensor,
             value: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A step's (action, log-prob, value) as numpy, in one host transfer, not three: a GPU rank waits once.
    Discrete actions travel as fp32, exact for any index below 2**24."""
    packed = torch.cat([action.reshape(len(value), -1).float(), log_prob[:, None], value[:, None]], 1).cpu().numpy()
    actions = packed[:, :-2].astype(np.int64).reshape(-1) if discrete else packed[:, :-2]
    return actions, packed[:, -2], packed[:, -1]


class RecurrentTorchPolicy(TorchPolicy):
    """TorchPolicy for a recurrent agent (ppo.RecurrentAgent): it carries each env's LSTM state from
    call to call. `reset(starts)` zeroes the envs whose episode starts; act and greedy advance the
    state, value reads it. A batch of another size than the state's starts from zeros."""

    def __init__(self, agent: nn.Module, device: torch.device, generator: torch.Generator | None = None):
        super().__init__(agent, device, generator)
        self.state: tuple[torch.Tensor, torch.Tensor] | None = None

    def current_state(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.state is None or self.state[0].shape[0] != batch:
            self.state = self.agent.lstm.zero_state(batch, self.device)
        return self.state

    def reset(self, starts: np.ndarray) -> None:
        state = self.current_state(len(starts))
        self.state = recurrent.reset_state(state, torch.as_tensor(starts, dtype=torch.float32, device=self.device))

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        action, log_prob, value, self.state = self.agent.act(to_device(obs, self.device), self.current_state(len(obs)),
                                                             self.generator)
        return _on_host(self.agent.discrete, action, log_prob, value)

    @torch.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.value(self._on_device(obs), self.current_state(len(obs))).cpu().numpy()

    @torch.no_grad()
    def greedy(self, obs: np.ndarray) -> np.ndarray:
        action, self.state = self.agent.greedy(self._on_device(obs), self.current_state(len(obs)))
        return action.cpu().numpy()

    def reseeded(self, seed: int) -> RecurrentTorchPolicy:
        """A fresh state (every env starting an episode) and generators of its own seeded with `seed`."""
        return RecurrentTorchPolicy(self.agent, self.device, torch.Generator(self.device).manual_seed(seed))


# --- DQN -----------------------------------------------------------------------------


class AutogradQLearner:
    """DDP + Adam + autograd on the algorithm's loss; the target network a
    module updated by soft_update."""

    def __init__(self, agent: nn.Module, target: nn.Module, hp, ctx: Dist, loss: Callable, timings: dict[str, float]):
        self.agent, self.target, self.hp, self.ctx, self.loss, self.timings = agent, target, hp, ctx, loss, timings
        self.weights = list(agent.parameters())  # listed once: agent.parameters() walks every submodule
        self.allreduce_seconds: list[float] = []
        self.model = ddp(agent, ctx, self.allreduce_seconds)
        networks.soft_update(target, agent, 1.0)  # the target equal to rank 0's weights (DDP's broadcast), everywhere
        self.optimizer = adam(agent, ctx.device, hp.learning_rate)

    def load_optimizer(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.agent.inputs(obs)

    def target_q(self, next_inputs: torch.Tensor) -> torch.Tensor:
        """The target network's Q-values of next observations given as inputs(), (B, A) fp32."""
        with torch.no_grad(), autocast(self.ctx.device, self.hp.precision):
            return self.target.q_values(next_inputs).float()

    def step(self, obs, actions, returns, discount, next_inputs, next_q_target=None) -> torch.Tensor:
        """One optimiser step on a per-rank batch (next observations as inputs()); the loss goes
        through the DDP wrapper, so the gradient is the mean over every rank's batch.
        Returns q_statistics (the loss, the taken actions' mean Q)."""
        started = time.perf_counter()
        if next_q_target is None:
            next_q_target = self.target_q(next_inputs)
        precision = self.hp.precision  # autocast the forwards only: Q-values come back fp32 for the TD maths
        with torch.no_grad(), autocast(self.ctx.device, precision):
            next_q_online = self.agent.q_values(next_inputs).float() if self.hp.double_dqn else None
        with autocast(self.ctx.device, precision):
            q = self.model(obs).float()
        loss = self.loss(q, actions, returns, discount, next_q_target, next_q_online, self.hp.loss)
        forwarded = time.perf_counter()
        with distributed.collectives():
            loss.backward()
        nn.utils.clip_grad_norm_(self.weights, self.hp.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.timings["train_forward"] += forwarded - started
        self.timings["backward_optimizer"] += time.perf_counter() - forwarded
        return q_statistics(loss, q, actions)

    def learn_draw(self, drawn: tuple[torch.Tensor, ...], next_q_target: torch.Tensor) -> torch.Tensor:
        """A step per batch of a draw (batch_size rows each); the sum of their statistics (step's)."""
        total = torch.zeros(2, device=next_q_target.device)  # on the learner's device: no host sync per step
        for batch in zip(*(t.split(self.hp.batch_size) for t in (*drawn, next_q_target)), strict=True):
            total += self.step(*batch)
        return total

    def update_target(self, tau: float) -> None:
        networks.soft_update(self.target, self.agent, tau)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return TorchGreedy(self.agent, self.ctx.device).greedy(obs)


class TorchGreedy:
    """DQN acting greedily in torch on the bare module (the reference learner's, or a copy rank 0 evaluates)."""

    def __init__(self, agent: nn.Module, device: torch.device):
        self.agent, self.device = agent, device

    @torch.no_grad()
    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.agent.greedy(torch.as_tensor(obs, device=self.device)).cpu().numpy()


class FusedQLearner:
    """fused.FusedQStep behind the QLearner face: its flat gradient summed by
    one all-reduce per step, a draw's steps in fewer operations (learn_draw)."""

    def __init__(self, agent: nn.Module, target: nn.Module, hp, ctx: Dist, timings: dict[str, float]):
        self.hp, self.timings = hp, timings
        self.allreduce_seconds: list[float] = []
        self.optimizer = fused.AdamState(agent.parameters(), lr=hp.learning_rate)
        self.fused = fused.FusedQStep(agent, target, hp, self.optimizer, _gradient_sum(ctx, self.allreduce_seconds),
                                      ctx.world_size)
        distributed.take_rank0_parameters(ctx, self.fused.flat)
        self.fused.update_target(1.0)  # the target starts as the online network, everywhere

    def load_optimizer(self, state: dict) -> None:
        self.fused.load_optimizer(state)

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.flatten(1).float()  # what the fused step reads (a view of float32 vectors)

    def target_q(self, next_inputs: torch.Tensor) -> torch.Tensor:
        return self.fused.target_q(next_inputs)

    def step(self, obs, actions, returns, discount, next_inputs, next_q_target=None) -> torch.Tensor:
        started = time.perf_counter()
        if next_q_target is None:
            next_q_target = self.target_q(next_inputs)
        targets = self.fused.targets(returns, discount, next_inputs, next_q_target)
        error = self.fused.step_towards(obs, actions, targets)  # Q(s, a) - target, Q before the step
        self.timings["backward_optimizer"] += time.perf_counter() - started
        return torch.stack([fused.td_loss(error, self.hp.loss), (error + targets).mean()])

    def learn_draw(self, drawn: tuple[torch.Tensor, ...], next_q_target: torch.Tensor) -> torch.Tensor:
        """Every batch of a draw in fewer operations: without double DQN the TD targets
        depend on the target network alone, so the whole draw's are taken at once; each
        step's TD error goes into one buffer and the losses are taken once at the end, as
        the taken actions' Q-values (error + target). Returns the sum of the steps' statistics
        (step's: loss, mean Q)."""
        started, size, step = time.perf_counter(), self.hp.batch_size, self.fused
        obs, actions, returns, discount, next_obs = drawn
        errors = torch.empty(len(obs) // size, size, device=obs.device)
        if self.hp.double_dqn:
            targets = torch.empty(len(obs), device=obs.device)
        else:
            targets = step.targets(returns, discount, next_obs, next_q_target)
        for k in range(len(errors)):
            part = slice(k * size, (k + 1) * size)
            if self.hp.double_dqn:  # a' comes from the online network as it is at this step
                targets[part] = step.targets(returns[part], discount[part], next_obs[part], next_q_target[part])
            step.step_towards(obs[part], actions[part], targets[part], errors[k])
        taken = (errors.sum() + targets.sum()) / size  # each step's mean Q(s, a), summed
        total = torch.stack([fused.td_loss(errors, self.hp.loss).sum(), taken])
        self.timings["backward_optimizer"] += time.perf_counter() - started
        return total

    def update_target(self, tau: float) -> None:
        self.fused.update_target(tau)

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        return self.fused.greedy(obs)


# --- on CUDA in fp32: the reference's steps replayed from CUDA graphs ---------------------


class StepGraph:
    """A function of fixed-shape tensors, replayed from a CUDA graph. Torch's CUDA graph docs ask
    for warm-up runs on a side stream before capture (cuDNN's autotuning, cuBLAS's workspace,
    Adam's lazily made state): the first WARM_UPS calls run the function there, for real; the
    next captures it (capture records kernels without running them) and replays; later calls
    copy their inputs into the graph's own tensors and replay. graph=False (CPU; tests) keeps
    the same static tensors and copies and calls the function: the bookkeeping a graph needs,
    checked where there is no GPU. A capture that fails is said once and the calls stay eager."""

    WARM_UPS = 3

    def __init__(self, fn: Callable[..., torch.Tensor | None], device: torch.device, graph: bool, name: str):
        self.fn, self.device, self.graph, self.name = fn, device, graph, name
        self.static: tuple[torch.Tensor, ...] | None = None
        self.output: torch.Tensor | None = None
        self.cuda_graph: torch.cuda.CUDAGraph | None = None
        # warm-ups' and captures', taken once at default priority: never one of device.stream_after_current's
        self.stream: torch.cuda.Stream | None = None
        self.calls = 0
        self.captures = 0

    def fits(self, inputs: tuple[torch.Tensor, ...]) -> bool:
        return self.static is None or all(
            s.shape == t.shape and s.dtype == t.dtype and s.device == t.device for s, t in zip(self.static, inputs, strict=True))

    def recapture(self) -> None:
        """What the function reads outside its inputs changed (an optimizer state loaded, a learning
        rate, which a graph holds as it was at capture): the next call captures again."""
        self.cuda_graph = None

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor | None:
        if self.static is None:
            self.static = tuple(t.detach().clone() for t in inputs)
        else:
            for static, t in zip(self.static, inputs, strict=True):
                static.copy_(t)
        if self.cuda_graph is not None:
            self.cuda_graph.replay()
            return self.output
        if not self.graph:
            self.output = self.fn(*self.static)
            return self.output
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
        if self.calls < self.WARM_UPS:
            self.calls += 1
            current = torch.cuda.current_stream(self.device)
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                self.output = self.fn(*self.static)
            current.wait_stream(self.stream)
            return self.output
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: acting or evaluating on other threads' streams meanwhile (learnWhileCollecting,
            # the frozen copy's evaluation) may allocate or wait without breaking this capture
            with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
                self.output = self.fn(*self.static)
        except RuntimeError as e:  # a step that cannot be captured still learns, eagerly
            print(f"kuberl trainer: {self.name} stays eager: CUDA graph capture failed: {e}"[:500], flush=True)
            self.graph = False
            self.output = self.fn(*self.static)
            return self.output
        self.cuda_graph = graph
        self.captures += 1
        graph.replay()
        return self.output


class GraphedOptimizerStep:
    """What the graphed learners share: every gradient a view of one flat buffer (tensors a graph
    can keep, and one all-reduce), rank 0's weights broadcast once (as DDP's constructor would:
    no DDP here), and the step after a backward: the all-reduce outside any graph (NCCL on the
    current stream: no host wait), then the mean over ranks, clipping and torch's Adam replayed
    from a graph of their own. The captured step reads its learning rate from a device tensor,
    filled before a replay when the rate changed (PPO anneals it once an update): capturing
    again for each rate synchronised the device and emptied torch's caches every update."""

    def __init__(self, agent: nn.Module, ctx: Dist, optimizer: torch.optim.Optimizer, max_grad_norm: float | None, graph: bool,
                 allreduce_seconds: list[float]):
        self.ctx, self.optimizer, self.max_grad_norm = ctx, optimizer, max_grad_norm
        self.weights = list(agent.parameters())
        sizes = [w.numel() for w in self.weights]
        with torch.no_grad():
            flat = torch.cat([w.detach().reshape(-1) for w in self.weights])
            distributed.take_rank0_parameters(ctx, flat)
            for w, chunk in zip(self.weights, flat.split(sizes), strict=True):
                w.copy_(chunk.view_as(w))
        self.gradient = torch.zeros(sum(sizes), device=ctx.device)
        for w, chunk in zip(self.weights, self.gradient.split(sizes), strict=True):
            w.grad = chunk.view_as(w)
        self.sum_gradient = _gradient_sum(ctx, allreduce_seconds)
        self.graph = StepGraph(self._apply, ctx.device, graph, "the optimiser step")
        self.rate = torch.zeros((), device=ctx.device)  # what a captured step reads as the learning rate
        self.rate_filled: float | None = None

    def _apply(self) -> None:
        if self.ctx.world_size > 1:
            self.gradient.div_(self.ctx.world_size)  # summed by the all-reduce; DDP's mean
        if self.max_grad_norm is not None:  # None: no clipping (SAC's, as CleanRL's and SB3's)
            nn.utils.clip_grad_norm_(self.weights, self.max_grad_norm, foreach=True)
        group = self.optimizer.param_groups[0]
        # torch's optimizers refuse capture unless capturable (the fused kernel keeps its step count on the
        # device either way); set only while capturing, so checkpoints keep the reference's groups
        capturing = self.graph.graph and torch.cuda.is_current_stream_capturing()
        capturable, group["capturable"] = group["capturable"], group["capturable"] or capturing
        # captured: the fused kernel reads the rate from self.rate (a float would be baked into the graph);
        # the group keeps its float, which checkpoints and the eager learners read
        rate, group["lr"] = group["lr"], self.rate if capturing else group["lr"]
        try:
            self.optimizer.step()
        finally:
            group["capturable"], group["lr"] = capturable, rate

    def recapture(self) -> None:
        self.graph.recapture()

    def __call__(self) -> None:
        if self.sum_gradient is not None:
            with distributed.collectives():
                self.sum_gradient(self.gradient)
        rate = self.optimizer.param_groups[0]["lr"]
        if rate != self.rate_filled:
            self.rate.fill_(rate)  # on this stream, before the replay that reads it: no host wait
            self.rate_filled = rate
        self.graph()


class GraphedQLearner(AutogradQLearner):
    """The reference learner's step (the same loss, clipping and torch Adam, so checkpoints move
    between the two) as two graphs: forward and backward into the flat gradient, then
    GraphedOptimizerStep's."""

    def __init__(self, agent: nn.Module, target: nn.Module, hp, ctx: Dist, loss: Callable, timings: dict[str, float],
                 graph: bool = True):
        self.agent, self.target, self.hp, self.ctx, self.loss, self.timings = agent, target, hp, ctx, loss, timings
        self.allreduce_seconds: list[float] = []
        self.model = agent
        self.optimizer = adam(agent, ctx.device, hp.learning_rate)
        self.optimizer_step = GraphedOptimizerStep(agent, ctx, self.optimizer, hp.max_grad_norm, graph, self.allreduce_seconds)
        self.weights, self.gradient = self.optimizer_step.weights, self.optimizer_step.gradient
        networks.soft_update(target, agent, 1.0)  # the target equal to rank 0's weights, everywhere
        self.backward = StepGraph(self._forward_backward, ctx.device, graph, "DQN's forward and backward")

    def load_optimizer(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)  # new state tensors: the optimiser's graph reads the old ones
        self.optimizer_step.recapture()

    def _forward_backward(self, obs, actions, returns, discount, next_inputs, next_q_target) -> torch.Tensor:
        """q_statistics on one batch, its loss's gradient accumulated into self.gradient (zeroed first)."""
        self.gradient.zero_()
        with torch.no_grad():
            next_q_online = self.agent.q_values(next_inputs) if self.hp.double_dqn else None
        q = self.agent(obs)
        loss = self.loss(q, actions, returns, discount, next_q_target, next_q_online, self.hp.loss)
        loss.backward()
        return q_statistics(loss, q, actions)

    def step(self, obs, actions, returns, discount, next_inputs, next_q_target=None) -> torch.Tensor:
        started = time.perf_counter()
        if next_q_target is None:
            next_q_target = self.target_q(next_inputs)
        batch = (obs, actions, returns, discount, next_inputs, next_q_target)
        # a batch of another shape (a caller's own) runs the same function eagerly
        loss = self.backward(*batch) if self.backward.fits(batch) else self._forward_backward(*batch)
        self.optimizer_step()
        self.timings["backward_optimizer"] += time.perf_counter() - started
        return loss.clone()  # the graph's output tensor is overwritten by the next replay


class GraphedPPOLearner:
    """The reference PPO learner's minibatch step (its loss, micro-batches, clipping and torch Adam)
    as two graphs: forward and backward of every micro-batch into the flat gradient, then
    GraphedOptimizerStep's. A minibatch of another size (num_minibatches not dividing the
    rollout) runs the same function eagerly."""

    def __init__(self, agent: nn.Module, hp, ctx: Dist, loss: Callable, graph: bool = True):
        self.agent, self.hp, self.ctx, self.loss = agent, hp, ctx, loss
        self.model = agent
        self.allreduce_seconds: list[float] = []
        self.optimizer = adam(agent, ctx.device, hp.learning_rate, eps=1e-5)
        self.optimizer_step = GraphedOptimizerStep(agent, ctx, self.optimizer, hp.max_grad_norm, graph, self.allreduce_seconds)
        self.weights, self.gradient = self.optimizer_step.weights, self.optimizer_step.gradient
        self.backward = StepGraph(self._forward_backward, ctx.device, graph, "PPO's forward and backward")

    def load_optimizer(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
        self.optimizer_step.recapture()

    def _forward_backward(self, obs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The minibatch's gradient accumulated into self.gradient (zeroed first); its summed STAT_NAMES."""
        self.gradient.zero_()
        return ppo_backward(self.agent, self.agent.discrete, self.hp, self.ctx, self.loss, obs, rows)

    def step(self, obs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        stats = self.backward(obs, rows) if self.backward.fits((obs, rows)) else self._forward_backward(obs, rows)
        self.optimizer_step()
        return stats.clone()  # the graph's output tensor is overwritten by the next replay


# --- SAC and TD3 -----------------------------------------------------------------------


def sac_learner(actor: nn.Module, critics: nn.Module, temperature: nn.Module, hp, ctx: Dist) -> ActorCriticLearner:
    """A learner for SAC's `actor`, twin `critics` and entropy coefficient (`temperature`, learned when
    hp.autotune), each step on a loss sac.py computes; rank 0's weights on every rank. One path on every
    device: eager (sampling inside a CUDA graph capture would take the default generator). The actor and
    the entropy coefficient are two groups of one Adam (policyLearningRate, qLearningRate): their gradients
    never meet, so one backward and one all-reduce serve both."""
    groups = [{"params": list(actor.parameters()), "lr": hp.policy_learning_rate}]
    if hp.autotune:
        groups.append({"params": list(temperature.parameters()), "lr": hp.q_learning_rate})
    policy = nn.ModuleList([actor, temperature]) if hp.autotune else actor
    return ActorCriticLearner(critics, hp.q_learning_rate, policy, groups, ctx)


def td3_learner(actor: nn.Module, critics: nn.Module, hp, ctx: Dist) -> ActorCriticLearner:
    """A learner for TD3's deterministic `actor` and twin `critics`, one Adam each at hp.learning_rate
    (CleanRL's and SB3's one rate), each step on a loss td3.py computes; rank 0's weights on every rank."""
    return ActorCriticLearner(critics, hp.learning_rate, actor, [{"params": list(actor.parameters()), "lr": hp.learning_rate}], ctx)


class ActorCriticOptimizers:
    """The critics' and the policy's Adam as one checkpointed optimizer state."""

    def __init__(self, critics: torch.optim.Optimizer, policy: torch.optim.Optimizer):
        self.critics, self.policy = critics, policy

    def state_dict(self) -> dict:
        return {"critics": self.critics.state_dict(), "policy": self.policy.state_dict()}


class ActorCriticLearner:
    """Two optimiser steps, each on a loss the algorithm passes in: the critics' (at `critic_rate`), and
    the policy's (`policy`'s weights, in the Adam groups `policy_groups`). Each step's gradient is one
    flat buffer summed by one torch.distributed all-reduce and divided by the ranks, DDP's mean
    (GraphedOptimizerStep, eager). No DDP wrapper: the actor's loss reads the critics, and only the
    critics' own loss may move them."""

    def __init__(self, critics: nn.Module, critic_rate: float, policy: nn.Module, policy_groups: list[dict], ctx: Dist):
        self.allreduce_seconds: list[float] = []
        fused_kernel = ctx.device.type in ("cpu", "cuda") or None  # as adam(): one launch a step
        critic_optimizer = torch.optim.Adam(critics.parameters(), lr=critic_rate, fused=fused_kernel)
        policy_optimizer = torch.optim.Adam(policy_groups, fused=fused_kernel)
        self.critic_step = GraphedOptimizerStep(critics, ctx, critic_optimizer, None, False, self.allreduce_seconds)
        self.policy_step = GraphedOptimizerStep(policy, ctx, policy_optimizer, None, False, self.allreduce_seconds)
        self.optimizer = ActorCriticOptimizers(critic_optimizer, policy_optimizer)

    def load_optimizer(self, state: dict) -> None:
        self.optimizer.critics.load_state_dict(state["critics"])
        self.optimizer.policy.load_state_dict(state["policy"])

    @staticmethod
    def _step(step: GraphedOptimizerStep, loss: torch.Tensor) -> None:
        step.gradient.zero_()
        loss.backward()
        step()

    def step_critics(self, loss: torch.Tensor) -> None:
        """One Adam step of the critics on `loss`'s gradient, the mean over every rank's batch."""
        self._step(self.critic_step, loss)

    def step_policy(self, loss: torch.Tensor) -> None:
        """One Adam step of the policy (SAC: the actor and, autotuned, the entropy coefficient; TD3: the actor) on
        `loss`'s gradient, the mean over ranks."""
        self._step(self.policy_step, loss)
