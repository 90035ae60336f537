"""`kuberl validate` makes a registered gymnasium id here, as the trainer makes it, and names what the trainer
would refuse at start: kwargs the env refuses (spec.env.kwargs), spaces the algorithm cannot learn on
(spec.env.id). It said "valid", and the job failed with ConfigError once its pods ran. Without torch, in
milliseconds; an env whose package is missing here, an Atari id and a "module:Class" are left to the trainer."""

import pytest
import yaml
from kuberl import cli
from kuberl.core import envspaces, installhint

from tests.support.cputime import cpu_seconds
from tests.support.jobs import make_job


def validate(tmp_path, capsys, job):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.obj()))
    code = cli.main(["validate", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("algorithm", "env", "line"), [
    ("dqn", {"id": "MountainCarContinuous-v0"},
     ("spec.env.id: 'MountainCarContinuous-v0' has action space Box(-1.0, 1.0, (1,), float32); supported by this"
     " algorithm: Discrete (numbered from 0) actions")),
    ("sac", {"id": "CartPole-v1"},
     "spec.env.id: 'CartPole-v1' has action space Discrete(2); supported by this algorithm: float Box actions"),
    ("td3", {"id": "CartPole-v1"},
     "spec.env.id: 'CartPole-v1' has action space Discrete(2); supported by this algorithm: float Box actions"),
    ("sac", {"id": "ALE/Pong-v5"},  # not made here (kuberl makes Atari's frames), its actions Discrete all the same
     "spec.env.id: 'ALE/Pong-v5' has Discrete actions (Atari); supported by this algorithm: float Box actions"),
    ("ppo", {"id": "CartPole-v1", "kwargs": {"gravity": 3}},
     ("spec.env.kwargs: 'CartPole-v1' refused them: TypeError: CartPoleVectorEnv.__init__() got an unexpected keyword"
     " argument 'gravity'")),
    ("ppo", {"id": "FrozenLake-v1", "kwargs": {"map_name": "5x5"}},
     "spec.env.kwargs: 'FrozenLake-v1' refused them: KeyError: '5x5'"),
    # a misspelt keyword is named with the one meant, gym.make's own or the env's (it named neither)
    ("ppo", {"id": "CartPole-v1", "kwargs": {"max_episode_step": 100}},
     ("spec.env.kwargs: 'CartPole-v1' refused them: TypeError: CartPoleVectorEnv.__init__() got an unexpected keyword"
     " argument 'max_episode_step'; did you mean 'max_episode_steps'?")),
    ("ppo", {"id": "MountainCarContinuous-v0", "kwargs": {"goal_velocty": 0.1}},
     ("spec.env.kwargs: 'MountainCarContinuous-v0' refused them: TypeError: Continuous_MountainCarEnv.__init__() got an"
     " unexpected keyword argument 'goal_velocty' was raised from the environment creator for MountainCarContinuous-v0"
     " with kwargs ({'goal_velocty': 0.1}); did you mean 'goal_velocity'?")),
])
def test_validate_names_what_the_trainer_would_refuse_at_start(tmp_path, capsys, algorithm, env, line):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().algorithm(algorithm).replace(env=env))
    assert code == 1 and f"  {line}\n" in err, err


@pytest.mark.parametrize(("algorithm", "env"), [
    ("dqn", {"id": "FrozenLake-v1", "kwargs": {"is_slippery": False}}),  # Discrete observations: flattened
    ("ppo", {"id": "Pendulum-v1", "kwargs": {"g": 9.81}}),
    ("sac", {"id": "Pendulum-v1"}),
    ("td3", {"id": "Pendulum-v1"}),
    ("ppo", {"id": "CartPole-v1", "kwargs": {"sutton_barto_reward": True}}),  # the native vector env's kwargs
    ("dqn", {"id": "HalfCheetah-v2"}),  # registered, its package missing here: the trainer's image may have it
    ("ppo", {"id": "tests.unit.test_trainer_spaces:Spaced", "kwargs": {"action": "multidiscrete"}}),  # user code: not run
])
def test_what_the_trainer_accepts_or_only_its_image_can_tell_is_valid(tmp_path, capsys, algorithm, env):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().algorithm(algorithm).replace(env=env))
    assert code == 0, err


