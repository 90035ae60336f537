"""One Stable-Baselines3 run for `make bench`, inside .tools/sb3-venv (it
never imports kuberl). Reads a JSON job on argv[1], writes a JSON result to
argv[2]: the learning curve (seconds since the process was launched, env
steps, last-100 training mean), when it solved, throughput, evaluation.

Solving uses kuberl's success rule: a greedy evaluation of `eval_episodes`
episodes every `eval_every` env steps reaching `target`.
"""

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy


def linear(start: float):
    """rl-zoo's `lin_<start>`: decays linearly to 0 over training."""
    return lambda progress_remaining: progress_remaining * start


class Watch(BaseCallback):
    def __init__(self, job: dict, launched: float, eval_env):
        super().__init__()
        self.job, self.launched, self.eval_env = job, launched, eval_env
        self.curve: list[list[float]] = []
        self.next_eval = job["eval_every"] or None
        self.next_point = 0
        self.solved_at = None
        self.last100_at = None
        self.eval_return = None

    def now(self) -> float:
        return time.time() - self.launched

    def _on_step(self) -> bool:
        steps = self.num_timesteps
        if steps >= self.next_point:
            self.next_point = steps + self.job["curve_every"]
            mean = float(np.mean([e["r"] for e in self.model.ep_info_buffer])) if self.model.ep_info_buffer else None
            self.curve.append([round(self.now(), 3), steps, mean])
            if mean is not None and mean >= self.job["target"] and self.last100_at is None:
                self.last100_at = self.now()
        if self.next_eval is not None and steps >= self.next_eval:
            self.next_eval = steps + self.job["eval_every"]
            returns, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.job["eval_episodes"], deterministic=True)
            self.eval_return = float(returns)
            if self.eval_return >= self.job["target"]:
                self.solved_at = self.now()
                return False
        return self.now() < self.job["time_cap"]


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    launched = job["launched"]
    torch.set_num_threads(1)
    hp = dict(job["hyperparameters"])
    n_envs = hp.pop("n_envs", 1)
    for key in ("learning_rate", "clip_range"):
        if isinstance(hp.get(key), str) and hp[key].startswith("lin_"):
            hp[key] = linear(float(hp[key][4:]))
    algo = {"ppo": PPO, "dqn": DQN}[job["algorithm"]]
    env = make_vec_env(job["env"], n_envs=n_envs, seed=job["seed"])
    eval_env = make_vec_env(job["env"], n_envs=1, seed=job["seed"] + 10_000)
    model = algo("MlpPolicy", env, seed=job["seed"], device="cpu", verbose=0, **hp)
    watch = Watch(job, launched, eval_env)
    started = time.time()
    model.learn(total_timesteps=job["total_timesteps"], callback=watch)
    train_seconds = time.time() - started
    if job.get("final_eval") and watch.eval_return is None or job.get("final_eval_always"):
        returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=job["eval_episodes"], deterministic=True)
        watch.eval_return = float(returns)
    result = {
        "curve": watch.curve,
        "solved_seconds": watch.solved_at,
        "last100_seconds": watch.last100_at,
        "eval_return": watch.eval_return,
        "timesteps": int(model.num_timesteps),
        "train_seconds": train_seconds,
        "total_seconds": time.time() - launched,
        "steps_per_second": model.num_timesteps / train_seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
