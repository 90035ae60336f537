"""Device placement, checked without a GPU.

CI has no GPU, and a CPU tensor mixed into CUDA maths only fails on one
(DQN's loss accumulator did: `torch.zeros(())` collecting CUDA losses).
Two guards, each catching what the other cannot:

- A static check: every tensor factory in the trainer names its device, or
  its line says `# host:` and why (memory that is meant to stay on the CPU).
- Fake CUDA: torch's FakeTensorMode runs the networks and the learners'
  maths on tensors that claim to be on `cuda:0` (made from meta tensors: a
  CPU build of torch cannot move a module to CUDA, fake or not). It raises on
  any CPU/CUDA mix, as a real GPU would. Autograd on fake CUDA tensors aborts
  a CPU build's process, so `backward` is recorded instead of run, and
  host<->device copies (which a CPU build refuses even for fakes) are the
  one door the tests replace. CUDA autocast is switched on as a GPU build
  does (CudaAutocast): a CPU build's is off, so bf16 would run fp32.

On fake CUDA: every algorithm's acting and evaluation step (PPO plain and
recurrent, DQN, SAC, TD3) and learning (DQN, SAC and TD3 whole; PPO's whole
update, plain and recurrent), vectors and pixels where the algorithm takes
them (SAC and TD3 take vectors only), fp32 and bf16 where it has a precision
(SAC and TD3 have none). On the CPU: checkpoints and models saved from a GPU,
resumed and played. Not on fake CUDA, so held by the static check and review:
sampling with a seeded generator (evaluation, learnWhileCollecting: a CPU
build cannot make a CUDA generator, fake or not), learnWhileCollecting's CUDA
stream, CUDA graphs, NCCL collectives. GAE, the normalisers, the
divergence vote and the TensorBoard/MLflow sinks are host numpy and floats.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import pathlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import DQNConfig, LSTMConfig, PPOConfig, SACConfig, TD3Config
from kuberl_trainer import (
    checkpoint,
    device,
    dqn,
    fused,
    learners,
    networks,
    ppo,
    recurrent,
    sac,
    td3,
)
from kuberl_trainer.distributed import Dist
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

TRAINER = pathlib.Path(ppo.__file__).parent
FACTORIES = {"zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "rand", "randn", "randint",
             "randperm", "eye", "linspace", "logspace", "empty_strided", "scalar_tensor", "Generator"}
POSITIONAL_DEVICE = {"Generator"}  # torch.Generator(device): its device may come first, unnamed
CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
PIXELS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def torch_names(tree: ast.AST) -> tuple[set[str], dict[str, str]]:
    """The names a module binds to torch (`import torch`, `import torch as th`) and to its factories
    (`from torch import zeros as z`: {"z": "zeros"}); `torch` always (a snippet may not import it)."""
    modules, factories = {"torch"}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "torch"}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            factories |= {alias.asname or alias.name: alias.name for alias in node.names if alias.name in FACTORIES}
    return modules, factories


def unplaced_factories(source: str) -> list[int]:
    """Line numbers of torch tensor factories (and generators) with neither device= nor a `# host:` mark,
    however torch or the factory was imported."""
    lines, tree = source.splitlines(), ast.parse(source)
    modules, imported = torch_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id in modules and node.func.attr in FACTORIES):
            factory = node.func.attr
        elif isinstance(node.func, ast.Name) and node.func.id in imported:
            factory = imported[node.func.id]
        else:
            continue
        if any(k.arg == "device" for k in node.keywords) or (factory in POSITIONAL_DEVICE and node.args):
            continue
        if any("# host:" in line for line in lines[node.lineno - 1:node.end_lineno]):
            continue
        found.append(node.lineno)
    return found


def trainer_sources(root: pathlib.Path) -> dict[str, str]:
    """Every Python file under `root`, in subpackages too, by its path from there: a module added anywhere
    in the trainer is checked without being listed."""
    return {path.relative_to(root).as_posix(): path.read_text() for path in sorted(root.rglob("*.py"))}


def test_the_static_check_catches_the_accumulator_that_crashed_dqn_on_cuda():
    crashed = "total, size = torch.zeros(()), self.hp.batch_size\n"
    assert unplaced_factories(crashed) == [1]
    assert unplaced_factories("total = torch.zeros((), device=self.ctx.device)\n") == []
    assert unplaced_factories("flat = torch.zeros(n)  # host: the fused step is CPU-only\n") == []


def test_the_static_check_follows_torch_however_it_was_imported():
    assert unplaced_factories("import torch as th\ntotal = th.zeros(())\n") == [2]
    assert unplaced_factories("from torch import zeros as z, nn\ntotal = z(())\nlayer = nn.Linear(2, 2)\n") == [2]
    assert unplaced_factories("import torch\ng = torch.Generator()\n") == [2]  # sampling on CUDA refuses a CPU one
    assert unplaced_factories("import torch\ng = torch.Generator(device)\nh = torch.Generator(device=device)\n") == []
    assert unplaced_factories("import numpy as torch_like\nx = torch_like.zeros(3)\n") == []


def test_the_static_check_reads_every_trainer_file_in_subpackages_too(tmp_path):
    (tmp_path / "algorithms").mkdir()
    (tmp_path / "algorithms" / "a2c.py").write_text("import torch\ntotal = torch.zeros(())\n")
    (tmp_path / "top.py").write_text("import torch\n")
    assert {name: unplaced_factories(text) for name, text in trainer_sources(tmp_path).items()} == {
        "algorithms/a2c.py": [2], "top.py": []}
    scanned = trainer_sources(TRAINER)
    assert {"ppo.py", "recurrent.py", "sac.py", "td3.py", "divergence.py", "normalize.py", "tensorboard.py",
            "tracking.py"} <= scanned.keys()


# Modules whose every tensor lives on the host by design, and the check that keeps them there.
HOST_ONLY = {
    "fused.py": "the hand-fused steps run on CPU only (fused.supports and supports_q refuse CUDA)",
}


def test_every_tensor_factory_in_the_trainer_names_its_device_or_says_host():
    offenders = {name: lines for name, text in trainer_sources(TRAINER).items()
                 if name not in HOST_ONLY and (lines := unplaced_factories(text))}
    assert offenders == {}, f"tensor factories without device= or a '# host:' reason: {offenders}"


def host_copies_that_wait(source: str) -> list[int]:
    """Line numbers of `torch.from_numpy(...).to(...)`: a fresh host array copied from
    pageable memory, which on CUDA waits for every queued kernel (device.upload does not)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Attribute)
            and node.func.value.func.attr == "from_numpy"]


def test_fresh_host_arrays_reach_the_device_through_upload():
    assert host_copies_that_wait("order = torch.from_numpy(rng.permutation(n)).to(device)\n") == [1]
    assert host_copies_that_wait("order = device.upload(rng.permutation(n), device)\n") == []
    offenders = {name: lines for name, text in trainer_sources(TRAINER).items()
                 if name not in HOST_ONLY and (lines := host_copies_that_wait(text))}
    assert offenders == {}, f"use device.upload (or to_device for pinned buffers): {offenders}"
    copied = device.upload(np.arange(6, dtype=np.int64)[::2], torch.device("cpu"))  # a strided view too
    assert copied.dtype == torch.int64 and copied.tolist() == [0, 2, 4]


