"""The CUDA/NCCL paths, on a machine with a GPU: device from LOCAL_RANK with
set_device first, collectives on CUDA tensors through a real NCCL group,
pinned host buffers and non-blocking copies, bf16 autocast, PPO and DQN
on Pong from pixels and SAC and TD3 on Pendulum at world size 1 (NCCL refuses two
ranks on one GPU).
Without a GPU every test here is skipped, and says why."""

import contextlib
import copy
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist
from kuberl.core import metricnames
from kuberl.core.spec import DQNConfig, LSTMConfig, PPOConfig, SACConfig, TD3Config
from kuberl_trainer import device, distributed, learners, networks, recurrent
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.metrics import TrainerMetrics
from kuberl_trainer.ppo import Agent, PPOTrainer
from kuberl_trainer.sac import SACTrainer
from kuberl_trainer.session import BareSession
from kuberl_trainer.td3 import TD3Trainer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU here: the CUDA/NCCL paths (device placement, NCCL collectives, pinned copies, bf16 autocast) were NOT exercised",
)
bf16 = pytest.mark.skipif(torch.cuda.is_available() and not torch.cuda.is_bf16_supported(), reason="this GPU has no bf16")
GPU = torch.device("cuda", 0)
PIXELS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


@contextlib.contextmanager
def nccl_group(tmp_path):
    """A real one-rank NCCL process group on GPU 0."""
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield Dist(0, 1, 0, 1, GPU, "nccl")
    finally:
        dist.destroy_process_group()


def test_the_rank_computes_on_the_gpu_named_by_local_rank(monkeypatch):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    with distributed.process_group("auto") as ctx:
        assert ctx.device == GPU and torch.cuda.current_device() == 0
        assert torch.cuda.get_device_name(0) in device.describe(ctx.device)
    assert distributed.choose_backend("auto") == "nccl"


@pytest.mark.skipif(torch.cuda.device_count() > 1, reason="needs a machine with exactly one GPU")
def test_a_second_process_on_a_one_gpu_machine_is_refused_naming_gpus_per_worker(monkeypatch):
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(distributed.BadEnvironment, match="spec.gpusPerWorker: this pod runs 2 process"), \
            distributed.process_group("auto"):
        pass


def test_collectives_run_on_cuda_tensors_through_nccl(tmp_path):
    with nccl_group(tmp_path) as ctx:
        values = torch.arange(4, dtype=torch.float64)
        assert distributed.all_reduce_sum(ctx, values).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert distributed.broadcast_object(ctx, {"step": 7}) == {"step": 7}
        assert distributed.gather_objects(ctx, "rank state") == ["rank state"]
        encoder, features = networks.encoder(PIXELS, "auto", "spec.ppo.policy")
        agent = Agent(features, gym.spaces.Discrete(6), [], encoder).to(GPU)
        model = torch.nn.parallel.DistributedDataParallel(agent, device_ids=[0])
        frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, device=GPU)
        log_prob, entropy, value = model(frames, torch.randint(0, 6, (8,), device=GPU))
        (log_prob.sum() + value.sum() - entropy.sum()).backward()
        grads = [p.grad for p in agent.parameters() if p.grad is not None]
        assert grads and all(g.device == GPU and torch.isfinite(g).all() for g in grads)


def test_a_gpu_rank_exports_its_device_memory_and_what_torch_reserved_read_at_scrape_time():
    metrics = TrainerMetrics("job", 0, 1, GPU)

    def scraped() -> dict[str, float]:
        page = generate_latest(metrics.registry).decode()
        return {s.name: s.value for family in text_string_to_metric_families(page) for s in family.samples
                if s.labels == {"rltj": "job", "rank": "0"}}

    held = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=GPU)
    page = scraped()
    assert page[metricnames.GPU_MEMORY_TOTAL] == torch.cuda.get_device_properties(GPU).total_memory
    assert page[metricnames.GPU_MEMORY_RESERVED] == torch.cuda.memory_reserved(GPU) >= held.numel()


