"""Rank 0 evaluates every success.evalEvery updates whether or not success.targetReturn is set: a run trained for
its totalTimesteps (SB3's EvalCallback, CleanRL's runs) had no eval return in its metrics, progress.jsonl or plots,
and no best-model.pt, because evaluation ran only to decide the early stop. The stop still needs a target.
Through the real trainer and session, on each algorithm's small CartPole or Pendulum job."""

from __future__ import annotations

import os

import pytest
import torch
from kuberl.core import contract
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session
from kuberl_trainer.metrics import TrainerMetrics
from trainer_support import (
    one_process_run,
    progress_rows,
    scored_evaluations,
    small_job,
)

# Updates between evaluations: PPO's updates are 32 steps; DQN's, SAC's and TD3's one vector step of 2 envs, and
# Pendulum's episodes are 200 steps long, so every 2 of theirs evaluated more than it trained
EVERY = {"ppo": 2, "dqn": 64, "sac": 32, "td3": 32}
BUDGET = {"ppo": 640, "dqn": 640, "sac": 256, "td3": 256}  # SAC's and TD3's gradient step at every vector step is the slow part


@pytest.mark.parametrize("updates, every, due", [(1, 1, True), (2, 2, True), (3, 2, False), (9, 10, False), (10, 10, True)])
def test_an_evaluation_is_due_every_eval_every_updates(updates, every, due):
    assert session.evaluation_due(updates, every) is due


@pytest.mark.parametrize("evaluated, target, stops", [(500.0, None, False), (-1e9, None, False), (475.0, 475.0, True),
                                                      (474.9, 475.0, False), (-100.0, -200.0, True)])
def test_only_a_target_that_is_set_and_reached_stops_the_run(evaluated, target, stops):
    assert session.meets_target(evaluated, target) is stops


def untargeted(name: str, tmp_path, monkeypatch, eval_every: int = 2, timesteps: int = 640, **success):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name)
            .with_spec(totalTimesteps=timesteps, workers=1, seed=1,
                       success={"evalEpisodes": 2, "evalEvery": eval_every, **success}, checkpoint={"everyUpdates": 4})
            .spec())
    assert spec.success.target_return is None
    return one_process_run(spec)


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_a_run_without_a_target_evaluates_every_eval_every_updates_and_keeps_the_best(name, tmp_path, monkeypatch):
    trainer, run = untargeted(name, tmp_path, monkeypatch, eval_every=EVERY[name], timesteps=BUDGET[name])
    run.metrics = TrainerMetrics("t", 0, 1)
    scored = scored_evaluations(trainer)
    assert session.run_updates(trainer, run) == "budget"  # no target: never a stop, whatever the returns
    message = run.finish(trainer, "budget")
    updates = trainer.counters.updates
    every = EVERY[name]
    final = [updates] if updates % every else []  # the final weights, when no periodic evaluation scored them
    assert updates >= 2 * every and [u for u, _, _ in scored] == list(range(every, updates + 1, every)) + final
    rows = [row for row in progress_rows(run) if row.get("evaluation")]
    assert [(row["timesteps"], row["eval_return"]) for row in rows] == [(steps, ret) for _, steps, ret in scored]
    best = torch.load(os.path.join(os.path.dirname(run.final_model), "best-model.pt"), weights_only=True)
    assert best["eval_return"] == max(ret for _, _, ret in scored)
    assert run.metrics.eval_return._value.get() == scored[-1][2] and run.metrics.success._value.get() == 0
    assert message.startswith(f"budget of {BUDGET[name]} timesteps spent (timesteps {trainer.counters.global_step}, eval return "
                              f"{session._fmt(scored[-1][2])}); model"), message
    assert progress_rows(run)[-1]["eval_return"] == scored[-1][2]  # what the run's summary line and kuberl plot read


def test_an_untargeted_run_evaluates_while_training_and_waits_for_the_last_at_the_end(tmp_path, monkeypatch):
    trainer, run = untargeted("ppo", tmp_path, monkeypatch, evalWhileTraining=True)
    assert session.run_updates(trainer, run) == "budget"
    run.finish(trainer, "budget")
    rows = [row for row in progress_rows(run) if row.get("evaluation")]
    # each copy's, and the final weights' own where the last copy evaluated was of earlier ones
    assert rows and all(row.get("evaluated_while_training") or row["timesteps"] == trainer.counters.global_step for row in rows)
    assert run.evaluated_at == trainer.counters.updates
    assert run.evaluation_in_flight is None and run.eval_return == rows[-1]["eval_return"]
    assert os.path.isfile(os.path.join(os.path.dirname(run.final_model), "best-model.pt"))


def counted(evaluate, calls: list):
    """`evaluate`, each call appended to `calls`."""
    def evaluate_and_count(*args, **kwargs):
        calls.append(args)
        return evaluate(*args, **kwargs)
    return evaluate_and_count


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_evaluating_often_trains_the_very_weights_of_a_run_that_never_evaluates(name, tmp_path, monkeypatch):
    """An evaluation draws from generators of its own (EVAL_SEED_STREAM, PPO's reseeded actor), never the training
    streams a checkpoint records: were it to draw from torch's or the rank's generator, an untargeted run's now
    periodic evaluations would change what it learns, and a resume would no longer repeat an uninterrupted run."""
    finals = {}
    often = EVERY[name] // 4 or 1
    # one thread for both: PPO's fast path sets it at its first make, after that network's orthogonal init (a QR, whose
    # rounding follows the thread count) ran on every core, so a process's first run started from other weights
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for every in (often, 1_000_000):
            trainer, run = untargeted(name, tmp_path / str(every), monkeypatch, eval_every=every, timesteps=BUDGET[name] * 3 // 5)
            evaluations = []
            trainer.evaluate = counted(trainer.evaluate, evaluations)
            torch.manual_seed(0)  # the process's generator as each run starts: only the evaluations differ
            assert session.run_updates(trainer, run) == "budget"
            assert len(evaluations) == trainer.counters.updates // every >= (4 if every == often else 0)
            finals[every] = (trainer.counters.global_step, {k: t.clone() for k, t in trainer.agent.state_dict().items()},
                             torch.get_rng_state())
    finally:
        torch.set_num_threads(threads)
    (steps, weights, rng), (steps_quiet, weights_quiet, rng_quiet) = finals[often], finals[1_000_000]
    assert steps == steps_quiet and torch.equal(rng, rng_quiet)
    for key, tensor in weights_quiet.items():
        assert torch.equal(weights[key], tensor), key