def cuda_streams_taken(source: str) -> list[tuple[int, str]]:
    """Each `torch.cuda.Stream(...)` and `torch.cuda.graph(...)` call: its line and whether it names the stream's
    pool ('priority') or the capture's stream ('stream'), else ''."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("Stream", "graph")
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "cuda"):
            named = {k.arg for k in node.keywords} & {"priority", "stream"}
            found.append((node.lineno, f"{node.func.attr}:{','.join(sorted(named))}"))
    return found


def test_no_stream_beside_the_update_can_be_a_capture_stream():
    """torch hands pool streams out round robin, 32 per priority (c10/cuda/CUDAStream.h, "Stream pool note"): a
    default-priority stream taken per update for learnWhileCollecting's acting became the optimiser capture's stream
    on an H200 (the acting thread's sampling failed inside the capture). Streams for work beside the update come from
    another priority's pool (device.stream_after_current), and captures name their own stream (learners.StepGraph)."""
    assert cuda_streams_taken("s = torch.cuda.Stream(d)\nwith torch.cuda.graph(g):\n    pass\n") == [(1, "Stream:"), (2, "graph:")]
    taken = {name: calls for name, text in trainer_sources(TRAINER).items() if (calls := cuda_streams_taken(text))}
    beside = [call for _, call in taken.pop("device.py")]
    assert beside == ["Stream:priority"] and device.BESIDE_UPDATE_PRIORITY < 0  # torch's default priority is 0
    assert sorted(call for _, call in taken.pop("learners.py")) == ["Stream:", "graph:stream"]  # StepGraph's own
    assert taken == {}, f"CUDA streams taken outside device.stream_after_current and learners.StepGraph: {taken}"


def test_the_host_only_fast_path_refuses_cuda():
    assert fused.supports_q(dqn.QNetwork(4, 2, [64, 64]), CUDA) is False
    assert fused.supports(ppo.Agent(4, gym.spaces.Discrete(2), [64, 64]), CUDA) is False
    assert fused.supports_q(dqn.QNetwork(4, 2, [64, 64]), torch.device("cpu")) is True


# --- fake CUDA -----------------------------------------------------------------


REAL_AUTOCAST = torch.autocast


class CudaAutocast:
    """torch.autocast as a GPU build runs it for device_type "cuda": a CPU build switches that off (warning that
    CUDA is not available), so bf16 on fake CUDA ran fp32. This turns CUDA autocast on and off through torch's
    own switches (set_autocast_enabled, set_autocast_dtype), which fake CUDA tensors obey, without its cache of
    cast weights (a cast of a weight that requires grad, cached, aborts a CPU build's process as autograd on fake
    CUDA does; it changes no device or dtype); every other device's autocast is torch's."""

    def __init__(self, device_type: str, dtype: torch.dtype | None = None, enabled: bool = True, cache_enabled=None):
        self.real = None if device_type == "cuda" else REAL_AUTOCAST(device_type, dtype, enabled, cache_enabled)
        self.dtype, self.enabled = dtype or torch.get_autocast_dtype("cuda"), enabled

    def __enter__(self):
        if self.real is not None:
            return self.real.__enter__()
        self.before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"), torch.is_autocast_cache_enabled()
        torch.set_autocast_enabled("cuda", self.enabled)
        torch.set_autocast_dtype("cuda", self.dtype)
        torch.set_autocast_cache_enabled(False)
        return self

    def __exit__(self, *exc):
        if self.real is not None:
            return self.real.__exit__(*exc)
        torch.set_autocast_enabled("cuda", self.before[0])
        torch.set_autocast_dtype("cuda", self.before[1])
        torch.set_autocast_cache_enabled(self.before[2])
        return False


@pytest.fixture
def fake(monkeypatch):
    """A FakeTensorMode to enter around the maths (real CPU tensors may flow in, as a
    GPU allows 0-dim CPU scalars), with CUDA autocast running as on a GPU (CudaAutocast)."""
    monkeypatch.setattr(torch, "autocast", CudaAutocast)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*compiled without cuDNN.*")  # nn.LSTM on CUDA tensors in a CPU build
        yield FakeTensorMode(allow_non_fake_inputs=True)


def test_bf16_on_fake_cuda_is_bf16_as_on_a_gpu(fake):
    """The harness's own check: device.autocast(CUDA, "bf16") casts a linear layer's maths to bf16 on fake CUDA (a
    CPU build's torch.autocast("cuda") is off, and every bf16 test here ran fp32), and full_precision turns it off."""
    layer = on_fake_cuda(fake, torch.nn.Linear(4, 2)).requires_grad_(False)
    x = fake_cuda(fake, np.zeros((3, 4), np.float32))
    with fake, torch.no_grad(), device.autocast(CUDA, "bf16"):
        assert layer(x).dtype == torch.bfloat16
        with device.full_precision(CUDA):
            assert layer(x).dtype == torch.float32
        assert layer(x).dtype == torch.bfloat16
    with fake, torch.no_grad(), device.autocast(CUDA, "fp32"):
        assert layer(x).dtype == torch.float32


def on_fake_cuda(mode: FakeTensorMode, module: torch.nn.Module) -> torch.nn.Module:
    """`module` (built outside the mode) with every parameter and buffer a fake CUDA tensor."""
    with mode:
        return module.to_empty(device=CUDA)


def fake_cuda(mode: FakeTensorMode, array: np.ndarray) -> torch.Tensor:
    """The fake CUDA copy of a host array: what device.to_device would give on a GPU."""
    return FakeTensor(mode, torch.from_numpy(np.ascontiguousarray(array)).to("meta"), CUDA)


@contextlib.contextmanager
def layer_dtypes():
    """The dtypes linear and convolution layers compute in on (fake) CUDA while inside (torch's global forward hook):
    bf16 where autocast is on for CUDA, so a forward autocast for the wrong device shows as fp32."""
    seen = set()

    def record(module, inputs, output):
        if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)) and output.device == CUDA:
            seen.add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        yield seen
    finally:
        handle.remove()


def frames(mode, batch: int) -> torch.Tensor:
    return fake_cuda(mode, np.zeros((batch, *PIXELS.shape), np.uint8))


