"""What a GPU waits on, counted on a CPU: host syncs and ops per optimiser step.

On a GPU every aten op is a kernel launch plus dispatch, and every `.item()`,
`bool(tensor)`, `.cpu()` or `.tolist()` of a device tensor stalls the Python
thread until the GPU has drained its queue (docs/gpus-and-atari.md: DQN's
batch-32 step is bound by launches and Python, not by kernel time). CI has no
GPU, so the reference learners (what a GPU rank runs) are counted here: a
TorchDispatchMode sees every op below autograd, the backward's included;
`_local_scalar_dense` is where item/bool/float/int of a tensor land. `.cpu()`
and `.tolist()` dispatch nothing on a CPU tensor, so they are counted at the
Tensor methods (`.numpy()` is not: on a CUDA tensor it raises, after a `.cpu()`).
"""

from __future__ import annotations

import collections

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import dqn, learners, networks, ppo
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo_terms import minibatch_table
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

CPU = torch.device("cpu")
FRAMES = (4, 84, 84)
BATCH = 32
METADATA = {"detach", "lift_fresh", "t", "_record_function_enter_new", "_record_function_exit"}
HOST_READS = ("cpu", "tolist", "item")

# Ops that are not views or metadata, per optimiser step, as torch 2.13 dispatches them on CPU
# (each one kernel or more on a GPU). Lower them freely; raise one only with a reason.
DQN_STEP_KERNELS = 56  # Nature CNN, double DQN, target values given: 2 forwards, loss, backward, clip, Adam (+3: the taken actions' mean Q, learners.q_statistics)
PPO_ACT_KERNELS = 18  # Nature CNN forward, sampling and the sample's log-prob (no entropy: acting never uses it)
PPO_STEP_KERNELS = 157  # Nature CNN actor-critic, clipped value loss, normalised advantages (+3: Bessel's std, as CleanRL/SB3)


class Counted(TorchDispatchMode):
    """Every aten op dispatched while active; host reads of tensors (see the module's doc)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.host_reads: collections.Counter[str] = collections.Counter()
        for name in HOST_READS:
            method = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(name, method))

    def _counting(self, name, method):
        def counted(tensor, *args, **kwargs):
            self.host_reads[name] += 1
            return method(tensor, *args, **kwargs)
        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def syncs(self) -> int:
        """Host reads a GPU would wait for."""
        return self.ops["_local_scalar_dense"] + sum(self.host_reads.values())

    @property
    def kernels(self) -> int:
        return sum(n for name, n in self.ops.items() if name not in METADATA and not _is_view(name))


def _is_view(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    return packet is not None and any(getattr(packet, o).is_view for o in packet.overloads())


@pytest.fixture
def counted(monkeypatch):
    return lambda: Counted(monkeypatch)


def test_the_counter_sees_every_kind_of_host_read(counted):
    x = torch.ones(3)
    reads = [lambda: x.sum().item(), lambda: bool(x.sum() > 0), lambda: float(x.sum()), lambda: x.cpu(),
             lambda: x.tolist(), lambda: x[0] if x.sum() else None]
    for read in reads:
        with counted() as mode:
            read()
        assert mode.syncs >= 1, read
    with counted() as mode:
        (x * 2 + 1).clamp(max=2.0).sum()
    assert mode.syncs == 0 and mode.kernels == 4


def frames(n: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (n, *FRAMES), np.uint8))


def q_learner(double: bool) -> learners.AutogradQLearner:
    torch.manual_seed(1)
    agent, target = networks.QCNN(FRAMES, 6), networks.QCNN(FRAMES, 6)
    target.load_state_dict(agent.state_dict())
    hp = DQNConfig(batch_size=BATCH, double_dqn=double)
    ctx = Dist(0, 1, 0, 1, CPU, None)
    learner = learners.q_learner(agent, target, hp, ctx, dqn.q_loss, dict.fromkeys(("train_forward", "backward_optimizer"), 0.0))
    assert isinstance(learner, learners.AutogradQLearner)  # pixels: the reference learner, as on a GPU
    return learner


def draw(learner: learners.AutogradQLearner, steps: int) -> tuple[torch.Tensor, ...]:
    """A draw as DQNTrainer.learn hands it over: its next frames as the learner's inputs."""
    n = steps * BATCH
    rng = np.random.default_rng(2)
    return (frames(n, 3), torch.from_numpy(rng.integers(0, 6, n)), torch.from_numpy(rng.random(n, np.float32)),
            torch.full((n,), 0.99**3), learner.inputs(frames(n, 4)))