def test_the_rules_are_the_trainers_own():
    """One table: each algorithm's trainer refuses by the very row validate reads."""
    from kuberl_trainer import __main__ as main

    assert {name: entry.make.ACTION_SPACES for name, entry in main.ALGORITHMS.items()} == envspaces.ACTION_SPACES


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCarContinuous-v0", "FrozenLake-v1", "Blackjack-v1"])
def test_making_a_classic_env_to_check_it_takes_milliseconds(env_id):
    envspaces.env_problem(env_id, {}, "ppo")  # gymnasium's first make imports the env's module
    # A speed the docstring promises, not a pathological cost: 0.5-1.6 ms of CPU a make with two CPU burners running
    # (the trainer's torch import would be seconds); 50 ms leaves 30 times that.
    problems, seconds = cpu_seconds(lambda: [envspaces.env_problem(env_id, {}, "ppo") for _ in range(10)])
    assert problems == [None] * 10 and seconds / 10 < 0.05, seconds


def test_kwargs_that_make_the_env_costly_are_left_to_the_trainer_not_made_here(monkeypatch):
    """FrozenLake builds its transition table from a `desc` map: a 1 MB map (a valid job, within the trainer's
    ConfigMap) held `kuberl validate` 76 s and 2 GB, a file read by a command that runs nothing of the job's.
    Kwargs larger than envspaces.MAX_MADE_KWARGS_BYTES are not made here (the trainer still refuses them): the envs
    made are counted, not timed (a timed bound fails on a loaded CI machine)."""
    side = 200  # a 40 KB map: made, it took 3 s and 80 MB here
    desc = ["S" + "F" * (side - 1)] + ["F" * side] * (side - 2) + ["F" * (side - 1) + "G"]
    made, make_vec = [], envspaces.gym.make_vec
    monkeypatch.setattr(envspaces.gym, "make_vec", lambda env_id, **kwargs: made.append(kwargs) or make_vec(env_id, **kwargs))
    assert envspaces.env_problem("FrozenLake-v1", {"desc": desc}, "ppo") is None
    assert made == []
    assert envspaces.env_problem("FrozenLake-v1", {"desc": ["SG", "F"]}, "ppo") is not None  # small ones still are
    assert [kwargs["desc"] for kwargs in made] == [["SG", "F"]]


