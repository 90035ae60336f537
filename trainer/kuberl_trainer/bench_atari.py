"""Pong throughput per rank: `python -m kuberl_trainer.bench_atari`.

Env steps per second for each backend with random actions (no learner) --
ale-py's threaded backend at 1 and 2 threads, with its scaling -- then PPO
and DQN from pixels at world size 1 (acting, learning, the update's
bookkeeping; PPO also with spec.ppo.learnWhileCollecting), and each run's peak resident memory; for the envs alone, the
seconds to build them and reset them with a seed (a rank's startup). Besides wall
steps/s it prints steps per CPU-second of this process, which a machine
shared with other work does not distort: a pod's rank with a dedicated core
runs at about that rate (EnvPool's pool threads count in it too).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import multiprocessing
import resource
import time

import numpy as np
import torch
from kuberl.core.spec import DQNConfig, PPOConfig

from . import atari
from .distributed import Dist
from .dqn import DQNTrainer
from .envs import make_envs
from .ppo import PPOTrainer
from .session import BareSession

ENV_ID = "ALE/Pong-v5"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def env_only(backend: str, num_envs: int, seconds: float) -> dict:
    started = time.perf_counter()
    envs = make_envs(ENV_ID, num_envs, {}, backend)
    envs.reset(seed=1)
    built = time.perf_counter() - started
    rng = np.random.default_rng(1)
    steps, wall, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        envs.step(rng.integers(0, 6, num_envs))
        steps += num_envs
    result = _rates(steps, wall, cpu) | {"build s": built}
    envs.close()
    return result


def thread_scaling(num_envs: int, rounds: int, seconds: float) -> list[float]:
    """ale's 2-thread rate over its 1-thread rate, one ratio per round: both
    pools live in this process and take turns, so drift in what else the
    machine runs falls on both sides of each ratio alike."""
    pools = {threads: atari.make_atari_envs(ENV_ID, num_envs, {}, "ale", num_threads=threads) for threads in (1, 2)}
    rng = np.random.default_rng(1)
    for envs in pools.values():
        envs.reset(seed=1)
    ratios = []
    for _ in range(rounds):
        rate = {}
        for threads, envs in pools.items():
            steps, wall = 0, time.perf_counter()
            while time.perf_counter() - wall < seconds:
                envs.step(rng.integers(0, 6, num_envs))
                steps += num_envs
            rate[threads] = steps / (time.perf_counter() - wall)
        ratios.append(rate[2] / rate[1])
    for envs in pools.values():
        envs.close()
    return ratios


def _rates(steps: int, wall: float, cpu: float) -> dict:
    wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    return {"steps": steps, "steps/s": steps / wall_s, "steps/cpu-s": steps / max(cpu_s, 1e-9)}


def with_learner(algorithm: str, backend: str, num_envs: int, timesteps: int) -> dict:
    ctx = Dist(0, 1, 0, 1, torch.device("cpu"), None)
    if algorithm in ("ppo", "ppo-lagged"):  # CleanRL's Atari settings, one rank
        hp = PPOConfig(num_steps=128, num_minibatches=4, update_epochs=4, learning_rate=2.5e-4,
                       learn_while_collecting=algorithm == "ppo-lagged")
        trainer = PPOTrainer(ctx, hp, ENV_ID, num_envs, {}, timesteps, 1, 0, env_backend=backend)
    else:  # one gradient step of 32 per 4 env steps, as the Nature DQN
        hp = DQNConfig(buffer_size=10_000, batch_size=32, learning_starts=512, train_frequency=4)
        trainer = DQNTrainer(ctx, hp, ENV_ID, num_envs, {}, timesteps, 1, 0, env_backend=backend)
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train(BareSession())
    result = _rates(trainer.counters.global_step, wall, cpu)
    trainer.envs.close()
    return result


def measure(run: str, backend: str, args: argparse.Namespace, threads: int) -> tuple[dict, float]:
    """One measurement in this (fresh) process: its rates and peak RSS."""
    torch.set_num_threads(threads)  # the rank's CPU share: ale's env threads follow it (atari.env_threads)
    if run == "envs":
        result = env_only(backend, args.num_envs, args.seconds)
    else:
        result = with_learner(run, backend, args.num_envs, args.timesteps)
    return result, peak_rss_mib()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--timesteps", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a rank's CPU share) for the learner runs")
    args = parser.parse_args(argv)
    others = ["gymnasium"] + (["envpool"] if importlib.util.find_spec("envpool") else [])
    labels = {"envs": "envs only", "ppo": "ppo (CNN, fp32)", "ppo-lagged": "ppo, learning while collecting",
              "dqn": "dqn (CNN, fp32)"}
    plan = [("envs", "ale", 1), ("envs", "ale", 2)] + [("envs", b, args.threads) for b in others]
    plan += [(run, backend, args.threads) for run in ("ppo", "dqn") for backend in ["ale", *others]]
    plan.insert(plan.index(("ppo", "ale", args.threads)) + 1, ("ppo-lagged", "ale", args.threads))
    rows = []
    for run, backend, threads in plan:
        # a fresh process per run, so each peak RSS is that run's own
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            result, rss = pool.submit(measure, run, backend, args, threads).result()
        rows.append((backend, threads, labels[run], result, rss))
    print(f"Pong per rank: {args.num_envs} envs, CPU")
    print(f"{'backend':<10} {'threads':>7} {'run':<30} {'steps':>7} {'steps/s':>9} {'steps/cpu-s':>12} {'peak RSS MiB':>13}"
          f" {'build s':>8}")
    for backend, threads, run, r, rss in rows:
        built = f"{r['build s']:>8.2f}" if "build s" in r else ""
        print(f"{backend:<10} {threads:>7} {run:<30} {r['steps']:>7} {r['steps/s']:>9.0f} {r['steps/cpu-s']:>12.0f} {rss:>13.0f} {built}")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        ratios = sorted(pool.submit(thread_scaling, args.num_envs, 7, args.seconds / 5).result())
    print(f"ale's threaded env, 2 threads over 1: {ratios[len(ratios) // 2]:.2f}x, median of {len(ratios)} "
          f"interleaved rounds (range {ratios[0]:.2f}-{ratios[-1]:.2f}x; goal >= 1.8x on 2 free cores)")


if __name__ == "__main__":
    main()
