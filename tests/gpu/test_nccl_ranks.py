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

import pytest
import torch

from tests.distributed.support import check_graphed_ranks, run_workers

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
