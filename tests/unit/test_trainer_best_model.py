"""best-model.pt: the weights of the best evaluation so far, kept beside final-model.pt (the last weights), as
SB3's EvalCallback keeps best_model.zip. DQN's final model was its last weights: a walkthrough saw a run end at
eval 81 after a peak of 464, and that peak was lost. Through the real trainer, on CartPole, with a small budget."""

from __future__ import annotations

import json
import os

import pytest
import torch
from kuberl.core import contract
from kuberl_trainer import __main__ as entry
from kuberl_trainer import checkpoint, session
from trainer_support import ENV_OF, one_process_run, small_job


def generation(name: str, tmp_path, monkeypatch, restart: int = 0, timesteps: int = 640, target: float = 1e9,
               eval_every: int = 2):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = (small_job(name)
            .with_spec(totalTimesteps=timesteps, workers=1, seed=1,
                       success={"targetReturn": target, "evalEpisodes": 2, "evalEvery": eval_every},
                       checkpoint={"everyUpdates": 4})
            .spec())
    return one_process_run(spec, restart=restart)


def evaluations(run) -> list[dict]:
    with open(os.path.join(run.checkpoint_dir, "progress.jsonl")) as f:
        return [row for row in map(json.loads, f) if row.get("evaluation")]


# (timesteps, evalEvery): about 10 evaluations each, the best of seed 1's not the last. PPO updates every 32 timesteps,
# DQN about every 4, SAC and TD3 every 2: at PPO's evalEvery 2 over 640 their 160 evaluations of 2 Pendulum
# episodes (200 steps each) were most of the unit tier's two slowest trainer tests (21 and 16 s).
BEST_RUNS = {"ppo": (640, 2), "dqn": (640, 16), "sac": (160, 8), "td3": (160, 8)}


@pytest.mark.parametrize("name", sorted(entry.ALGORITHMS))
def test_the_best_evaluation_is_kept_beside_the_last_weights(name, tmp_path, monkeypatch):
    timesteps, eval_every = BEST_RUNS[name]
    trainer, run = generation(name, tmp_path, monkeypatch, timesteps=timesteps, eval_every=eval_every)
    scored = []
    evaluate = trainer.evaluate

    def evaluate_and_keep(*args, **kwargs):  # the real evaluation; its weights kept to compare with the file
        returned = evaluate(*args, **kwargs)
        scored.append((returned, trainer.counters.global_step, {k: t.clone() for k, t in trainer.agent.state_dict().items()}))
        return returned

    trainer.evaluate = evaluate_and_keep
    assert session.run_updates(trainer, run) == "budget"
    run.finish(trainer, "budget")
    assert len(scored) >= 3
    best_return, best_steps, best_weights = max(scored, key=lambda s: s[0])  # the first of equal bests: only a better one replaces it
    assert best_steps != scored[-1][1], "the best is the last: best-model.pt would not be told from final-model.pt (BEST_RUNS)"
    best = torch.load(os.path.join(os.path.dirname(run.final_model), "best-model.pt"), weights_only=True)
    assert best["eval_return"] == best_return and best["timesteps"] == best_steps
    assert best["algorithm"] == name and best["env_id"] == ENV_OF[name] and best["format"] == 1
    for key, tensor in best_weights.items():
        assert torch.equal(best["agent"][key], tensor), key
    final = torch.load(run.final_model, weights_only=True)
    assert final["eval_return"] == scored[-1][0] and final["timesteps"] == trainer.counters.global_step  # the last weights
    # progress.jsonl marks each evaluation that made a new best, so a run's summary can name it without torch
    marked = [row for row in evaluations(run) if row.get("best")]
    assert marked[-1]["eval_return"] == best_return and marked[-1]["timesteps"] == best_steps
    assert [row["eval_return"] for row in marked] == sorted({row["eval_return"] for row in marked})  # each one better


