"""A GPU script as PyTorchJob users bring it: NCCL, set_device(LOCAL_RANK), a
CUDA all-reduce. On a machine without GPUs it must fail, saying why."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    total = torch.ones(1, device="cuda")
    dist.all_reduce(total)
    print(f"nccl rank {dist.get_rank()}: {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