@pytest.mark.parametrize("precision", device.PRECISIONS)
@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_ppo_acts_and_scores_on_the_device_of_its_weights(fake, space, precision):
    encoder, features = networks.encoder(space, "auto", "spec.ppo.policy")
    agent = on_fake_cuda(fake, ppo.Agent(features, gym.spaces.Discrete(6), [64, 64], encoder))
    obs = fake_cuda(fake, np.zeros((8, *space.shape), space.dtype))
    with fake, torch.no_grad(), device.autocast(CUDA, precision):
        action, log_prob, value = agent.act(obs)
        new_log_prob, entropy, new_value = agent(obs, action)
        greedy = agent.greedy(obs)
    for tensor in (action, log_prob, value, new_log_prob, entropy, new_value, greedy):
        assert tensor.device == CUDA
    assert log_prob.dtype == value.dtype == torch.float32  # the heads return fp32 under bf16 too


def test_ppo_loss_stays_on_the_device(fake):
    n = 16
    zeros = fake_cuda(fake, np.zeros(n, np.float32))
    with fake, torch.no_grad():
        loss, stats = ppo.ppo_loss(zeros, zeros, zeros, zeros, zeros, zeros, zeros, zeros + 1 / n, PPOConfig())
    assert loss.device == CUDA and all(v.device == CUDA for v in stats.values())


@pytest.mark.parametrize("precision", device.PRECISIONS)
@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_q_networks_and_td_maths_stay_on_the_device(fake, space, precision):
    if space is PIXELS:
        online = on_fake_cuda(fake, networks.QCNN(space.shape, 6))
    else:
        online = on_fake_cuda(fake, dqn.QNetwork(4, 6, [64, 64]))
    obs = fake_cuda(fake, np.zeros((8, *space.shape), space.dtype))
    with fake, torch.no_grad(), device.autocast(CUDA, precision):
        q = online(obs).float()
        targets = dqn.td_targets(q.select(1, 0), q.select(1, 1), q, q)  # (indexing a fake CUDA tensor needs CUDA)
        loss = dqn.dqn_loss(q, online.greedy(obs), targets)
    assert loss.device == CUDA


def test_dqn_learns_on_cuda_without_a_host_tensor_in_its_maths(fake, monkeypatch):
    """DQNTrainer.learn on fake CUDA: batches drawn from the (host) replay buffer,
    target values, every gradient step's loss and their sum."""
    backward, losses = dqn_learning_on_fake_cuda(fake, monkeypatch, VECTOR, "huber")
    assert backward == [CUDA] * 2  # gradientSteps 2: each step's loss on the learner's device
    assert {name: loss.device for name, loss in losses.items()} == {"value_loss": CUDA, "q_value": CUDA}


@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_dqn_acts_on_cuda_reading_each_batch_of_greedy_actions_once(fake, monkeypatch, space):
    """DQNTrainer.collect's epsilon-greedy steps (and evaluation's, the same learner.greedy) on fake CUDA: the
    observations to the device, the Q-network's argmax there, one host read of the actions a vector step."""
    hp = DQNConfig(buffer_size=256, learning_starts=64, batch_size=32, train_frequency=8, hidden_sizes=[16])
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is: no fused CPU path
    env = "CartPole-v1" if space is VECTOR else "tests.unit.test_trainer_devices:Frames"
    trainer = dqn.DQNTrainer(ctx, hp, env, 4, {}, 10_000, 7, 0)
    trainer.ctx = trainer.learner.ctx = dataclasses.replace(ctx, device=CUDA)
    on_fake_cuda(fake, trainer.agent).requires_grad_(False)
    reads = []
    monkeypatch.setattr(torch.Tensor, "cpu", lambda tensor: HostRead(reads, tensor))
    try:
        with fake:
            assert trainer.collect(eps=0.0) == 8  # 2 vector steps of 4 envs, every action greedy
    finally:
        trainer.envs.close()
    assert reads == [(CUDA, (4,))] * 2


def test_adam_takes_torchs_fused_kernel_on_cuda_as_on_cpu(fake):
    """One fused launch a step instead of a dozen foreach ones: DQN's batch-32 step on a
    GPU is bound by launches (docs/gpus-and-atari.md)."""
    agent = on_fake_cuda(fake, dqn.QNetwork(4, 2, [64, 64]))
    assert learners.adam(agent, CUDA, 1e-3).defaults["fused"] is True
    assert learners.adam(dqn.QNetwork(4, 2, [8]), torch.device("cpu"), 1e-3).defaults["fused"] is True


def test_a_gpu_ranks_final_model_is_written_from_host_memory(fake, monkeypatch):
    """A model trained on a GPU must load on a laptop with a plain torch.load: write_model, which writes both
    final-model.pt and best-model.pt, passes the algorithm's tensors through device.on_host."""
    import types

    from kuberl_trainer import session as sessions

    agent = on_fake_cuda(fake, dqn.QNetwork(4, 2, [8]))
    algorithm = types.SimpleNamespace(counters=types.SimpleNamespace(global_step=7), final_model=lambda: {
        "agent": agent.state_dict(), "obs_norm": {"mean": agent.state_dict()["net.0.bias"], "count": 3.0},
        "pair": (agent.state_dict()["net.0.weight"], 1), "hidden_sizes": [8]})
    saved = []
    monkeypatch.setattr(sessions.torch, "save", lambda model, _buffer: saved.append(model))
    monkeypatch.setattr(sessions.checkpoint, "write_on_volume", lambda *_a, **_k: None)
    monkeypatch.setattr(sessions.checkpoint, "nonfinite", lambda _model: [])  # fakes hold no values: judged below
    spec = types.SimpleNamespace(algorithm="dqn", env=types.SimpleNamespace(id="CartPole-v1", kwargs={}))
    session = types.SimpleNamespace(spec=spec, volume=lambda: None, last_good=None)
    with fake:
        sessions.TrainingSession.write_model(session, algorithm, "model.pt", None)
    tensors = [*saved[0]["agent"].values(), saved[0]["obs_norm"]["mean"], saved[0]["pair"][0]]
    assert agent.state_dict()["net.0.bias"].device == CUDA
    assert {t.device for t in tensors} == {torch.device("cpu")}
    assert saved[0]["obs_norm"]["count"] == 3.0 and saved[0]["pair"][1] == 1 and saved[0]["hidden_sizes"] == [8]


_ON_A_GPU: list[bool] = []  # non-empty while saved_as_on_a_gpu is entered
_TAGGER_REGISTERED: list[bool] = []


@contextlib.contextmanager
def saved_as_on_a_gpu():
    """torch.save inside it records every storage at cuda:0, as a GPU rank's save of its tensors does: a tagger
    ahead of the CPU's through torch.serialization.register_package (torch's public hook for devices of its own,
    registered once, inert outside), so a CPU build without map_location refuses the file as it would a GPU's."""
    if not _TAGGER_REGISTERED:
        torch.serialization.register_package(5, lambda storage: "cuda:0" if _ON_A_GPU else None,
                                             lambda storage, location: None)
        _TAGGER_REGISTERED.append(True)
    _ON_A_GPU.append(True)
    try:
        yield
    finally:
        _ON_A_GPU.pop()


def recurrent_trainer(seed: int) -> ppo.PPOTrainer:
    hp = PPOConfig(num_steps=8, hidden_sizes=[16], lstm=LSTMConfig(hidden_size=8))
    return ppo.PPOTrainer(Dist(0, 1, 0, 1, CPU, None), hp, "CartPole-v1", 2, {}, 10_000, seed, 0)