def test_a_resumed_run_keeps_the_best_of_the_runs_before_it(tmp_path, monkeypatch):
    trainer, run = generation("ppo", tmp_path, monkeypatch, timesteps=256)
    session.run_updates(trainer, run)
    run.finish(trainer, "stopped")  # saved: the checkpoint carries the best return so far
    before = run.best_eval_return
    assert before is not None
    assert checkpoint.load_newest(run.checkpoint_dir)[1]["best_eval_return"] == before
    trainer, resumed = generation("ppo", tmp_path, monkeypatch, restart=1, timesteps=256)
    trainer.evaluate = lambda *_args, **_kwargs: before - 1.0  # worse than the earlier generation's best
    resumed.load()
    resumed.evaluated(trainer, before - 1.0)
    best = torch.load(os.path.join(os.path.dirname(run.final_model), "best-model.pt"), weights_only=True)
    assert best["eval_return"] == before and resumed.best_eval_return == before


def test_kuberl_eval_plays_the_final_model_by_default_and_the_best_with_best(tmp_path):
    from kuberl.cli import build_parser
    from kuberl_trainer.policy import UnusableModel, find_model

    helped = " ".join(build_parser().subcommands["eval"].format_help().split())
    assert "played by default: its final-model.pt, the last weights" in helped and "--best" in helped
    run = tmp_path / "runs" / "j"
    weights = run / "checkpoints" / "j-uid"
    weights.mkdir(parents=True)
    (weights / "final-model.pt").write_bytes(b"last")
    with pytest.raises(UnusableModel, match="has no best-model.pt: the run has not evaluated yet"):
        find_model(str(run), best=True)
    (weights / "best-model.pt").write_bytes(b"best")
    assert find_model(str(run)) == str(weights / "final-model.pt")
    assert find_model(str(run), best=True) == str(weights / "best-model.pt")
    with pytest.raises(UnusableModel, match="--best picks best-model.pt of a run directory"):
        find_model(str(weights / "final-model.pt"), best=True)


def test_a_run_that_met_its_target_says_the_timesteps_of_the_weights_that_met_it(tmp_path, monkeypatch):
    """make train ended 'eval return 494.9 >= 475.0 at timesteps 38644' where its evaluation (and kuberl plot's point)
    was at 38,132: the update that carries the vote collects one more rollout, learns nothing from it, and the message
    named its timesteps. The weights are the evaluated ones, which best-model.pt holds too."""
    trainer, run = generation("ppo", tmp_path, monkeypatch, target=-1.0)  # the first evaluation meets it
    assert session.run_updates(trainer, run) == "target"
    [evaluated] = evaluations(run)
    assert evaluated["timesteps"] < trainer.counters.global_step
    message = run.finish(trainer, "target")
    assert message.startswith(f"eval return {evaluated['eval_return']:.1f} >= -1.0 at timesteps {evaluated['timesteps']}; model"), message
    best = torch.load(os.path.join(os.path.dirname(run.final_model), "best-model.pt"), weights_only=True)
    final = torch.load(run.final_model, weights_only=True)
    for key, tensor in best["agent"].items():
        assert torch.equal(final["agent"][key], tensor), key


@pytest.mark.parametrize("best", [True, False], ids=["best-model.pt", "final-model.pt"])
def test_a_model_file_that_is_a_dangling_link_or_a_fifo_is_refused_in_a_line(tmp_path, best):
    """A run directory is anyone's to fill (a copied run, a checkpoint volume a tenant writes): a best-model.pt or
    final-model.pt that is a link to nothing ended kuberl eval in a FileNotFoundError traceback (os.path.getmtime,
    sorting the candidates); a FIFO, or a link to /dev/zero, is refused unread, never waited on."""
    from kuberl_trainer.policy import UnusableModel, find_model, read_model

    weights = tmp_path / "runs" / "j" / "checkpoints" / "j-uid"
    weights.mkdir(parents=True)
    name = "best-model.pt" if best else "final-model.pt"
    (weights / name).symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnusableModel, match="No such file or directory"):
        read_model(find_model(str(tmp_path / "runs" / "j"), best=best))
    (weights / name).unlink()
    os.mkfifo(weights / name)  # opened without waiting for a writer, then refused: not a regular file
    with pytest.raises(UnusableModel, match="not a regular file"):
        read_model(find_model(str(tmp_path / "runs" / "j"), best=best))
    (weights / name).unlink()
    (weights / name).symlink_to("/dev/zero")
    with pytest.raises(UnusableModel, match="not a regular file"):
        read_model(find_model(str(tmp_path / "runs" / "j"), best=best))