@pytest.mark.parametrize("double", [True, False], ids=["double", "vanilla"])
def test_dqns_gradient_steps_never_wait_for_the_device(counted, double):
    learner = q_learner(double)
    drawn = draw(learner, 3)
    learner.learn_draw(drawn, learner.target_q(drawn[-1]))  # warm: Adam's state exists
    with counted() as mode:
        total = learner.learn_draw(drawn, learner.target_q(drawn[-1]))
    assert mode.syncs == 0, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))
    assert total.shape == (2,) and total.requires_grad is False  # the steps' losses and mean Qs, summed


def test_dqns_graphed_gradient_steps_never_wait_for_the_device(counted):
    """The learner a GPU rank runs in fp32 (learners.GraphedQLearner): its copies into the graph's
    tensors, the gradient buffer and the step read nothing back either (a sync inside a capture fails it)."""
    reference = q_learner(double=True)
    learner = learners.GraphedQLearner(reference.agent, reference.target, reference.hp, reference.ctx, dqn.q_loss,
                                       reference.timings, graph=False)
    drawn = draw(learner, 3)
    learner.learn_draw(drawn, learner.target_q(drawn[-1]))  # warm: Adam's state exists
    with counted() as mode:
        learner.learn_draw(drawn, learner.target_q(drawn[-1]))
    assert mode.syncs == 0, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))


def test_ppos_graphed_minibatch_steps_never_wait_for_the_device(counted):
    """The learner a GPU rank runs in fp32 (learners.GraphedPPOLearner), its bookkeeping on a CPU."""
    reference, obs, rows = ppo_learner()
    learner = learners.GraphedPPOLearner(reference.agent, reference.hp, reference.ctx, ppo.ppo_loss, graph=False)
    learner.step(obs, rows)  # warm: Adam's state exists
    with counted() as mode:
        learner.step(obs, rows)
    assert mode.syncs == 0, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))


def test_ppos_graphed_step_on_continuous_actions_never_waits_for_the_device(counted):
    """MuJoCo-style PPO on a GPU (a Gaussian policy's MLP, Box actions) goes through the graphed learner too:
    a host read in its loss would fail the capture and leave every step eager."""
    torch.manual_seed(1)
    space = gym.spaces.Box(-1, 1, (11,), np.float32)
    encoder, features = networks.encoder(space, "auto", "spec.ppo.policy")
    agent = ppo.Agent(features, gym.spaces.Box(-1, 1, (3,), np.float32), [64, 64], encoder)
    learner = learners.GraphedPPOLearner(agent, PPOConfig(), Dist(0, 1, 0, 1, CPU, None), ppo.ppo_loss, graph=False)
    n, rng = 64, np.random.default_rng(5)
    scalars = torch.from_numpy(np.stack([rng.normal(size=n) - 2, rng.normal(size=n), rng.normal(size=n),
                                         rng.normal(size=n), np.ones(n)], -1).astype(np.float32))
    rows = minibatch_table(torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32)), scalars)
    obs = torch.from_numpy(rng.normal(size=(n, 11)).astype(np.float32))
    learner.step(obs, rows)  # warm: Adam's state exists
    with counted() as mode:
        learner.step(obs, rows)
    assert mode.syncs == 0, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))


def test_dqns_gradient_step_stays_within_its_op_budget(counted):
    learner = q_learner(double=True)
    obs, actions, returns, discount, next_obs = draw(learner, 1)
    next_q_target = learner.target_q(next_obs)
    learner.step(obs, actions, returns, discount, next_obs, next_q_target)
    with counted() as mode:
        learner.step(obs, actions, returns, discount, next_obs, next_q_target)
    assert mode.kernels <= DQN_STEP_KERNELS, sorted(mode.ops.items())


