"""The line a `kuberl run` ends with reports the newest checkpoint's timesteps, also when the
run's last progress record (or its status) says less: a restarted generation that failed at
once has reported nothing, but the checkpoint it would resume from is there."""

import json
import os

from kuberl.core.render import Job
from kuberl.core.rules import validate_job
from kuberl.local.runner import (
    EXIT_INTERRUPTED,
    reason_and_message,
    rerun_note,
    summary,
)

from tests.support.jobs import make_job


def framed_checkpoint(updates: int = 1) -> bytes:
    """A checkpoint file's bytes as the trainer writes them."""
    from kuberl_trainer import checkpoint

    return checkpoint.encode({"counters": {"global_step": updates * 62, "updates": updates, "episodes": 0}})

JOB = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=1000).obj()))
FAILED = {"phase": "Failed", "restarts": 3, "progress": {"timesteps": 0},
          "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}]}


def test_a_failed_run_reports_its_newest_checkpoint(tmp_path):
    (tmp_path / "ckpt-0000000003.pt").write_bytes(b"a checkpoint")
    records = [{"timesteps": 124, "checkpoint": "ckpt-0000000002.pt"},  # pruned since: not on disk
               {"timesteps": 186, "checkpoint": "ckpt-0000000003.pt"}]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    line = summary(JOB, {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}, FAILED, 1, 9.0)
    assert line == ("j failed after 9s at 186 timesteps (newest checkpoint ckpt-0000000003.pt at 186 timesteps): "
                    "BackoffLimitExceeded: m"), line


def test_a_record_naming_a_file_elsewhere_or_gone_is_not_taken(tmp_path):
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 9, "checkpoint": "../ckpt-0000000001.pt"}) + "\n"
                                             + json.dumps({"timesteps": 7, "checkpoint": "ckpt-0000000001.pt"}) + "\n")
    line = summary(JOB, {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}, FAILED, 1, 9.0)
    assert "newest checkpoint" not in line and "at 7 timesteps" in line, line


def test_a_stopped_run_promises_a_resume_only_from_a_checkpoint_on_disk(tmp_path):
    """Ranks killed before their stop checkpoint (torchrun's 30 s, before pods got
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT) left progress records and no checkpoint, and the
    run still said "run the same command again to resume": it would have started over."""
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 8192}) + "\n")
    paths = {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}
    line = summary(JOB, paths, {"phase": "Suspended"}, EXIT_INTERRUPTED, 151.0)
    assert line == "j stopped at 8,192 timesteps after 151s before any checkpoint was saved; the same command starts over"
    (tmp_path / "ckpt-0000000001.pt").write_bytes(b"a checkpoint")
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 8192, "checkpoint": "ckpt-0000000001.pt"}) + "\n")
    line = summary(JOB, paths, {"phase": "Suspended"}, EXIT_INTERRUPTED, 160.0)
    assert line.endswith("(newest checkpoint ckpt-0000000001.pt at 8,192 timesteps); run the same command again to resume")
    custom = {"checkpoints": str(tmp_path / "elsewhere"), "model": None}  # a custom trainer keeps its own checkpoints
    assert summary(JOB, custom, {}, EXIT_INTERRUPTED, 5.0).endswith("run the same command again to resume")


def test_a_rerun_says_what_it_resumes_from_and_never_resumes_a_run_that_saved_nothing():
    """After "stopped … before any checkpoint was saved; the same command starts over" the rerun said
    "resuming j (last run: Suspended, generation 1)"."""
    assert rerun_note("j", "Suspended", ("ckpt-0000000003.pt", 186), True) == (
        "resuming j from ckpt-0000000003.pt at 186 timesteps (last run: stopped)")
    assert rerun_note("j", "Suspended", None, False) == "running j again from the start: its last run (stopped) saved no checkpoint"
    assert rerun_note("j", "Failed", None, True) == "resuming j from its newest checkpoint (last run: failed)"
    assert rerun_note("j", "Running", None, None) == "running j again (last run: ended while running)"  # a custom trainer's own
    assert rerun_note("j", None, None, False).endswith("(unknown) saved no checkpoint")


