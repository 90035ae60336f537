"""PyTorch's "ddp elastic" tutorial, as its users bring it: started by torch's
launcher, `init_process_group(backend="gloo")` with no other argument, every
name the launcher sets read with os.environ[...] (a KeyError if one is missing),
`@record` on main; then DDP and the collectives strangers use."""

import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

# torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers
LAUNCHER_NAMES = ("LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                  "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")


@record
def main() -> None:
    env = {name: os.environ[name] for name in LAUNCHER_NAMES}
    local_rank, local_world = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert (rank, world) == (int(env["RANK"]), int(env["WORLD_SIZE"])), (rank, world, env)
    assert rank == int(env["GROUP_RANK"]) * local_world + local_rank, env
    assert world == int(env["GROUP_WORLD_SIZE"]) * local_world == int(env["ROLE_WORLD_SIZE"]), env

    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimiser.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimiser.step()
    weights = [None] * world
    dist.all_gather_object(weights, [round(w, 6) for w in model.module.weight.flatten().tolist()])
    assert all(w == weights[0] for w in weights), weights

    evens = dist.new_group(list(range(0, world, 2)))
    if rank % 2 == 0:
        total = torch.ones(1)
        dist.all_reduce(total, group=evens)
        assert int(total.item()) == len(range(0, world, 2))
    dist.barrier()
    message = [f"from rank 0 of run {env['TORCHELASTIC_RUN_ID']}" if rank == 0 else None]
    dist.broadcast_object_list(message, src=0)
    print(f"elastic_ddp rank {rank}/{world} group {env['GROUP_RANK']} local {local_rank}/{local_world} "
          f"restart {env['TORCHELASTIC_RESTART_COUNT']} master {env['MASTER_ADDR']}:{env['MASTER_PORT']} "
          f"heard {message[0]!r} threads {torch.get_num_threads()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Skip finalization, where torch 2.13's gloo worker thread can still be freeing broadcast_object_list's
    # tensors and aborts the interpreter (exit 134, 1 run in 100 here; see dcp_reshard.py). A retried pod
    # would print its lines twice.
    os._exit(0)
