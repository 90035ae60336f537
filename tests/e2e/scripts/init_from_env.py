"""A PyTorchJob user's script: the rendezvous URL comes whole from an env
value the manifest composes (`tcp://$(MASTER_ADDR):$(MASTER_PORT)`), rank and
world size from RANK and WORLD_SIZE; then a few collectives strangers use."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=os.environ["INIT_METHOD"], rank=rank, world_size=world)
    hosts = [None] * world
    dist.all_gather_object(hosts, os.environ["HOSTNAME"])
    dist.barrier()
    dist.monitored_barrier()
    pair = dist.new_group([0, 1])
    total = torch.ones(1)
    dist.all_reduce(total, group=pair)
    print(f"init_from_env rank {rank}: hosts {hosts} pair {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
