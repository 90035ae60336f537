"""What a GPU would wait on per optimiser step of the reference learners (the path a GPU
rank runs; here on CPU with fast=False): Python calls, aten ops dispatched (all of them, and
those that are neither views nor metadata: a kernel launch or more each on a GPU), host
syncs (item/bool/float of a tensor) per learn(), and CPU ms per step. The counts do not move
with the machine's load, so two commits compare on a shared machine.

    python bench/step_counts.py dqn-pong dqn-cartpole ppo-pong ppo-cartpole
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer
from torch.utils._python_dispatch import TorchDispatchMode

METADATA = {"detach", "lift_fresh", "t", "_record_function_enter_new", "_record_function_exit"}
ENVS = {"pong": "ALE/Pong-v5", "cartpole": "CartPole-v1"}


class Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.all = self.kernels = self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.all += 1
        self.kernels += not func.is_view and name not in METADATA
        self.syncs += name == "_local_scalar_dense"
        return func(*args, **(kwargs or {}))


def learner_of(case: str):
    """(trainer, learn, optimiser steps per learn) for 'ALGORITHM-ENV'."""
    algorithm, env = case.split("-")
    ctx = Dist(0, 1, 0, 1, torch.device("cpu"), None)
    if algorithm == "dqn":  # a gradient step of 32 per 4 env steps (Pong), 4 per 64 (CartPole)
        hp = DQNConfig(buffer_size=10_000, batch_size=32, learning_starts=128, train_frequency=4 if env == "pong" else 64)
        trainer = DQNTrainer(ctx, hp, ENVS[env], 16, {}, 10**9, 1, 0, fast=False)
        while not trainer.learning():
            trainer.collect(1.0)
        return trainer, trainer.learn, trainer.gradient_steps
    hp = PPOConfig(num_steps=32 if env == "pong" else 128, num_minibatches=4, update_epochs=2)
    trainer = PPOTrainer(ctx, hp, ENVS[env], 4, {}, 10**9, 1, 0, fast=False)
    trainer.collect()
    advantages, returns = trainer.advantages(False)
    return trainer, lambda: trainer.learn(advantages, returns), hp.num_minibatches * hp.update_epochs


def measure(case: str, reps: int) -> dict:
    trainer, learn, steps = learner_of(case)
    learn()  # warm: Adam's state, the allocator
    with Counter() as counted:
        learn()
    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    learn()
    sys.setprofile(None)
    cpu = time.process_time()
    for _ in range(reps):
        learn()
    cpu = time.process_time() - cpu
    trainer.envs.close()
    return {"case": case, "python_calls": calls / steps, "aten_ops": counted.all / steps,
            "kernel_ops": counted.kernels / steps, "syncs_per_learn": counted.syncs,
            "cpu_ms": round(cpu / reps / steps * 1e3, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", choices=[f"{a}-{e}" for a in ("dqn", "ppo") for e in ENVS])
    parser.add_argument("--reps", type=int, default=20, help="learn() calls timed per case")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for case in args.cases:
        print(json.dumps(measure(case, args.reps)), flush=True)


if __name__ == "__main__":
    main()