def test_cudnn_autotunes_unless_deterministic(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    device.tune(GPU, deterministic=True)
    assert not torch.backends.cudnn.benchmark
    device.tune(GPU, deterministic=False)
    assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32


def test_host_buffers_are_pinned_and_copies_keep_uint8():
    buffer = device.host_zeros((16, 4, 84, 84), np.uint8, GPU)
    assert torch.from_numpy(buffer).is_pinned()
    buffer[:] = 7
    copied = device.to_device(buffer, GPU)
    torch.cuda.synchronize()
    assert copied.device == GPU and copied.dtype == torch.uint8 and int(copied.sum()) == 7 * buffer.size
    assert not torch.from_numpy(device.host_zeros((2,), np.float32, torch.device("cpu"))).is_pinned()


def test_a_fresh_host_array_reaches_the_gpu_without_waiting_for_queued_kernels():
    """PPO's minibatch order and DQN's replay draws (device.upload): a copy from
    pageable memory would wait for the kernels already queued, an idle gap per epoch."""
    x = torch.randn(4096, 4096, device=GPU)
    torch.cuda.synchronize()
    queued = time.perf_counter()
    for _ in range(20):  # tens of milliseconds of queued matmuls
        x = x @ x / 64
    launched = time.perf_counter()
    order = device.upload(np.arange(1000), GPU)
    uploaded = time.perf_counter()
    torch.cuda.synchronize()
    drained = time.perf_counter()
    assert uploaded - launched < (drained - queued) / 4, (uploaded - launched, drained - queued)
    assert order.device == GPU and torch.equal(order.cpu(), torch.arange(1000))


@bf16
def test_bf16_autocast_on_the_gpu_keeps_the_rl_maths_in_fp32():
    encoder, features = networks.encoder(PIXELS, "auto", "spec.ppo.policy")
    agent = Agent(features, gym.spaces.Discrete(6), [], encoder).to(GPU)
    frames = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, device=GPU)
    seen = []
    agent.encoder.convs[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    with device.autocast(GPU, "bf16"):
        log_prob, entropy, value = agent(frames, torch.zeros(8, dtype=torch.long, device=GPU))
    assert seen == [torch.bfloat16]
    assert log_prob.dtype == entropy.dtype == value.dtype == torch.float32


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=bf16)])
def test_ppo_learns_pong_from_pixels_on_one_gpu(precision):
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = PPOConfig(num_steps=16, num_minibatches=2, update_epochs=1, precision=precision)
    trainer = PPOTrainer(ctx, hp, "ALE/Pong-v5", 4, {}, total_timesteps=256, seed=1, restart=0)
    assert trainer.buf.obs.dtype == np.uint8 and torch.from_numpy(trainer.buf.obs).is_pinned()
    session = BareSession()
    assert trainer.train(session) == "budget"
    assert all(p.device == GPU for p in trainer.agent.parameters())
    assert session.reports and all(np.isfinite(v) for r in session.reports for v in r.losses.values())
    graphed = isinstance(trainer.learner, learners.GraphedPPOLearner)
    assert graphed is (precision == "fp32")  # 8 minibatch steps, the rate annealed each update (read from a device tensor)
    assert not graphed or (trainer.learner.backward.cuda_graph is not None
                           and trainer.learner.optimizer_step.graph.cuda_graph is not None)
    final = device.on_host(trainer.final_model())  # as write_final_model saves it: loadable without a GPU
    assert {t.device.type for t in final["agent"].values()} == {"cpu"}


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=bf16)])
def test_recurrent_ppo_runs_its_lstm_once_per_stretch_without_an_episode_start_on_the_gpu(precision):
    """spec.ppo.lstm on CUDA: each minibatch's LSTM calls are cut where some env's episode starts, from the host copy
    of the rollout's starts (a GPU rank stepped it one time step a call), and it learns in bf16 too."""
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = PPOConfig(num_steps=64, num_minibatches=2, update_epochs=1, hidden_sizes=[16], precision=precision,
                   lstm=LSTMConfig(hidden_size=8))
    trainer = PPOTrainer(ctx, hp, "kuberl_trainer.masked:CartPoleNoVelocity", 4, {}, total_timesteps=10_000, seed=1, restart=0)
    calls = []
    trainer.agent.lstm.lstm.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    trainer.collect()
    calls.clear()
    groups = recurrent.env_minibatches(4, hp.num_minibatches, copy.deepcopy(trainer.np_rng))  # the groups learn draws
    losses, _ = trainer.learn(*trainer.advantages(False))
    assert calls == [end - first for envs in groups for first, end in recurrent.segments(trainer.buf.starts[:, envs].max(1))]
    assert len(calls) < hp.num_minibatches * hp.num_steps and all(np.isfinite(v) for v in losses.values())
    trainer.envs.close()


