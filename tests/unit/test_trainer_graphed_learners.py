"""DQN's and PPO's steps replayed from CUDA graphs (learners.GraphedQLearner, GraphedPPOLearner), checked on a CPU.

A CUDA graph replays fixed kernels on fixed tensors, so what can go wrong is the bookkeeping
around it: inputs copied into the graph's tensors, gradients that must stay views of the one
buffer the graph and the all-reduce write, an optimizer state loaded under a captured step.
graph=False runs that bookkeeping with plain calls, so these tests hold it to the reference
learners (AutogradQLearner, AutogradPPOLearner: DDP + torch Adam), bit for bit. tests/gpu
captures and replays.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import dqn, learners, networks, ppo
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo_terms import minibatch_table

CPU = torch.device("cpu")
FRAMES = (4, 84, 84)
BATCH, ACTIONS = 8, 6
ONE_PROCESS = Dist(0, 1, 0, 1, CPU, None)


def pair(double: bool = True, seed: int = 1) -> tuple[learners.AutogradQLearner, learners.GraphedQLearner]:
    """The reference and the graphed learner on equal copies of one network."""
    made = []
    for kind in (learners.AutogradQLearner, learners.GraphedQLearner):
        torch.manual_seed(seed)
        agent, target = networks.QCNN(FRAMES, ACTIONS), networks.QCNN(FRAMES, ACTIONS)
        target.load_state_dict(agent.state_dict())
        hp = DQNConfig(batch_size=BATCH, double_dqn=double, learning_rate=1e-3, max_grad_norm=0.5)
        timings = dict.fromkeys(("train_forward", "backward_optimizer"), 0.0)
        extra = {"graph": False} if kind is learners.GraphedQLearner else {}
        made.append(kind(agent, target, hp, ONE_PROCESS, dqn.q_loss, timings, **extra))
    return made[0], made[1]


def draw(learner, steps: int, seed: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """A draw as DQNTrainer.learn hands it over (next frames as inputs) and its target Q-values."""
    n, rng = steps * BATCH, np.random.default_rng(seed)
    frames = [torch.from_numpy(rng.integers(0, 256, (n, *FRAMES), np.uint8)) for _ in range(2)]
    drawn = (frames[0], torch.from_numpy(rng.integers(0, ACTIONS, n)), torch.from_numpy(rng.normal(size=n).astype(np.float32)),
             torch.full((n,), 0.99**3), learner.inputs(frames[1]))
    return drawn, learner.target_q(drawn[-1])


def weights(learner) -> list[torch.Tensor]:
    return [w.detach().clone() for w in learner.agent.parameters()]


@pytest.mark.parametrize("double", [True, False], ids=["double", "vanilla"])
def test_the_graphed_step_learns_exactly_what_the_reference_learns(double):
    reference, graphed = pair(double)
    for seed in range(3):  # draws of 2 steps: more calls than StepGraph.WARM_UPS
        losses = [learner.learn_draw(*draw(learner, 2, seed)) for learner in (reference, graphed)]
        assert torch.equal(losses[0], losses[1])
    assert all(torch.equal(a, b) for a, b in zip(weights(reference), weights(graphed), strict=True))
    assert graphed.backward.static is not None  # the steps went through the graph's own tensors
    torch.manual_seed(1)  # the networks' start, as pair() made them: the steps moved the weights
    assert any(not torch.equal(a, b) for a, b in zip(weights(graphed), networks.QCNN(FRAMES, ACTIONS).parameters(), strict=True))


def test_gradients_stay_views_of_the_one_buffer_the_graph_and_the_all_reduce_write():
    _, graphed = pair()
    graphed.learn_draw(*draw(graphed, 2, 0))
    start, end = graphed.gradient.data_ptr(), graphed.gradient.data_ptr() + graphed.gradient.numel() * 4
    assert all(start <= w.grad.data_ptr() < end for w in graphed.agent.parameters())
    assert torch.equal(torch.cat([w.grad.reshape(-1) for w in graphed.agent.parameters()]), graphed.gradient)
    assert graphed.gradient.abs().sum() > 0  # the last step's gradient, clipped, where Adam read it


def test_an_optimizer_state_loaded_from_the_reference_continues_as_the_reference_does():
    """A checkpoint moves between a CPU and a GPU rank: the same torch Adam state both ways, and
    a load makes the optimiser's graph capture again (its old state tensors are gone)."""
    reference, graphed = pair(seed=1)
    reference.learn_draw(*draw(reference, 2, 0))
    graphed.agent.load_state_dict(reference.agent.state_dict())
    graphed.optimizer_step.graph.cuda_graph = object()  # as if captured
    graphed.load_optimizer(copy.deepcopy(reference.optimizer.state_dict()))  # as torch.load gives it: tensors of its own
    assert graphed.optimizer_step.graph.cuda_graph is None
    for learner in (reference, graphed):
        learner.learn_draw(*draw(learner, 2, 1))
    assert all(torch.equal(a, b) for a, b in zip(weights(reference), weights(graphed), strict=True))
    assert graphed.optimizer.state_dict()["state"][0]["step"] == reference.optimizer.state_dict()["state"][0]["step"] == 4


