"""One PPO update's learning phase (advantages + every gradient step) in the
real PPOTrainer, one process, bench.py's CartPole settings (8 envs x 32
steps, 20 epochs of one 256-sample minibatch): through kuberl_trainer.fused
against the nn.Module path (fused.supports patched to refuse), interleaved.

    .venv/bin/python bench/ppo_learn.py [--updates 12]

Prints ms per update (wall, and this thread's CPU time, which leaves out the
time other processes held the core), min and median, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer import fused
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import KUBERL_PPO_CARTPOLE, _snake


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fused.flush_subnormals()  # as the trainer's entry point does
    hp = PPOConfig(**_snake(KUBERL_PPO_CARTPOLE))
    ctx = Dist(0, 1, 0, 1, torch.device("cpu"), None)

    def trainer() -> PPOTrainer:
        return PPOTrainer(ctx, hp, "CartPole-v1", 8, {}, 10**7, seed=1, restart=0)

    sides = {"fused": trainer()}
    with mock.patch.object(fused, "supports", lambda *a, **k: False):
        sides["module"] = trainer()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for name, t in sides.items():
        original = t.learn

        def timed(*a, _original=original, _name=name):
            wall, cpu = time.perf_counter(), time.thread_time()
            result = _original(*a)
            timings[_name].append((time.perf_counter() - wall, time.thread_time() - cpu))
            return result

        t.learn = timed
    for _ in range(args.updates + 2):
        for t in sides.values():
            t.update(False, False)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    steps = hp.update_epochs * hp.num_minibatches
    print(f"PPO CartPole learn(): {steps} gradient steps of {8 * hp.num_steps // hp.num_minibatches} samples, "
          f"hidden {list(hp.hidden_sizes)}, 1 thread, load {load}")
    for name, times in timings.items():
        wall, cpu = [1000 * w for w, _ in times[2:]], [1000 * c for _, c in times[2:]]
        print(f"  {name:7s} ms/update wall min {min(wall):.1f} median {statistics.median(wall):.1f}; "
              f"CPU min {min(cpu):.1f} median {statistics.median(cpu):.1f}  (= CPU min {min(cpu) / steps:.3f} ms per gradient step)")


if __name__ == "__main__":
    main()
