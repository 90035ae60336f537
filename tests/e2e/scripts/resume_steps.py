"""A script that checkpoints and resumes, as torchrun users write it: rank 0
saves {step, weights} to CKPT_DIR every step (temp file, rename); at start,
rank 0 loads the newest and broadcasts it, whether the launcher restarted the
workers (TORCHELASTIC_RESTART_COUNT > 0) or the pods were restarted (count 0
again, the file is there). Rank 0 crashes once at step CRASH_AT (a marker file
there remembers it did)."""

import os
import sys

import torch
import torch.distributed as dist

STEPS, CRASH_AT = 8, 4


def main() -> None:
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ckpt_dir = sys.argv[1]
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    state = [{"step": 0, "weight": 0.0}]
    if rank == 0 and os.path.exists(os.path.join(ckpt_dir, "ckpt.pt")):
        state = [torch.load(os.path.join(ckpt_dir, "ckpt.pt"), weights_only=True)]
    dist.broadcast_object_list(state, src=0)
    step, weight = state[0]["step"], state[0]["weight"]
    print(f"resume_steps rank {rank} restart_count {restart} starts at step {step} weight {weight}", flush=True)
    while step < STEPS:
        grad = torch.tensor([float(rank + 1)])
        dist.all_reduce(grad)
        weight, step = weight + grad.item(), step + 1
        if rank == 0:
            tmp = os.path.join(ckpt_dir, "ckpt.pt.tmp")
            torch.save({"step": step, "weight": weight}, tmp)
            os.replace(tmp, os.path.join(ckpt_dir, "ckpt.pt"))
            marker = os.path.join(ckpt_dir, "crashed-once")
            if step == CRASH_AT and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError(f"rank 0 crashes at step {step} (once)")
    print(f"resume_steps rank {rank} done: step {step} weight {weight}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