def test_a_checkpoint_a_gpu_rank_wrote_resumes_on_a_machine_without_one():
    """checkpoint.decode loads with map_location="cpu": a GPU job's checkpoints resume where there is no GPU (a
    `kuberl run --resume` on a laptop), its weights and optimiser moments as they were."""
    trained = recurrent_trainer(seed=1)
    trained.collect()
    trained.learn(*trained.advantages(False))
    with saved_as_on_a_gpu():
        data = checkpoint.encode(trained.shared_state())
    with pytest.raises(RuntimeError, match="CUDA"):  # what the tagging makes of it: a file only a GPU build loads as is
        torch.load(io.BytesIO(data.partition(b"\n")[2]), weights_only=True)
    resumed = recurrent_trainer(seed=2)
    resumed.load_shared(checkpoint.decode(data))
    assert all(torch.equal(a, b) for a, b in zip(trained.agent.state_dict().values(), resumed.agent.state_dict().values(), strict=True))
    moments = [state["exp_avg"] for state in resumed.optimizer.state_dict()["state"].values()]
    assert moments and all(m.device == CPU and m.abs().sum() > 0 for m in moments)
    for trainer in (trained, resumed):
        trainer.envs.close()


def test_a_model_a_gpu_rank_wrote_plays_with_kuberl_eval_on_a_machine_without_one(tmp_path):
    """checkpoint.read_model (kuberl eval, load_policy) loads with map_location="cpu" too: a model file whose tensors
    were saved from the GPU (a trainer before write_model's on_host, or one saved by hand) still plays."""
    from kuberl_trainer import policy as policies

    trained = recurrent_trainer(seed=1)
    model = {**trained.final_model(), "format": 1, "algorithm": "ppo", "env_id": "CartPole-v1", "env_kwargs": {},
             "timesteps": 0, "eval_return": None}
    with saved_as_on_a_gpu():
        torch.save(model, str(tmp_path / "final-model.pt"))
    played = policies.load_policy(str(tmp_path / "final-model.pt"))
    assert np.isfinite(policies.evaluate(played, 2, seed=0)).all()
    trained.envs.close()


def test_a_pod_with_fewer_gpus_than_processes_is_a_configuration_error_naming_the_field():
    """`kuberl run` of a 4-GPU example on a 1-GPU machine crashed each rank past the first with
    "invalid device ordinal", and each restart met it again."""
    from kuberl_trainer.distributed import BadEnvironment, cuda_device

    assert cuda_device(3, 4, 4) == torch.device("cuda", 3)
    with pytest.raises(BadEnvironment) as refused:
        cuda_device(1, 4, 1)
    assert str(refused.value).startswith("spec.gpusPerWorker: this pod runs 4 process(es), one per GPU, but sees 1")
    assert "--set gpusPerWorker=1" in str(refused.value)


def test_rank_0_says_when_the_spec_asks_for_gpus_and_torch_sees_none():
    assert device.gpus_missing(0, torch.device("cpu")) is None
    assert device.gpus_missing(4, CUDA) is None
    note = device.gpus_missing(4, torch.device("cpu"))
    assert note.startswith("spec.gpusPerWorker is 4, but torch ") and "train on the CPU" in note


# --- code added since the checks above were written: each path on fake CUDA, and each fails on a host tensor ---


class Frames(gym.Env):
    """Pixel observations for DQN's CNN path outside ALE: uint8 frames, 4 stacked."""

    observation_space, action_space = PIXELS, gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.integers(0, 255, PIXELS.shape, np.uint8), {}

    def step(self, action):
        return self.np_random.integers(0, 255, PIXELS.shape, np.uint8), 1.0, False, False, {}


MIXED_DEVICES = "cuda:0 and cpu|cpu and cuda:0|two different devices"  # torch's words for a CPU/CUDA mix, eager and fake


def host_vector(n: int) -> torch.Tensor:
    """A host tensor a GPU refuses beside CUDA ones (a 0-dim one it would take as a scalar)."""
    return torch.zeros(n)  # host: the mix the fake CUDA tests must catch


def dqn_learning_on_fake_cuda(fake, monkeypatch, space, loss: str, precision: str = "fp32") -> tuple[list, dict]:
    """DQNTrainer.learn on fake CUDA (see the test below): the devices its backward passes saw, and its losses."""
    hp = DQNConfig(buffer_size=256, learning_starts=64, batch_size=32, train_frequency=4, gradient_steps=2, loss=loss,
                   precision=precision)
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is: no fused CPU path
    env = "CartPole-v1" if space is VECTOR else "tests.unit.test_trainer_devices:Frames"
    trainer = dqn.DQNTrainer(ctx, hp, env, 4, {}, 10_000, 7, 0)
    for _ in range(32):  # acting needs a host sync: real CPU work, done before the fake mode
        trainer.next_obs = trainer.envs.step(trainer.envs.action_space.sample())[0]
        trainer.replay.add(trainer.next_obs, np.zeros(4, np.int64), np.ones(4, np.float32),
                           np.zeros(4, bool), np.zeros(4, bool), np.ones(4, bool))
    trainer.ctx = trainer.learner.ctx = dataclasses.replace(ctx, device=CUDA)  # the learner autocasts on its own ctx's device
    backward = []
    monkeypatch.setattr(torch.Tensor, "backward", lambda loss, *a, **k: backward.append(loss.device))
    on_fake_cuda(fake, trainer.agent).requires_grad_(False)  # recording autograd on fake CUDA aborts too
    on_fake_cuda(fake, trainer.target)
    monkeypatch.setattr(trainer, "to_tensors", lambda batch: tuple(
        fake_cuda(fake, a) for a in (batch.obs, batch.actions, batch.returns, batch.discount, batch.next_obs)))
    with fake:
        losses, _ = trainer.learn()
    trainer.envs.close()
    return backward, losses


