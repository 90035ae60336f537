"""A run whose budget ends between two evalEvery updates has its final weights evaluated once, by rank 0, at the end:
before, its last eval return, progress.jsonl, kuberl_trainer_eval_return and best-model.pt were those of older weights
than the model the user gets. Through the real trainer and session, on each algorithm's small CartPole or Pendulum job."""

from __future__ import annotations

import os

import pytest
import torch
from kuberl.core import contract
from kuberl_trainer import __main__ as entry
from kuberl_trainer import checkpoint, session
from kuberl_trainer.metrics import TrainerMetrics
from trainer_support import (
    one_process_run,
    progress_rows,
    scored_evaluations,
    small_job,
)

# Budgets as test_trainer_untargeted_evaluation's (PPO 21 updates, DQN 320, SAC and TD3 128), evaluated at an evalEvery that
# does not divide them: the last periodic evaluation is a few updates before the end
BUDGET = {"ppo": 640, "dqn": 640, "sac": 256, "td3": 256}
EVERY = {"ppo": 4, "dqn": 96, "sac": 48, "td3": 48}


@pytest.mark.parametrize("outcome, updates, evaluated_at, started_at, target_met, every, due", [
    ("budget", 20, 18, 0, False, 6, True),  # the budget ended two updates after the last evaluation
    ("budget", 20, None, 0, False, 20, True),  # resumed past the last: none scored this process's weights
    ("budget", 20, None, 0, False, 21, False),  # shorter than evalEvery: evaluation is off
    ("budget", 20, None, 0, False, 10**6, False),
    ("budget", 20, 20, 0, False, 4, False),  # the last update was evaluated already
    ("budget", 20, 18, 20, False, 6, False),  # a resume with nothing left to train: its checkpoint's return stands
    ("budget", 20, 18, 0, True, 6, False),  # a copy evaluated while training met the target: that copy is the model
    ("stopped", 20, 18, 0, False, 6, False),  # a stop's grace period is its checkpoint's
    ("target", 20, 18, 0, True, 6, False),
])
def test_the_final_weights_are_evaluated_once_the_budget_ends_unless_scored_already(outcome, updates, evaluated_at,
                                                                                      started_at, target_met, every, due):
    assert session.final_evaluation_due(outcome, updates, evaluated_at, started_at, target_met, every) is due


def run_of(name: str, tmp_path, monkeypatch, every: int, timesteps: int, **success):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name)
            .with_spec(totalTimesteps=timesteps, workers=1, seed=1,
                       success={"evalEpisodes": 2, "evalEvery": every, **success}, checkpoint={"everyUpdates": 4})
            .spec())
    trainer, run = one_process_run(spec)
    run.metrics = TrainerMetrics("t", 0, 1)
    return trainer, run, scored_evaluations(trainer)


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_a_budget_ending_between_evaluations_evaluates_the_final_weights_without_changing_them(name, tmp_path, monkeypatch):
    trainer, run, scored = run_of(name, tmp_path, monkeypatch, EVERY[name], BUDGET[name])
    assert session.run_updates(trainer, run) == "budget"
    updates, steps, every = trainer.counters.updates, trainer.counters.global_step, EVERY[name]
    assert updates % every and [u for u, _, _ in scored] == list(range(every, updates, every))  # none at the last
    weights = {k: t.clone() for k, t in trainer.agent.state_dict().items()}
    rng, own = torch.get_rng_state(), checkpoint.encode({"own": trainer.rank_state()})  # as a checkpoint holds it
    message = run.finish(trainer, "budget")
    assert [u for u, _, _ in scored][-1] == updates and len(scored) == updates // every + 1  # once, at the end
    final_return = scored[-1][2]
    # evaluating trains nothing and draws from no training stream: the model and what a checkpoint resumes from are as
    # they were when the budget ended
    assert torch.equal(torch.get_rng_state(), rng)
    assert checkpoint.encode({"own": trainer.rank_state()}) == own  # envs mid-episode, RNGs, buffers (SAC's and TD3's Pendulum: none)
    model = torch.load(run.final_model, weights_only=True)
    assert model["eval_return"] == final_return and model["timesteps"] == steps
    for key, tensor in weights.items():
        assert torch.equal(model["agent"][key], tensor) and torch.equal(trainer.agent.state_dict()[key], tensor), key
    # where periodic evaluations' results go: the progress row, the metric, best-model.pt when better, the summary
    rows = [row for row in progress_rows(run) if row.get("evaluation")]
    assert [(row["timesteps"], row["eval_return"]) for row in rows] == [(s, r) for _, s, r in scored]
    assert rows[-1].get("best", False) is (final_return > max(r for _, _, r in scored[:-1]))
    best = torch.load(os.path.join(os.path.dirname(run.final_model), "best-model.pt"), weights_only=True)
    assert best["eval_return"] == max(r for _, _, r in scored)
    assert run.metrics.eval_return._value.get() == final_return and run.metrics.success._value.get() == 0
    assert progress_rows(run)[-1]["eval_return"] == final_return  # what the run's summary line and kuberl plot read
    assert message.startswith(f"budget of {BUDGET[name]} timesteps spent (timesteps {steps}, eval return "
                              f"{session._fmt(final_return)}); model"), message
    assert message.endswith(contract.final_numbers(steps, final_return))


