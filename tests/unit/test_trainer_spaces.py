"""Spaces kuberl's networks cannot read or emit are refused at start, naming spec.env.id and what is
supported: a Dict observation was a TypeError deep in base.py (`tuple(None)`), retried as a crash by
every restart; MultiDiscrete actions an AttributeError in PPO's clipping; a Discrete observation
(FrozenLake) fed its index to the MLP as one number. Discrete, MultiDiscrete, Dict and Tuple
observations are flattened into one vector first, as SB3 reads them."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.envs import UnknownEnv, space_problem
from kuberl_trainer.ppo import PPOTrainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
VECTOR = spaces.Box(-1, 1, (3,), np.float32)
PPO_ACTIONS = (spaces.Discrete, spaces.Box)
DQN_ACTIONS = (spaces.Discrete,)


@pytest.mark.parametrize(("observation", "action", "accepted", "words"), [
    (spaces.Dict({"a": VECTOR}), spaces.Discrete(2), PPO_ACTIONS, "observation space Dict"),
    (spaces.Tuple((spaces.Discrete(3), spaces.Discrete(2))), spaces.Discrete(2), PPO_ACTIONS, "observation space Tuple"),
    (spaces.Discrete(16), spaces.Discrete(2), DQN_ACTIONS, "observation space Discrete(16)"),
    (spaces.Box(-1, 1, (), np.float32), spaces.Discrete(2), DQN_ACTIONS, "observation space Box"),
    (VECTOR, spaces.MultiDiscrete([3, 2]), PPO_ACTIONS, "action space MultiDiscrete"),
    (VECTOR, spaces.MultiBinary(3), PPO_ACTIONS, "action space MultiBinary"),
    (VECTOR, spaces.Dict({"a": spaces.Discrete(2)}), PPO_ACTIONS, "action space Dict"),
    (VECTOR, spaces.Discrete(3, start=1), PPO_ACTIONS, "starts at 1"),
    (VECTOR, spaces.Box(0, 5, (2,), np.int64), PPO_ACTIONS, "int64"),
    (VECTOR, spaces.Box(-1, 1, (2, 3), np.float32), PPO_ACTIONS, "of shape (2, 3)"),
    (VECTOR, spaces.Box(-1, 1, (2,), np.float32), DQN_ACTIONS, "action space Box"),
])
def test_a_space_the_networks_cannot_use_is_named_with_what_is_supported(observation, action, accepted, words):
    problem = space_problem(observation, action, accepted)
    assert problem is not None and words in problem, problem
    assert "supported" in problem, problem


@pytest.mark.parametrize(("observation", "action", "accepted"), [
    (VECTOR, spaces.Discrete(2), DQN_ACTIONS),
    (spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), DQN_ACTIONS),  # Atari frames
    (spaces.Box(0, 10, (3,), np.int64), spaces.Discrete(2), PPO_ACTIONS),  # integer features: cast to float
    (spaces.MultiBinary(4), spaces.Discrete(2), PPO_ACTIONS),
    (VECTOR, spaces.Box(-2, 2, (2,), np.float32), PPO_ACTIONS),
    (VECTOR, spaces.Box(-np.inf, np.inf, (2,), np.float64), PPO_ACTIONS),
])
def test_the_spaces_kuberl_learns_on_pass(observation, action, accepted):
    assert space_problem(observation, action, accepted) is None


class Spaced(gym.Env):
    """A ten-step env with the spaces its kwargs name."""

    def __init__(self, observation: str = "vector", action: str = "discrete"):
        self.observation_space = {
            "vector": VECTOR,
            "dict": spaces.Dict({"velocity": VECTOR, "gear": spaces.Discrete(3), "lights": spaces.MultiBinary(2)}),
            "text": spaces.Dict({"a": VECTOR, "mission": spaces.Text(8)}),  # MiniGrid's mission
            "image": spaces.Dict({"a": VECTOR, "pixels": spaces.Box(0, 255, (64, 64, 3), np.uint8)}),
        }[observation]
        self.action_space = {"discrete": spaces.Discrete(2), "multidiscrete": spaces.MultiDiscrete([3, 2])}[action]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        return self.observation_space.sample(), 1.0, False, self.steps == 10, {}


@pytest.mark.parametrize(("make", "env_id", "kwargs", "words"), [
    (lambda *a: PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8), *a), "tests.unit.test_trainer_spaces:Spaced",
     {"action": "multidiscrete"}, "action space MultiDiscrete"),
    (lambda *a: PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8), *a), "tests.unit.test_trainer_spaces:Spaced",
     {"observation": "text"}, "holding Text("),
    (lambda *a: DQNTrainer(ONE_PROCESS, DQNConfig(), *a), "tests.unit.test_trainer_spaces:Spaced",
     {"observation": "image"}, "holding an image Box(0, 255, (64, 64, 3), uint8)"),
])
def test_each_algorithm_refuses_such_an_env_at_start_naming_the_field_and_the_env(make, env_id, kwargs, words):
    with pytest.raises(UnknownEnv) as refused:
        make(env_id, 2, kwargs, 64, 1, 0)
    message = str(refused.value)
    assert message.startswith(f"spec.env.id: {env_id!r} has ") and words in message, message


def test_a_registered_id_whose_making_raises_an_import_error_is_the_specs_error_not_a_crash():
    """gymnasium registers HalfCheetah-v2 (so `kuberl validate` passes it) and raises ImportError when it is made:
    the rank crashed, and every restart met it again."""
    from kuberl_trainer.envs import make_envs

    with pytest.raises(UnknownEnv, match=r"^spec\.env\.id: 'HalfCheetah-v2' needs a package the trainer image lacks: .*gymnasium-robotics"):
        make_envs("HalfCheetah-v2", 1)


@pytest.mark.parametrize(("algorithm", "env_id", "kwargs", "size"), [
    ("ppo", "FrozenLake-v1", {}, 16),  # Discrete(16): one-hot
    ("dqn", "Blackjack-v1", {}, 32 + 11 + 2),  # Tuple of Discretes: their one-hots side by side
    ("ppo", "tests.unit.test_trainer_spaces:Spaced", {"observation": "dict"}, 3 + 3 + 2),  # gear, lights, velocity
])
def test_discrete_dict_and_tuple_observations_are_flattened_as_sb3_reads_them_and_learned_on(algorithm, env_id, kwargs, size,
                                                                                             tmp_path):
    """SB3 one-hots a Discrete observation and its MultiInputPolicy concatenates a Dict's parts (keys sorted); kuberl
    refused all three, so an SB3 user's FrozenLake, Blackjack or Dict env needed a wrapper class of their own."""
    from kuberl_trainer import policy as policies
    from kuberl_trainer.session import BareSession

    if algorithm == "ppo":
        trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=8, hidden_sizes=[8]), env_id, 2, kwargs, 64, seed=1, restart=0)
    else:
        trainer = DQNTrainer(ONE_PROCESS, DQNConfig(learning_starts=8, batch_size=8, hidden_sizes=[8]), env_id, 2, kwargs,
                             64, seed=1, restart=0)
    assert trainer.obs_shape == (size,)
    raw = gym.make(env_id, **kwargs) if ":" not in env_id else Spaced(**kwargs)
    first, _ = raw.reset(seed=trainer.seed)
    np.testing.assert_array_equal(trainer.next_obs[0], gym.spaces.flatten(raw.observation_space, first))
    # one-hot parts alone are kept as bytes, a Dict with a Box part as float32: gymnasium's int64 kept 8 per 0 or 1
    assert trainer.next_obs.dtype == (np.float32 if ":" in env_id else np.uint8)
    if algorithm == "dqn":
        assert trainer.replay.obs.dtype == np.uint8
    assert trainer.train(BareSession()) == "budget"
    played = trainer.evaluate(env_id, 3, kwargs, 5)
    torch.save({**trainer.final_model(), "format": 1, "algorithm": algorithm, "env_id": env_id, "env_kwargs": kwargs,
                "timesteps": trainer.counters.global_step, "eval_return": None}, tmp_path / "final-model.pt")
    model = policies.load_policy(str(tmp_path / "final-model.pt"), env_modules=["tests.unit.test_trainer_spaces"])
    assert model.observation_space.shape == (size,)
    assert policies.env_for(model).observation_space.shape == (size,)  # kuberl eval --video's env reads as the model
    if algorithm == "dqn":  # the same greedy play from the model file as from the trainer
        assert policies.evaluate(model, 3, seed=5).mean() == played