@pytest.mark.parametrize("precision", device.PRECISIONS)
@pytest.mark.parametrize("loss", ["huber", "mse"])
@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_dqn_learns_on_cuda_with_either_loss_its_frames_made_floats_once_on_the_device(fake, monkeypatch, space, loss, precision):
    """spec.dqn.loss mse (CleanRL's) and the CNN's next frames, converted to floats once per draw for the
    target and online networks (learner.inputs), came after the fake CUDA test above, which ran Huber on vectors."""
    inputs = []
    real_inputs = learners.AutogradQLearner.inputs
    monkeypatch.setattr(learners.AutogradQLearner, "inputs", lambda self, obs: inputs.append(
        (obs.dtype, obs.device)) or real_inputs(self, obs))
    with layer_dtypes() as computed:
        backward, losses = dqn_learning_on_fake_cuda(fake, monkeypatch, space, loss, precision)
    assert computed == {torch.bfloat16 if precision == "bf16" else torch.float32}  # the target's forwards too
    assert backward == [CUDA] * 2 and {name: t.device for name, t in losses.items()} == {"value_loss": CUDA, "q_value": CUDA}
    assert {t.dtype for t in losses.values()} == {torch.float32}  # under bf16 too: the TD maths run in fp32
    assert inputs == [(torch.uint8 if space is PIXELS else torch.float32, CUDA)]  # one draw: its next frames once


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_a_host_tensor_in_dqns_loss_fails_on_fake_cuda(fake, monkeypatch, loss):
    """The harness can fail: the chosen loss (spec.dqn.loss) taking a host vector raises, as a GPU would."""
    name = {"huber": "smooth_l1_loss", "mse": "mse_loss"}[loss]
    real = getattr(torch.nn.functional, name)
    monkeypatch.setattr(torch.nn.functional, name, lambda chosen, targets: real(chosen + host_vector(len(chosen)), targets))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        dqn_learning_on_fake_cuda(fake, monkeypatch, VECTOR, loss)


def test_a_host_tensor_in_dqns_mean_q_fails_on_fake_cuda(fake, monkeypatch):
    """The harness can fail on the mean Q too (kuberl_trainer_q_value): the taken actions' Q-values read
    beside a host vector raise, as a GPU would (issue 27's accumulator was a host tensor collecting CUDA losses)."""
    real = learners.q_statistics
    monkeypatch.setattr(learners, "q_statistics", lambda loss, q, actions: real(loss, q + host_vector(q.shape[1]), actions))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        dqn_learning_on_fake_cuda(fake, monkeypatch, VECTOR, "huber")


def narrowing(real_getitem):
    """Tensor.__getitem__ with basic slices and None taken as narrow() and unsqueeze() views, and a 1-D integer
    tensor as index_select, which fake CUDA tensors run (a CPU build refuses to index one: "not linked with support
    for cuda devices"); every other index as it was."""

    def getitem(tensor, index):
        if isinstance(index, torch.Tensor) and index.dim() == 1 and not index.is_floating_point() and index.dtype != torch.bool:
            return tensor.index_select(0, index)  # stricter than a GPU, which takes host indices too (copied, a wait)
        parts = index if isinstance(index, tuple) else (index,)
        if not (isinstance(tensor, FakeTensor)
                and all(p is None or (isinstance(p, slice) and p.step in (None, 1)) for p in parts)):
            return real_getitem(tensor, index)
        for dim, part in enumerate(parts):
            if part is None:
                tensor = tensor.unsqueeze(dim)
            else:
                start, stop, _ = part.indices(tensor.shape[dim])
                tensor = tensor.narrow(dim, start, max(0, stop - start))
        return tensor

    return getitem


def ppo_minibatch_on_fake_cuda(fake, monkeypatch, norm_advantage: bool = True) -> tuple[torch.Tensor, list]:
    """One PPO minibatch step of the reference learner on fake CUDA, advantages normalised (Bessel's std over
    the valid rows), two micro-batches: its statistics and the devices its backward passes saw."""
    hp = PPOConfig(hidden_sizes=[16], grad_accumulation=2, norm_advantage=norm_advantage)
    agent = ppo.Agent(4, gym.spaces.Discrete(2), [16])
    ctx = Dist(0, 1, 0, 1, CUDA, None)
    learner = learners.AutogradPPOLearner(on_fake_cuda(fake, agent).requires_grad_(False), hp, ctx, ppo.ppo_loss)
    backward = []
    monkeypatch.setattr(torch.Tensor, "backward", lambda loss, *a, **k: backward.append(loss.device))
    n = 12
    scalars = np.stack([np.zeros(n), np.zeros(n), np.linspace(-1, 1, n), np.ones(n), np.r_[np.ones(n - 2), 0, 0]], -1)
    rows = fake_cuda(fake, np.concatenate([np.zeros((n, 1)), scalars], 1).astype(np.float32))
    monkeypatch.setattr(torch.Tensor, "__getitem__", narrowing(torch.Tensor.__getitem__))
    with fake:
        stats = learner.step(fake_cuda(fake, np.zeros((n, 4), np.float32)), rows)
    return stats, backward


def test_ppos_minibatch_with_bessels_std_advantages_stays_on_the_device(fake, monkeypatch):
    """minibatch_columns normalises advantages by the valid rows' Bessel std (after the tests above were written)."""
    stats, backward = ppo_minibatch_on_fake_cuda(fake, monkeypatch)
    assert stats.device == CUDA and backward == [CUDA] * 2


def test_a_host_tensor_in_ppos_advantage_normalisation_fails_on_fake_cuda(fake, monkeypatch):
    from kuberl_trainer import ppo_terms

    real_columns = ppo_terms.minibatch_columns

    def columns_with_a_host_std(rows, norm_advantage):
        actions, old_log_prob, old_value, advantages, returns, weight = real_columns(rows, norm_advantage)
        return actions, old_log_prob, old_value, advantages / (host_vector(len(advantages)) + 1), returns, weight

    monkeypatch.setattr(learners, "minibatch_columns", columns_with_a_host_std)
    with pytest.raises(Exception, match=MIXED_DEVICES):
        ppo_minibatch_on_fake_cuda(fake, monkeypatch)


class HostRead:
    """What Tensor.cpu returns here: the fake CUDA tensor's shape as host zeros (a CPU build refuses the copy)."""

    def __init__(self, reads: list, tensor: torch.Tensor):
        reads.append((tensor.device, tuple(tensor.shape)))
        self.shape = tuple(tensor.shape)

        self.dtype = np.float32 if tensor.is_floating_point() else np.int64  # integer actions stay integers for the envs

    def numpy(self) -> np.ndarray:
        return np.zeros(self.shape, self.dtype)


def test_a_gpu_ranks_state_is_judged_finite_on_its_device_with_one_host_read(fake, monkeypatch):
    """checkpoint.nonfinite, before each checkpoint: every floating tensor's isfinite().all() on the device, stacked
    and read once (a host read per tensor was 36 waits for PPO's state), the host's own arrays judged where they are."""
    from kuberl_trainer import checkpoint

    agent = on_fake_cuda(fake, dqn.QNetwork(4, 2, [8]))
    reads = []

    class AllFinite(HostRead):
        def tolist(self) -> list[bool]:
            return [True] * self.shape[0]

    monkeypatch.setattr(torch.Tensor, "cpu", lambda tensor: AllFinite(reads, tensor))
    state = {"agent": agent.state_dict(), "counters": {"updates": 3}, "obs_norm": {"mean": np.zeros(4), "count": 2.0}}
    with fake:
        assert checkpoint.nonfinite(state) == []
    assert reads == [(CUDA, (len(agent.state_dict()),))]


