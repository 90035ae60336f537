"""A script whose last rank fails (a bad batch) while the others wait in a
collective, main decorated with torch's `@record`: under torch's launcher the
traceback goes to TORCHELASTIC_ERROR_FILE and the launcher names it the root
cause; run directly, `@record` just re-raises."""

import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"fail_one_rank rank {rank}/{world} error file {os.environ.get('TORCHELASTIC_ERROR_FILE')}", flush=True)
    dist.barrier()
    if rank == world - 1:
        raise ValueError(f"rank {rank} read a corrupt batch 17")
    dist.all_reduce(torch.ones(1))  # waits for the rank that failed
    print(f"fail_one_rank rank {rank}: all_reduce returned", flush=True)


if __name__ == "__main__":
    main()
