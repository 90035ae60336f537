"""What SAC and TD3 promise alike, in one process: a stop and resume that continues exactly, a resume without
the rank's buffer that refills it, evaluation without exploration and a model that is the actor alone, and an
env whose actions a tanh-bounded actor cannot emit refused by name. Each algorithm's own schedule and maths
are in its own file (test_sac_trainer.py, test_td3_trainer.py)."""

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core.spec import SACConfig, TD3Config
from kuberl_trainer import checkpoint
from kuberl_trainer.distributed import Dist
from kuberl_trainer.envs import UnknownEnv
from kuberl_trainer.sac import SACTrainer
from kuberl_trainer.session import BareSession
from kuberl_trainer.td3 import TD3Trainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
pytestmark = pytest.mark.usefixtures("one_thread")


class Algorithm(NamedTuple):
    trainer: type
    config: type
    modules: tuple[str, ...]  # every module a checkpoint carries, each compared after a resume


ALGORITHMS = {
    "sac": Algorithm(SACTrainer, SACConfig, ("agent", "critics", "target", "temperature")),
    "td3": Algorithm(TD3Trainer, TD3Config, ("agent", "critics", "target_actor", "target_critics")),
}
algorithms = pytest.mark.parametrize("algorithm", ALGORITHMS.values(), ids=ALGORITHMS.keys())


def small_trainer(algorithm: Algorithm, total=400, restart=0):
    config = algorithm.config(learning_starts=64, batch_size=32, train_frequency=8, gradient_steps=4,
                              hidden_sizes=[16], buffer_size=1000)
    return algorithm.trainer(ONE_PROCESS, config, "Pendulum-v1", 4, {}, total, seed=3, restart=restart)


@algorithms
def test_a_resume_learns_exactly_as_the_uninterrupted_run(algorithm):
    """What a checkpoint holds (networks, targets, SAC's alpha, both optimisers, counters) plus, as deterministic
    mode adds, the rank's replay buffer and RNGs, through the checkpoint's encoding: the resumed rank's gradient
    steps (TD3's target noise included) equal the uninterrupted one's, bit for bit. (Pendulum's envs are not plain
    data, so their state is no part of it: both learn from their buffers alone.)"""
    trainer = small_trainer(algorithm)
    for _ in range(12):
        trainer.update(False, False)
    own = {"replay": trainer.replay.state_dict(), "torch_rng": torch.get_rng_state(), "np_rng": trainer.np_rng.bit_generator.state}
    saved = checkpoint.decode(checkpoint.encode({"shared": trainer.shared_state(), "own": own}))
    resumed = small_trainer(algorithm, restart=1)  # another restart generation: its own seeds must not matter
    resumed.load_shared(saved["shared"])
    resumed._load_rank_extra(saved["own"])
    resumed.np_rng.bit_generator.state = saved["own"]["np_rng"]

    torch.set_rng_state(saved["own"]["torch_rng"])
    trainer.learn()
    trainer.learn()
    torch.set_rng_state(saved["own"]["torch_rng"])
    resumed.learn()
    resumed.learn()
    assert resumed.critic_updates == trainer.critic_updates > 0
    for name in algorithm.modules:
        mine, theirs = getattr(resumed, name).state_dict(), getattr(trainer, name).state_dict()
        for key, value in theirs.items():
            assert torch.equal(mine[key], value), (name, key)
    for group in ("critics", "policy"):
        mine, theirs = resumed.optimizer.state_dict()[group]["state"], trainer.optimizer.state_dict()[group]["state"]
        for key, state in theirs.items():
            for name, tensor in state.items():
                assert torch.equal(mine[key][name], tensor), (group, key, name)


@algorithms
def test_without_the_rank_state_a_resume_refills_the_buffer_then_learns_on(algorithm):
    trainer = small_trainer(algorithm, total=300)
    assert trainer.train(BareSession()) == "budget"
    resumed = small_trainer(algorithm, total=600)
    resumed.load_shared(trainer.shared_state())
    assert len(resumed.replay) == 0 and not resumed.learning()
    assert resumed.train(BareSession()) == "budget" and resumed.critic_updates > trainer.critic_updates


@algorithms
def test_evaluation_acts_without_exploration_and_the_final_model_is_the_actor(algorithm):
    """SAC evaluates with its mean action, TD3 without its exploration noise: the same observations, the same actions."""
    trainer = small_trainer(algorithm)
    obs = np.zeros((3, 3), np.float32)
    assert np.array_equal(trainer.greedy(obs), trainer.greedy(obs))
    score = trainer.evaluate("Pendulum-v1", 2, {}, seed=5)
    assert -2000 < score < 0
    model = trainer.final_model()
    assert set(model) == {"agent", "hidden_sizes"} and set(model["agent"]) == set(trainer.agent.state_dict())
    frozen = trainer.frozen_copy()
    assert frozen.agent is not trainer.agent and frozen.evaluate("Pendulum-v1", 2, {}, seed=5) == score


class Unbounded(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


@algorithms
@pytest.mark.parametrize(("env_id", "words"), [
    ("CartPole-v1", "'CartPole-v1' has action space Discrete(2); supported by this algorithm: float Box actions"),
    ("tests.unit.test_continuous_trainers:Unbounded", "unbounded; supported by this algorithm: float Box actions with finite bounds"),
])
def test_an_env_whose_actions_the_actor_cannot_emit_is_refused_naming_spec_env_id(algorithm, env_id, words):
    with pytest.raises(UnknownEnv) as refused:
        algorithm.trainer(ONE_PROCESS, algorithm.config(hidden_sizes=[8]), env_id, 2, {}, 1000, seed=1, restart=0)
    assert str(refused.value).startswith("spec.env.id: ") and words in str(refused.value), refused.value
