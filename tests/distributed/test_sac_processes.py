"""SAC as pods run it: real processes, gloo on 127.0.0.1.

The Pendulum example is run with its own seed, on a smaller batch and an earlier start, so two ranks
on a 2-core machine learn within about a minute (a seeded 2-rank run is reproducible: seeded envs,
weights, noise and replay sampling, and one order of the gloo sum)."""

import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from kuberl.core import contract
from kuberl.core.spec import SACConfig
from kuberl_trainer import policy
from kuberl_trainer.distributed import process_group
from kuberl_trainer.sac import SACTrainer

from .support import REPO, Ranks, free_ports, make_job

# --- every rank learns from its own buffer and ends with the same weights --------------


def run_updates(out: str, updates: int = 12) -> None:
    """SAC updates on this rank's own envs and replay buffer (distinct seeds per rank), learning from
    the 4th on; the state saved to `out`."""
    with process_group("gloo", 60, 60) as ctx:
        hp = SACConfig(learning_starts=32, batch_size=16, train_frequency=8, gradient_steps=4, hidden_sizes=[16],
                       buffer_size=1000, policy_frequency=1)
        trainer = SACTrainer(ctx, hp, "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
        for _ in range(updates):
            trainer.update(False, False)
        torch.save({**trainer.shared_state(), "first_obs": trainer.replay.obs[0]}, out)


def launch_run_updates(out: Path, rank: int, world_size: int, port: int) -> subprocess.Popen:
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
           "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1"}
    code = f"from tests.distributed.test_sac_processes import run_updates; run_updates({str(out)!r})"
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO)


def test_two_ranks_learning_from_their_own_buffers_keep_equal_weights(tmp_path):
    """The actor's, both critics' and alpha's gradients are all-reduced: ranks that sample different
    transitions and noise step to the same weights, the target critics follow alike, and the Adam moments
    agree; the weights moved from where they started."""
    port = free_ports(1)
    procs = [launch_run_updates(tmp_path / f"rank{r}.pt", r, 2, port) for r in range(2)]
    assert [p.wait(timeout=90) for p in procs] == [0, 0]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2))
    assert not (rank0["first_obs"] == rank1["first_obs"]).all()  # each rank's own envs
    assert rank0["critic_updates"] == rank1["critic_updates"] == 9 * 4  # learning from the 4th update (its 32 transitions per rank) on
    for net in ("agent", "critics", "target", "temperature"):
        for name, value in rank0[net].items():
            assert torch.equal(value, rank1[net][name]), (net, name)
    for group in ("critics", "policy"):
        for key, state in rank0["optimizer"][group]["state"].items():
            for name, tensor in state.items():
                assert torch.equal(tensor, rank1["optimizer"][group]["state"][key][name]), (group, key, name)
    assert rank0["temperature"]["log_alpha"].item() != 0.0  # alpha learned, from 1


# --- the real entry point --------------------------------------------------------


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