def ppo_learner() -> tuple[learners.AutogradPPOLearner, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    space = gym.spaces.Box(0, 255, FRAMES, np.uint8)
    encoder, features = networks.encoder(space, "auto", "spec.ppo.policy")
    agent = ppo.Agent(features, gym.spaces.Discrete(6), [], encoder)
    hp = PPOConfig()
    learner, _ = learners.ppo_learner(agent, hp, Dist(0, 1, 0, 1, CPU, None), ppo.ppo_loss, np.random.default_rng(1))
    assert isinstance(learner, learners.AutogradPPOLearner)
    n = 64
    rng = np.random.default_rng(5)
    scalars = torch.from_numpy(np.stack([rng.normal(size=n) - 2, rng.normal(size=n), rng.normal(size=n),
                                         rng.normal(size=n), np.ones(n)], -1).astype(np.float32))
    rows = minibatch_table(torch.from_numpy(rng.integers(0, 6, (n, 1))), scalars)
    return learner, frames(n, 6), rows


def test_ppos_minibatch_step_never_waits_for_the_device_and_stays_within_its_op_budget(counted):
    learner, obs, rows = ppo_learner()
    learner.step(obs, rows)
    with counted() as mode:
        stats = learner.step(obs, rows)
    assert mode.syncs == 0, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))
    assert mode.kernels <= PPO_STEP_KERNELS, sorted(mode.ops.items())
    assert stats.requires_grad is False


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_reference_step_lists_no_parameters(monkeypatch, algorithm):
    """agent.parameters() walks every submodule in Python (a quarter of the DQN step's
    Python calls on the Nature CNN); the learners list their weights once."""
    if algorithm == "dqn":
        learner = q_learner(double=True)
        obs, actions, returns, discount, next_obs = draw(learner, 1)
        step = lambda: learner.step(obs, actions, returns, discount, next_obs)
    else:
        learner, obs, rows = ppo_learner()
        step = lambda: learner.step(obs, rows)
    walks = []
    original = nn.Module.named_parameters
    monkeypatch.setattr(nn.Module, "named_parameters", lambda self, *a, **k: walks.append(self) or original(self, *a, **k))
    step()
    assert walks == []


def test_an_update_reads_the_device_only_for_actions_and_its_report(counted):
    """Per update, on the reference path: DQN reads each vector step's greedy actions
    and its statistics (mean loss, mean Q) in one read; PPO each vector step's sampled (action, log-prob, value)
    in ONE read, the bootstrap value and the update's statistics once. A read more per
    gradient step or per env step stalls a GPU rank that often."""
    ctx = Dist(0, 1, 0, 1, CPU, None)
    hp = DQNConfig(buffer_size=1000, batch_size=32, learning_starts=64, train_frequency=16, gradient_steps=4)
    trainer = dqn.DQNTrainer(ctx, hp, "CartPole-v1", 4, {}, 10**6, 1, 0, fast=False)
    while not trainer.learning():
        trainer.update(False, False)
    with counted() as mode:
        report = trainer.update(False, False)
    assert report.losses and trainer.vector_steps == 4 and trainer.gradient_steps == 4
    assert mode.syncs == trainer.vector_steps + 1, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))
    trainer.envs.close()

    hp = PPOConfig(num_steps=8, num_minibatches=2, update_epochs=2)
    trainer = ppo.PPOTrainer(ctx, hp, "CartPole-v1", 4, {}, 10**6, 1, 0, fast=False)
    trainer.update(False, False)
    with counted() as mode:
        report = trainer.update(False, False)
    assert report.losses
    assert mode.syncs == hp.num_steps + 2, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))
    trainer.envs.close()


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(6), gym.spaces.Box(-1, 1, (3,))], ids=["discrete", "continuous"])
def test_acting_reads_the_device_once_per_vector_step_and_returns_what_the_agent_sampled(counted, action_space):
    """TorchPolicy.act brings (action, log-prob, value) to the host in one transfer; the
    actions keep their dtype and values (discrete: int64 indices, continuous: fp32)."""
    agent = ppo.Agent(4, action_space, [8])
    obs = np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32)
    policy = learners.TorchPolicy(agent, CPU)
    torch.manual_seed(3)
    with counted() as mode:
        action, log_prob, value = policy.act(obs)
    assert mode.syncs == 1, (mode.ops["_local_scalar_dense"], dict(mode.host_reads))
    torch.manual_seed(3)
    with torch.no_grad():
        expected = [t.numpy() for t in agent.act(torch.from_numpy(obs))]
    for got, want in zip((action, log_prob, value), expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_ppos_act_stays_within_its_op_budget(counted):
    """Per vector step of a GPU rank's rollout. Acting computed the entropy too (four kernels a step) and
    never read it."""
    learner, obs, _ = ppo_learner()
    policy = learners.TorchPolicy(learner.agent, CPU)
    policy.act(obs[:16].numpy())
    with counted() as mode:
        policy.act(obs[:16].numpy())
    assert mode.kernels <= PPO_ACT_KERNELS, sorted(mode.ops.items())
