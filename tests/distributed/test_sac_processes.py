"""SAC's Pendulum example as pods run it: real processes, gloo on 127.0.0.1.

The example is run with its own seed, on a smaller batch and an earlier start, so two ranks
on a 2-core machine learn within about a minute (a seeded 2-rank run is reproducible: seeded envs,
weights, noise and replay sampling, and one order of the gloo sum). Two ranks' equal weights, update by
update, are in test_continuous_processes.py."""

import yaml
from kuberl.core import contract
from kuberl_trainer import policy

from .support import REPO, Ranks, free_ports, make_job


def test_the_pendulum_example_learns_with_two_ranks(tmp_path):
    """Random actions score about -1200 on Pendulum; the example's target is -200. Here a smaller batch (64)
    and an earlier start (500 transitions per rank) keep the run short, and the bound is -400 over 10
    unseen seeds, played from the final model as `kuberl eval` plays it (the squashed mean action)."""
    example = yaml.safe_load((REPO / "manifests/examples/pendulum-sac.yaml").read_text())["spec"]
    example["sac"] |= {"batchSize": 64, "learningStarts": 500}
    example["success"] |= {"targetReturn": -300}
    example |= {"totalTimesteps": 12_000, "metrics": {"port": free_ports(2)}}
    job = make_job(tmp_path, raw_spec=example)
    ranks = Ranks(job)
    assert ranks.wait(timeout=300) == [0, 0], ranks.log(0)
    assert job.termination_log(0).startswith(f"{contract.REASON_SUCCEEDED}: eval return"), ranks.log(0)
    played = policy.evaluate(policy.load_policy(str(job.final_model)), episodes=10, seed=20_000)
    assert played.mean() >= -400, played
