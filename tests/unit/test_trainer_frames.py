"""uint8 observations that are not Atari's channels-first stacks: CarRacing's (96, 96, 3) frames are
channels last, MiniGrid's (7, 7, 3) grids too small for the Nature CNN. Both were picked for the CNN
and crashed deep in torch's conv2d ("Kernel size can't be greater than actual input size"), a crash
every restart met again. Channels-last frames are read as SB3 reads them (VecTransposeImage); grids
too small for the CNN go to the MLP, and forcing the CNN on them names the field."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import networks
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer
from torch.utils._python_dispatch import TorchDispatchMode

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)


def frames(*shape: int) -> spaces.Box:
    return spaces.Box(0, 255, shape, np.uint8)


@pytest.mark.parametrize(("shape", "layout"), [
    ((96, 96, 3), (3, 96, 96, True)),  # CarRacing
    ((84, 84, 4), (4, 84, 84, True)),
    ((4, 84, 84), (4, 84, 84, False)),  # Atari's stack
    ((84, 84), (1, 84, 84, False)),
])
def test_the_frame_layout_puts_channels_where_the_smallest_dimension_is(shape, layout):
    assert networks.frame_layout(shape) == layout


def test_a_channels_last_frame_gives_the_features_of_the_same_frame_channels_first():
    torch.manual_seed(0)
    last = networks.NatureCNN((96, 96, 3))
    first = networks.NatureCNN((3, 96, 96))
    first.load_state_dict(last.state_dict())
    batch = torch.randint(0, 256, (2, 96, 96, 3), dtype=torch.uint8)
    torch.testing.assert_close(last(batch), first(batch.permute(0, 3, 1, 2)))


def test_auto_picks_the_cnn_for_frames_it_can_read_and_the_mlp_for_smaller_grids():
    assert networks.choose(frames(96, 96, 3), "auto", "spec.ppo.policy") == "cnn"
    assert networks.choose(frames(7, 7, 3), "auto", "spec.ppo.policy") == "mlp"
    assert networks.choose(frames(10, 10), "auto", "spec.dqn.policy") == "mlp"
    with pytest.raises(networks.PolicyMismatch, match=r"^spec\.dqn\.policy: 'cnn' needs .* at least 36x36; the env gives Box"):
        networks.choose(frames(7, 7, 3), "cnn", "spec.dqn.policy")


class Frames(gym.Env):
    """Random uint8 observations of the shape its kwargs name, three actions, ten-step episodes."""

    def __init__(self, shape=(96, 96, 3)):
        self.observation_space, self.action_space = frames(*shape), spaces.Discrete(3)
        self.steps = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        return self.observation_space.sample(), 1.0, False, self.steps >= 10, {}


@pytest.mark.parametrize("shape", [[96, 96, 3], [7, 7, 3]])
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_both_algorithms_learn_on_channels_last_frames_and_small_grids(algorithm, shape):
    env_id = "tests.unit.test_trainer_frames:Frames"
    if algorithm == "ppo":
        trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8, num_minibatches=1, update_epochs=1), env_id, 2,
                             {"shape": shape}, 64, seed=1, restart=0)
    else:
        trainer = DQNTrainer(ONE_PROCESS, DQNConfig(learning_starts=8, batch_size=4, buffer_size=64, train_frequency=2),
                             env_id, 2, {"shape": shape}, 64, seed=1, restart=0)
    before = [p.detach().clone() for p in trainer.agent.parameters()]
    for _ in range(8):
        trainer.update(stop_vote=False, success_vote=False)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.agent.parameters(), strict=True))


@pytest.mark.parametrize("shape", [[7, 7, 3], [96, 96, 3]])
def test_a_ppo_model_of_uint8_observations_plays_and_exports_as_the_trainer_acts(shape, tmp_path):
    """A loaded PPO model handed uint8 grids to its MLP as uint8 ("mat1 and mat2 must have the same
    dtype" in kuberl eval and in the TorchScript export), though the trainer had acted on floats."""
    from kuberl_trainer import policy as policies

    env_id = "tests.unit.test_trainer_frames:Frames"
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8, num_minibatches=1, update_epochs=1), env_id, 2,
                         {"shape": shape}, 64, seed=1, restart=0)
    trainer.update(stop_vote=False, success_vote=False)
    path = str(tmp_path / "final-model.pt")
    torch.save({**trainer.final_model(), "format": 1, "algorithm": "ppo", "env_id": env_id, "env_kwargs": {"shape": shape},
                "timesteps": trainer.counters.global_step, "eval_return": None}, path)
    policy = policies.load_policy(path, sample=False, env_modules=["tests.unit"])
    obs = np.stack([policy.observation_space.sample() for _ in range(3)])
    expected = trainer.actor.greedy(obs.astype(np.float32)) if shape[0] < 36 else trainer.actor.greedy(obs)
    np.testing.assert_array_equal(policy(obs), expected)
    policies.export_torchscript(policy, str(tmp_path / "policy.ts"))
    exported = torch.jit.load(str(tmp_path / "policy.ts"))
    np.testing.assert_array_equal(exported(torch.as_tensor(obs)).numpy(), expected)


