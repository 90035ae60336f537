"""Run as `python -m file_store_init` with PYTHONPATH=/app, a shared file as the
rendezvous (INIT_METHOD=file:///shared/...) and rank and world size passed
explicitly, as scripts that predate env:// do."""

import os

import torch
import torch.distributed as dist
from shapes import HIDDEN


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=os.environ["INIT_METHOD"], rank=rank, world_size=world)
    total = torch.full((HIDDEN,), float(rank + 1))
    dist.all_reduce(total)
    print(f"file_store_init rank {rank}/{world}: sum {int(total[0].item())} width {total.numel()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
