"""A training loop that stops cleanly on SIGTERM, as a pod's kubelet sends it:
the handler only sets a flag, and each step's all-reduce carries it, so every
rank leaves the loop at the same step. Signals reach ranks at different
moments: a rank that left alone while its peer was already in the next
collective left that peer failing 'Connection closed by peer' (a fresh-clone CI
run met it). Each rank then exits 0, where a real script saves its checkpoint
first (this one only says so). IGNORE_SIGTERM=1 makes the script that never
stops, whose pod must still end within its grace period."""

import os
import signal
import time

import torch
import torch.distributed as dist

stop = []


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get("IGNORE_SIGTERM") == "1" else lambda *_: stop.append(1))
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    print(f"sigterm_steps rank {rank} pid {os.getpid()} training", flush=True)
    steps = 0
    while True:
        any_stopped = torch.tensor([1.0 if stop else 0.0])
        dist.all_reduce(any_stopped, op=dist.ReduceOp.MAX)
        if any_stopped.item():
            break
        steps += 1
        time.sleep(0.05)
    # The gang stopped because some rank had SIGTERM; this rank's own is on its way (every pod is told).
    deadline = time.monotonic() + 2
    while not stop and time.monotonic() < deadline:
        time.sleep(0.01)
    # a real script saves its checkpoint here, every rank at the same step
    said = "got SIGTERM" if stop else "stopped with its gang before its own SIGTERM"
    print(f"sigterm_steps rank {rank} {said} after {steps} steps: saved, exiting 0", flush=True)
    dist.destroy_process_group()
    # Skip finalization, where torch 2.13's gloo worker thread can abort the interpreter (exit 134, 3 runs
    # in 120 here; see dcp_reshard.py).
    os._exit(0)


if __name__ == "__main__":
    main()