def test_run_refuses_such_a_job_as_validate_does_before_any_run_directory_or_pod(tmp_path, capsys):
    """`kuberl run` made a run directory and started the pods, whose trainer ended in a ConfigError."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().algorithm("dqn").replace(env={"id": "Pendulum-v1"}).obj()))
    assert cli.main(["run", str(path), "--dir", str(tmp_path / "runs")]) == 1
    assert "  spec.env.id: 'Pendulum-v1' has action space Box(-2.0, 2.0, (1,), float32)" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("env", "line"), [
    ({"id": "ALE/Pong-v5", "kwargs": {"protocol": "sb3"}},
     "spec.env.kwargs.protocol: expected one of 'modern', 'nature' (got 'sb3')"),
    ({"id": "ALE/Pong-v5", "kwargs": {"frameskip": 1}},
     "spec.env.kwargs.frameskip: set by the protocol ('modern'); choose the protocol instead"),
    ({"id": "ALE/Breakout-v5", "kwargs": {"frameStack": 0}}, "spec.env.kwargs.frameStack: expected an integer from 1 to 16 (got 0)"),
    ({"id": "ALE/Pong-v5", "kwargs": {"protocol": ["nature"]}},  # a list is no key of the protocols' dict: TypeError
     "spec.env.kwargs.protocol: expected one of 'modern', 'nature' (got ['nature'])"),
    ({"id": "ALE/Pong-v5", "kwargs": {"mode": 1}},
     "spec.env.kwargs.mode: not an option of backend ale (gymnasium.make's keys need backend: gymnasium)"),
    ({"id": "ALE/Pong-v5", "backend": "envpool", "kwargs": {"noop_max": 30}},
     "spec.env.kwargs.noop_max: not an option of backend envpool"),
])
def test_validate_names_the_atari_kwargs_the_trainer_refuses_at_start(tmp_path, capsys, env, line):
    """kuberl's own Atari keys (protocol, frameStack, …) and the keys its ALE and EnvPool backends cannot take: read
    without an emulator. validate said valid, and the pods (GPU pods, for the Pong examples) ended in a ConfigError."""
    code, err = validate(tmp_path, capsys, make_job("j").minimal().algorithm("ppo").replace(env=env))
    assert code == 1 and f"  {line}\n" in err, err


@pytest.mark.parametrize("env", [
    {"id": "ALE/Pong-v5", "kwargs": {"protocol": "nature", "frameStack": 4, "noopMax": 0, "episodicLife": True}},
    {"id": "ALE/Pong-v5", "backend": "gymnasium", "kwargs": {"mode": 1}},  # gymnasium.make's key: the emulator's to tell
])
def test_atari_kwargs_the_trainer_takes_are_valid(tmp_path, capsys, env):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().algorithm("ppo").replace(env=env))
    assert code == 0, err


def test_the_operator_refuses_an_ale_ids_kwargs_at_their_field_without_gymnasium():
    """The operator's image has no gymnasium (nor ale-py), and its judge read no kwargs: the job was admitted, its
    pods (a GPU node's, for Pong) were scheduled and started, and the trainer ended them in a ConfigError."""
    from kuberl.core import jobstatus, lifecycle

    job = make_job("j").minimal().algorithm("ppo").replace(env={"id": "ALE/Pong-v5", "kwargs": {"protocol": "sb3"}}).obj()
    spec, refusal = jobstatus.judge(job)
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC
    assert refusal.message == "spec.env.kwargs.protocol: expected one of 'modern', 'nature' (got 'sb3')"
    fine = make_job("j").minimal().algorithm("ppo").replace(env={"id": "ALE/Pong-v5", "kwargs": {"protocol": "nature"}}).obj()
    assert jobstatus.judge(fine)[1] is None


def test_an_atari_id_ale_py_registers_is_valid_where_ale_py_is_installed(tmp_path):
    """The trainer registers ale-py's ids (PongNoFrameskip-v4, the Nature papers' spelling) before it reads one;
    validate and run checked spec.env.id against gymnasium's own registry, and refused it as not registered. In a
    process of its own: this one's tests have imported ale-py already."""
    import subprocess
    import sys

    pytest.importorskip("ale_py")
    for kwargs, code, line in [({"protocol": "nature"}, 0, ""),
                               ({"protocol": "x"}, 1, "  spec.env.kwargs.protocol: expected one of 'modern', 'nature' (got 'x')\n")]:
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(make_job("j").minimal().algorithm("ppo").replace(
            env={"id": "PongNoFrameskip-v4", "kwargs": kwargs}).obj()))
        done = subprocess.run([sys.executable, "-m", "kuberl.cli", "validate", str(path)], check=False, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == code and line in done.stderr, done.stderr


@pytest.mark.parametrize(("algorithm", "env", "options", "line"), [
    ("ppo", {"id": "CartPole-v1"}, {"policy": "cnn"},
     "spec.ppo.policy: 'cnn' needs uint8 image observations (H, W), (C, H, W) or (H, W, C), at least 36x36; the env gives"),
    ("dqn", {"id": "FrozenLake-v1"}, {"policy": "cnn"}, "spec.dqn.policy: 'cnn' needs uint8 image observations"),
    ("ppo", {"id": "ALE/Pong-v5"}, {"policy": "mlp"},
     "spec.ppo.policy: 'mlp' cannot learn from (4, 84, 84) pixel observations; use 'cnn' or 'auto'"),
    ("dqn", {"id": "ALE/Breakout-v5", "kwargs": {"frameStack": 2}}, {"policy": "mlp"},
     "spec.dqn.policy: 'mlp' cannot learn from (2, 84, 84) pixel observations; use 'cnn' or 'auto'"),
    ("ppo", {"id": "ALE/Pong-v5"}, {"normalizeObservation": True},
     "spec.ppo.normalizeObservation: not for pixels (the CNN scales uint8 frames by 1/255)"),
])
def test_validate_names_a_network_the_envs_observations_refuse(tmp_path, capsys, algorithm, env, options, line):
    """A forced torso that cannot read the env's observations (or PPO's normaliser on frames) passed validate, and
    the trainer refused it with a ConfigError once the pods (GPU pods, for Atari) ran."""
    job = make_job("j").minimal().algorithm(algorithm).replace(env=env).with_spec(**{algorithm: options})
    code, err = validate(tmp_path, capsys, job)
    assert code == 1 and f"  {line}" in err, err


@pytest.mark.parametrize(("algorithm", "env", "options"), [
    ("ppo", {"id": "CartPole-v1"}, {"policy": "mlp", "normalizeObservation": True}),
    ("dqn", {"id": "ALE/Pong-v5"}, {"policy": "cnn"}),
    ("ppo", {"id": "ALE/Pong-v5", "backend": "gymnasium", "kwargs": {"obs_type": "ram"}}, {"policy": "mlp"}),  # 128 bytes
])
def test_a_network_that_reads_the_observations_is_valid(tmp_path, capsys, algorithm, env, options):
    job = make_job("j").minimal().algorithm(algorithm).replace(env=env).with_spec(**{algorithm: options})
    code, err = validate(tmp_path, capsys, job)
    assert code == 0, err


def test_the_operator_refuses_an_mlp_on_an_ale_ids_frames_without_gymnasium():
    from kuberl.core import jobstatus

    job = make_job("j").minimal().algorithm("dqn").replace(env={"id": "ALE/Pong-v5"}).with_spec(dqn={"policy": "mlp"}).obj()
    spec, refusal = jobstatus.judge(job)
    assert spec is None and refusal.message == "spec.dqn.policy: 'mlp' cannot learn from (4, 84, 84) pixel observations; use 'cnn' or 'auto'"


def test_validate_and_the_trainer_refuse_a_torso_in_the_same_words():
    import gymnasium as gym
    import numpy as np
    from kuberl_trainer import networks

    for space, policy in [(gym.spaces.Box(-1, 1, (4,), np.float32), "cnn"), (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), "mlp")]:
        with pytest.raises(networks.PolicyMismatch) as refused:
            networks.choose(space, policy, "spec.ppo.policy")
        problem = envspaces.network_problem(space, "ppo", policy, False)
        assert str(refused.value) == str(problem)


