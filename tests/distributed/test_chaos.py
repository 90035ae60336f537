"""A few chaos trials of bench/chaos.py with fixed seeds (`make chaos` runs every fault class): a rank of a real
2-rank `kuberl run` of CartPole PPO (gloo, deterministic mode) is killed at a checkpoint's or the final model's
rename, or while pruning; the run must then end as an uninterrupted one does, bitwise,
having resumed from the newest checkpoint saved, with no file that does not load among the kept, no temp
file and no process left."""

import sys
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