def test_a_rerun_names_a_checkpoint_saved_after_the_last_progress_record(tmp_path):
    """A rank stopped between a checkpoint's save and its progress record (chaos found it): the rerun said
    "resuming j from ckpt-0000000002.pt" while the trainer resumed from ckpt-0000000003.pt, the newest that loads."""
    from kuberl.local.runner import newest_checkpoint, newest_on_disk, newest_whole

    for n in (2, 3):
        (tmp_path / f"ckpt-000000000{n}.pt").write_bytes(framed_checkpoint())
    (tmp_path / "ckpt-notes.pt").write_bytes(b"not the trainer's")
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 124, "checkpoint": "ckpt-0000000002.pt"}) + "\n")
    whole, flawed = newest_whole(str(tmp_path))
    assert newest_on_disk(str(tmp_path)) == whole and flawed == []
    note = rerun_note("j", "Suspended", newest_checkpoint(str(tmp_path), whole), True, whole, flawed)
    assert note == "resuming j from its newest checkpoint, ckpt-0000000003.pt (last run: stopped)", note
    assert rerun_note("j", "Suspended", ("ckpt-0000000003.pt", 186), True, "ckpt-0000000003.pt").startswith(
        "resuming j from ckpt-0000000003.pt at 186 timesteps")


def test_a_failure_quoting_its_own_reason_says_the_reason_once(tmp_path):
    """The last line read "failed after 2s at 0 timesteps: ConfigError: worker 0 (j-0): ConfigError: spec.env.id: …"."""
    config_error = {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "reason": "ConfigError",
                                                        "message": "worker 0 (j-0): ConfigError: spec.env.id: unknown"}]}
    line = summary(JOB, {"checkpoints": str(tmp_path), "model": "m.pt"}, config_error, 1, 2.0)
    assert line == "j failed after 2s at 0 timesteps: worker 0 (j-0): ConfigError: spec.env.id: unknown", line
    assert reason_and_message("BackoffLimitExceeded", "m") == "BackoffLimitExceeded: m"


def test_a_succeeded_run_names_which_return_it_reports(tmp_path):
    """`make train` ended "final return 492.1": the trainer's evaluation return, where the progress bar's `return`
    is the training return; a run without evaluations reported its training return under the same words."""
    paths = {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}
    for record, said in (({"timesteps": 41191, "episode_return_mean": 173.4, "eval_return": 492.15}, "eval return 492.1"),
                         ({"timesteps": 41191, "episode_return_mean": 173.4, "eval_return": None}, "training return 173.4"),
                         ({"timesteps": 0}, "no return yet")):
        (tmp_path / "progress.jsonl").write_text(json.dumps(record) + "\n")
        line = summary(JOB, paths, {}, 0, 11.0)
        assert line.startswith(f"j succeeded: {record['timesteps']:,} timesteps in 11s, {said}; model "), line


def test_a_rerun_names_the_checkpoint_the_trainer_takes_when_the_newest_is_truncated(tmp_path):
    """Chaos: with the newest checkpoint truncated, the rerun said "resuming ck from ckpt-0000000640.pt" while the
    trainer skipped that file and resumed from an older one. The line now judges each file's frame with the
    trainer's own rule (kuberl.core.contract), and names the file the trainer loads."""
    from kuberl.local.runner import newest_checkpoint, newest_whole
    from kuberl_trainer import checkpoint

    for n in (2, 3):
        (tmp_path / f"ckpt-000000000{n}.pt").write_bytes(framed_checkpoint(n))
    newest = tmp_path / "ckpt-0000000003.pt"
    os.truncate(newest, newest.stat().st_size - 100)
    records = [{"timesteps": 124, "checkpoint": "ckpt-0000000002.pt"}, {"timesteps": 186, "checkpoint": "ckpt-0000000003.pt"}]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    whole, flawed = newest_whole(str(tmp_path))
    note = rerun_note("j", "Suspended", newest_checkpoint(str(tmp_path), whole), True, whole, flawed)
    assert note == ("resuming j from ckpt-0000000002.pt at 124 timesteps (last run: stopped); newer one is not whole "
                    "(ckpt-0000000003.pt: checksum mismatch (truncated or corrupted)): the trainer sets it aside"), note
    loaded, _ = checkpoint.load_newest(str(tmp_path))
    assert os.path.basename(loaded) == whole


