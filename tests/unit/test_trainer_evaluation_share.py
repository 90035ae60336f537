"""Rank 0's evaluations, every other rank waiting for them, that take most of a run's time are said once, with what
trains faster: the CartPole example with env.id LunarLander-v3 (20 episodes of up to 1,000 steps every 5 updates)
ran 60,000 timesteps in 99 s, against 27 s with success.evalEvery 50, and said nothing of why."""

from __future__ import annotations

import pytest
from kuberl.core import contract
from kuberl_trainer import session
from kuberl_trainer.session import evaluation_share_note
from trainer_support import SMALL_BLOCKS, one_process_run

from tests.support.jobs import make_job


@pytest.mark.parametrize(("eval_seconds", "wall_seconds", "evaluations", "said"), [
    (3.0, 4.0, 3, True),
    (2.0, 4.0, 3, True),  # half
    (1.9, 4.0, 3, False),
    (3.0, 4.0, 2, False),  # too few to tell: the first evaluations of a fresh policy are the short ones
    (0.0, 0.0, 5, False),
])
def test_the_note_is_due_once_evaluation_takes_half_of_the_time(eval_seconds, wall_seconds, evaluations, said):
    assert (evaluation_share_note(eval_seconds, wall_seconds, evaluations, 20, 5) is not None) is said


def test_the_note_says_the_share_each_evaluations_cost_and_the_fields_to_change():
    assert evaluation_share_note(70.0, 99.0, 14, 20, 5) == (
        "evaluation took 71% of rank 0's time so far (5.0 s for each of 14: 20 episode(s) every 5 update(s)), every"
        " rank waiting for it: a larger success.evalEvery, fewer success.evalEpisodes, or success.evalWhileTraining:"
        " true (rank 0 evaluates beside training) trains faster")


def run_logging(tmp_path, monkeypatch, success):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (make_job().algorithm("ppo", **SMALL_BLOCKS["ppo"])
            .with_spec(totalTimesteps=640, workers=1, seed=1, success=success).spec())
    lines: list[str] = []
    trainer, run = one_process_run(spec, log=lines.append)
    assert session.run_updates(trainer, run) == "budget"
    return [line for line in lines if line.startswith("evaluation took")]


def test_a_run_evaluating_more_than_it_trains_says_so_once(tmp_path, monkeypatch):
    """50 CartPole episodes after each update of 32 steps: about 70% of the time here, an untrained policy's episodes."""
    said = run_logging(tmp_path, monkeypatch, {"targetReturn": 1e9, "evalEpisodes": 50, "evalEvery": 1})
    assert len(said) == 1 and said[0].endswith("trains faster"), said


def test_a_run_that_evaluates_little_says_nothing(tmp_path, monkeypatch):
    assert run_logging(tmp_path, monkeypatch, {"targetReturn": 1e9, "evalEpisodes": 1, "evalEvery": 5}) == []
