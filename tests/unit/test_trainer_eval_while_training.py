"""spec.success.evalWhileTraining: rank 0 evaluates a frozen copy of the weights on a
thread of its own while training goes on; the copy that meets the target is the model."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import torch
from kuberl.core import contract
from kuberl.core.spec import PPOConfig
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session
from kuberl_trainer.ppo import PPOTrainer
from trainer_support import ENV_OF, ONE_PROCESS, one_process_run, small_job


def training(name: str, tmp_path, monkeypatch, eval_every: int = 2, target: float = 1e9, timesteps: int = 1024):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name)
            .with_spec(totalTimesteps=timesteps, workers=1, seed=1,
                       success={"targetReturn": target, "evalEpisodes": 2, "evalEvery": eval_every, "evalWhileTraining": True})
            .spec())
    return one_process_run(spec)


def gated(trainer, gate: threading.Event, returns: float, frozen: list):
    """trainer.frozen_copy, whose copies' evaluation waits for `gate` and then returns `returns`."""
    freeze = trainer.frozen_copy

    def frozen_copy():
        copy = freeze()
        frozen.append(copy)
        copy.evaluate = lambda *_args: (gate.wait(30), returns)[1]
        return copy

    trainer.frozen_copy = frozen_copy


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_training_goes_on_while_a_copy_is_evaluated_and_the_copy_that_met_is_the_model(name, tmp_path, monkeypatch):
    trainer, run = training(name, tmp_path, monkeypatch, target=100.0)
    gate, frozen = threading.Event(), []
    gated(trainer, gate, 150.0, frozen)
    for _ in range(5):  # the evaluation due at update 2 starts; at 4 it is still running, so 4's is skipped
        run.after_update(trainer.update(run.stop_requested(), run.success_vote()), trainer)
    assert len(frozen) == 1 and frozen[0].counters.updates == 2 and trainer.counters.updates == 5
    assert run.eval_return is None and not run.success_vote()  # nothing recorded while it runs
    gate.set()
    run.evaluation_in_flight[0].result(timeout=30)
    run.after_update(trainer.update(run.stop_requested(), run.success_vote()), trainer)
    assert run.eval_return == 150.0 and run.success_vote() and run.model_that_met is frozen[0]
    report = trainer.update(run.stop_requested(), run.success_vote())  # every rank sees the vote: nothing learned
    assert report.target_met
    message = run.finish(trainer, "target")
    at = frozen[0].counters.global_step
    assert f">= 100.0 at timesteps {at} (the weights of then, evaluated while training went on to {trainer.counters.global_step})" in message
    model = torch.load(run.final_model, weights_only=True)
    assert model["timesteps"] == at and model["eval_return"] == 150.0
    for key, tensor in frozen[0].agent.state_dict().items():
        assert torch.equal(model["agent"][key], tensor), key
    assert any(not torch.equal(model["agent"][k], t) for k, t in trainer.agent.state_dict().items())  # not today's weights


def test_the_evaluation_in_flight_at_the_end_of_the_budget_gives_the_last_eval_return(tmp_path, monkeypatch):
    trainer, run = training("ppo", tmp_path, monkeypatch, eval_every=1, timesteps=32)
    gate, frozen = threading.Event(), []
    gated(trainer, gate, 7.0, frozen)
    gate.set()
    assert session.run_updates(trainer, run) == "budget"
    message = run.finish(trainer, "budget")
    assert run.evaluation_in_flight is None and run.eval_return == 7.0 and "eval return 7.0" in message


def test_a_failed_evaluation_on_its_thread_is_raised_by_the_update_after_it(tmp_path, monkeypatch):
    trainer, run = training("ppo", tmp_path, monkeypatch, eval_every=1)
    freeze = trainer.frozen_copy

    def broken_copy():
        copy = freeze()
        copy.evaluate = lambda *_args: (_ for _ in ()).throw(RuntimeError("the evaluation envs broke"))
        return copy

    trainer.frozen_copy = broken_copy
    run.after_update(trainer.update(False, False), trainer)
    run.evaluation_in_flight[0].exception(timeout=30)
    with pytest.raises(RuntimeError, match="the evaluation envs broke"):
        run.after_update(trainer.update(False, False), trainer)


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_a_frozen_copy_evaluates_the_weights_of_when_it_was_taken(name, tmp_path, monkeypatch):
    trainer, _ = training(name, tmp_path, monkeypatch)
    for _ in range(3):
        trainer.update(False, False)
    frozen = trainer.frozen_copy()
    then = {k: v.clone() for k, v in trainer.agent.state_dict().items()}
    assert frozen.evaluate(ENV_OF[name], 4, {}, 3) == trainer.evaluate(ENV_OF[name], 4, {}, 3)
    steps = trainer.counters.global_step
    for _ in range(3):
        trainer.update(False, False)
    assert frozen.counters.global_step == steps < trainer.counters.global_step
    for key, tensor in frozen.final_model()["agent"].items():
        assert torch.equal(tensor, then[key]), key