def test_a_misspelt_env_id_is_named_with_the_specs_other_problems(tmp_path, capsys):
    """A job with a typo'd field and a typo'd env id: validate named the field alone, and the env id only once
    the field was fixed, one more round for a user who had been told "every problem"."""
    code, err = validate(tmp_path, capsys, make_job("j").minimal().with_spec(worker=2).replace(env={"id": "Cartpole-v1"}))
    assert code == 1
    assert "spec.worker: unknown field; did you mean 'workers'?" in err, err
    assert "spec.env.id: expected a gymnasium id registered here" in err and "did you mean 'CartPole-v1'?" in err, err


def test_an_install_hint_names_the_pip_of_the_python_that_runs_kuberl():
    """gymnasium's hint for Box2D said `pip install swig` then `pip install "gymnasium[box2d]"`: in the README's flow
    (.venv/bin/kuberl, no venv activated) a bare pip is another Python's, and installed nothing the pods see."""
    said = installhint.with_this_pip('by run `pip install swig` followed by `pip install "gymnasium[box2d]"`', "/home/me/kuberl/.venv/bin/python")
    assert said == ('by run `/home/me/kuberl/.venv/bin/python -m pip install swig` followed by'
                    ' `/home/me/kuberl/.venv/bin/python -m pip install "gymnasium[box2d]"`')
    assert installhint.with_this_pip("pip3 install x", "/a b/python") == "'/a b/python' -m pip install x"  # quoted for a shell
    for kept in ("python -m pip install x", "/usr/bin/pip install x", "mypip install x"):  # a pip already named: as written
        assert installhint.with_this_pip(kept, "/venv/bin/python") == kept


def test_validate_says_an_env_whose_package_is_missing_here_is_not_checked_and_how_to_install_it(tmp_path, capsys):
    pytest.importorskip("gymnasium")
    try:
        import Box2D  # noqa: F401
        pytest.skip("Box2D is installed here: LunarLander is made and checked")
    except ImportError:
        pass
    import sys

    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(env={"id": "LunarLander-v3"}))
    assert code == 0, err  # the trainer's image may have it
    assert ("j: warning: spec.env.id: 'LunarLander-v3' not checked: it needs a package not installed here (kuberl run here"
            " would fail): Box2D is not installed") in err, err
    assert f"`{sys.executable} -m pip install swig`" in err and " `pip install" not in err, err


@pytest.mark.parametrize(("env_id", "line"), [
    # the id their package registers when imported: unknown here, where nothing imports it
    ("Corridor-v0", ("spec.env.id: expected a gymnasium id registered here, or \"module:Class\" (got 'Corridor-v0');"
                     " if your own package registers it when imported, name a function there that returns gymnasium.make of it"
                     " (or the env's class): \"package.module:name\"")),
    # gymnasium.make's own form, which imports the module first: kuberl takes what makes the env
    ("myenvs:Corridor-v0", ("spec.env.id: expected a gymnasium id such as \"CartPole-v1\" or \"ALE/Pong-v5\", or"
                            " \"module:Class\" (a class or function that makes the env, not gymnasium's \"module:Env-v0\")"
                            " (got 'myenvs:Corridor-v0')")),
])
def test_an_env_of_ones_own_named_as_gymnasium_takes_it_is_told_to_name_the_class(tmp_path, capsys, env_id, line):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(env={"id": env_id}))
    assert code == 1 and f"  {line}\n" in err, err
