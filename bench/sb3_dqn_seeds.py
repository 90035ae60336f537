"""SB3's side of bench/dqn_seeds.py: the env step at which SB3's DQN first
solves CartPole (greedy 20 episodes >= 475, checked every 5120 steps), seed
by seed, with rl-zoo's settings. Runs in .tools/sb3-venv (never imports kuberl):

    .tools/sb3-venv/bin/python bench/sb3_dqn_seeds.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

# bench.py's RLZOO_DQN_CARTPOLE (not imported: this venv has no kuberl)
RLZOO_DQN_CARTPOLE = {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100000, "learning_starts": 1000,
                      "gamma": 0.99, "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
                      "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
                      "policy_kwargs": {"net_arch": [256, 256]}}
TARGET, EVAL_EVERY_STEPS, EVAL_EPISODES = 475.0, 5120, 20


class Watch(BaseCallback):
    def __init__(self, eval_env, max_steps: int):
        super().__init__()
        self.eval_env, self.max_steps = eval_env, max_steps
        self.next_eval, self.curve, self.solved_at = EVAL_EVERY_STEPS, [], None

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self.next_eval += EVAL_EVERY_STEPS
            value, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
            self.curve.append((self.num_timesteps, round(float(value), 1)))
            if value >= TARGET:
                self.solved_at = self.num_timesteps
                return False
        return self.num_timesteps < self.max_steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--total", type=int, default=200_000, help="total_timesteps (sets epsilon's schedule)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        started = time.time()
        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
        model = DQN("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **RLZOO_DQN_CARTPOLE)
        watch = Watch(eval_env, args.max_steps)
        model.learn(total_timesteps=args.total, callback=watch)
        print(json.dumps({"seed": seed, "solved_at": watch.solved_at, "steps": int(model.num_timesteps),
                          "seconds": round(time.time() - started, 1), "curve": watch.curve}), flush=True)


if __name__ == "__main__":
    main()
