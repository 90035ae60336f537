"""A script that states no reason: the last rank exits 3 on a bad batch; the
others, finding their peer gone in all_reduce, exit 1 at once (no traceback to
print), so every pod has failed by the next time anyone looks. The job must
name the first failure, not the lowest rank's echo of it."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.barrier()
    if rank == world - 1:
        print(f"first_failure rank {rank}: bad batch 17, exiting 3", flush=True)
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        print(f"first_failure rank {rank}: peer gone ({str(e)[:70]})", flush=True)
        os._exit(1)


if __name__ == "__main__":
    main()
