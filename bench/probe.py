"""One rank of a throughput probe for `make bench` (main venv): the real
trainers, driven for a fixed number of updates with every phase timed.

    python bench/probe.py JOB.json OUT_PREFIX   (rank and world from the env contract)

Per update and per rank: env stepping, policy/Q forward while acting, the
learning forward, backward + optimiser, gradient all-reduce (launch to
completion, overlapping backward; DDP's hook), the counter all-reduce, and
one checkpoint write. Then the two ceilings with the same envs: random
actions only, and acting with the policy's forward.
"""

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer import checkpoint, fused
from kuberl_trainer.distributed import all_reduce_gradient, process_group
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.envs import make_envs
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.session import BareSession


class Timed:
    """Wraps a callable, adding its wall time to `self.seconds` (and each call's to
    `self.durations`, when that is a list)."""

    def __init__(self, fn, keep_durations: bool = False):
        self.fn, self.seconds = fn, 0.0
        self.durations: list[float] | None = [] if keep_durations else None

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            took = time.perf_counter() - started
            self.seconds += took
            if self.durations is not None:
                self.durations.append(took)


def timed_comm_hook(model, seconds: list[float]) -> None:
    def hook(_state, bucket):
        started = time.perf_counter()
        future = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True).get_future()

        def done(f):
            seconds.append(time.perf_counter() - started)
            return f.value()[0]

        return future.then(done)

    model.register_comm_hook(None, hook)


def ceilings(job: dict, agent, steps: int) -> dict:
    """Env steps/s with random actions, and with the network's forward."""
    envs = make_envs(job["env"], job["num_envs"])
    obs, _ = envs.reset(seed=1)
    rng = np.random.default_rng(0)
    space = envs.action_space
    low = high = None
    if job["algorithm"] == "ppo" and not agent.discrete:
        low, high = envs.single_action_space.low, envs.single_action_space.high
    started = time.perf_counter()
    for _ in range(steps):
        envs.step(space.sample() if low is None else rng.uniform(low, high, space.shape).astype(np.float32))
    random_rate = steps * job["num_envs"] / (time.perf_counter() - started)
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            x = torch.as_tensor(obs, dtype=torch.float32)
            if job["algorithm"] == "ppo":
                action = agent.act(x)[0].numpy()
                action = action if low is None else np.clip(action, low, high)
            else:
                action = agent.greedy(x).numpy()
            obs, *_ = envs.step(action)
    forward_rate = steps * job["num_envs"] / (time.perf_counter() - started)
    envs.close()
    return {"random_actions": random_rate, "env_plus_forward": forward_rate}


def step_spread(durations: list[float]) -> dict | None:
    """How much one gradient step's time varies, and what that costs ranks that sync after
    every step: each sync waits for the slower rank, so a step takes E[max(X, Y)] of two
    independent draws of the one-process step time X rather than E[X]. For the sorted sample
    x_1..x_n, E[max] = sum of x_i (2i - 1) / n^2 (every ordered pair once)."""
    if len(durations) < 2:
        return None
    x = np.sort(np.asarray(durations))
    n = len(x)
    expected_max = float(np.sum(x * (2 * np.arange(1, n + 1) - 1)) / n**2)
    return {"steps": n, "mean": float(x.mean()), "std": float(x.std()), "p10": float(np.percentile(x, 10)),
            "p90": float(np.percentile(x, 90)), "slower_of_two_extra": expected_max - float(x.mean())}


