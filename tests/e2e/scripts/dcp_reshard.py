"""torch.distributed.checkpoint as a user brings it: every rank saves its part
of the state into CHECKPOINT_DIR, a directory on a ReadWriteMany claim that
every worker mounts; a later job, of any world size, loads it from there."""

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def main() -> None:
    where = os.environ["CHECKPOINT_DIR"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(4, 2)
    if os.path.exists(os.path.join(where, ".metadata")):
        state = {"model": model.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=where)
        print(f"dcp rank {rank}/{world} loaded step {int(state['step'])} bias {state['model']['bias'].tolist()}", flush=True)
    else:
        with torch.no_grad():
            model.bias.copy_(torch.tensor([1.5, -2.5]))
        dcp.save({"model": model.state_dict(), "step": torch.tensor(7)}, checkpoint_id=where)
        print(f"dcp rank {rank}/{world} saved to {where}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