class FrameCopies(TorchDispatchMode):
    """uint8 frames turned into floats, and float tensors of a frame's shape newly made, while active."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape, self.converted, self.float_frames = shape, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        source = args[0] if args else None
        if func.overloadpacket.__name__ == "_to_copy" and isinstance(source, torch.Tensor) and source.dtype == torch.uint8:
            self.converted += source.numel() // math.prod(self.shape)
        out = func(*args, **(kwargs or {}))
        made = isinstance(out, torch.Tensor) and not any(  # new memory: not a view, not an in-place op's result
            isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == out.untyped_storage().data_ptr() for a in args)
        if made and out.is_floating_point() and tuple(out.shape[-len(self.shape):]) == self.shape:
            self.float_frames += out.numel() // math.prod(self.shape)
        return out


@pytest.mark.parametrize("double", [True, False], ids=["double", "vanilla"])
def test_a_dqn_draws_frames_become_floats_once_each_in_one_pass(double):
    """Each trained sample has two frame stacks (obs, next obs): each is converted once on the learner's
    device and scaled in place. Double DQN converted the next frames twice (target network, then the
    online one's argmax), and each conversion made two float copies (the cast, then the division)."""
    shape = (4, 84, 84)
    hp = DQNConfig(learning_starts=32, batch_size=8, buffer_size=256, train_frequency=4, gradient_steps=2, double_dqn=double)
    trainer = DQNTrainer(ONE_PROCESS, hp, "tests.unit.test_trainer_frames:Frames", 2, {"shape": shape}, 10**6, seed=1,
                         restart=0, fast=False)
    while not trainer.learning():
        trainer.collect(1.0)
    trainer.learn()
    with FrameCopies(shape) as copies:
        trainer.learn()
    samples = trainer.gradient_steps * hp.batch_size
    assert (copies.converted / samples, copies.float_frames / samples) == (2, 2)


def test_a_ppo_minibatchs_frames_become_floats_once_each_in_one_pass():
    shape = (4, 84, 84)
    hp = PPOConfig(num_steps=8, num_minibatches=2, update_epochs=2)
    trainer = PPOTrainer(ONE_PROCESS, hp, "tests.unit.test_trainer_frames:Frames", 2, {"shape": shape}, 10**6, seed=1,
                         restart=0, fast=False)
    trainer.collect()
    advantages, returns = trainer.advantages(False)
    with FrameCopies(shape) as copies:
        trainer.learn(advantages, returns)
    samples = hp.update_epochs * trainer.batch_per_rank
    assert (copies.converted / samples, copies.float_frames / samples) == (1, 1)


def test_ppo_values_its_last_frames_as_uint8_on_the_device():
    """The rollout's bootstrap value took its frames as float32 made on the host (4x the bytes to copy)."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=4), "tests.unit.test_trainer_frames:Frames", 2,
                         {"shape": (4, 84, 84)}, 10**6, seed=1, restart=0, fast=False)
    seen = []
    forward = trainer.agent.value
    trainer.agent.value = lambda obs: seen.append(obs.dtype) or forward(obs)
    trainer.collect()
    assert seen == [torch.uint8]