def test_a_batch_of_another_size_runs_the_same_step_eagerly():
    reference, graphed = pair()
    graphed.learn_draw(*draw(graphed, 1, 0))
    reference.learn_draw(*draw(reference, 1, 0))
    (obs, actions, returns, discount, next_inputs), target = draw(graphed, 1, 5)
    half = slice(0, BATCH // 2)
    for learner in (reference, graphed):
        learner.step(obs[half], actions[half], returns[half], discount[half], next_inputs[half], target[half])
    assert graphed.backward.static[0].shape[0] == BATCH  # the graph's tensors kept their shape
    assert all(torch.equal(a, b) for a, b in zip(weights(reference), weights(graphed), strict=True))


def test_a_returned_loss_is_the_callers_not_the_graphs_output():
    _, graphed = pair()
    (obs, actions, returns, discount, next_inputs), target = draw(graphed, 2, 0)
    first = graphed.step(obs[:BATCH], actions[:BATCH], returns[:BATCH], discount[:BATCH], next_inputs[:BATCH], target[:BATCH])
    assert first.data_ptr() != graphed.backward.output.data_ptr()  # a replay writes over the graph's output
    kept = first.clone()
    graphed.step(obs[BATCH:], actions[BATCH:], returns[BATCH:], discount[BATCH:], next_inputs[BATCH:], target[BATCH:])
    assert torch.equal(first, kept)


def test_the_target_starts_as_the_online_network():
    torch.manual_seed(3)
    agent, target = networks.QCNN(FRAMES, ACTIONS), networks.QCNN(FRAMES, ACTIONS)  # different draws
    learners.GraphedQLearner(agent, target, DQNConfig(), ONE_PROCESS, dqn.q_loss, {"backward_optimizer": 0.0}, graph=False)
    assert all(torch.equal(a, b) for a, b in zip(agent.parameters(), target.parameters(), strict=True))


@pytest.mark.parametrize(("device", "precision", "graphed"), [
    ("cuda", "fp32", True), ("cuda", "bf16", False), ("cpu", "fp32", False), ("meta", "fp32", False)])
def test_graphs_are_for_cuda_in_fp32(device, precision, graphed):
    assert learners.graphs(torch.device(device), precision) is graphed


def test_a_capture_that_fails_is_said_and_the_step_stays_eager(capsys, monkeypatch):
    """What a GPU whose capture raises (an op that syncs, an unsupported kernel) meets, with a stand-in
    for torch.cuda's graph: the step still runs, eagerly, and the log says why."""
    calls = []
    step = learners.StepGraph(lambda x: calls.append(1) or x * 2, CPU, True, "DQN's test step")
    step.calls = step.WARM_UPS  # warmed: the next call captures

    class Refusing:
        def __enter__(self):
            raise RuntimeError("operation not permitted when stream is capturing")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: None)  # the capture's stream (CPU torch has none)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, **kwargs: Refusing())
    assert torch.equal(step(torch.ones(2)), torch.full((2,), 2.0)) and calls == [1]
    assert step.graph is False and "DQN's test step stays eager: CUDA graph capture failed" in capsys.readouterr().out
    assert torch.equal(step(torch.full((2,), 3.0)), torch.full((2,), 6.0)) and calls == [1, 1]