def test_ppo_learning_while_collecting_acts_on_a_stream_beside_the_update():
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = PPOConfig(num_steps=16, num_minibatches=2, update_epochs=1, learn_while_collecting=True)
    trainer = PPOTrainer(ctx, hp, "ALE/Pong-v5", 4, {}, total_timesteps=3 * 16 * 4, seed=1, restart=0)
    streams, act = [], trainer.behaviour.act
    trainer.behaviour.act = lambda obs: (streams.append(torch.cuda.current_stream(GPU)), act(obs))[1]
    session = BareSession()
    assert trainer.train(session) == "budget"
    default = torch.cuda.default_stream(GPU)
    assert streams[0] == default  # the first rollout, before any update
    assert streams[-1] != default  # the later ones, collected while an update runs on the default stream
    assert all(np.isfinite(v) for r in session.reports for v in r.losses.values())
    # captured while the collecting thread sampled, from a generator of its own (learners.own_generator)
    assert isinstance(trainer.learner, learners.GraphedPPOLearner) and trainer.learner.backward.cuda_graph is not None


def test_streams_beside_the_update_are_never_a_capture_stream_however_many_are_taken():
    """torch hands pool streams out round robin, 32 per priority: the 33rd default-priority stream is the 1st.
    learnWhileCollecting took one per update, and near update 60 of pong-ppo-gpu it was the optimiser capture's."""
    captures = {torch.cuda.Stream(GPU).cuda_stream for _ in range(40)}  # as learners.StepGraph takes them
    beside = {device.stream_after_current(GPU).stream.cuda_stream for _ in range(40)}
    assert len(captures) == 32 and beside and not beside & captures


def test_learning_while_collecting_outlives_torchs_stream_pool():
    """70 updates (the stream pool wraps twice) while the collecting thread samples on its own stream: on an H200
    this crashed near update 60 of pong-ppo-gpu, when the optimiser step was captured again each update for the
    annealed learning rate. The captured step now reads the rate from a device tensor: one capture, 70 rates."""
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = PPOConfig(num_steps=8, num_minibatches=2, update_epochs=1, learn_while_collecting=True, anneal_lr=True)
    trainer = PPOTrainer(ctx, hp, "ALE/Pong-v5", 4, {}, total_timesteps=70 * 8 * 4, seed=1, restart=0)
    session = BareSession()
    assert trainer.train(session) == "budget"
    assert len(session.reports) == 70 and all(np.isfinite(v) for r in session.reports for v in r.losses.values())
    assert trainer.learner.optimizer_step.graph.cuda_graph is not None and trainer.learner.optimizer_step.graph.captures == 1
    assert trainer.learner.optimizer_step.rate.item() == pytest.approx(trainer.optimizer.param_groups[0]["lr"])


def test_a_frozen_copy_evaluates_on_its_own_stream_while_the_update_runs():
    """What spec.success.evalWhileTraining does on rank 0: the copy's evaluation on a thread
    and a stream of its own, the update on the main thread, and the same return as alone."""
    import concurrent.futures

    ctx = Dist(0, 1, 0, 1, GPU, None)
    trainer = PPOTrainer(ctx, PPOConfig(num_steps=16, hidden_sizes=[16]), "CartPole-v1", 4, {}, 10**6, seed=1, restart=0)
    trainer.update(False, False)
    frozen = trainer.frozen_copy()
    stream = device.stream_after_current(GPU)

    def evaluate() -> float:
        with stream:
            return frozen.evaluate("CartPole-v1", 8, {}, 3)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(evaluate)
        for _ in range(3):
            trainer.update(False, False)
        concurrent_return = running.result()
    assert concurrent_return == frozen.evaluate("CartPole-v1", 8, {}, 3)


@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=bf16)])
def test_dqn_learns_pong_from_pixels_on_one_gpu(precision):
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = DQNConfig(buffer_size=1000, batch_size=32, learning_starts=64, train_frequency=4, precision=precision)
    trainer = DQNTrainer(ctx, hp, "ALE/Pong-v5", 4, {}, total_timesteps=256, seed=1, restart=0)
    assert trainer.replay.frame_stack == 4 and trainer.replay.obs.dtype == np.uint8
    session = BareSession()
    assert trainer.train(session) == "budget"
    assert all(p.device == GPU for p in trainer.agent.parameters())
    learned = [(r.losses["value_loss"], r.losses["q_value"]) for r in session.reports if r.losses]
    assert learned and np.isfinite(learned).all()
    graphed = isinstance(trainer.learner, learners.GraphedQLearner)
    assert graphed is (precision == "fp32")  # 48 gradient steps: captured after StepGraph.WARM_UPS
    assert not graphed or (trainer.learner.backward.cuda_graph is not None and trainer.learner.optimizer_step.graph.cuda_graph is not None)