@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_ppo_acts_on_cuda_with_one_host_read_per_vector_step(fake, monkeypatch, space):
    """TorchPolicy.act packs action, log-prob and value into one tensor on the device and reads it once
    (a GPU rank waits once per vector step, not three times)."""
    encoder, features = networks.encoder(space, "auto", "spec.ppo.policy")
    policy = learners.TorchPolicy(on_fake_cuda(fake, ppo.Agent(features, gym.spaces.Discrete(6), [16], encoder)), CUDA)
    reads = []
    monkeypatch.setattr(learners, "to_device", lambda array, device: fake_cuda(fake, array))
    monkeypatch.setattr(torch.Tensor, "__getitem__", narrowing(torch.Tensor.__getitem__))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda tensor: HostRead(reads, tensor))
    with fake:
        actions, log_probs, values = policy.act(np.zeros((8, *space.shape), space.dtype))
    assert reads == [(CUDA, (8, 3))]
    assert actions.shape == log_probs.shape == values.shape == (8,)

    def act_leaving_actions_on_the_host(self, obs, generator=None):
        _, value = self._heads(obs)
        return host_vector(len(value)).long(), value, value

    monkeypatch.setattr(ppo.Agent, "act", act_leaving_actions_on_the_host)
    with fake, pytest.raises(Exception, match=MIXED_DEVICES):
        policy.act(np.zeros((8, *space.shape), space.dtype))


def test_learn_while_collecting_acts_with_a_copy_on_the_learners_device():
    """learnWhileCollecting's lagged copy and its actor live where the learner's weights do, never on the host."""
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is: a torch actor, no fused path
    trainer = ppo.PPOTrainer(ctx, PPOConfig(num_steps=8, learn_while_collecting=True, hidden_sizes=[16]),
                             "CartPole-v1", 2, {}, 10_000, 1, 0)
    assert trainer.acting_agent is not trainer.agent
    assert {p.device for p in trainer.acting_agent.parameters()} == {ctx.device}
    assert isinstance(trainer.behaviour, learners.TorchPolicy) and trainer.behaviour.device == ctx.device
    assert trainer.behaviour.agent is trainer.acting_agent  # copy_weights_for_acting loads into it, in place
    trainer.envs.close()


# --- SAC: its networks, soft targets and both steps' losses on fake CUDA ---------------------------------


def learning_on_fake_cuda(fake, monkeypatch, trainer_class, hp, target_modules: tuple[str, ...]) -> tuple[list, dict, list]:
    """An actor-critic's learn (SAC's, TD3's) on fake CUDA: batches drawn from the (host) replay buffer, the
    targets' next actions and values, both steps' losses (recorded, not run, as the DQN test's backward), the
    soft target updates and the sums of the statistics. The devices each step's loss was on, the losses, and
    the devices of the targets' weights after each soft update."""
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is
    trainer = trainer_class(ctx, hp, "Pendulum-v1", 4, {}, 10_000, 7, 0)
    for _ in range(4):  # random actions before learningStarts: real CPU work, done before the fake mode
        trainer.collect()
    trainer.ctx = dataclasses.replace(ctx, device=CUDA)
    steps = []
    monkeypatch.setattr(trainer.learner, "_step", lambda _step, loss: steps.append(loss.device))
    targets, soft_update = [], networks.soft_update
    monkeypatch.setattr(networks, "soft_update", lambda target, online, tau: (
        soft_update(target, online, tau), targets.append({p.device for p in target.parameters()})))
    for name in ("agent", "critics", *target_modules):
        on_fake_cuda(fake, getattr(trainer, name)).requires_grad_(False)  # recording autograd on fake CUDA aborts too
    monkeypatch.setattr(trainer, "to_tensors", lambda batch: tuple(
        fake_cuda(fake, a) for a in (batch.obs, batch.actions, batch.returns, batch.discount, batch.next_obs)))
    with fake:
        losses, _ = trainer.learn()
    trainer.envs.close()
    return steps, losses, targets


def sac_learning_on_fake_cuda(fake, monkeypatch) -> tuple[list, dict, list]:
    """SAC's: the target critics and the actor's next actions, and the entropy coefficient."""
    hp = SACConfig(buffer_size=256, learning_starts=16, batch_size=8, train_frequency=8, gradient_steps=4,
                   policy_frequency=2, hidden_sizes=[16])
    return learning_on_fake_cuda(fake, monkeypatch, sac.SACTrainer, hp, ("target", "temperature"))


def test_sac_learns_on_cuda_without_a_host_tensor_in_its_maths(fake, monkeypatch):
    steps, losses, targets = sac_learning_on_fake_cuda(fake, monkeypatch)
    assert steps == [CUDA] * 8  # 4 critic steps, and 2 actor steps after the 2nd and the 4th
    assert targets == [{CUDA}] * 4  # targetNetworkFrequency 1: a soft update after each critic step
    assert {name: loss.device for name, loss in losses.items()} == dict.fromkeys(("value_loss", "q_value", "entropy_coefficient", "policy_loss", "entropy", *networks.TWIN_CRITIC_STATISTICS), CUDA)


def acting_on_fake_cuda(fake, monkeypatch, trainer_class, hp) -> list:
    """An actor-critic's collect past learningStarts (SAC's, TD3's: the actor's actions, one host read a vector
    step) and greedy (evaluation's action) on fake CUDA: the host reads they made, (device, shape) each."""
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is
    trainer = trainer_class(ctx, hp, "Pendulum-v1", 4, {}, 10_000, 7, 0)
    trainer.counters.global_step = hp.learning_starts  # the actor acts from here, no longer uniform noise
    trainer.ctx = dataclasses.replace(ctx, device=CUDA)
    on_fake_cuda(fake, trainer.agent)
    reads = []
    monkeypatch.setattr(f"{trainer_class.__module__}.to_device", lambda array, device: fake_cuda(fake, array))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda tensor: HostRead(reads, tensor))
    try:
        with fake:
            assert trainer.collect() == 8  # 2 vector steps of 4 envs
            trainer.greedy(np.zeros((3, 3), np.float32))
    finally:
        trainer.envs.close()
    return reads


def sac_acting_on_fake_cuda(fake, monkeypatch) -> list:
    """SAC's: sampled actions, and evaluation's mean action."""
    hp = SACConfig(buffer_size=256, learning_starts=16, batch_size=8, train_frequency=8, hidden_sizes=[16])
    return acting_on_fake_cuda(fake, monkeypatch, sac.SACTrainer, hp)


def test_sac_acts_and_evaluates_on_cuda_reading_each_batch_of_actions_once(fake, monkeypatch):
    assert sac_acting_on_fake_cuda(fake, monkeypatch) == [(CUDA, (4, 1))] * 2 + [(CUDA, (3, 1))]


def test_a_host_tensor_in_sacs_squashed_actions_fails_on_fake_cuda(fake, monkeypatch):
    """The harness can fail: a host vector in the squash that acting and evaluation share raises, as a GPU would."""
    real = sac.squash
    monkeypatch.setattr(sac, "squash", lambda pre_tanh, *rest: real(pre_tanh + host_vector(pre_tanh.shape[-1]), *rest))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        sac_acting_on_fake_cuda(fake, monkeypatch)