def ppo_pair(hp: PPOConfig) -> tuple[learners.AutogradPPOLearner, learners.GraphedPPOLearner]:
    made = []
    for kind in (learners.AutogradPPOLearner, learners.GraphedPPOLearner):
        torch.manual_seed(1)
        encoder, features = networks.encoder(gym.spaces.Box(0, 255, FRAMES, np.uint8), "auto", "spec.ppo.policy")
        agent = ppo.Agent(features, gym.spaces.Discrete(ACTIONS), [], encoder)
        extra = {"graph": False} if kind is learners.GraphedPPOLearner else {}
        made.append(kind(agent, hp, ONE_PROCESS, ppo.ppo_loss, **extra))
    return made[0], made[1]


def minibatch(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Frames and ppo_terms.minibatch_table's rows, as PPOTrainer.learn hands a minibatch over."""
    rng = np.random.default_rng(seed)
    scalars = np.stack([rng.normal(size=n) - 2, rng.normal(size=n), rng.normal(size=n), rng.normal(size=n), np.ones(n)], -1)
    rows = minibatch_table(torch.from_numpy(rng.integers(0, ACTIONS, (n, 1))), torch.from_numpy(scalars.astype(np.float32)))
    return torch.from_numpy(rng.integers(0, 256, (n, *FRAMES), np.uint8)), rows


def test_the_graphed_ppo_step_learns_exactly_what_the_reference_learns_while_the_rate_anneals():
    """Micro-batches accumulated (gradAccumulation 2) and a learning rate that changes between updates,
    as PPO's anneal sets it on the optimizer: a graph would keep a float rate it was captured with, so the
    captured step reads the rate from a tensor, filled when the rate changes, and is never captured again for it
    (a capture synchronises the device and empties torch's caches)."""
    hp = PPOConfig(grad_accumulation=2, learning_rate=1e-3)
    reference, graphed = ppo_pair(hp)
    captures, rates = [], []
    graphed.optimizer_step.graph.recapture = lambda: captures.append(graphed.optimizer.param_groups[0]["lr"])
    for update in range(3):
        for learner in (reference, graphed):
            for group in learner.optimizer.param_groups:
                group["lr"] = 1e-3 * (1 - update / 3)
        for seed in range(2):
            stats = [learner.step(*minibatch(8, 10 * update + seed)) for learner in (reference, graphed)]
            assert torch.equal(stats[0], stats[1])
        rates.append(graphed.optimizer_step.rate.item())
    assert all(torch.equal(a, b) for a, b in zip(reference.agent.parameters(), graphed.agent.parameters(), strict=True))
    assert captures == [] and rates == pytest.approx([1e-3 * (1 - update / 3) for update in range(3)])
    assert all(isinstance(group["lr"], float) for group in graphed.optimizer.param_groups)  # checkpoints keep floats
    assert graphed.backward.static[0].shape == (8, *FRAMES)


def test_a_ppo_minibatch_of_another_size_runs_eagerly_and_the_graphs_tensors_keep_their_shape():
    """num_minibatches that does not divide the rollout: sizes that differ by one (tensor_split)."""
    reference, graphed = ppo_pair(PPOConfig())
    for n in (8, 7, 8):
        stats = [learner.step(*minibatch(n, n)) for learner in (reference, graphed)]
        assert torch.equal(stats[0], stats[1])
    assert graphed.backward.static[0].shape[0] == 8
    assert all(torch.equal(a, b) for a, b in zip(reference.agent.parameters(), graphed.agent.parameters(), strict=True))



@pytest.mark.parametrize("beside", [False, True], ids=["synchronous", "learnWhileCollecting"])
def test_ppo_learns_from_graphs_beside_a_collecting_thread_too(monkeypatch, beside):
    """A capture takes torch's default CUDA generator. learnWhileCollecting's thread sampled from it while the
    update ran, which failed the GPU tier on an H200 ("Offset increment outside graph capture encountered
    unexpectedly"); it samples from its own now (test_trainer_learn_while_collecting), so both modes replay graphs."""
    monkeypatch.setattr(learners, "graphs", lambda device, precision: True)  # as on CUDA in fp32
    torch.manual_seed(1)
    encoder, features = networks.encoder(gym.spaces.Box(0, 255, FRAMES, np.uint8), "auto", "spec.ppo.policy")
    agent = ppo.Agent(features, gym.spaces.Discrete(ACTIONS), [], encoder)
    learner, _ = learners.ppo_learner(agent, PPOConfig(learn_while_collecting=beside), ONE_PROCESS, ppo.ppo_loss,
                                      np.random.default_rng(0))
    assert type(learner) is learners.GraphedPPOLearner