def test_sac_learns_pendulum_on_one_gpu():
    """SAC's reference learner (no precision, no graphs): the actor acting from learningStarts on, through
    one host read a vector step, the critics, their soft targets and alpha, all on the GPU."""
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = SACConfig(buffer_size=1000, batch_size=32, learning_starts=64, train_frequency=4, hidden_sizes=[64, 64])
    trainer = SACTrainer(ctx, hp, "Pendulum-v1", 4, {}, total_timesteps=256, seed=1, restart=0)
    session = BareSession()
    assert trainer.train(session) == "budget"
    for module in (trainer.agent, trainer.critics, trainer.target, trainer.temperature):
        assert all(t.device == GPU for t in [*module.parameters(), *module.buffers()]), module
    learned = [r.losses for r in session.reports if r.losses]
    assert learned and all(np.isfinite(v) for losses in learned for v in losses.values())
    # the actor steps every policyFrequency-th critic step (2), so an update of one critic step reports
    # the actor's losses every other time: each report has the critics', one at least the actor's too
    critics = {"value_loss", "q_value", "entropy_coefficient", *networks.TWIN_CRITIC_STATISTICS}
    assert all(set(losses) in (critics, critics | {"policy_loss", "entropy"}) for losses in learned)
    assert any("policy_loss" in losses for losses in learned) and any("policy_loss" not in losses for losses in learned)
    held = trainer.replay.actions[: trainer.replay.added]  # the actor's, read back from the GPU, inside the box
    assert (np.abs(held) <= 2.0).all() and np.unique(held).size == held.size
    assert np.isfinite(trainer.evaluate("Pendulum-v1", 2, {}, 3))  # the mean action, on the GPU
    final = device.on_host(trainer.final_model())  # as write_final_model saves it: loadable without a GPU
    assert {t.device.type for t in final["agent"].values()} == {"cpu"}


def test_td3_learns_pendulum_on_one_gpu():
    """TD3's learner (the actor-critic one SAC's shares): exploration noise added on the host to the actor's GPU
    action, the critics each step, the actor and both targets every policyDelay critic steps, all on the GPU."""
    ctx = Dist(0, 1, 0, 1, GPU, None)
    hp = TD3Config(buffer_size=1000, batch_size=32, learning_starts=64, train_frequency=4, hidden_sizes=[64, 64])
    trainer = TD3Trainer(ctx, hp, "Pendulum-v1", 4, {}, total_timesteps=256, seed=1, restart=0)
    session = BareSession()
    assert trainer.train(session) == "budget"
    for module in (trainer.agent, trainer.critics, trainer.target_actor, trainer.target_critics):
        assert all(t.device == GPU for t in [*module.parameters(), *module.buffers()]), module
    learned = [r.losses for r in session.reports if r.losses]
    assert learned and all(np.isfinite(v) for losses in learned for v in losses.values())
    assert {"value_loss", "q_value"} <= set(learned[-1])
    assert trainer.critic_updates >= hp.policy_delay  # the actor and the targets stepped at least once
    held = trainer.replay.actions[: trainer.replay.added]  # the actor's plus noise, read back from the GPU, clipped
    assert (np.abs(held) <= 2.0).all() and np.unique(held).size > 1
    assert np.isfinite(trainer.evaluate("Pendulum-v1", 2, {}, 3))  # the actor's action, on the GPU
    final = device.on_host(trainer.final_model())  # as write_final_model saves it: loadable without a GPU
    assert {t.device.type for t in final["agent"].values()} == {"cpu"}


