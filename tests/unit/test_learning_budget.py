"""An off-policy job (DQN, SAC, TD3) whose totalTimesteps end before its first gradient step: each rank first takes
learningStarts transitions (and a batch's worth), so a TD3 job of 2,000 timesteps with TD3's default learningStarts
(25,000) acted at random throughout, succeeded, and wrote its initial weights as its model; `kuberl validate` and
`kuberl run` said nothing. They warn now, naming the field (rules.learning_budget_warning)."""

from __future__ import annotations

import pytest
import yaml
from kuberl import cli

from tests.support.jobs import make_job


def validate(tmp_path, capsys, job):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job.obj()))
    return cli.main(["validate", str(path)]), capsys.readouterr().err


@pytest.mark.parametrize(("algorithm", "env", "block", "total", "workers", "words"), [
    ("td3", "Pendulum-v1", {}, 2000, 1, ("spec.td3.learningStarts: 25,000 transitions per rank come before the first"
                                         " gradient step, and totalTimesteps 2,000 over world size 1 gives each rank 2,000")),
    ("sac", "Pendulum-v1", {"learningStarts": 100, "batchSize": 600, "bufferSize": 1000}, 1000, 2,
     ("spec.sac.batchSize: 600 transitions per rank come before the first gradient step, and totalTimesteps 1,000 over"
     " world size 2 gives each rank 500")),
    ("dqn", "CartPole-v1", {"learningStarts": 500, "bufferSize": 1000}, 500, 1, "spec.dqn.learningStarts: 500 transitions"),
])
def test_validate_warns_of_a_budget_that_ends_before_learning_and_still_says_valid(tmp_path, capsys, algorithm, env, block,
                                                                                   total, workers, words):
    job = make_job("j").minimal().algorithm(algorithm, **block).env(env).replace(totalTimesteps=total, workers=workers)
    code, err = validate(tmp_path, capsys, job)
    assert code == 0 and f"j: warning: {words}" in err, err
    assert "the run would end without learning (its model its initial weights)" in err


@pytest.mark.parametrize(("algorithm", "env", "block", "total"), [
    ("td3", "Pendulum-v1", {"learningStarts": 1000}, 2000),
    ("dqn", "CartPole-v1", {"learningStarts": 499, "bufferSize": 1000}, 500),  # one update learns
    ("ppo", "CartPole-v1", {}, 64),  # on-policy: every update learns
])
def test_validate_says_nothing_where_the_budget_reaches_a_gradient_step(tmp_path, capsys, algorithm, env, block, total):
    job = make_job("j").minimal().algorithm(algorithm, **block).env(env).replace(totalTimesteps=total)
    code, err = validate(tmp_path, capsys, job)
    assert code == 0 and "without learning" not in err, err


def test_run_warns_the_same_before_anything_starts_naming_the_flag_that_set_it(tmp_path, capsys):
    """`runPolicy.suspend: true` stops the run (exit 3) before a run directory: the warning came before it."""
    path = tmp_path / "job.yaml"
    job = make_job("j").minimal().algorithm("td3").env("Pendulum-v1").replace(totalTimesteps=100_000, runPolicy={"suspend": True})
    path.write_text(yaml.safe_dump(job.obj()))
    code = cli.main(["run", str(path), "--dir", str(tmp_path / "runs"), "--set", "totalTimesteps=3000"])
    out = capsys.readouterr()
    assert code == 3 and not (tmp_path / "runs").exists()
    assert ("warning: spec.td3.learningStarts: 25,000 transitions per rank come before the first gradient step, and"
            " totalTimesteps 3,000 over world size 1") in out.out + out.err, out


def test_a_td3_budget_whose_critic_steps_never_reach_policy_delay_is_warned_of(tmp_path, capsys):
    """policyDelay 1000 (its schema's bound) with a budget of a few hundred critic steps: the actor, TD3's model, never
    stepped, and the run succeeded with it as initialised."""
    block = {"learningStarts": 100, "batchSize": 32, "bufferSize": 1000, "policyDelay": 1000, "gradientSteps": 1,
             "trainFrequency": 1}
    job = make_job("j").minimal().algorithm("td3", **block).replace(env={"id": "Pendulum-v1", "numEnvs": 1}, totalTimesteps=1100)
    code, err = validate(tmp_path, capsys, job)
    assert code == 0 and "policyDelay" not in err, err  # 1,001 critic steps at most: the actor may step once
    code, err = validate(tmp_path, capsys, job.replace(totalTimesteps=1000))
    assert code == 0 and ("j: warning: spec.td3.policyDelay: the actor steps once every 1,000 critic steps, and the run"
                          " takes at most 901 (per rank, after learningStarts): it would end with its actor") in err, err
