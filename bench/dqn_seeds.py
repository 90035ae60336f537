"""Sample efficiency of kuberl's DQN on CartPole, seed by seed, in env steps
(not seconds, so machine load does not decide it): one process, in-process
trainer, rl-zoo's settings as `make bench` maps them (bench.py).

    .venv/bin/python bench/dqn_seeds.py --seeds 1 2 3 [--max-steps 100000] [--unflushed]

Prints, per seed, the global env step at which a greedy evaluation of 20
episodes first reached 475 (checked every 5120 steps, as `make bench`
does), or "-" when it never did, the evaluation curve and the wall time.
--unflushed leaves subnormal floats as they are (the trainer before
fused.flush_subnormals): the same steps to solve, twice the time on long seeds.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from kuberl.core.spec import DQNConfig
from kuberl_trainer import fused
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer

from bench import KUBERL_DQN_CARTPOLE, TARGET, _snake

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
EVAL_EVERY_STEPS = 5120
EVAL_EPISODES = 20


class EvalSession:
    """Greedy evaluation every EVAL_EVERY_STEPS env steps; stops at the target."""

    restart = 0

    def __init__(self, seed: int, max_steps: int):
        self.seed, self.max_steps, self.curve, self.solved_at, self.next_eval = seed, max_steps, [], None, EVAL_EVERY_STEPS
        self.step = 0

    def stop_requested(self) -> bool:
        return self.step >= self.max_steps

    def success_vote(self) -> bool:
        return self.solved_at is not None

    def divergence_vote(self) -> bool:
        return False

    def log(self, line: str) -> None:
        print(line, flush=True)

    def load(self) -> None:
        return None

    def after_update(self, report, trainer) -> None:
        step = self.step = report.counters.global_step
        if step < self.next_eval:
            return
        self.next_eval += EVAL_EVERY_STEPS
        value = trainer.evaluate("CartPole-v1", EVAL_EPISODES, {}, seed=10_000 + self.seed + step)
        self.curve.append((step, round(value, 1)))
        if value >= TARGET and self.solved_at is None:
            self.solved_at = step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--total", type=int, default=200_000, help="totalTimesteps (sets epsilon's schedule)")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--set", default="{}", help="JSON overrides of the DQN hyperparameters (snake_case)")
    parser.add_argument("--unflushed", action="store_true", help="keep subnormal floats (no fused.flush_subnormals)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.unflushed:
        fused.flush_subnormals()  # as the trainer's entry point does
    hp = DQNConfig(**{**_snake(KUBERL_DQN_CARTPOLE), **json.loads(args.set)})
    for seed in args.seeds:
        started = time.time()
        trainer = DQNTrainer(ONE_PROCESS, hp, "CartPole-v1", args.num_envs, {}, args.total, seed=seed, restart=0)
        session = EvalSession(seed, args.max_steps)
        trainer.train(session)
        print(json.dumps({"seed": seed, "solved_at": session.solved_at, "steps": trainer.counters.global_step,
                          "seconds": round(time.time() - started, 1), "curve": session.curve}), flush=True)


if __name__ == "__main__":
    main()
