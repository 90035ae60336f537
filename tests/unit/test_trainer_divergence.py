"""A run whose losses or weights go non-finite ends as Diverged, every finite checkpoint kept (kuberl_trainer.divergence).

Before, nothing watched: an env whose rewards went infinite after some steps trained on, PPO and SAC alike; the job
Succeeded, every checkpoint the rotation kept held NaN (36 of PPO's tensors, weights and Adam's moments), and so did
final-model.pt, which `kuberl eval` refuses to load. Through the real trainer here, one process on the CPU; two
ranks in tests/distributed/test_divergence.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from kuberl.core import contract, names
from kuberl.core.rules import parse_spec
from kuberl_trainer import __main__ as entry
from kuberl_trainer import checkpoint, divergence, session
from kuberl_trainer.paths import pod_path
from trainer_support import one_process_run, small_job

from tests.support.jobs import make_job
from tests.unit.diverging_envs import DivergingContinuous, DivergingDiscrete

NAN, INF = float("nan"), float("inf")


# --- the pure parts --------------------------------------------------------------


def test_the_losses_named_are_those_not_finite():
    assert divergence.nonfinite_losses({"policy_loss": 0.1, "value_loss": NAN, "entropy": -INF, "approx_kl": 0.0}) == [
        "value_loss", "entropy"]
    assert divergence.nonfinite_losses({"value_loss": 1e38}) == []
    assert divergence.nonfinite_losses({}) == []  # an off-policy update before learning starts


def test_a_long_list_is_named_in_part_and_counted():
    assert divergence.named(["value_loss"]) == "value_loss"
    assert divergence.named(["a", "b"]) == "a, b"
    assert divergence.named([f"t{i}" for i in range(36)]) == "t0, t1 and 34 more"


@pytest.mark.parametrize(("name", "said"), [
    ("ppo", "try a lower spec.ppo.learningRate (0.0025) or maxGradNorm (0.5), spec.ppo.normalizeReward: true, or smaller rewards"),
    ("dqn", "try a lower spec.dqn.learningRate (0.001) or maxGradNorm (10) or smaller rewards"),
    ("sac", "try a lower spec.sac.policyLearningRate (0.0003) or qLearningRate (0.001) or smaller rewards"),
    ("td3", "try a lower spec.td3.learningRate (0.0003) or smaller rewards"),
])
def test_the_advice_names_the_jobs_own_fields_and_values(name, said):
    spec = parse_spec(make_job().algorithm(name).obj()["spec"])
    assert divergence.advice(name, spec.hyperparameters) == said


def test_rewards_already_normalised_are_not_advised_again():
    spec = parse_spec(make_job().algorithm("ppo", normalizeReward=True, learningRate=0.01).obj()["spec"])
    assert divergence.advice("ppo", spec.hyperparameters) == "try a lower spec.ppo.learningRate (0.01) or maxGradNorm (0.5) or smaller rewards"


# The job's status keeps a pod's message to lifecycle._POD_MESSAGE_BUDGET characters, its end: the head (what went
# non-finite, when) was cut off a first version's 520.
STATUS_KEEPS = 384


def test_the_message_names_what_when_and_the_kept_checkpoint_in_what_status_keeps():
    from kuberl.core import lifecycle

    assert lifecycle._POD_MESSAGE_BUDGET == STATUS_KEEPS
    seen = divergence.Divergence("rank 0's policy_loss, value_loss and 2 more", 14, 1708)
    path = f"/checkpoints/{'j' * names.MAX_JOB_NAME}-6f1c1bd4-0c3d-4b1e-9a57-3f1e2d4c5b6a/ckpt-0000000010.pt"  # the longest
    spec = parse_spec(make_job().algorithm("ppo").obj()["spec"])
    message = divergence.diverged_message(seen, (path, 1220), divergence.advice("ppo", spec.hyperparameters))
    assert message == (f"rank 0's policy_loss, value_loss and 2 more not finite at update 14 (timesteps 1708); last finite "
                       f"checkpoint kept: {path} (timesteps 1220); try a lower spec.ppo.learningRate (0.0025) or maxGradNorm "
                       "(0.5), spec.ppo.normalizeReward: true, or smaller rewards")
    assert len(message) <= STATUS_KEEPS
    none = divergence.diverged_message(seen, None, "try x")
    assert none.endswith("(timesteps 1708); no finite checkpoint was written; try x")


def test_how_to_go_on_from_the_kept_checkpoint_is_said_for_where_the_run_is():
    assert divergence.continuing(("runs/j/checkpoints/j-uid/ckpt-0000000010.pt", 1220), local=True) == (
        "`kuberl run --resume` with the job changed continues from runs/j/checkpoints/j-uid/ckpt-0000000010.pt")
    assert "a new job continues from /c/ckpt-0000000010.pt once it is copied into that job's checkpoint directory" == (
        divergence.continuing(("/c/ckpt-0000000010.pt", 1220), local=False))
    assert divergence.continuing(None, local=True) is None


def test_diverged_is_a_permanent_reason_the_lifecycle_fails_the_job_on():
    from kuberl.core import lifecycle

    assert contract.REASON_DIVERGED in contract.PERMANENT_REASONS
    seen = lifecycle.observed_pod({"metadata": {"name": "t-0", "labels": {"kuberl.dev/rank": "0", "kuberl.dev/restart": "0"}},
                                   "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                                       "exitCode": 1, "reason": "Error",
                                       "message": contract.termination_line("Diverged", "rank 0's value_loss not finite …")}}}]}})
    assert seen.reason == "Diverged"


# --- a state judged ----------------------------------------------------------------


def test_every_non_finite_value_of_a_state_is_named_by_its_path_in_order():
    state = {"agent": {"w": torch.tensor([1.0, NAN]), "b": torch.zeros(2)},
             "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg_sq": torch.tensor([INF])}}},
             "obs_norm": {"mean": np.array([0.0, -np.inf]), "count": 4.0}, "pair": (np.float32(np.nan), 1),
             "counters": {"updates": 3}, "eval_return": INF, "best_eval_return": None, "ids": torch.tensor([1, 2]),
             "half": torch.tensor([NAN], dtype=torch.bfloat16)}
    assert checkpoint.nonfinite(state) == ["agent.w", "optimizer.state.0.exp_avg_sq", "obs_norm.mean", "pair[0]",
                                           "eval_return", "half"]
    assert checkpoint.nonfinite({"agent": {"w": torch.ones(3)}, "count": 1e308, "flag": True, "name": "x"}) == []


# --- through the real trainer, one process ---------------------------------------------


def diverging_run(name: str, tmp_path, monkeypatch, timesteps: int, every: int):
    """The algorithm's trainer on an env whose rewards go infinite after 100 steps (each of its 2 envs), with a
    checkpoint every `every` updates and rank 0 evaluating every 2."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    env = DivergingDiscrete if name in ("ppo", "dqn", "ppo-lstm") else DivergingContinuous
    job = small_job("ppo").algorithm("ppo", numSteps=16, lstm={"hiddenSize": 16}) if name == "ppo-lstm" else small_job(name)
    spec = (job.replace(env={"id": f"tests.unit.diverging_envs:{env.__name__}"})
            .with_spec(totalTimesteps=timesteps, workers=1, seed=1, checkpoint={"everyUpdates": every, "keep": 2},
                       success={"evalEpisodes": 1, "evalEvery": 2}).spec())
    return one_process_run(spec)


