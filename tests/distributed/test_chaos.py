"""A few chaos trials of bench/chaos.py with fixed seeds (`make chaos` runs every fault class): a rank of a real
2-rank `kuberl run` of CartPole PPO (gloo, deterministic mode) is killed at a checkpoint's or the final model's
rename, or while pruning; the run must then end as an uninterrupted one does, bitwise,
having resumed from the newest checkpoint saved, with no file that does not load among the kept, no temp
file and no process left."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import chaos  # bench/ is no package: imported from its path


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return chaos.reference_model("ppo", tmp_path_factory.mktemp("uninterrupted"), evaluate=False)


@pytest.mark.parametrize("fault, seed", [("ckpt-rename-kill", 0), ("prune-kill", 0), ("final-renamed-kill", 0)])
def test_a_rank_killed_at_a_checkpoint_moment_ends_as_an_uninterrupted_run(tmp_path, uninterrupted, fault, seed):
    trial = chaos.run_trial(chaos.Trial("ppo", fault, seed, tmp_path), uninterrupted)
    assert trial.fired is not None, f"the fault never fired: {trial.runs[-1]['output'][-2000:]}"
    assert not trial.problems, trial.problems


def chaos_hook(tmp_path, plan: dict):
    """A PYTHONPATH folder whose sitecustomize is bench/chaos_hook.py, following `plan` in the ranks it starts."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text((chaos.REPO / "bench" / "chaos_hook.py").read_text().replace("@STATE@", str(hook)))
    (hook / "plan.json").write_text(json.dumps(plan))
    return hook


def stop_both_and_outlive_the_grace_period(ranks, until=None) -> None:
    """SIGTERM both ranks and check rank 0 is still running after the job's 1 s grace period: the kill that
    follows (the caller's ranks.kill()) comes inside what rank 0 was doing, as the kubelet's SIGKILL would.
    With `until`, the grace period ends once `until()` is true (what the kill must come inside has begun)."""
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    if until is None:
        time.sleep(1.0)  # the grace period
    deadline = time.monotonic() + 60
    while until is not None and not until():
        assert time.monotonic() < deadline and ranks.procs[0].poll() is None, ranks.log(0)[-3000:]
        time.sleep(0.01)
    assert ranks.procs[0].poll() is None, f"rank 0 ended inside its grace period: {ranks.log(0)[-2000:]}"


def log_of_a_start_that_counts_one_loss(job, updates: int) -> str:
    """Start the job again, run it to `updates`, check rank 0 counted one lost checkpoint, and return rank 0's log."""
    from kuberl.core import metricnames

    from .support import Ranks

    resumed = Ranks(job)
    try:
        resumed.wait_for_updates(updates)
        assert resumed.metric(0, metricnames.CHECKPOINTS_SKIPPED) == 1
    finally:
        resumed.kill()
    return resumed.log(0)


