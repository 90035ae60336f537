"""Run as `python -m file_store_init --dist-url file:///shared/pg --world-size N --rank R`
with PYTHONPATH=/app: the flags of PyTorch's ImageNet example, a file on a
shared volume as the rendezvous, rank and world size passed explicitly."""

import argparse

import torch
import torch.distributed as dist
from shapes import HIDDEN


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist-url", default="env://")
    parser.add_argument("--world-size", type=int, default=-1)
    parser.add_argument("--rank", type=int, default=-1)
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method=args.dist_url, rank=args.rank, world_size=args.world_size)
    total = torch.full((HIDDEN,), float(args.rank + 1))
    dist.all_reduce(total)
    print(f"file_store_init rank {args.rank}/{args.world_size}: sum {int(total[0].item())} width {total.numel()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
