"""Kubeflow's smoke-dist/dist_sendrecv.py pattern, as a user brings it: one
process per pod, the process group from the environment PyTorchJob sets
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), point-to-point to rank 0."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    print(f"env WORLD_SIZE={os.environ.get('WORLD_SIZE')} RANK={os.environ.get('RANK')} "
          f"MASTER_ADDR={os.environ.get('MASTER_ADDR')} MASTER_PORT={os.environ.get('MASTER_PORT')}", flush=True)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        received = []
        for peer in range(1, world):
            tensor = torch.zeros(1)
            dist.recv(tensor, src=peer)
            received.append(int(tensor.item()))
        print(f"rank 0 received {received}", flush=True)
    else:
        dist.send(torch.tensor([float(rank * 10)]), dst=0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