def scripted(trainer, returns, scored: list):
    """trainer.evaluate returning `returns(global_step)` (each call recorded in `scored` as run_of's are)."""
    def evaluate(*_args, **_kwargs):
        step = trainer.counters.global_step
        scored.append((trainer.counters.updates, step, returns(step)))
        return scored[-1][2]
    trainer.evaluate = evaluate


def test_a_target_met_by_the_final_evaluation_is_the_run_s_success(tmp_path, monkeypatch):
    """The periodic evaluations missed the target; the one at the end meets it: the run ends as one whose periodic
    evaluation met it does (the message the job's status reads, the success metric, the model's return)."""
    trainer, run, scored = run_of("ppo", tmp_path, monkeypatch, 2, 128, targetReturn=0.0)
    scored.clear()
    scripted(trainer, lambda step: 5.0 if step >= 128 else -5.0, scored)  # only the weights past the budget meet it
    assert session.run_updates(trainer, run) == "budget"
    periodic = len(scored)
    assert trainer.counters.updates % 2 and periodic == trainer.counters.updates // 2  # the budget ended between two
    message = run.finish(trainer, "budget")
    steps = trainer.counters.global_step
    assert len(scored) == periodic + 1 and scored[-1][:2] == (trainer.counters.updates, steps)
    assert message.startswith(f"eval return {session._fmt(scored[-1][2])} >= 0.0 at timesteps {steps}; model"), message
    assert run.metrics.success._value.get() == 1
    assert torch.load(run.final_model, weights_only=True)["eval_return"] == scored[-1][2]


def test_a_run_shorter_than_eval_every_updates_evaluates_none(tmp_path, monkeypatch):
    """An evalEvery above the budget keeps evaluation off, at the end too (make gpu-check's rates, the Pong test)."""
    trainer, run, scored = run_of("ppo", tmp_path, monkeypatch, 10**6, 128)
    assert session.run_updates(trainer, run) == "budget"
    message = run.finish(trainer, "budget")
    assert scored == [] and run.eval_return is None and "eval return -" in message


def test_a_stop_at_the_end_of_the_budget_abandons_the_final_evaluation_for_the_checkpoint(tmp_path, monkeypatch):
    logged = []
    trainer, run, scored = run_of("ppo", tmp_path, monkeypatch, 2, 128)
    run.log = logged.append
    assert session.run_updates(trainer, run) == "budget"
    periodic = list(scored)
    assert trainer.counters.updates % 2 and periodic  # the budget ended between two evaluations
    run.stop.set()  # SIGTERM as the last update ended
    run.finish(trainer, "budget")
    assert scored == periodic and run.eval_return == periodic[-1][2]  # the final weights were not scored
    assert any("abandoned" in line for line in logged), logged
