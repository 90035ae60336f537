"""What does a gradient sync wait for? Two ranks on this machine, their
gradient sums through torch.distributed's all-reduce on gloo (the trainer's
one engine), measured three ways in one run:

1. floor: back-to-back all-reduces of a tensor the size of the PPO agent's
   gradient, nothing else running in the ranks;
2. training: the real PPOTrainer (bench.py's CartPole settings), each
   gradient all-reduce timed from launch (this rank's gradient ready) to
   completion, its launch stamped on the system-wide monotonic clock, so the
   two ranks' launches of the same sync can be compared: the gap between
   them is time the earlier rank waits for the later. The trainer's own path
   (the fused step for small MLPs), or with --module DDP's (comm hook);
3. fixed: the fused step on one fixed minibatch per rank, its flat gradient
   all-reduced once per step (identical work on both ranks: no imbalance).

    .venv/bin/python bench/sync_wait.py [--updates 10] [--floor-calls 500] [--module] [--separate-pods] [--floats N]
                                        [--blocking] [--gloo-loop-unchanged]

Every sum goes through the trainer's own `all_reduce_gradient`, which waits
by yielding the CPU for up to 10 ms before it blocks; --blocking makes it
block at once. The two ranks are the processes of one pod
(LOCAL_WORLD_SIZE 2: each takes its own slice of the CPUs,
distributed.pin_threads); --separate-pods runs them as two one-process pods
sharing every CPU, as `kuberl run` does.

--gloo-loop-unchanged leaves gloo's event loop thread a normal thread, as
the trainer ran before distributed.calm_gloo_loop: woken by a peer's data
onto the core where the gloo worker holding a pair's lock runs, it preempts
that worker and spins on the lock until the next scheduler tick.

Prints milliseconds per sync (median, p90, min) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the tests' port picker: ports outside the kernel's ephemeral range
from tests.support.ports import free_port


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def summary(ms: list[float]) -> str:
    if not ms:
        return "-"
    ordered = sorted(ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(ms):.3f} ms, p90 {p90:.3f}, min {ordered[0]:.3f} ({len(ms)} syncs)"


# --- one rank ---------------------------------------------------------------------------


def rank_main(out: str, updates: int, floor_calls: int, module: bool, floats: int | None,
              blocking: bool, gloo_loop_unchanged: bool) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from kuberl.core.spec import PPOConfig
    from kuberl_trainer import distributed, fused
    from kuberl_trainer.distributed import process_group
    from kuberl_trainer.ppo import PPOTrainer
    from kuberl_trainer.session import BareSession

    sys.path.insert(0, str(REPO / "bench"))
    sys.path.insert(0, str(REPO / "tests/unit"))
    from test_trainer_fused import minibatch

    from bench import KUBERL_PPO_CARTPOLE, _snake

    if blocking:
        distributed.GRADIENT_SPIN_SECONDS = 0.0
    if gloo_loop_unchanged:
        distributed.calm_gloo_loop = lambda: 0
    with process_group("gloo", 600, 120) as ctx:
        fused.flush_subnormals()  # as the trainer's entry point does
        hp = PPOConfig(**_snake(KUBERL_PPO_CARTPOLE))
        supports = fused.supports
        if module:
            fused.supports = lambda *args, **kwargs: False
        trainer = PPOTrainer(ctx, hp, "CartPole-v1", 8, {}, 10**9, 1, 0)
        fused.supports = supports
        size = sum(p.numel() for p in trainer.agent.parameters())
        result: dict = {"rank": ctx.rank, "gradient_floats": size, "threads": torch.get_num_threads(),
                        "cpus": sorted(os.sched_getaffinity(0)),
                        "path": "fused" if isinstance(trainer.learner, fused.FusedPPOStep) else "DDP module",
                        "wait": "blocking" if blocking else "yielding",
                        "gloo_loop": "unchanged (SCHED_OTHER)" if gloo_loop_unchanged else "SCHED_BATCH"}

        # 1. the floor
        grad = torch.zeros(floats or size)
        for _ in range(50):
            distributed.all_reduce_gradient(ctx, grad)
        floor = []
        for _ in range(floor_calls):
            started = now()
            distributed.all_reduce_gradient(ctx, grad)
            floor.append(now() - started)
        result["floor"] = floor
        if floats:  # the floor alone, for another network's gradient size
            result["gradient_floats"] = floats
            with open(f"{out}-rank{result['rank']}.json", "w") as f:
                json.dump(result, f)
            return

        # 2. inside training, launch stamps on the shared clock
        launches: list[float] = []
        waits: list[float] = []

        def timed_allreduce(tensor):
            started = now()
            launches.append(started)
            distributed.all_reduce_gradient(ctx, tensor)
            waits.append(now() - started)

        def hook(_state, bucket):
            started = now()
            launches.append(started)
            future = dist.all_reduce(bucket.buffer().div_(ctx.world_size), async_op=True).get_future()

            def done(f):
                waits.append(now() - started)
                return f.value()[0]

            return future.then(done)

        if isinstance(trainer.learner, fused.FusedPPOStep):
            trainer.learner.allreduce = timed_allreduce
        else:
            trainer.learner.model.register_comm_hook(None, hook)
        trainer.train(BareSession(2))  # warm-up
        launches.clear()
        waits.clear()
        session = BareSession(updates)
        trainer.train(session)
        result["training"] = {"launches": list(launches), "waits": list(waits),
                              "update_seconds": [r.update_seconds for r in session.reports],
                              "rollout_seconds": [r.rollout_seconds for r in session.reports]}

        # 3. the fused step on a fixed minibatch, one flat all-reduce per gradient step
        step = trainer.learner if isinstance(trainer.learner, fused.FusedPPOStep) else fused.FusedPPOStep(trainer.agent, hp, trainer.optimizer, world_size=ctx.world_size)
        step.allreduce = timed_allreduce
        obs, rows = minibatch(trainer.agent, np.random.default_rng(ctx.rank), 256, 4)
        for _ in range(20):
            step.step(obs, rows)
        waits.clear()
        launches.clear()
        started, process_cpu, thread_cpu = now(), time.process_time(), time.thread_time()
        for _ in range(updates * 20):
            step.step(obs, rows)
        steps = updates * 20
        result["fixed"] = {"launches": launches, "waits": waits, "seconds_per_step": (now() - started) / steps,
                           # all of the process's threads vs the training thread: gloo's own threads' share
                           "process_cpu_per_step": (time.process_time() - process_cpu) / steps,
                           "thread_cpu_per_step": (time.thread_time() - thread_cpu) / steps}
    with open(f"{out}-rank{result['rank']}.json", "w") as f:
        json.dump(result, f)


# --- the launcher -------------------------------------------------------------------------


def report(results: list[dict]) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    how = f"sums over gloo, {results[0]['wait']} wait, gloo event loop {results[0]['gloo_loop']}"
    print(f"2 ranks, {how}, {results[0]['gradient_floats']} floats per gradient, torch threads per rank "
          f"{results[0]['threads']}, CPUs {[r['cpus'] for r in results]}, training path {results[0]['path']}, load {load}")
    for r in results:
        print(f"  rank {r['rank']} floor (idle ranks, back to back): {summary([1000 * x for x in r['floor']])}")
    if "training" not in results[0]:
        return
    for part in ("training", "fixed"):
        a, b = results[0][part], results[1][part]
        n = min(len(a["launches"]), len(b["launches"]))
        gaps = [1000 * abs(a["launches"][i] - b["launches"][i]) for i in range(n)]
        for r in results:
            print(f"  rank {r['rank']} {part}: wait per sync {summary([1000 * x for x in r[part]['waits']])}")
        print(f"  {part}: gap between the ranks' launches of the same sync {summary(gaps)}")
        early = [1000 * (b["launches"][i] - a["launches"][i]) for i in range(n)]
        print(f"  {part}: rank 0 launches first in {sum(e > 0 for e in early)} of {n} syncs")
    print(f"  fixed: ms per fused gradient step including its sync, rank 0 {1000 * results[0]['fixed']['seconds_per_step']:.3f}, "
          f"rank 1 {1000 * results[1]['fixed']['seconds_per_step']:.3f}")
    for r in results:
        f = r["fixed"]
        print(f"  rank {r['rank']} fixed: CPU ms per step, training thread {1000 * f['thread_cpu_per_step']:.3f}, "
              f"whole process {1000 * f['process_cpu_per_step']:.3f}")
    for r in results:
        t = r["training"]
        print(f"  rank {r['rank']} training: update {1000 * statistics.median(t['update_seconds']):.1f} ms, "
              f"rollout {1000 * statistics.median(t['rollout_seconds']):.1f} ms (medians)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--floor-calls", type=int, default=500)
    parser.add_argument("--module", action="store_true", help="train through DDP's module path, not the fused step")
    parser.add_argument("--separate-pods", action="store_true",
                        help="two one-process pods sharing every CPU (kuberl run), not one pod of two processes")
    parser.add_argument("--floats", type=int, help="measure only the floor, for a gradient of this many floats")
    parser.add_argument("--gloo-loop-unchanged", action="store_true",
                        help="leave gloo's event loop thread SCHED_OTHER (the trainer before calm_gloo_loop)")
    parser.add_argument("--blocking", action="store_true", help="gloo: block in each all-reduce at once, no yielding wait")
    parser.add_argument("--rank-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_out:
        rank_main(args.rank_out, args.updates, args.floor_calls, args.module, args.floats, args.blocking,
                  args.gloo_loop_unchanged)
        return
    run_ranks(args, free_port())


def run_ranks(args: argparse.Namespace, port: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sync")
        procs = []
        for rank in range(2):
            # one pod of two processes (a CPU limit of 2, split), or two pods of one CPU each
            pod = ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "OMP_NUM_THREADS": "1"} if args.separate_pods else
                   {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "2"})
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port), **pod}
            procs.append(subprocess.Popen([sys.executable, __file__, "--rank-out", out, "--updates", str(args.updates),
                                           "--floor-calls", str(args.floor_calls),
                                           *(["--module"] if args.module else []),
                                           *(["--blocking"] if args.blocking else []),
                                           *(["--gloo-loop-unchanged"] if args.gloo_loop_unchanged else []),
                                           *(["--floats", str(args.floats)] if args.floats else [])],
                                          env=env, cwd=REPO))
        codes = [p.wait(timeout=1800) for p in procs]
        if any(codes):
            sys.exit(f"a rank failed: exit codes {codes}")
        report([json.loads(Path(f"{out}-rank{rank}.json").read_text()) for rank in range(2)])


if __name__ == "__main__":
    main()
