"""What a stop vote costs while an algorithm learns (base.LearningStop.vote, between PPO's epochs and
DQN's gradient steps), at one rank (the flag alone) and at two gloo ranks (one all-reduce of two numbers
on host tensors), each rank a process of this machine. A vote that asks every unit is what an update
whose units the update before timed at STOP_VOTE_SECONDS or more gets; shorter units vote less often.

    .venv/bin/python bench/vote_cost.py [--calls 20000] [--rounds 3]

Per world size: the aten ops one vote dispatches (a TorchDispatchMode's count), then per round the
process's CPU microseconds per vote (every thread: gloo's included) and wall microseconds per vote."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

ROLE = "KUBERL_VOTE_COST_RANK"


def rank_main(calls: int, rounds: int) -> None:
    import torch
    from kuberl_trainer.base import LearningStop
    from kuberl_trainer.distributed import process_group
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    with process_group("gloo", 120, 120) as ctx:
        stop = LearningStop(ctx)
        stop.unit_seconds = 1.0  # as an update before timed it: a vote after every unit
        stop.begin(calls, lambda: False)
        with Count() as count:
            stop.vote(1)
        cpu, wall = [], []
        for _ in range(rounds):
            stop.begin(calls, lambda: False)
            started_cpu, started = time.process_time(), time.perf_counter()
            for done in range(1, calls + 1):
                stop.vote(done)
            cpu.append((time.process_time() - started_cpu) / calls * 1e6)
            wall.append((time.perf_counter() - started) / calls * 1e6)
        if ctx.rank == 0:
            print(f"{ctx.world_size} rank(s), torch {torch.__version__}: {count.ops} aten ops a vote; per round, "
                  f"CPU us a vote {', '.join(f'{c:.2f}' for c in cpu)}; wall us a vote {', '.join(f'{w:.1f}' for w in wall)}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="votes per round at one rank (two ranks: a twentieth)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if ROLE in os.environ:
        rank_main(args.calls if os.environ["WORLD_SIZE"] == "1" else max(1, args.calls // 20), args.rounds)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for world in (1, 2):
        ranks = [subprocess.Popen([sys.executable, __file__, f"--calls={args.calls}", f"--rounds={args.rounds}"],
                                  env={**os.environ, ROLE: "1", "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                                       "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port + world)})
                 for r in range(world)]
        if any(rank.wait() for rank in ranks):
            sys.exit(f"a rank of {world} failed")
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
