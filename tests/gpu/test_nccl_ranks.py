"""Two ranks on two GPUs over NCCL, for a node with two GPUs or more (a pod of 4 GPUs is the examples' shape;
one GPU cannot hold two NCCL ranks: NCCL refuses a duplicate GPU). Skipped elsewhere, and says so.

workers.graphed_ranks runs, per rank, what tests/distributed runs on two gloo ranks
(test_the_graphed_learners_between_two_gloo_ranks_learn_what_ddp_learns): the process group from the
env contract (cuda:LOCAL_RANK, set before the group; device_id binds it), a barrier and the trainer's
collectives on CUDA tensors, and both graphed learners beside the reference (DDP with device_ids) on
batches of each rank's own. Here their steps replay from CUDA graphs and the gradient all-reduce runs
between the two graphs on NCCL's stream: a collective launched before the backward graph's gradient is
written, or an optimiser graph that does not wait for the sum, would leave the ranks apart or away from
DDP's weights; a capture that waited on a peer's collective would hang, and the ranks' deadline fails
the test instead of the session."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed.support import check_graphed_ranks, run_workers

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "cartpole-ppo.yaml"

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"{torch.cuda.device_count()} CUDA GPU(s) here: two NCCL ranks need two GPUs; the multi-GPU paths "
           "(NCCL between ranks, graphed learners' all-reduce on NCCL) were NOT exercised",
)


def test_two_nccl_ranks_each_on_its_local_rank_gpu_learn_from_graphs_what_ddp_learns(tmp_path):
    ranks = run_workers("graphed_ranks", tmp_path, 2, timeout=300)
    check_graphed_ranks(ranks, "nccl")
    for rank, seen in enumerate(ranks):
        assert (seen["device"], seen["current_device"]) == (f"cuda:{rank}", rank)
        captured = {name: learner["captured"] for name, learner in seen["learners"].items() if "graphed" in name}
        assert captured == {"q graphed": True, "ppo graphed": True}  # replayed, not eager: a capture that failed says why in the log


def kuberl_run_on_gpus(tmp_path: Path, workers: int, gpus: int) -> subprocess.CompletedProcess:
    """cartpole-ppo.yaml through `kuberl run`, `workers` pods of `gpus` GPUs each, 2,048 timesteps."""
    return subprocess.run([sys.executable, "-m", "kuberl.cli", "run", str(EXAMPLE), "--dir", "runs", f"--set=workers={workers}",
                           f"--set=gpusPerWorker={gpus}", "--set=totalTimesteps=2048"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.parametrize(("workers", "gpus"), [(1, 2), (2, 1)], ids=["one pod of 2 GPUs", "two pods of 1 GPU each"])
def test_kuberl_run_trains_on_two_gpus_through_nccl(tmp_path, workers, gpus):
    """The trainer end to end on two GPUs: one pod through torch's launcher (the examples' 4-GPU pods in small), and
    two pods, which kuberl run gives a GPU each as a device plugin would (both took cuda:0 before, which NCCL refuses)."""
    done = kuberl_run_on_gpus(tmp_path, workers, gpus)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "2 rank(s), backend nccl, rank 0 on cuda:0" in out and "cartpole-ppo succeeded" in out, out[-4000:]