def test_a_rerun_whose_checkpoints_are_none_of_them_whole_says_so():
    note = rerun_note("j", "Failed", None, True, None, [("ckpt-0000000003.pt", "not a kuberl checkpoint (bad header)")])
    assert note == ("j's last run (failed) left no whole checkpoint (ckpt-0000000003.pt: not a kuberl checkpoint (bad "
                    "header)): the trainer sets them aside and starts over, or fails NoUsableCheckpoint, as "
                    "spec.checkpoint.whenNoneUsable says"), note


def test_a_run_that_spent_its_budget_below_its_target_says_so(tmp_path):
    """The README's third command (cartpole-dqn at learningRate 0.0005) ended "cartpole-dqn succeeded: 100,122
    timesteps in 137s, eval return 81.0": the job's phase is Succeeded once its budget is spent, but a user who set
    targetReturn 475 read a solved CartPole."""
    job = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=1000, success={"targetReturn": 475}).obj()))
    paths = {"checkpoints": str(tmp_path), "model": str(tmp_path / "m.pt")}
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 1000, "eval_return": 81.0}) + "\n")
    line = summary(job, paths, {"phase": "Succeeded"}, 0, 9.0)
    assert "eval return 81.0 (below success.targetReturn 475: totalTimesteps ran out first);" in line, line
    (tmp_path / "progress.jsonl").write_text(json.dumps({"timesteps": 1000, "eval_return": 480.0}) + "\n")
    assert "eval return 480.0; model" in summary(job, paths, {"phase": "Succeeded"}, 0, 9.0)
    assert "below" not in summary(JOB, paths, {"phase": "Succeeded"}, 0, 9.0)  # no target: the budget was the goal


def test_a_run_below_its_target_names_its_best_evaluation_beside_the_last_weights(tmp_path):
    """The same DQN run peaked at eval 464 and ended at 81: its final model, the one kuberl eval plays by default, is
    the last weights, and the peak was lost. The trainer keeps best-model.pt; the summary says where, and how to play it."""
    job = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=1000, success={"targetReturn": 475}).obj()))
    run_dir = tmp_path / "runs" / "j"
    tmp_path = run_dir / "checkpoints" / "j-uid"
    tmp_path.mkdir(parents=True)
    paths = {"checkpoints": str(tmp_path), "model": str(tmp_path / "final-model.pt")}
    records = [{"timesteps": 400, "eval_return": 120.0, "evaluation": True, "best": True},
               {"timesteps": 700, "eval_return": 464.0, "evaluation": True, "best": True},
               {"timesteps": 1000, "eval_return": 81.0, "evaluation": True}, {"timesteps": 1000, "eval_return": 81.0}]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert "best evaluation" not in summary(job, paths, {"phase": "Succeeded"}, 0, 9.0)  # no best-model.pt on disk: said nothing
    (tmp_path / "best-model.pt").write_bytes(b"weights")
    line = summary(job, paths, {"phase": "Succeeded"}, 0, 9.0)
    assert (f"; model {tmp_path / 'final-model.pt'} (the last weights); best evaluation {tmp_path / 'best-model.pt'}"
            f" (eval 464.0 at 700 timesteps; kuberl eval {run_dir} --best plays it);") in line, line
    untargeted = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=1000).obj()))
    line = summary(untargeted, paths, {"phase": "Succeeded"}, 0, 9.0)  # evaluated without a target: named the same
    assert "eval return 81.0; model" in line and "best evaluation" in line and "below success" not in line, line
    met = Job("j", validate_job(make_job("j").env("CartPole-v1").with_spec(totalTimesteps=1000, success={"targetReturn": 80}).obj()))
    assert "best evaluation" not in summary(met, paths, {"phase": "Succeeded"}, 0, 9.0)  # met: the model is what met it
