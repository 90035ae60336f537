"""What a spec asks the trainer for and can never get fails at once naming its
fields (a ConfigError, never retried): a rollout or replay buffer that cannot
fit the rank's memory (weighed before it is allocated, instead of being
OOM-killed once it fills and restarted), an env the image cannot make."""

import numpy as np
import pytest
import torch
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import budget
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer, Rollout

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
GIB = 1 << 30


@pytest.mark.parametrize("layout", [
    (32, 8, (4,), (), True, np.float32),
    (128, 3, (4, 84, 84), (), True, np.uint8),
    (16, 2, (3,), (1,), False, np.float32),
])
def test_a_rollouts_planned_bytes_are_what_it_allocates(layout):
    rollout = Rollout(*layout)
    allocated = sum(getattr(rollout, name).nbytes for name in Rollout.layout(*layout))
    assert budget.nbytes(Rollout.layout(*layout)) == allocated
    assert {name for name, value in vars(rollout).items() if isinstance(value, np.ndarray)} == set(Rollout.layout(*layout))


def test_a_ranks_share_is_the_limit_split_among_the_pods_ranks_less_what_it_holds():
    limit, resident = 8 * GIB, GIB // 2
    assert budget.rank_share(4, limit, resident)[0] == 2 * GIB - GIB // 2
    budget.check_fits("spec.dqn.bufferSize", "a replay buffer", int(1.4 * GIB), 4, limit, resident)
    with pytest.raises(budget.BufferTooLarge) as refused:
        budget.check_fits("spec.dqn.bufferSize", "a replay buffer", int(1.6 * GIB), 4, limit, resident)
    assert str(refused.value) == (
        "spec.dqn.bufferSize: a replay buffer takes 1.6 GiB per rank, more than the 1.5 GiB it may use "
        "(8.0 GiB of memory, the container's limit or else the machine's, shared by the pod's 4 ranks, "
        "less the 0.50 GiB this rank holds already); lower spec.dqn.bufferSize or raise the pod's resources.limits.memory")


def test_a_rollout_over_the_ranks_share_is_refused_before_it_is_allocated(monkeypatch, tmp_path):
    (tmp_path / "memory.max").write_text(f"{2 * GIB}\n")  # the container's cgroup, as Dist.cgroup names it
    eight = Dist(0, 8, 0, 8, torch.device("cpu"), None, cgroup=str(tmp_path))
    allocated = []
    monkeypatch.setattr(Rollout, "__init__", lambda self, *args: allocated.append(args))
    with pytest.raises(budget.BufferTooLarge, match=r"^spec\.ppo\.numSteps x spec\.env\.numEnvs: a rollout of 6,400,000 steps of CartPole-v1 takes 0\.4 GiB") as refused:
        PPOTrainer(eight, PPOConfig(num_steps=100_000), "CartPole-v1", 64, {}, 10**9, 1, 0)
    assert allocated == []
    # either factor may be lowered: the message names the product, not numSteps alone
    assert str(refused.value).endswith("; lower spec.ppo.numSteps x spec.env.numEnvs or raise the pod's resources.limits.memory")
    with pytest.raises(budget.BufferTooLarge, match=r": a rollout of 3,200,000 steps of CartPole-v1, held twice for spec.ppo.learnWhileCollecting, takes 0\.4 GiB"):
        PPOTrainer(eight, PPOConfig(num_steps=50_000, learn_while_collecting=True),
                   "CartPole-v1", 64, {}, 10**9, 1, 0)
    assert allocated == []


def test_buffers_that_fit_are_made_as_before():
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=32), "CartPole-v1", 8, {}, 10**6, 1, 0)
    assert trainer.buf.obs.shape == (32, 8, 4)
    from kuberl_trainer.dqn import DQNTrainer
    trainer = DQNTrainer(ONE_PROCESS, DQNConfig(buffer_size=50_000), "CartPole-v1", 1, {}, 10**6, 1, 0)
    assert trainer.replay.rows == 50_000


# --- envs the spec asks for that cannot be made: ConfigError (UnknownEnv), never a retried crash ---

