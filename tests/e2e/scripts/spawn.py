"""A script that starts its own processes, as many PyTorchJob users write it:
global rank = RANK * nproc + local rank, world size from WORLD_SIZE."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank: int, nproc: int) -> None:
    rank = int(os.environ["RANK"]) * nproc + local_rank
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    print(f"spawn rank {rank} of {dist.get_world_size()}: {int(total.item())} processes answered", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    nproc = int(sys.argv[1])
    mp.spawn(worker, args=(nproc,), nprocs=nproc)