@pytest.mark.parametrize("name", [*sorted(entry.ALGORITHMS), "ppo-lstm"])
def test_a_run_whose_rewards_go_infinite_ends_diverged_keeping_its_finite_checkpoints(name, tmp_path, monkeypatch):
    """PPO's recurrent policy acts in torch, whose sampling refuses NaN probabilities: its rollout after the update that
    diverged raised a RuntimeError before that update's vote, and the job Crashed, to restart into it again."""
    trainer, run = diverging_run(name, tmp_path, monkeypatch, timesteps=4000, every=2)
    name = name.removesuffix("-lstm")
    assert session.run_updates(trainer, run) == "diverged"
    message = run.finish(trainer, "diverged")
    assert run.ended_diverged and run.divergence is not None
    kept = checkpoint.list_checkpoints(run.checkpoint_dir)
    assert kept, "no checkpoint was written before the rewards went infinite"
    for path in kept:
        assert checkpoint.nonfinite(checkpoint.read(path)) == [], path
    newest = checkpoint.read(kept[0])["counters"]  # list_checkpoints: newest first
    assert newest["updates"] <= run.divergence.updates  # DQN's Huber loss: an infinite loss, finite gradients and weights
    assert f"last finite checkpoint kept: {pod_path(kept[0])} (timesteps {newest['global_step']})" in message
    assert message.startswith(f"{run.divergence.what} not finite at update {run.divergence.updates} ")
    assert f"spec.{name}." in message
    assert not os.path.exists(run.final_model)  # weights that diverged are no model
    best = os.path.join(os.path.dirname(run.final_model), "best-model.pt")
    assert not os.path.exists(best) or checkpoint.nonfinite(torch.load(best, weights_only=True)) == []