def test_ppo_evaluation_samples_the_stream_a_seeded_default_generator_would_and_leaves_it_alone():
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(hidden_sizes=[16]), "CartPole-v1", 2, {}, 256, 1, 0, fast=False)
    obs = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    with torch.random.fork_rng():
        torch.manual_seed(11)
        expected = trainer.actor.act(obs)[0]  # how evaluation sampled before: the default generator, seeded
    before = torch.get_rng_state()
    assert np.array_equal(trainer.actor.reseeded(11).act(obs)[0], expected)
    trainer.evaluate("CartPole-v1", 2, {}, 5)
    assert torch.equal(torch.get_rng_state(), before)  # training's sampling is untouched, from any thread


def test_progress_ends_where_training_did_after_the_evaluation_waited_for_at_the_budget(tmp_path, monkeypatch):
    """The evaluation in flight at the end of the budget was written last, at its copy's earlier timesteps,
    when a progress line had said the final ones already: a run's summary (progress.jsonl's last line) then
    told the copy's timesteps as the run's."""
    trainer, run = training("ppo", tmp_path, monkeypatch, eval_every=2, timesteps=128)
    gate, frozen = threading.Event(), []
    gated(trainer, gate, 7.0, frozen)
    assert session.run_updates(trainer, run) == "budget"
    run.report(trainer.counters.global_step)  # a progress line said the final timesteps
    gate.set()
    run.finish(trainer, "budget")
    with open(os.path.join(run.checkpoint_dir, "progress.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    # the copy's row, then the final weights' own evaluation (the copy was of earlier ones), then the end's checkpoint
    (*_, evaluated, final), last = [row for row in rows if row.get("evaluation")], rows[-1]
    assert evaluated == {**evaluated, "timesteps": frozen[-1].counters.global_step, "eval_return": 7.0, "evaluation": True,
                         "evaluated_while_training": True}  # so kuberl plot's training line leaves its return out
    assert frozen[-1].counters.global_step < trainer.counters.global_step == final["timesteps"] == last["timesteps"]
    assert "evaluated_while_training" not in final and final["eval_return"] == run.eval_return != 7.0
    assert last["eval_return"] == run.eval_return and "evaluation" not in last


def test_no_evaluation_starts_once_one_met_the_target(tmp_path, monkeypatch):
    """The evaluation that met the target, recorded at an update when one was due, started another copy's
    evaluation that nothing would read: a copy of the networks and an evaluation's envs competing with the
    last update and the final model for the CPU."""
    trainer, run = training("ppo", tmp_path, monkeypatch, eval_every=1, target=100.0)
    gate, frozen = threading.Event(), []
    gated(trainer, gate, 150.0, frozen)
    gate.set()
    run.after_update(trainer.update(False, False), trainer)
    run.evaluation_in_flight[0].result(timeout=30)
    run.after_update(trainer.update(False, False), trainer)
    assert run.success_vote() and run.evaluation_in_flight is None and len(frozen) == 1


def test_a_copy_that_met_the_target_as_the_budget_ended_is_the_model(tmp_path, monkeypatch):
    """The evaluation waited for at the end of the budget met the target: the final model was the weights
    training had reached since, never evaluated, yet carrying the copy's return, and the message said
    "budget spent" (the CRD: "when a copy meets targetReturn, that copy is the final model")."""
    trainer, run = training("ppo", tmp_path, monkeypatch, eval_every=2, target=100.0, timesteps=128)
    gate, frozen = threading.Event(), []
    gated(trainer, gate, 150.0, frozen)
    assert session.run_updates(trainer, run) == "budget"
    gate.set()
    message = run.finish(trainer, "budget")
    at = frozen[-1].counters.global_step
    assert message.startswith(f"eval return 150.0 >= 100.0 at timesteps {at} (the weights of then, evaluated while "
                              f"training went on to {trainer.counters.global_step})"), message
    model = torch.load(run.final_model, weights_only=True)
    assert model["timesteps"] == at and model["eval_return"] == 150.0
    for key, tensor in frozen[-1].agent.state_dict().items():
        assert torch.equal(model["agent"][key], tensor), key