def test_a_host_tensor_in_sacs_soft_target_fails_on_fake_cuda(fake, monkeypatch):
    """The harness can fail: a host vector in the soft Q target raises, as a GPU would."""
    real = sac.soft_q_target
    monkeypatch.setattr(sac, "soft_q_target", lambda rewards, *rest: real(rewards + host_vector(len(rewards)), *rest))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        sac_learning_on_fake_cuda(fake, monkeypatch)


# --- TD3: its networks, smoothed targets, delayed steps and both targets' updates on fake CUDA ------------


def td3_learning_on_fake_cuda(fake, monkeypatch) -> tuple[list, dict, list]:
    """TD3's: the target actor's smoothed next actions, the target critics, delayed actor steps and both targets' updates."""
    hp = TD3Config(buffer_size=256, learning_starts=16, batch_size=8, train_frequency=8, gradient_steps=4,
                   policy_delay=2, hidden_sizes=[16])
    return learning_on_fake_cuda(fake, monkeypatch, td3.TD3Trainer, hp, ("target_actor", "target_critics"))


def test_td3_learns_on_cuda_without_a_host_tensor_in_its_maths(fake, monkeypatch):
    steps, losses, targets = td3_learning_on_fake_cuda(fake, monkeypatch)
    assert steps == [CUDA] * 6  # 4 critic steps, and an actor step after the 2nd and the 4th
    assert targets == [{CUDA}] * 4  # after each actor step, the target actor's and the target critics' update
    assert {name: loss.device for name, loss in losses.items()} == dict.fromkeys(("value_loss", "q_value", "policy_loss", *networks.TWIN_CRITIC_STATISTICS), CUDA)


def test_a_host_tensor_in_td3s_smoothed_target_actions_fails_on_fake_cuda(fake, monkeypatch):
    """The harness can fail: a host vector in target policy smoothing raises, as a GPU would."""
    real = td3.smoothed_target_actions
    monkeypatch.setattr(td3, "smoothed_target_actions",
                        lambda actions, *rest: real(actions + host_vector(actions.shape[-1]), *rest))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        td3_learning_on_fake_cuda(fake, monkeypatch)


def test_td3_acts_and_evaluates_on_cuda_reading_each_batch_of_actions_once(fake, monkeypatch):
    """TD3's actions: the actor's, the noise added on the host."""
    hp = TD3Config(buffer_size=256, learning_starts=16, batch_size=8, train_frequency=8, hidden_sizes=[16])
    assert acting_on_fake_cuda(fake, monkeypatch, td3.TD3Trainer, hp) == [(CUDA, (4, 1))] * 2 + [(CUDA, (3, 1))]


def recurrent_ppo_on_fake_cuda(fake, monkeypatch, space, precision: str = "fp32") -> tuple[torch.Tensor, list, tuple, list]:
    """A recurrent agent (spec.ppo.lstm) on fake CUDA: its torch actor's step of 4 envs from the state it
    carries (reset where episodes start), its bootstrap value and greedy step, then one minibatch step of the
    reference learner over those envs' sequences of 3 steps in two micro-batches of whole sequences: the step's statistics, the devices its
    backward passes saw, the actor's state after its step, and the LSTM's calls (the steps each took)."""
    encoder, features = networks.encoder(space, "auto", "spec.ppo.policy")
    agent = ppo.RecurrentAgent(features, gym.spaces.Discrete(2), [] if space is PIXELS else [16], 8, encoder)
    hp = PPOConfig(hidden_sizes=[16], grad_accumulation=2, precision=precision)
    ctx = Dist(0, 1, 0, 1, CUDA, None)
    learner = learners.AutogradPPOLearner(on_fake_cuda(fake, agent).requires_grad_(False), hp, ctx, ppo.ppo_loss)
    policy = learners.RecurrentTorchPolicy(learner.agent, CUDA)
    reads, backward, calls = [], [], []
    agent.lstm.lstm.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    monkeypatch.setattr(learners, "to_device", lambda array, device: fake_cuda(fake, array))
    monkeypatch.setattr(torch.Tensor, "__getitem__", narrowing(torch.Tensor.__getitem__))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda tensor: HostRead(reads, tensor))
    monkeypatch.setattr(torch.Tensor, "backward", lambda loss, *a, **k: backward.append(loss.device))
    envs, steps = 4, 3
    n = envs * steps
    scalars = np.stack([np.zeros(n), np.zeros(n), np.linspace(-1, 1, n), np.ones(n), np.ones(n)], -1)
    rows = fake_cuda(fake, np.concatenate([np.zeros((n, 1)), scalars], 1).astype(np.float32))
    first = (fake_cuda(fake, np.zeros((envs, 8), np.float32)), fake_cuda(fake, np.zeros((envs, 8), np.float32)))
    host_starts = np.array([1, 0, 0] * envs, np.float32)
    with fake:
        policy.reset(np.array([1, 0, 0, 1], np.float32))
        policy.act(np.zeros((envs, *space.shape), space.dtype))
        policy.value(np.zeros((envs, *space.shape), space.dtype))  # the rollout's bootstrap
        policy.greedy(np.zeros((envs, *space.shape), space.dtype))  # as evaluation's continuous actions step
        stats = learner.step(fake_cuda(fake, np.zeros((n, *space.shape), space.dtype)), rows,
                             learners.Sequences(*first, fake_cuda(fake, host_starts), host_starts))
    assert reads == [(CUDA, (envs, 3)), (CUDA, (envs,)), (CUDA, (envs,))]  # one host read a call
    return stats, backward, policy.state, calls


@pytest.mark.parametrize("precision", device.PRECISIONS)
@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_recurrent_ppo_acts_and_learns_with_its_state_on_the_device(fake, monkeypatch, space, precision):
    """bf16 too: the LSTM between the (bf16) encoder and heads runs in fp32, the state it carries fp32 as acting's."""
    stats, backward, state, calls = recurrent_ppo_on_fake_cuda(fake, monkeypatch, space, precision)
    assert stats.device == CUDA and backward == [CUDA] * 2
    assert state[0].device == state[1].device == CUDA and state[0].dtype == state[1].dtype == torch.float32
    assert calls == [1, 1, 1, 3, 3]  # act, value, greedy; each micro-batch's 3 steps in one call, cut from the host's starts


def test_on_cuda_the_lstm_takes_a_run_without_resets_in_one_call_cut_from_the_starts_host_copy(fake, monkeypatch):
    """test_recurrent_maths' call count on fake CUDA, where the device's starts cannot be read: 128 steps of 4 envs
    with one episode starting at step 40 take two LSTM calls given the starts' host copy (a GPU stepped one time
    step a call, 128, not to wait for a host read), and a step a call without one."""
    core = on_fake_cuda(fake, recurrent.LSTMCore(3, 4)).requires_grad_(False)
    calls = []
    core.lstm.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    host_starts = np.zeros((4, 128), np.float32)
    host_starts[2, 40] = 1.0
    monkeypatch.setattr(torch.Tensor, "__getitem__", narrowing(torch.Tensor.__getitem__))
    with fake, torch.no_grad():
        features, starts = torch.zeros(4 * 128, 3, device=CUDA), fake_cuda(fake, host_starts.reshape(-1))
        _, (h, _) = core(features, core.zero_state(4, CUDA), starts, host_starts.reshape(-1))
        assert calls == [40, 88] and h.device == CUDA
        calls.clear()
        core(features, core.zero_state(4, CUDA), starts)
    assert calls == [1] * 128