# --- a NaN planted in the weights, as an optimiser step on a NaN gradient writes one -----------------------------


def planted(trainer) -> None:
    with torch.no_grad():
        next(trainer.agent.parameters()).view(-1)[0] = NAN


def cartpole_run(tmp_path, monkeypatch):
    """PPO on CartPole, 9 updates of 32 vector steps (268 timesteps: autoreset steps are none), a checkpoint every 4
    (the last at 8), trained to its budget."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job("ppo").with_spec(totalTimesteps=256, workers=1, seed=1, checkpoint={"everyUpdates": 4, "keep": 2},
                                       success={"evalEpisodes": 1, "evalEvery": 100}).spec())
    trainer, run = one_process_run(spec)
    assert session.run_updates(trainer, run) == "budget"
    assert (trainer.counters.updates, trainer.counters.global_step) == (9, 268)
    return trainer, run


@pytest.mark.parametrize(("outcome", "what"), [("budget", "the final state's agent."), ("stopped", "the checkpoint's agent.")])
def test_weights_gone_nan_in_the_last_update_are_neither_checkpointed_nor_the_model(outcome, what, tmp_path, monkeypatch):
    """The last update's NaN is voted in no later update: the run's end judges the state itself (a budget's end
    with every rank's vote; a stop's save, rank 0's alone, without collectives)."""
    trainer, run = cartpole_run(tmp_path, monkeypatch)
    before = checkpoint.list_checkpoints(run.checkpoint_dir)
    assert [os.path.basename(path) for path in before] == ["ckpt-0000000008.pt", "ckpt-0000000004.pt"]
    kept_at = checkpoint.read(before[0])["counters"]["global_step"]
    planted(trainer)
    message = run.finish(trainer, outcome)
    assert run.ended_diverged
    assert message.startswith(what) and " not finite at update 9 (timesteps 268); last finite checkpoint kept: " in message
    assert f"{pod_path(before[0])} (timesteps {kept_at})" in message
    assert checkpoint.list_checkpoints(run.checkpoint_dir) == before
    assert not os.path.exists(run.final_model)


def test_the_same_run_unplanted_ends_as_before(tmp_path, monkeypatch):
    trainer, run = cartpole_run(tmp_path, monkeypatch)
    message = run.finish(trainer, "budget")
    assert not run.ended_diverged and message.startswith("budget of 256 timesteps spent")
    assert [os.path.basename(path) for path in checkpoint.list_checkpoints(run.checkpoint_dir)] == [
        "ckpt-0000000009.pt", "ckpt-0000000008.pt"]
    assert os.path.exists(run.final_model)


def test_weights_gone_nan_are_no_best_model_however_they_score(tmp_path, monkeypatch):
    trainer, run = cartpole_run(tmp_path, monkeypatch)
    run.evaluated(trainer, 10.0)
    best = os.path.join(os.path.dirname(run.final_model), "best-model.pt")
    assert torch.load(best, weights_only=True)["eval_return"] == 10.0
    planted(trainer)
    run.evaluated(trainer, 500.0)
    assert torch.load(best, weights_only=True)["eval_return"] == 10.0 and run.best_eval_return == 10.0
    assert run.divergence.what.startswith("best-model.pt's agent.") and run.divergence_vote()


def test_a_divergence_only_another_rank_saw_is_named_at_rank_0s_last_boundary(tmp_path, monkeypatch):
    _, run = cartpole_run(tmp_path, monkeypatch)
    assert run.divergence is None
    assert run.divergence_message().startswith("another rank's loss not finite at update 9 (timesteps 268); last finite ")
