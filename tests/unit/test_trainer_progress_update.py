"""progress.jsonl records each update's losses and learning rate (`update`), and `kuberl plot` draws them under the
returns: a local run (no Prometheus) showed its returns only, where CleanRL's and SB3's TensorBoard logs show the
policy and value losses, entropy, approximate KL and clip fraction a person reads to see why a run does not learn.
Through the real trainer and session, on each algorithm's small CartPole or Pendulum job."""

from __future__ import annotations

import math

import pytest
from kuberl.core import contract
from kuberl.local.curves import UPDATE_STATISTICS, update_names, update_points
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session
from trainer_support import one_process_run, progress_rows, small_job

EVERY = {"ppo": 2, "dqn": 64, "sac": 32, "td3": 32}
BUDGET = {"ppo": 640, "dqn": 640, "sac": 256, "td3": 256}


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_each_evaluation_row_carries_the_statistics_of_the_update_before_it(name, tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name).with_spec(totalTimesteps=BUDGET[name], workers=1, seed=1,
                                      success={"evalEpisodes": 1, "evalEvery": EVERY[name]}).spec())
    trainer, run = one_process_run(spec)
    reports, after_update = {}, run.after_update

    def recorded(report, algorithm):
        reports[report.counters.global_step] = session.update_statistics(report)
        return after_update(report, algorithm)

    run.after_update = recorded
    assert session.run_updates(trainer, run) == "budget"
    run.finish(trainer, "budget")
    evaluated = [row for row in progress_rows(run) if row.get("evaluation")]
    assert len(evaluated) >= 2
    for row in evaluated:
        assert row["update"] == reports[row["timesteps"]]
    statistics = set(evaluated[-1]["update"])
    assert "learning_rate" in statistics and statistics <= set(UPDATE_STATISTICS)  # every one kuberl plot can draw
    assert {"ppo": "approx_kl", "dqn": "q_value", "sac": "entropy_coefficient", "td3": "policy_loss"}[name] in statistics
    assert all("update" not in row for row in progress_rows(run) if row.get("checkpoint"))  # no row twice


def test_a_resumed_row_and_an_evaluation_while_training_carry_no_statistics(tmp_path, monkeypatch):
    """A resumed row is at the checkpoint's timesteps before any update of its generation; an evaluation while
    training is recorded at the timesteps of an older copy than the update just made."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = small_job("ppo").with_spec(totalTimesteps=640, workers=1, seed=1, checkpoint={"everyUpdates": 4},
                                      success={"evalEpisodes": 1, "evalEvery": 2, "evalWhileTraining": True}).spec()
    trainer, run = one_process_run(spec)
    assert session.run_updates(trainer, run) == "budget"
    run.finish(trainer, "budget")
    more = spec.model_copy(update={"total_timesteps": 1280})
    trainer, run = one_process_run(more, restart=1)
    assert session.run_updates(trainer, run) == "budget"  # resumed from the first generation's final checkpoint
    rows = progress_rows(run)
    assert [row for row in rows if row.get("resumed")] and all("update" not in row for row in rows if row.get("resumed"))
    assert all("update" not in row for row in rows if row.get("evaluated_while_training"))


def test_statistics_are_rounded_and_one_that_diverged_is_null():
    report = session.UpdateReport(counters=session.Counters(), local_steps=1, episode_return_sum=0.0,
                                  episode_return_count=0, learning_rate=0.000250000001,
                                  losses={"policy_loss": -0.0123456789, "value_loss": math.nan, "entropy": math.inf},
                                  rollout_seconds=0.0, update_seconds=0.0, allreduce_seconds=0.0, epochs_run=1)
    assert session.update_statistics(report) == {"policy_loss": -0.0123457, "value_loss": None, "entropy": None,
                                                  "learning_rate": 0.00025}


def test_kuberl_plot_draws_the_statistics_it_knows_in_order_and_nothing_a_foreign_file_adds():
    rows = [{"timesteps": 200, "restart": 0, "update": {"value_loss": 2.0, "learning_rate": 1e-3, "mine": 1}},
            {"timesteps": 100, "restart": 0, "update": {"value_loss": 3.0, "policy_loss": "high"}},
            {"timesteps": 300, "restart": 0, "update": ["not", "a", "map"]},
            {"timesteps": 400, "restart": 0}]
    assert update_names([rows]) == ["value_loss", "learning_rate"]  # a string where a number goes: no panel of its own
    paced = [*rows, {"timesteps": 500, "restart": 0, "steps_per_second": 1e4}, {"timesteps": 250, "steps_per_second": "x"}]
    assert update_names([paced]) == ["value_loss", "learning_rate", "steps_per_second"]
    assert update_points(paced, "steps_per_second") == [(500, 1e4)]
    assert update_names([[{"timesteps": 1, "steps_per_second": 1e4}]]) == []  # an older file's rows: the returns alone
    assert update_points(rows, "value_loss") == [(100, 3.0), (200, 2.0)]
    assert update_points(rows, "policy_loss") == []
    assert update_names([[{"update": {f"k{i}": 1 for i in range(10_000)}}]]) == []
