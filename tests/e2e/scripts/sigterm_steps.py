"""A training loop that stops cleanly on SIGTERM, as a pod's kubelet sends it:
the handler only sets a flag, the loop checks it between steps, then the rank
saves what it has and exits 0 with no collective (signals reach ranks at
different moments). IGNORE_SIGTERM=1 makes the script that never stops, whose
pod must still end within its grace period."""

import os
import signal
import sys
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
    while not stop:
        dist.all_reduce(torch.ones(1))
        steps += 1
        time.sleep(0.05)
    print(f"sigterm_steps rank {rank} got SIGTERM after {steps} steps: saved, exiting 0", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