@pytest.mark.parametrize("env_id, kwargs, expected", [
    ("LunarLander-v3", {}, "spec.env.id: 'LunarLander-v3' needs a package the trainer image lacks: Box2D"),
    ("CartPole-v1", {"wrappers": ["x"]}, "spec.env.kwargs: 'CartPole-v1' refused them: Cannot use `vector_entry_point`"),
    ("CartPole-v1", {"vector_kwargs": {"x": 1}}, "spec.env.kwargs: 'CartPole-v1' refused them: Custom vector environment"),
    ("Acrobot-v1", {"foo": 1}, "spec.env.kwargs: 'Acrobot-v1' refused them: AcrobotEnv.__init__() got an unexpected keyword"),
    ("gymnasium.envs.classic_control:CartPoleEnv", {"foo": 1},
     "spec.env.kwargs: 'gymnasium.envs.classic_control:CartPoleEnv' refused them: CartPoleEnv.__init__() got an unexpected"),
    # refused by the constructor's own checks on the values (kuberl validate said so; the rank crashed, retried)
    ("FrozenLake-v1", {"map_name": "5x5"}, "spec.env.kwargs: 'FrozenLake-v1' refused them: KeyError: '5x5'"),
    ("FrozenLake-v1", {"desc": ["SF", "FFG"]}, "spec.env.kwargs: 'FrozenLake-v1' refused them: ValueError: setting an array"),  # rows unequal
    # a first class of one's own that sets no spaces: gymnasium's checker refuses it, and every restart would too
    # (the rank crashed with a traceback, restarted backoffLimit times and the run ended 'stopped … starts over')
    ("gymnasium:Env", {}, "spec.env.id: 'gymnasium:Env' refused to be made: AttributeError: The environment must specify an action space"),
])
def test_an_env_that_cannot_be_made_names_the_field(env_id, kwargs, expected):
    from kuberl_trainer import envs

    if env_id == "LunarLander-v3":
        try:
            import Box2D  # noqa: F401 — with Box2D installed this env is made, nothing to refuse
            pytest.skip("Box2D is installed here")
        except ImportError:
            pass
    with pytest.raises(envs.UnknownEnv) as refused:
        envs.make_envs(env_id, 2, kwargs)
    assert str(refused.value).startswith(expected), str(refused.value)
    if env_id == "LunarLander-v3":  # gymnasium's hint, with the pip of the Python that runs the trainer (a bare pip is another's)
        import sys

        assert f"`{sys.executable} -m pip install swig`" in str(refused.value) and " `pip install" not in str(refused.value)


@pytest.mark.parametrize("env_id, kwargs, expected", [
    # taken at construction, then the first step compares an int with a str
    ("CartPole-v1", {"max_episode_steps": "x"}, "spec.env.kwargs: 'CartPole-v1' failed its first step: UFuncTypeError"),
    ("Pendulum-v1", {"g": "x"}, "spec.env.kwargs: 'Pendulum-v1' failed its first step: TypeError: unsupported operand"),
])
def test_an_env_that_fails_its_first_step_on_the_specs_values_names_the_field(env_id, kwargs, expected):
    """Made without complaint, these fail at the first step; a restart (same kwargs, same code) would
    fail there again: a ConfigError, not a Crashed rank retried until backoffLimit."""
    from kuberl_trainer import envs

    made = envs.make_envs(env_id, 2, kwargs)
    made.reset(seed=1)
    with pytest.raises(envs.UnknownEnv) as refused:
        made.step(made.action_space.sample())
    assert str(refused.value).startswith(expected), str(refused.value)


