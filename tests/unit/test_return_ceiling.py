"""A success.targetReturn above what the env can ever return is warned of by `kuberl validate` and `kuberl run`,
naming the field, the value and the ceiling: a new user who put Acrobot-v1 into the CartPole example (target 475,
Acrobot's returns never positive) trained all 500,000 timesteps, 64 s, for a stop that could not come. A warning,
not a refusal: a "module:Class" env or a reward wrapper of the user's own returns other things."""

import gymnasium as gym
import pytest
import yaml
from kuberl import cli
from kuberl.core.returnceiling import REWARDS, Ceiling, return_ceiling, target_problem

from tests.support.jobs import make_job

CARTPOLE = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
ACROBOT = "gymnasium.envs.classic_control.acrobot:AcrobotEnv"


@pytest.mark.parametrize(("entry_point", "steps", "kwargs", "ceiling"), [
    (CARTPOLE, 500, {}, 500.0),
    (CARTPOLE, 200, {}, 200.0),  # CartPole-v0
    (CARTPOLE, 500, {"max_episode_steps": 1000}, 1000.0),  # gym.make's own kwarg replaces the registered limit
    (CARTPOLE, None, {}, None),  # no step limit: +1 a step adds up without end
    (CARTPOLE, 500, {"max_episode_steps": None}, None),
    (CARTPOLE, 500, {"max_episode_steps": "500"}, None),  # the env refuses it; no ceiling claimed from it
    (CARTPOLE, 500, {"max_episode_steps": True}, None),
    (CARTPOLE, 500, {"sutton_barto_reward": True}, None),  # its rewards change: not claimed
    (ACROBOT, 500, {}, 0.0),
    (ACROBOT, 500, {"max_episode_steps": 10**6}, 0.0),  # never positive, however long
    ("gymnasium.envs.toy_text.blackjack:BlackjackEnv", None, {}, 1.0),
    ("gymnasium.envs.toy_text.blackjack:BlackjackEnv", None, {"natural": True}, None),  # 1.5 for a natural
    ("gymnasium.envs.toy_text.frozen_lake:FrozenLakeEnv", 100, {"reward_schedule": (5, 0, 0)}, None),
    ("gymnasium.envs.box2d.lunar_lander:LunarLander", 1000, {}, None),  # not known here
    ("myenvs:Corridor", 100, {}, None),
])
def test_the_ceiling_of_an_entry_point_with_its_step_limit_and_kwargs(entry_point, steps, kwargs, ceiling):
    found = return_ceiling(entry_point, steps, kwargs)
    assert (found.value if found else None) == ceiling


@pytest.mark.parametrize(("target", "warned"), [(None, False), (-100, False), (500, False), (500.5, True), (600, True)])
def test_a_target_is_warned_of_only_above_the_ceiling(target, warned):
    """The trainer stops at an eval return >= target: 500 on CartPole-v1 can be met (every episode to its limit)."""
    ceiling = Ceiling(500.0, "+1 a step for at most 500 steps, its registered max_episode_steps", per_step=True)
    assert (target_problem(target, "CartPole-v1", ceiling) is not None) == warned
    assert target_problem(target, "CartPole-v1", None) is None  # an env whose rewards are not known: nothing said


def test_the_warning_names_the_field_the_value_and_the_ceiling():
    acrobot = target_problem(475, "Acrobot-v1", return_ceiling(ACROBOT, 500, {}))
    assert str(acrobot) == (
        "spec.success.targetReturn: 475 is above the most an episode of Acrobot-v1 returns, 0 (-1 a step, 0 at the goal:"
        " never positive): no evaluation reaches it, so the run never stops early and trains all of"
        " spec.totalTimesteps; lower it")
    v0 = target_problem(475, "CartPole-v0", return_ceiling(CARTPOLE, 200, {}))
    assert str(v0).endswith("returns, 200 (+1 a step for at most 200 steps, its registered max_episode_steps): no"
                            " evaluation reaches it, so the run never stops early and trains all of spec.totalTimesteps;"
                            " lower it, or raise spec.env.kwargs.max_episode_steps")


@pytest.mark.parametrize("entry_point", sorted(REWARDS))
def test_each_row_is_an_entry_point_of_gymnasiums_registry_here(entry_point):
    """A row whose entry point gymnasium renamed would silently warn of nothing."""
    assert entry_point in {spec.entry_point for spec in gym.registry.values()}