def allreduce_floor(ctx, floats: int, calls: int = 1000) -> tuple[float, float]:
    """(mean, median) seconds of one all-reduce of `floats` floats between the ranks with
    nothing else running in them, through the trainer's own gradient all-reduce (its
    yielding wait included): the floor a gradient sync cannot go below. The mean is what
    a run of syncs costs, a tail included."""
    grad = torch.zeros(floats)
    for _ in range(20):
        all_reduce_gradient(ctx, grad)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        all_reduce_gradient(ctx, grad)
        times.append(time.perf_counter() - started)
    return statistics.mean(times), statistics.median(times)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    if "BENCH_PIN_CPU" in os.environ:  # one of two jobs side by side: one CPU each, as the ranks of one job have
        os.sched_setaffinity(0, {int(os.environ["BENCH_PIN_CPU"])})
    with process_group("gloo", 600, 120) as ctx:
        fused.flush_subnormals()  # as the trainer's entry point does
        if job["algorithm"] == "ppo":
            hp = PPOConfig(**job["hyperparameters"])
            trainer = PPOTrainer(ctx, hp, job["env"], job["num_envs"], {}, 10**9, 1, 0)
        else:
            hp = DQNConfig(**job["hyperparameters"])
            trainer = DQNTrainer(ctx, hp, job["env"], job["num_envs"], {}, 10**9, 1, 0)
        grad_allreduce: list[float] = []
        flat_step = getattr(trainer.learner, "fused", trainer.learner)  # the hand-fused step, when the learner is one
        fast = isinstance(flat_step, fused.FlatAdam)
        if ctx.distributed and job["algorithm"] == "ppo":
            if fast:  # the fused step all-reduces its flat gradient itself
                flat_step.allreduce = Timed(flat_step.allreduce)
            else:
                timed_comm_hook(trainer.learner.model, grad_allreduce)
        step_times = None
        if not ctx.distributed and fast:  # the one-process learner's step times
            step = "step" if job["algorithm"] == "ppo" else "step_towards"  # DQN's: one gradient step of a drawn chunk
            step_times = Timed(getattr(flat_step, step), keep_durations=True)
            setattr(flat_step, step, step_times)
        env_step = Timed(trainer.envs.step)
        trainer.envs.step = env_step
        learn_forward = Timed(trainer.agent.forward)  # DDP's forward calls it too
        trainer.agent.forward = learn_forward
        counter_sync = Timed(trainer.sync_update)
        trainer.sync_update = counter_sync

        warmup = BareSession(job["warmup_updates"])
        trainer.train(warmup)  # DQN: fills learningStarts; both: first-call costs
        env_step.seconds = learn_forward.seconds = counter_sync.seconds = 0.0
        if step_times is not None:
            step_times.durations.clear()
        grad_allreduce.clear()
        fused_allreduce = fast and flat_step.allreduce
        if isinstance(fused_allreduce, Timed):
            fused_allreduce.seconds = 0.0
        timings_before = dict(getattr(trainer, "timings", {}))
        steps_before = trainer.counters.global_step
        recorder = BareSession(job["updates"])
        started = time.perf_counter()
        trainer.train(recorder)
        wall = time.perf_counter() - started
        reports = recorder.reports
        updates = len(reports)
        local_steps = sum(r.local_steps for r in reports)

        with tempfile.TemporaryDirectory() as tmp:
            write = time.perf_counter()
            for i in range(3):
                checkpoint.save(tmp, i, trainer.shared_state(), keep=1)
            checkpoint_seconds = (time.perf_counter() - write) / 3

        rollout = sum(r.rollout_seconds for r in reports)
        update = sum(r.update_seconds for r in reports)
        counter_allreduce = counter_sync.seconds
        if job["algorithm"] == "dqn":
            timings = {k: trainer.timings[k] - timings_before.get(k, 0.0) for k in trainer.timings}
            # DQN's report folds its gradient all-reduces (comm hook) into allreduce_seconds
            gradient_allreduce = sum(r.allreduce_seconds for r in reports) - counter_allreduce
            breakdown = {
                "env_step": timings["env_step"] / updates,
                "act_forward": timings["act_forward"] / updates,
                "sample": timings["sample"] / updates,
                "learn_forward": timings["train_forward"] / updates,
                "backward_optimizer": timings["backward_optimizer"] / updates,
                "allreduce_gradients": gradient_allreduce / updates,
                "allreduce_counters": counter_allreduce / updates,
            }
            gradient_steps = trainer.gradient_steps
            batch = hp.batch_size
        else:
            breakdown = {
                "env_step": env_step.seconds / updates,
                "act_forward": (rollout - env_step.seconds) / updates,
                "learn_forward": learn_forward.seconds / updates,
                "backward_optimizer": (update - learn_forward.seconds) / updates,
                "allreduce_gradients": (fused_allreduce.seconds if isinstance(fused_allreduce, Timed)
                                        else sum(grad_allreduce)) / updates,
                "allreduce_counters": counter_allreduce / updates,
            }
            gradient_steps = hp.update_epochs * hp.num_minibatches
            batch = trainer.batch_per_rank // hp.num_minibatches
        breakdown["checkpoint_write"] = checkpoint_seconds if ctx.is_main else 0.0
        gradient_floats = sum(p.numel() for p in trainer.agent.parameters())
        floor, floor_median = allreduce_floor(ctx, gradient_floats) if ctx.distributed else (None, None)
        breakdown["update_total"] = wall / updates
        result = {
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "updates": updates,
            "local_steps": local_steps,
            "global_steps": trainer.counters.global_step - steps_before,
            "wall_seconds": wall,
            "steps_per_second_rank": local_steps / wall,
            "gradient_steps_per_update": gradient_steps,
            "syncs_per_update": gradient_steps if ctx.distributed else 0,  # one gradient all-reduce per gradient step
            "gradient_floats": gradient_floats,
            "allreduce_floor_seconds": floor,
            "allreduce_floor_median_seconds": floor_median,
            "env_steps_per_update": trainer.batch_per_rank,
            "batch_per_gradient_step": batch,
            "breakdown_seconds": breakdown,
            "step_seconds": step_spread(step_times.durations) if step_times is not None else None,
            "ceilings": ceilings(job, trainer.agent, job["ceiling_steps"]) if job.get("ceiling_steps") else None,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    with open(f"{sys.argv[2]}-rank{result['rank']}.json", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