def test_a_user_env_failing_its_first_reset_names_the_id_and_other_errors_pass_through(tmp_path, monkeypatch):
    from kuberl_trainer import envs

    (tmp_path / "firstreset.py").write_text(
        "import gymnasium as gym, numpy as np\n"
        "class Bad(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)\n"
        "    action_space = gym.spaces.Discrete(2)\n"
        "    def reset(self, seed=None, options=None):\n"
        "        raise ValueError('needs a map file')\n"
        "class Flaky(Bad):\n"
        "    def reset(self, seed=None, options=None):\n"
        "        raise ConnectionError('simulator not up yet')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(envs.UnknownEnv, match=r"^spec.env.id: 'firstreset:Bad' failed its first reset: ValueError: needs a map file"):
        envs.make_envs("firstreset:Bad", 1).reset(seed=1)
    with pytest.raises(ConnectionError):  # may pass on a retry: stays a crash, retried
        envs.make_envs("firstreset:Flaky", 1).reset(seed=1)


def test_a_user_env_whose_observation_is_not_its_space_says_both_shapes(tmp_path, monkeypatch):
    """A first custom env declaring Box((3,)) and returning 2 numbers failed "ValueError: Output array is the wrong
    shape", numpy's words for the vector env's copy, which named neither shape."""
    from kuberl_trainer import envs

    (tmp_path / "misshapen.py").write_text(
        "import gymnasium as gym, numpy as np\n"
        "class Short(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)\n"
        "    action_space = gym.spaces.Discrete(2)\n"
        "    def reset(self, seed=None, options=None):\n"
        "        return np.zeros(2, np.float32), {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(envs.UnknownEnv) as refused:
        envs.make_envs("misshapen:Short", 2).reset(seed=1)
    assert str(refused.value).startswith("spec.env.id: 'misshapen:Short' failed its first reset: ValueError: "), refused.value
    assert str(refused.value).endswith("(its reset returned an observation of shape (2,); its observation_space is"
                                       " Box(-1.0, 1.0, (3,), float32))"), refused.value


def test_after_its_first_step_an_env_is_unguarded_and_its_state_still_plain_data():
    from kuberl_trainer import envs

    made = envs.make_envs("CartPole-v1", 2)
    assert envs.env_state(made) is not None  # before the first step: the guards are not state
    made.reset(seed=1)
    made.step(made.action_space.sample())
    assert not {"reset", "step"} & set(vars(made))  # the class's own methods again: no cost per step
    with pytest.raises(AssertionError):  # after the first step an error is the env's own, as raised
        made.step(np.array(["x", "y"]))


OLD_GYM_ENVS = (
    "import gymnasium as gym, numpy as np\n"
    "class Space(gym.Env):\n"
    "    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)\n"
    "    action_space = gym.spaces.Discrete(2)\n"
    "class OldReset(Space):\n"
    "    def reset(self, seed=None, options=None):\n"
    "        return np.zeros(2, np.float32)\n"
    "class OldStep(Space):\n"
    "    def reset(self, seed=None, options=None):\n"
    "        return np.zeros(2, np.float32), {}\n"
    "    def step(self, action):\n"
    "        return np.zeros(2, np.float32), 1.0, False, {}\n")


def test_a_user_env_of_gyms_old_api_is_refused_saying_what_gymnasium_returns(tmp_path, monkeypatch):
    """An env written for gym before 0.26 (reset returns the observation, step 4 values) crashed
    "AttributeError: 'numpy.float32' object has no attribute 'items'" at every one of its gang restarts."""
    from kuberl_trainer import envs

    (tmp_path / "oldgym.py").write_text(OLD_GYM_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(envs.UnknownEnv) as refused:
        envs.make_envs("oldgym:OldReset", 2).reset(seed=1)
    assert str(refused.value).startswith("spec.env.id: 'oldgym:OldReset' failed its first reset: AttributeError: ")
    assert str(refused.value).endswith(
        "(its reset returned the observation alone (ndarray), where gymnasium's returns (obs, info): an env written for"
        " gym before 0.26; return (obs, info) from reset)"), refused.value
    made = envs.make_envs("oldgym:OldStep", 2)
    made.reset(seed=1)
    with pytest.raises(envs.UnknownEnv) as refused:
        made.step(made.action_space.sample())
    assert str(refused.value).endswith(
        "(its step returned 4 values, where gymnasium's returns (obs, reward, terminated, truncated, info): an env"
        " written for gym before 0.26; return (obs, reward, terminated, truncated, info) from step)"), refused.value


@pytest.mark.parametrize("algorithm, env_id, block, what, weights", [
    ("td3", "Pendulum-v1", {}, "the actor and twin critics", r"90,\d{3},\d{3},\d{3}"),
    ("sac", "Pendulum-v1", {}, "the actor and twin critics", r"90,\d{3},\d{3},\d{3}"),
    ("ppo", "CartPole-v1", {}, "the actor and critic", r"60,\d{3},\d{3},\d{3}"),
    ("ppo", "CartPole-v1", {"lstm": {"hidden_size": 4096}}, "the actor and critic", r"60,\d{3},\d{3},\d{3}"),
    ("dqn", "CartPole-v1", {"buffer_size": 1000, "learning_starts": 10, "batch_size": 10}, "the Q network", r"30,\d{3},\d{3},\d{3}"),
], ids=["td3", "sac", "ppo", "ppo-lstm", "dqn"])
def test_networks_no_rank_can_hold_are_refused_naming_hidden_sizes_before_they_are_made(monkeypatch, tmp_path, algorithm,
                                                                                        env_id, block, what, weights):
    """hiddenSizes at its bounds (8 layers of 65,536) asks 30 to 90 billion weights of an algorithm's networks: torch
    writes each layer as it makes it, so the kernel killed the rank, and the operator restarted it as a crash, to be
    killed again. Weighed on torch's meta device before any is made, as the buffers are."""
    from kuberl.core.spec import SACConfig, TD3Config
    from kuberl_trainer.dqn import DQNTrainer
    from kuberl_trainer.sac import SACTrainer
    from kuberl_trainer.td3 import TD3Trainer

    (tmp_path / "memory.max").write_text(f"{2 * GIB}\n")
    one = Dist(0, 1, 0, 1, torch.device("cpu"), None, cgroup=str(tmp_path))
    made, make = [], torch.nn.Linear.__init__

    def recorded(self, *args, **kwargs):
        if kwargs.get("device") is None and torch.empty(0).device.type != "meta":  # torch's default device, as set
            made.append(args)
            raise MemoryError("a layer was made")  # never allocated here, whatever the outcome
        make(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Linear, "__init__", recorded)
    trainer, config = {"td3": (TD3Trainer, TD3Config), "sac": (SACTrainer, SACConfig), "ppo": (PPOTrainer, PPOConfig),
                       "dqn": (DQNTrainer, DQNConfig)}[algorithm]
    extra = {} if algorithm in ("ppo", "dqn") else {"buffer_size": 1000, "learning_starts": 10, "batch_size": 10}
    wide = config(hidden_sizes=[65536] * 8, **extra, **block)
    with pytest.raises(budget.BufferTooLarge, match=rf"^spec\.{algorithm}\.hiddenSizes: holding {what} \({weights} weights"
                       r", each with its gradient and Adam's two moments\) takes \d+\.\d GiB per rank"):
        trainer(one, wide, env_id, 1, {}, 10**4, 1, 0)
    assert made == []
