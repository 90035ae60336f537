"""One Stable-Baselines3 run for `make bench`, inside .tools/sb3-venv (it
never imports kuberl). Reads a JSON job on argv[1], writes a JSON result to
argv[2]: the learning curve (seconds since the process was launched, env
steps, last-100 training mean), when it solved, throughput, evaluation.

Solving uses kuberl's success rule and kuberl's own evaluation code
(trainer/kuberl_trainer/evaluation.py, loaded by path: numpy only):
`eval_episodes` episodes every `eval_every` env steps reaching `target`, PPO's
discrete actions sampled, DQN's and continuous ones deterministic.
"""

import importlib.util
import json
import resource
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise

EVALUATION = Path(__file__).resolve().parents[1] / "trainer/kuberl_trainer/evaluation.py"


def load_evaluation():
    spec = importlib.util.spec_from_file_location("kuberl_evaluation", EVALUATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


evaluation = load_evaluation()


def evaluate(model, env_id: str, episodes: int, seed: int, algorithm: str) -> float:
    """kuberl's protocol (evaluation.mean_return) with SB3's policy acting."""
    envs = gym.make_vec(env_id, num_envs=episodes, vectorization_mode="sync")
    discrete = isinstance(envs.single_action_space, gym.spaces.Discrete)
    deterministic = not (algorithm == "ppo" and discrete)
    try:
        return evaluation.mean_return(envs, lambda obs: model.predict(obs, deterministic=deterministic)[0], episodes, seed)
    finally:
        envs.close()


def linear(start: float):
    """rl-zoo's `lin_<start>`: decays linearly to 0 over training."""
    return lambda progress_remaining: progress_remaining * start


class Watch(BaseCallback):
    def __init__(self, job: dict, launched: float):
        super().__init__()
        self.job, self.launched = job, launched
        self.first_step_at = None
        self.curve: list[list[float]] = []
        self.next_eval = job["eval_every"] or None
        self.next_point = 0
        self.solved_at = None
        self.last100_at = None
        self.eval_return = None

    def now(self) -> float:
        return time.time() - self.launched

    def _on_training_start(self) -> None:
        self.first_step_at = self.now()  # imports, env and model built: the next call steps the envs

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
            self.eval_return = evaluate(self.model, self.job["env"], self.job["eval_episodes"], self.job["seed"] + 10_000,
                                        self.job["algorithm"])
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
    algo = {"ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3}[job["algorithm"]]
    env = make_vec_env(job["env"], n_envs=n_envs, seed=job["seed"])
    if "noise_std" in hp:  # rl-zoo's noise_type normal: Gaussian noise on SB3's [-1, 1] actions (TD3 explores with none by default)
        actions = env.action_space.shape[-1]
        hp["action_noise"] = NormalActionNoise(np.zeros(actions), hp.pop("noise_std") * np.ones(actions))
    model = algo("MlpPolicy", env, seed=job["seed"], device="cpu", verbose=0, **hp)
    watch = Watch(job, launched)
    started = time.time()
    model.learn(total_timesteps=job["total_timesteps"], callback=watch)
    train_seconds = time.time() - started
    if job.get("final_eval") and watch.eval_return is None or job.get("final_eval_always"):
        watch.eval_return = evaluate(model, job["env"], job["eval_episodes"], job["seed"] + 10_000, job["algorithm"])
    result = {
        "curve": watch.curve,
        "solved_seconds": watch.solved_at,
        "last100_seconds": watch.last100_at,
        "first_step_seconds": watch.first_step_at,
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
