"""Kubeflow's elastic/echo/echo.py pattern: started by torch's launcher with
no rendezvous flags beyond the backend, so it meets wherever the environment
says; prints what the launcher gave it, then proves the group works."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
    print("echo " + " ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    print(f"echo rank {dist.get_rank()} of {dist.get_world_size()}: sum of ranks {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
