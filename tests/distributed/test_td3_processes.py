"""TD3's Pendulum example as pods run it: real processes, through the real entry point, on one rank: the
cheaper half of the 2-core machine's CPU (about 20 s there, unloaded). Two ranks' equal weights, update by
update, are in test_continuous_processes.py."""

import numpy as np
import yaml
from kuberl.core import contract
from kuberl_trainer import policy

from .support import REPO, Ranks, free_ports, make_job


def test_the_pendulum_example_learns_on_one_rank(tmp_path):
    """Random actions score about -1200 on Pendulum; the example's target is -200, met at about 6,600 steps by one
    rank of seed 1. Played from the final model as `kuberl eval` plays it (the actor's action, no noise) over 10
    unseen seeds, the median is the bound: an actor stopped this early swings most episodes up and a few not at
    all (-1,500 each), which a mean would weigh as much as the rest. Evaluated every 500 steps, not the example's
    200 (two ranks' 400): one rank's evaluations of 30 episodes each were a fifth of its time."""
    example = yaml.safe_load((REPO / "manifests/examples/pendulum-td3.yaml").read_text())["spec"]
    example["success"] |= {"evalEvery": 125}
    example |= {"workers": 1, "totalTimesteps": 12_000, "metrics": {"port": free_ports(1)}}
    job = make_job(tmp_path, world_size=1, raw_spec=example)
    ranks = Ranks(job)
    assert ranks.wait(timeout=300) == [0], ranks.log(0)
    assert job.termination_log(0).startswith(f"{contract.REASON_SUCCEEDED}: eval return"), ranks.log(0)
    played = policy.evaluate(policy.load_policy(str(job.final_model)), episodes=10, seed=20_000)
    assert np.median(played) >= -400, played