@pytest.mark.parametrize("entry_point", sorted(REWARDS))
def test_no_episode_played_returns_more_than_its_rows_ceiling(entry_point):
    """The rows are read from each env's step(); random play, and for CartPole the longest balance there is
    (its step limit reached), must stay within them."""
    env_id = next(i for i, spec in sorted(gym.registry.items()) if spec.entry_point == entry_point
                  and not spec.kwargs.get("natural"))
    registered = gym.registry[env_id]
    ceiling = return_ceiling(entry_point, registered.max_episode_steps, {})
    env = gym.make(env_id, max_episode_steps=registered.max_episode_steps or 300)
    env.action_space.seed(0)
    for episode in range(5):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        assert total <= ceiling.value, (env_id, total)
    env.close()


def test_cartpole_held_up_to_its_limit_returns_its_ceiling_exactly():
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    total, done = 0.0, False
    while not done:  # a balancing controller: push toward the pole's lean
        angle, velocity = env.unwrapped.state[2], env.unwrapped.state[3]
        _, reward, terminated, truncated, _ = env.step(int(angle + 0.5 * velocity > 0))
        total, done = total + float(reward), terminated or truncated
    assert not terminated and total == return_ceiling(CARTPOLE, 500, {}).value


def validate(tmp_path, capsys, job):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.obj()))
    return cli.main(["validate", str(path)]), capsys.readouterr().err


def test_validate_warns_of_the_examples_target_on_acrobot_and_still_says_valid(tmp_path, capsys):
    job = make_job("j").minimal().env("Acrobot-v1").replace(success={"targetReturn": 475})
    code, err = validate(tmp_path, capsys, job)
    assert code == 0
    assert "j: warning: spec.success.targetReturn: 475 is above the most an episode of Acrobot-v1 returns, 0 (" in err


@pytest.mark.parametrize("env", [
    {"id": "CartPole-v1", "kwargs": {"max_episode_steps": 1000}},  # its limit raised: 600 can be met
    {"id": "CartPole-v1", "kwargs": {"sutton_barto_reward": True}},
    {"id": "tests.unit.test_trainer_spaces:Spaced"},  # the user's own env: its returns are not known here
])
def test_validate_says_nothing_where_the_target_can_be_met_or_the_ceiling_is_not_known(tmp_path, capsys, env):
    code, err = validate(tmp_path, capsys, make_job("j").minimal().replace(env=env, success={"targetReturn": 600}))
    assert code == 0 and "targetReturn" not in err, err


def test_run_warns_the_same_before_anything_starts_naming_the_flag_that_set_it(tmp_path, capsys):
    """`runPolicy.suspend: true` stops the run (exit 3) before a run directory: the warning came before it."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("j").minimal().replace(runPolicy={"suspend": True}).obj()))
    code = cli.main(["run", str(path), "--dir", str(tmp_path / "runs"), "--set", "success.targetReturn=600"])
    out = capsys.readouterr()
    assert code == 3 and not (tmp_path / "runs").exists()
    assert ("warning: spec.success.targetReturn: 600 is above the most an episode of CartPole-v1 returns, 500 (+1 a step"
            " for at most 500 steps, its registered max_episode_steps)") in out.out + out.err
    assert "lower it, or raise spec.env.kwargs.max_episode_steps (from --set success.targetReturn=600)" in out.out + out.err


@pytest.mark.parametrize(("env_id", "kwargs", "ceiling"), [
    ("ALE/Pong-v5", {}, 21.0),
    ("PongNoFrameskip-v4", {}, 21.0),
    ("ALE/Pong-v5", {"game": "breakout"}, None),  # spec.env.kwargs make another game: not claimed
    ("ALE/Breakout-v5", {}, None),  # no bound this exact
])
def test_pongs_ceiling_comes_from_the_game_its_registration_names(env_id, kwargs, ceiling):
    """ALE registers every game at one entry point: the game is a kwarg of its registration."""
    gym.register_envs(pytest.importorskip("ale_py"))
    registered = gym.spec(env_id)
    got = return_ceiling(registered.entry_point, registered.max_episode_steps, kwargs, registered.kwargs)
    assert (got and got.value) == ceiling


@pytest.mark.parametrize(("target", "warned"), [(21, False), (21.5, True)])
def test_validate_warns_of_a_pong_target_above_21(tmp_path, capsys, target, warned):
    pytest.importorskip("ale_py")
    job = make_job("j").minimal().env("ALE/Pong-v5").replace(success={"targetReturn": target})
    code, err = validate(tmp_path, capsys, job)
    assert code == 0, err
    assert ("j: warning: spec.success.targetReturn: 21.5 is above the most an episode of ALE/Pong-v5 returns, 21 (+1 a"
            " point won, -1 a point lost, the game over at 21 points)" in err) == warned, err
