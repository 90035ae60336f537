"""Milliseconds per PPO gradient step on one minibatch, one torch thread:
the nn.Module path (learners.AutogradPPOLearner.step's maths: autograd, foreach
clipping, fused Adam) against kuberl_trainer.fused's hand-fused step.

    .venv/bin/python bench/fused_step.py [--batch 256] [--hidden 64 64] [--repeats 7]

Each repeat times `--steps` consecutive steps; the machine is shared, so the
minimum over repeats is the figure to quote (the median is printed beside it,
with the load average).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/unit"))
from kuberl.core.spec import PPOConfig
from kuberl_trainer import fused
from kuberl_trainer.ppo import Agent
from test_trainer_fused import minibatch, module_step


def time_steps(step, batches, steps: int) -> tuple[float, float]:
    """(wall, this thread's CPU) milliseconds per step: on a loaded machine
    the CPU time leaves out the time other processes held the core."""
    started, cpu = time.perf_counter(), time.thread_time()
    for i in range(steps):
        step(*batches[i % len(batches)])
    return (time.perf_counter() - started) / steps * 1000, (time.thread_time() - cpu) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--obs-dim", type=int, default=4)
    parser.add_argument("--actions", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    hp = PPOConfig(hidden_sizes=args.hidden, clip_value_loss=False, ent_coef=0.0, max_grad_norm=0.5)
    torch.manual_seed(0)
    reference = Agent(args.obs_dim, gym.spaces.Discrete(args.actions), args.hidden)
    agent = copy.deepcopy(reference)
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-4, eps=1e-5, fused=True)
    fused_step = fused.FusedPPOStep(agent, hp, torch.optim.Adam(agent.parameters(), lr=1e-4, eps=1e-5))
    rng = np.random.default_rng(0)
    batches = [minibatch(reference, rng, args.batch, args.obs_dim) for _ in range(8)]
    sides = {
        "module": lambda obs, rows: module_step(reference, optimizer, obs, rows, hp, keep_grads=False),
        "fused": fused_step.step,
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for name, step in sides.items():
        time_steps(step, batches, 20)  # warm up
    for _ in range(args.repeats):
        for name, step in sides.items():  # interleaved, so load hits both alike
            results[name].append(time_steps(step, batches, args.steps))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"batch {args.batch}, hidden {args.hidden}, obs {args.obs_dim}, actions {args.actions}, 1 thread, load {load}")
    for name, times in results.items():
        wall, cpu = [t[0] for t in times], [t[1] for t in times]
        print(f"  {name:7s} ms/step wall min {min(wall):.3f} median {statistics.median(wall):.3f}; "
              f"CPU min {min(cpu):.3f} median {statistics.median(cpu):.3f}  ({args.repeats} x {args.steps} steps)")
    module, fast = results["module"], results["fused"]
    print(f"  speed-up (min/min): wall {min(t[0] for t in module) / min(t[0] for t in fast):.2f}x, "
          f"CPU {min(t[1] for t in module) / min(t[1] for t in fast):.2f}x")


if __name__ == "__main__":
    main()