def placed(array: np.ndarray | torch.Tensor, where: torch.device) -> torch.Tensor:
    """device.to_device and device.upload inside the fake mode: the array's shape and dtype on `where` (a CPU build
    refuses the copy itself, even of a fake), so a copy sent to the wrong device mixes as it would on a GPU."""
    tensor = torch.from_numpy(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
    return torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device=where)


def ppo_update_on_fake_cuda(fake, monkeypatch, space, precision: str, lstm: bool, upload=None) -> tuple[list, list, list]:
    """PPOTrainer.learn on fake CUDA, plain or recurrent: a rollout of 4 envs x 8 steps written into its (host) buffer,
    every env's episode ending at step 3 (step 4 the autoreset step, step 5 a start), then 2 epochs of 2 minibatches
    of 2 micro-batches: the rollout's copies to the device, the table of the loss's inputs, the statistics'
    accumulator, a recurrent policy's first states and starts. The devices its backward passes saw, its host reads
    (device, shape), and each LSTM call's (steps, outputs' dtype). `upload`: device.upload's stand-in, `placed` unless given."""
    hp = PPOConfig(num_steps=8, num_minibatches=2, update_epochs=2, grad_accumulation=2, hidden_sizes=[16],
                   precision=precision, lstm=LSTMConfig(hidden_size=8) if lstm else None)
    ctx = Dist(0, 1, 0, 1, torch.device("meta"), None)  # built as a GPU rank is: no fused CPU path
    env = "CartPole-v1" if space is VECTOR else "tests.unit.test_trainer_devices:Frames"
    trainer = ppo.PPOTrainer(ctx, hp, env, 4, {}, 10_000, 7, 0)
    trainer.envs.close()
    buf = trainer.buf
    buf.valid[:] = 1.0
    buf.valid[4] = 0.0
    buf.starts[:] = recurrent.episode_starts(buf.valid, np.zeros(4, np.float32))
    trainer.ctx = trainer.learner.ctx = dataclasses.replace(ctx, device=CUDA)
    on_fake_cuda(fake, trainer.agent).requires_grad_(False)  # recording autograd on fake CUDA aborts too
    backward, reads, calls = [], [], []
    if lstm:  # each call's steps, and its outputs' dtype
        trainer.agent.lstm.lstm.register_forward_hook(lambda module, inputs, output: calls.append((inputs[0].shape[0], output[0].dtype)))
    monkeypatch.setattr(ppo, "to_device", placed)
    monkeypatch.setattr(ppo, "upload", upload or placed)
    monkeypatch.setattr(torch.Tensor, "__getitem__", narrowing(torch.Tensor.__getitem__))
    monkeypatch.setattr(torch.Tensor, "backward", lambda loss, *a, **k: backward.append(loss.device))
    monkeypatch.setattr(FakeTensor, "tolist", lambda tensor: reads.append((tensor.device, tuple(tensor.shape)))
                        or [0.0] * len(tensor))
    zeros = np.zeros((8, 4), np.float32)
    with fake:
        if lstm:  # what collect() leaves: each env's state as the rollout began, on the device
            buf.initial_state = trainer.agent.lstm.zero_state(4, CUDA)
        trainer.learn(zeros, zeros)
    return backward, reads, calls


@pytest.mark.parametrize("lstm", [False, True], ids=["plain", "lstm"])
@pytest.mark.parametrize("precision", device.PRECISIONS)
@pytest.mark.parametrize("space", [VECTOR, PIXELS], ids=["vectors", "pixels"])
def test_a_ppo_update_runs_on_cuda_reading_its_statistics_once(fake, monkeypatch, space, precision, lstm):
    """The whole update, where the tests above take one minibatch step: every backward on the device, one host read
    (the statistics' means), and a recurrent policy's LSTM one call per stretch without an episode start."""
    with layer_dtypes() as computed:
        backward, reads, calls = ppo_update_on_fake_cuda(fake, monkeypatch, space, precision, lstm)
    assert computed == {torch.bfloat16 if precision == "bf16" else torch.float32}
    assert backward == [CUDA] * 8
    assert reads == [(CUDA, (len(ppo.STAT_NAMES),))]
    # each micro-batch's env: steps 0-4, then from its episode's start; in fp32 under bf16 too, as acting's state is
    assert calls == ([(5, torch.float32), (3, torch.float32)] * 8 if lstm else [])


def test_recurrent_starts_left_on_the_host_fail_a_ppo_update_on_fake_cuda(fake, monkeypatch):
    """The harness can fail: the episode starts not copied to the device raise, as a GPU would."""
    def leaving_the_starts_on_the_host(array, where):
        return placed(array, CPU if isinstance(array, torch.Tensor) and array.dim() == 1 else where)

    with pytest.raises(Exception, match=MIXED_DEVICES):
        ppo_update_on_fake_cuda(fake, monkeypatch, VECTOR, "fp32", lstm=True, upload=leaving_the_starts_on_the_host)


def test_a_host_tensor_in_the_recurrent_state_reset_fails_on_fake_cuda(fake, monkeypatch):
    from kuberl_trainer import recurrent

    real_reset = recurrent.reset_state
    monkeypatch.setattr(recurrent, "reset_state", lambda state, starts: real_reset(state, starts + host_vector(len(starts))))
    with pytest.raises(Exception, match=MIXED_DEVICES):
        recurrent_ppo_on_fake_cuda(fake, monkeypatch, VECTOR)


def test_a_recurrent_agent_on_cuda_learns_eagerly_not_from_cuda_graphs(fake):
    """CUDA graphs replay fixed tensors, with no state carried between steps: spec.ppo.lstm takes the reference path
    where a plain agent's steps would be graphed (a graphed learner cannot even be built on fake CUDA)."""
    ctx, rng = Dist(0, 1, 0, 1, CUDA, None), np.random.default_rng(0)
    assert learners.graphs(CUDA, "fp32")  # what a plain agent on this device gets
    recurrent = on_fake_cuda(fake, ppo.RecurrentAgent(4, gym.spaces.Discrete(2), [16], 8))
    with fake:
        learner, actor = learners.ppo_learner(recurrent, PPOConfig(hidden_sizes=[16], lstm={"hidden_size": 8}), ctx,
                                              ppo.ppo_loss, rng)
    assert type(learner) is learners.AutogradPPOLearner and type(actor) is learners.RecurrentTorchPolicy