def test_dqns_gradient_steps_replayed_from_cuda_graphs_learn_what_the_same_steps_learn_eagerly(monkeypatch):
    """learners.GraphedQLearner captured and replayed against the same learner run eagerly (graph=False),
    from the same weights on the same draws, with cuDNN's deterministic kernels: a graph replays the
    kernels it captured, so the weights must agree to float rounding. Inputs left stale in the graph's
    tensors, a gradient outside the buffer Adam reads or a step captured twice would not."""
    from kuberl_trainer import dqn

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    ctx, made = Dist(0, 1, 0, 1, GPU, None), []
    for graph in (True, False):
        torch.manual_seed(1)
        agent, target = networks.QCNN((4, 84, 84), 6).to(GPU), networks.QCNN((4, 84, 84), 6).to(GPU)
        hp = DQNConfig(batch_size=32, learning_rate=1e-4)
        made.append(learners.GraphedQLearner(agent, target, hp, ctx, dqn.q_loss, {"backward_optimizer": 0.0}, graph=graph))
    start = [p.detach().clone() for p in made[0].agent.parameters()]
    rng = np.random.default_rng(0)
    losses = {True: [], False: []}
    for _ in range(6):  # 12 steps: 3 warm-ups, a capture, then replays
        n = 64
        frames = [torch.from_numpy(rng.integers(0, 256, (n, 4, 84, 84), np.uint8)).to(GPU) for _ in range(2)]
        actions = torch.from_numpy(rng.integers(0, 6, n)).to(GPU)
        returns = torch.from_numpy(rng.normal(size=n).astype(np.float32)).to(GPU)
        discount = torch.full((n,), 0.99**3, device=GPU)
        for learner, graph in zip(made, (True, False), strict=True):
            next_inputs = learner.inputs(frames[1])
            losses[graph].append(learner.learn_draw((frames[0], actions, returns, discount, next_inputs),
                                                    learner.target_q(next_inputs)))
    replayed, eager = made
    assert replayed.backward.cuda_graph is not None and replayed.optimizer_step.graph.cuda_graph is not None
    assert eager.backward.cuda_graph is None
    torch.testing.assert_close(torch.stack(losses[True]), torch.stack(losses[False]), rtol=1e-5, atol=1e-6)
    for a, b in zip(replayed.agent.parameters(), eager.agent.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a, b) for a, b in zip(replayed.agent.parameters(), start, strict=True))


def test_ppos_minibatch_steps_replayed_from_cuda_graphs_learn_what_the_same_steps_learn_eagerly(monkeypatch):
    """learners.GraphedPPOLearner captured and replayed against itself run eagerly (graph=False), from the
    same weights on the same minibatches, the learning rate changed half way (PPO anneals it), with
    cuDNN's deterministic kernels: the weights must agree to float rounding."""
    from kuberl_trainer import ppo
    from kuberl_trainer.ppo_terms import minibatch_table

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    ctx, made = Dist(0, 1, 0, 1, GPU, None), []
    for graph in (True, False):
        torch.manual_seed(1)
        encoder, features = networks.encoder(PIXELS, "auto", "spec.ppo.policy")
        agent = Agent(features, gym.spaces.Discrete(6), [], encoder).to(GPU)
        made.append(learners.GraphedPPOLearner(agent, PPOConfig(grad_accumulation=2), ctx, ppo.ppo_loss, graph=graph))
    start = [p.detach().clone() for p in made[0].agent.parameters()]
    rng, stats = np.random.default_rng(0), {True: [], False: []}
    for step in range(10):  # 3 warm-ups, a capture, replays; a new rate at step 5, which the replays read
        n = 256
        scalars = np.stack([rng.normal(size=n) - 2, rng.normal(size=n), rng.normal(size=n), rng.normal(size=n), np.ones(n)], -1)
        rows = minibatch_table(torch.from_numpy(rng.integers(0, 6, (n, 1))), torch.from_numpy(scalars.astype(np.float32))).to(GPU)
        obs = torch.from_numpy(rng.integers(0, 256, (n, 4, 84, 84), np.uint8)).to(GPU)
        for learner, graph in zip(made, (True, False), strict=True):
            if step == 5:
                learner.optimizer.param_groups[0]["lr"] = 1e-4
            stats[graph].append(learner.step(obs, rows))
    replayed, eager = made
    assert replayed.backward.cuda_graph is not None and replayed.optimizer_step.graph.cuda_graph is not None
    assert replayed.optimizer_step.graph.captures == 1 and replayed.optimizer_step.rate.item() == pytest.approx(1e-4)
    torch.testing.assert_close(torch.stack(stats[True]), torch.stack(stats[False]), rtol=1e-5, atol=1e-6)
    for a, b in zip(replayed.agent.parameters(), eager.agent.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a, b) for a, b in zip(replayed.agent.parameters(), start, strict=True))
