"""The state at a run's end is checkpointed: a CartPole PPO run that met its target at 38,644 timesteps, resumed with a
higher success.targetReturn, went back to its last periodic checkpoint at 30,483. Through the real trainer, on CartPole."""

from __future__ import annotations

import json
import os

import pytest
from kuberl.core import contract
from kuberl_trainer import checkpoint, session
from trainer_support import one_process_run, small_job


def generation(tmp_path, monkeypatch, target: float, every: int, restart: int = 0):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job("ppo")
            .with_spec(totalTimesteps=640, workers=1, seed=1, checkpoint={"everyUpdates": every, "keep": 2},
                       success={"targetReturn": target, "evalEpisodes": 2, "evalEvery": 3})
            .spec())
    return one_process_run(spec, restart=restart)


def newest_steps(run) -> int:
    return checkpoint.load_newest(run.checkpoint_dir)[1]["counters"]["global_step"]


@pytest.mark.parametrize(("target", "every", "outcome"), [
    (1e9, 8, "budget"),  # no periodic checkpoint falls on the last update
    (-1.0, 100, "target"),  # none at all before the end
    (-1.0, 1, "target"),  # one at the update before: the vote's rollout adds steps it did not learn from
])
def test_the_newest_checkpoint_is_at_the_final_step(tmp_path, monkeypatch, target, every, outcome):
    trainer, run = generation(tmp_path, monkeypatch, target, every)
    assert session.run_updates(trainer, run) == outcome
    run.finish(trainer, outcome)
    final = trainer.counters.global_step
    assert newest_steps(run) == final
    assert len(checkpoint.list_checkpoints(run.checkpoint_dir)) <= 2  # spec.checkpoint.keep still rules
    with open(os.path.join(run.checkpoint_dir, "progress.jsonl")) as f:
        saved = [row for row in map(json.loads, f) if row.get("checkpoint")]
    assert saved[-1]["timesteps"] == final  # the run's summary names it (runner.newest_checkpoint)
    # a resume goes on from there; a run that resumes with nothing left to train writes no second copy
    trainer, resumed = generation(tmp_path, monkeypatch, 1e9, every, restart=1)
    files = {p: os.stat(p).st_mtime_ns for p in checkpoint.list_checkpoints(run.checkpoint_dir)}
    if outcome == "budget":
        assert session.run_updates(trainer, resumed) == "budget"
        assert trainer.counters.global_step == final
        resumed.finish(trainer, "budget")
        assert {p: os.stat(p).st_mtime_ns for p in checkpoint.list_checkpoints(run.checkpoint_dir)} == files
    else:
        resumed.load()
        assert resumed.start_step == final