def test_a_save_that_outlasts_the_grace_period_is_warned_of_and_its_loss_said_at_the_next_start(tmp_path):
    """terminationGracePeriodSeconds 1 on a slow volume (every checkpoint's fsync takes 3 s, chaos_hook's sleep): rank
    0 warns at its first save that a stop's save cannot fit. Then a stop as the kubelet makes it: SIGTERM, and SIGKILL
    when the grace period ends, rank 0 inside its save. The newest whole checkpoint survives (temp file, fsync,
    rename); the next start removes the cut-off temp file and says the loss, in its log and in the
    checkpoints_skipped gauge (the operator's CheckpointsSkipped Event and the chart's alert read it). It was a
    warning from `checkpoint`'s logger about a temp file, which named no loss, and the gauge said 0."""
    from kuberl_trainer import checkpoint

    from .support import Ranks, make_job

    hook = chaos_hook(tmp_path, {"point": "ckpt-fsync", "rank": 0, "sleep": 3.0})
    job = make_job(tmp_path / "job", checkpoint={"everyUpdates": 5}, runPolicy={"terminationGracePeriodSeconds": 1})
    ranks = Ranks(job, extra_env={"PYTHONPATH": str(hook)})
    try:
        deadline = time.monotonic() + 90
        while not list(job.checkpoint_dir.glob("ckpt-*.pt")):
            assert time.monotonic() < deadline and all(p.poll() is None for p in ranks.procs), ranks.log(0)[-3000:]
            time.sleep(0.05)
        # the stop's save is cut off once its temp file is there (0.12 to 0.21 s after the SIGTERM here, an update's work
        # later): a fixed 1 s could end before it on a loaded machine, and then no save was cut off
        stop_both_and_outlive_the_grace_period(ranks, until=lambda: list(job.checkpoint_dir.glob(".tmp-*.part")))
    finally:
        ranks.kill()
    first = ranks.log(0)
    assert "this checkpoint took 3." in first and "longer than the 1s a stop gives rank 0" in first, first[-3000:]
    assert [p.name for p in job.checkpoint_dir.glob(".tmp-*.part")], "rank 0 was killed inside a save: its temp file is left"
    newest, state = checkpoint.load_newest(str(job.checkpoint_dir))
    assert os.path.basename(newest) == "ckpt-0000000005.pt" and state["counters"]["updates"] == 5

    said = log_of_a_start_that_counts_one_loss(job, updates=6)
    assert "1 save(s) cut off mid-write: the rank writing it was killed (.tmp-" in said, said[-3000:]
    assert "terminationGracePeriodSeconds (1s). resuming from /checkpoints/" in said and "ckpt-0000000005.pt, the newest whole" in said
    assert not list(job.checkpoint_dir.glob(".tmp-*.part")) and not (job.checkpoint_dir / ".stop-pending.json").exists()


def test_a_stop_killed_before_a_byte_of_its_checkpoint_is_written_is_said_at_the_next_start(tmp_path):
    """Rank 0's updates take 2 s each (chaos_hook's sleep at each update boundary, as a large model's update or a
    long rollout does), the grace period 1 s: the SIGKILL comes inside an update, before the stop's save has begun,
    so no temp file is left to tell. Rank 0 recorded the stop when it came (.stop-pending.json); the next start
    says the stop's checkpoint was never written, what it resumes from, and counts the loss in checkpoints_skipped.
    A stop whose checkpoint is written leaves no record (the SIGTERM test beside: no word, the gauge 0)."""
    from kuberl_trainer import checkpoint

    from .support import Ranks, make_job

    hook = chaos_hook(tmp_path, {"point": "update", "rank": 0, "sleep": 2.0})
    job = make_job(tmp_path / "job", checkpoint={"everyUpdates": 2}, runPolicy={"terminationGracePeriodSeconds": 1})
    ranks = Ranks(job, extra_env={"PYTHONPATH": str(hook)})
    try:
        ranks.wait_for_updates(5, timeout=90)  # checkpoints at updates 2 and 4 written
        stop_both_and_outlive_the_grace_period(ranks)
    finally:
        ranks.kill()
    assert not list(job.checkpoint_dir.glob(".tmp-*.part")), "killed before its save began: no temp file"
    newest, state = checkpoint.load_newest(str(job.checkpoint_dir))
    pending = json.loads((job.checkpoint_dir / ".stop-pending.json").read_text())
    assert pending["updates"] > state["counters"]["updates"] == 4, (pending, newest)

    said = log_of_a_start_that_counts_one_loss(job, updates=5)
    assert f"the last stop asked of rank 0 ({pending['askedAt']}) at update {pending['updates']}" in said, said[-3000:]
    assert ("ended before its checkpoint was written: rank 0 was killed, as when spec.runPolicy.terminationGracePeriodSeconds"
            " (1s) runs out") in said and "Resuming from /checkpoints/" in said and "ckpt-0000000004.pt (update 4)" in said
    assert not (job.checkpoint_dir / ".stop-pending.json").exists()
