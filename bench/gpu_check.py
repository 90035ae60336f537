"""`make gpu-check`: what one rank gets out of one GPU node, beside the node's ceiling
and Stable-Baselines3, in one run of about ten minutes.

Sections, each bounded in time and reported even when another fails:
  machine    GPU, driver, torch, cores
  ceiling    ale-py's threaded vector env alone (random actions) at 16/64 envs,
             gymnasium's one-core backend (and EnvPool, where installed) beside it,
             each with the seconds it takes to build its envs
  update     PPO's update inside the trainer (samples/s, fp32 and bf16) and its
             rollout with and without stepping overlapped with acting
  profile    torch.profiler over PPO's and DQN's learning: per optimiser step its
             wall ms, aten ops, kernel launches and GPU-busy ms, and the top ops
  graphs     the trainer's PPO and DQN optimiser steps eager against captured in a
             CUDA graph: ms per step each, and how far their weights differ
  ppo        manifests/examples/pong-ppo-gpu.yaml through `kuberl run` with one
             GPU: env steps/s, GPU utilisation and memory, the startup split
             (a second, warm launch resumes it and reports its startup too); then
             again with spec.ppo.learnWhileCollecting
  dqn        pong-dqn-gpu.yaml likewise: env steps/s once learning has started
  sb3        SB3's PPO and DQN on the same game with matched settings
GPU_CHECK_SOLVE=1 instead trains pong-ppo-gpu to its success target (eval
return >= 18) and reports launch to success; GPU_CHECK_SET="ppo.learnWhileCollecting=true"
adds `--set` overrides to that run.

The numbers go to stdout and, as JSON, to runs/gpu-check/summary.json.
Without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "gpu-check"
RUNS = OUT / "runs"
GAME = "ALE/Pong-v5"
SUMMARY: dict = {}


def say(line: str = "") -> None:
    print(line, flush=True)


def section(name: str, seconds: float):
    """Decorator: run the section, report its failure and go on."""
    def wrap(fn):
        def run(*args, **kwargs):
            say(f"\n== {name} (budget {seconds:.0f} s)")
            started = time.monotonic()
            try:
                result = fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 -- one broken section must not hide the others' figures
                say(f"   {name} FAILED: {type(e).__name__}: {e}")
                result = {"error": f"{type(e).__name__}: {e}"}
            SUMMARY[name] = result
            say(f"   ({time.monotonic() - started:.0f} s)")
            (OUT / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))
            return result
        return run
    return wrap


# --- GPU sampling ------------------------------------------------------------------


class GpuSampler:
    """nvidia-smi's utilisation and memory once a second while a run lasts."""

    def __init__(self):
        self.samples: list[tuple[float, float, float]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "1000"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, mem))

    def window(self, start: float, end: float) -> dict:
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return {"gpu_util_mean": None, "gpu_mem_max_mib": None}
        return {"gpu_util_mean": round(sum(u for u, _ in inside) / len(inside), 1),
                "gpu_mem_max_mib": max(m for _, m in inside), "samples": len(inside)}

    def stop(self):
        self.proc.terminate()


# --- sections ----------------------------------------------------------------------


@section("machine", 10)
def machine() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    info = {"gpu": props.name, "gpu_mem_gib": round(props.total_memory / 2**30), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpus": os.cpu_count()}
    say("   " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return info


@section("ceiling", 50)
def ceiling() -> dict:
    """Each backend's env-only rate, and how long it takes to build its envs and
    reset them with a seed (most of a rank's startup: docs/gpus-and-atari.md)."""
    import importlib.util

    import numpy as np
    from kuberl_trainer import atari, envs

    threads = atari.env_threads(os.cpu_count() or 1)
    plan = [("ale", 16), ("ale", 64), ("gymnasium", 16)]  # 128 ale envs stepped no faster than 64 (2026-11-27)
    if importlib.util.find_spec("envpool"):
        plan += [("envpool", 16), ("envpool", 64)]
    rates = {}
    for backend, num_envs in plan:
        started = time.perf_counter()
        vec = (envs.make_envs(GAME, num_envs, {}, "gymnasium") if backend == "gymnasium"
               else atari.make_atari_envs(GAME, num_envs, {}, backend, num_threads=threads))
        vec.reset(seed=1)
        built = time.perf_counter() - started
        rng = np.random.default_rng(0)
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < 3.0:
            vec.step(rng.integers(0, 6, num_envs))
            steps += num_envs
        rate = steps / (time.perf_counter() - started)
        vec.close()
        rates[f"{backend}x{num_envs}"] = round(rate)
        rates[f"{backend}x{num_envs}_build_s"] = round(built, 2)
        say(f"   {backend:<9} {num_envs:>3} envs ({1 if backend == 'gymnasium' else threads} threads): "
            f"{rate:>8,.0f} env steps/s, built and reset in {built:.1f} s")
    return rates


@section("update", 90)
def update() -> dict:
    """PPO at the GPU example's shape (64 envs x 32 steps, 4 epochs, 4 minibatches),
    inside the trainer: rollout rate (acting + stepping) and update rate."""
    import torch
    from kuberl.core.spec import PPOConfig
    from kuberl_trainer import device as devices
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    cuda = torch.device("cuda", 0)
    devices.tune(cuda, deterministic=False)
    ctx = Dist(0, 1, 0, 1, cuda, None)
    results = {}
    for precision in ("fp32", "bf16"):
        for overlap in (False, True):
            if precision == "bf16" and not overlap:
                continue
            hp = PPOConfig(num_steps=32, num_minibatches=4, update_epochs=4, precision=precision)
            trainer = PPOTrainer(ctx, hp, GAME, 64, {}, 10**9, 1, 0, overlap=overlap)
            reports = [trainer.update(False, False) for _ in range(6)][2:]  # 2 warm-ups: cudnn autotuning
            trainer.envs.close()
            batch = trainer.batch_per_rank
            rollout = sum(r.rollout_seconds for r in reports)
            learn = sum(r.update_seconds for r in reports)
            row = {"rollout_steps_per_s": round(batch * len(reports) / rollout),
                   "update_samples_per_s": round(batch * hp.update_epochs * len(reports) / learn),
                   "bound_env_steps_per_s": round(batch * len(reports) / (rollout + learn))}
            results[f"{precision}{'-overlap' if overlap else ''}"] = row
            say(f"   {precision} overlap={'on ' if overlap else 'off'}: rollout {row['rollout_steps_per_s']:>7,} steps/s, "
                f"update {row['update_samples_per_s']:>7,} samples/s, together {row['bound_env_steps_per_s']:>7,} steps/s")
    return results


def kuberl_run(example: str, seconds: float, overrides: list[str], sampler: GpuSampler, warm_relaunch: bool = False,
               runs: Path = RUNS) -> dict:
    """`kuberl run` the example with one GPU for `seconds`, then Ctrl-C; the rate
    from progress.jsonl, the GPU over the same window, rank 0's startup line."""
    job = Path(example).stem
    command = [sys.executable, "-m", "kuberl.cli", "run", example, "--dir", str(runs), "--set", "gpusPerWorker=1", "--workers", "1"]
    for override in overrides:
        command += ["--set", override]
    result = {}
    for attempt in ("cold", "warm") if warm_relaunch else ("cold",):
        log = (OUT / f"{job}-{attempt}.log").open("w")
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            proc.wait(timeout=seconds if attempt == "cold" else 25)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C: ranks stop at an update boundary and save
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        ended = time.monotonic()
        log.close()
        text = (OUT / f"{job}-{attempt}.log").read_text(errors="replace")
        ready = re.findall(r"rank 0 ready to step ([\d.]+) s after launch \(([^)]*)\)", text)
        if not ready:  # the line lives in the pod's own log
            for pod_log in sorted((runs / job / "logs").glob("*.log")) if (runs / job / "logs").exists() else []:
                ready += re.findall(r"rank 0 ready to step ([\d.]+) s after launch \(([^)]*)\)", pod_log.read_text(errors="replace"))
        result[f"startup_{attempt}"] = {"seconds": float(ready[-1][0]), "phases": ready[-1][1]} if ready else None
        if attempt == "cold":
            result.update(sampler.window(started + 0.5 * (ended - started), ended))
            result["wall_seconds"] = round(ended - started, 1)
        say(f"   {attempt} launch: rank 0 ready to step after {ready[-1][0] if ready else '?'} s ({ready[-1][1] if ready else 'no startup line'})")
    result.update(progress_rate(runs / job))
    return result


def progress_rate(run_dir: Path, after_timesteps: int = 0) -> dict:
    """Env steps/s over the first generation's records past `after_timesteps`
    (and past the first 20% of them: warm-up), from every progress.jsonl."""
    records = []
    for path in run_dir.rglob("progress.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    first = [r for r in records if r.get("restart", 0) == records[0].get("restart", 0)] if records else []
    first = [r for r in first if r["timesteps"] > after_timesteps]
    first.sort(key=lambda r: r["wall_seconds"])
    first = first[len(first) // 5:]
    if len(first) < 2:
        return {"env_steps_per_s": None, "records": len(records)}
    steps = first[-1]["timesteps"] - first[0]["timesteps"]
    wall = first[-1]["wall_seconds"] - first[0]["wall_seconds"]
    returns = [r["episode_return_mean"] for r in first if r.get("episode_return_mean") is not None]
    return {"env_steps_per_s": round(steps / wall), "timesteps": first[-1]["timesteps"],
            "return_last": returns[-1] if returns else None}


KERNEL_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")


def learning_profile(device, ppo_envs: int = 16, ppo_steps: int = 128, dqn_envs: int = 16) -> dict:
    """torch.profiler over one PPO learn() (2,048 samples, 4 epochs x 4 minibatches, as the
    GPU example) and one DQN learn() (its gradient steps of 32): where an optimiser step's
    time goes. Few envs (the learning's shapes are the example's): ale-py builds each
    emulator in 0.2 s, serially, and device time is short.
    Per step: wall ms (unprofiled), aten ops dispatched (each is at least one kernel
    on a GPU), kernel launches and GPU-busy ms (CUDA only); then the top ops."""
    import torch
    from kuberl.core.spec import DQNConfig, PPOConfig
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.dqn import DQNTrainer
    from kuberl_trainer.ppo import PPOTrainer
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    ctx = Dist(0, 1, 0, 1, device, None)

    def measured(name: str, learn, steps: int) -> dict:
        learn()  # warm: cudnn autotuning, allocator
        if cuda:
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        learn()
        if cuda:
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - started
        with profile(activities=activities) as prof:
            learn()
            if cuda:
                torch.cuda.synchronize(device)
        events = prof.events()
        top_level = [e for e in events if e.name.startswith("aten::")
                     and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        row = {"steps": steps, "wall_ms_per_step": round(wall * 1e3 / steps, 3),
               "aten_ops_per_step": round(len(top_level) / steps, 1),
               "kernel_launches_per_step": round(sum(e.name in KERNEL_LAUNCHES for e in events) / steps, 1),
               "gpu_busy_ms_per_step": round(sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / steps, 3)}
        say(f"   {name}: {row['wall_ms_per_step']} ms per optimiser step, {row['aten_ops_per_step']} aten ops, "
            f"{row['kernel_launches_per_step']} kernel launches, GPU busy {row['gpu_busy_ms_per_step']} ms")
        table = prof.key_averages().table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total", row_limit=12)
        say("\n".join("      " + line for line in table.splitlines()))
        return row

    hp = PPOConfig(num_steps=ppo_steps, num_minibatches=4, update_epochs=4)
    ppo_trainer = PPOTrainer(ctx, hp, GAME, ppo_envs, {}, 10**9, 1, 0)
    ppo_trainer.collect()
    advantages, returns = ppo_trainer.advantages(False)
    result = {"ppo": measured("PPO learn", lambda: ppo_trainer.learn(advantages, returns), 4 * 4)}
    ppo_trainer.envs.close()

    dqn_hp = DQNConfig(buffer_size=10_000, batch_size=32, learning_starts=dqn_envs * 8, train_frequency=4)
    dqn_trainer = DQNTrainer(ctx, dqn_hp, GAME, dqn_envs, {}, 10**9, 1, 0)
    while not dqn_trainer.learning():
        dqn_trainer.collect(1.0)  # random actions until the buffer holds learning_starts
    result["dqn"] = measured("DQN learn", dqn_trainer.learn, dqn_trainer.gradient_steps)
    dqn_trainer.envs.close()
    return result


def step_graphs(device, ppo_envs: int = 16, ppo_steps: int = 128, dqn_envs: int = 16, steps: int = 32) -> dict:
    """The trainer's own PPO minibatch step (512 samples) and DQN gradient step (32), eager
    against the same step captured once in a CUDA graph and replayed (torch.cuda.graph, Adam
    with capturable=True), on a real rollout and replay draw: ms per step each, and the
    largest weight difference between the two after the same `steps` steps from the same
    start. Whether graphs are worth building into the learners is this section's question.
    On a CPU only the eager half runs."""
    import numpy as np
    import torch
    from kuberl.core.spec import DQNConfig, PPOConfig
    from kuberl_trainer import device as devices
    from kuberl_trainer.device import to_device, upload
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.dqn import DQNTrainer
    from kuberl_trainer.ppo import PPOTrainer
    from kuberl_trainer.ppo_terms import minibatch_table

    cuda = device.type == "cuda"
    ctx = Dist(0, 1, 0, 1, device, None)
    devices.tune(device, deterministic=False)  # TF32 and cudnn.benchmark, as the trainer runs

    def compare(name: str, learner, batches: list[tuple]) -> dict:
        """Eager, then (CUDA) captured and replayed, each `steps` steps over `batches` from the same start."""
        params = list(learner.agent.parameters())
        learner.optimizer = torch.optim.Adam(params, **{**learner.optimizer.defaults, "capturable": cuda})
        static = tuple(t.clone() for t in batches[0])

        def load(batch):
            for into, value in zip(static, batch, strict=True):
                into.copy_(value)

        def synced() -> float:
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter()

        side = torch.cuda.Stream(device) if cuda else None
        if cuda:
            side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
            for batch in batches[:3]:  # warm: cudnn autotuning, Adam's state, the allocator
                load(batch)
                learner.step(*static)
        if cuda:
            torch.cuda.current_stream(device).wait_stream(side)
        start = [p.detach().clone() for p in params]
        state = [{k: v.detach().clone() for k, v in learner.optimizer.state[p].items()} for p in params]

        def rewind():
            with torch.no_grad():
                for p, p0, s0 in zip(params, start, state, strict=True):
                    p.copy_(p0)
                    for key, value in learner.optimizer.state[p].items():
                        value.copy_(s0[key])

        graph = None
        if cuda:
            graph = torch.cuda.CUDAGraph()
            learner.optimizer.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                learner.step(*static)
        rewind()
        began = synced()
        for i in range(steps):
            load(batches[i % len(batches)])
            learner.step(*static)
        eager_ms = (synced() - began) * 1e3 / steps
        row = {"eager_ms_per_step": round(eager_ms, 3)}
        if graph is not None:
            eager_weights = [p.detach().clone() for p in params]
            rewind()
            began = synced()
            for i in range(steps):
                load(batches[i % len(batches)])
                graph.replay()
            graph_ms = (synced() - began) * 1e3 / steps
            drift = max(float((p - q).abs().max()) for p, q in zip(params, eager_weights, strict=True))
            row.update(graph_ms_per_step=round(graph_ms, 3), speedup=round(eager_ms / graph_ms, 2), max_weight_diff=drift)
        say(f"   {name}: eager {row['eager_ms_per_step']} ms per step"
            + (f", CUDA graph {row['graph_ms_per_step']} ms ({row['speedup']}x), weights within {row['max_weight_diff']:.2e}"
               if graph is not None else " (no CUDA: no graph)"))
        return row

    hp = PPOConfig(num_steps=ppo_steps, num_minibatches=4, update_epochs=4)
    ppo_trainer = PPOTrainer(ctx, hp, GAME, ppo_envs, {}, 10**9, 1, 0)
    ppo_trainer.collect()
    advantages, returns = ppo_trainer.advantages(False)
    buf, size = ppo_trainer.buf, ppo_trainer.batch_per_rank
    all_obs = to_device(buf.obs_t.reshape(size, *ppo_trainer.obs_shape), device)
    scalars = np.stack([buf.log_probs, buf.values, advantages, returns, buf.valid], -1).reshape(size, -1)
    table = upload(minibatch_table(buf.actions_t.reshape(size, -1), torch.from_numpy(scalars)), device)
    order = upload(np.random.default_rng(0).permutation(size), device).reshape(4, -1)  # one epoch's 4 minibatches
    result = {"ppo": compare("PPO minibatch step", ppo_trainer.learner, [(all_obs[rows], table[rows]) for rows in order])}
    ppo_trainer.envs.close()

    dqn_hp = DQNConfig(buffer_size=10_000, batch_size=32, learning_starts=dqn_envs * 8, train_frequency=4)
    dqn_trainer = DQNTrainer(ctx, dqn_hp, GAME, dqn_envs, {}, 10**9, 1, 0)
    while not dqn_trainer.learning():
        dqn_trainer.collect(1.0)  # random actions until the buffer holds learning_starts
    drawn = dqn_trainer.to_tensors(dqn_trainer.replay.sample(32 * 8, dqn_hp.gamma, dqn_trainer.np_rng))
    drawn = (*drawn[:-1], dqn_trainer.learner.inputs(drawn[-1]))  # as DQNTrainer.learn hands a draw over
    next_q_target = dqn_trainer.learner.target_q(drawn[-1])
    batches = list(zip(*(t.split(32) for t in (*drawn, next_q_target)), strict=True))
    result["dqn"] = compare("DQN gradient step", dqn_trainer.learner, batches)
    dqn_trainer.envs.close()
    return result


@section("graphs", 60)
def graphs() -> dict:
    import torch

    return step_graphs(torch.device("cuda", 0))


@section("profile", 60)
def profile_learning() -> dict:
    import torch

    return learning_profile(torch.device("cuda", 0))


@section("ppo", 220)
def ppo(sampler: GpuSampler) -> dict:
    """The example as it ships, then with spec.ppo.learnWhileCollecting (the next rollout
    collected while the update learns): the synchronous bound is 1 / (1/rollout + 1/update),
    the overlapped one min(rollout, update)."""
    example, quiet = "manifests/examples/pong-ppo-gpu.yaml", "success.evalEvery=1000000"
    result = kuberl_run(example, 75, [quiet], sampler, warm_relaunch=True)
    say(f"   PPO Pong: {result.get('env_steps_per_s')} env steps/s, GPU {result.get('gpu_util_mean')}% busy, "
        f"{result.get('gpu_mem_max_mib')} MiB")
    lagged = kuberl_run(example, 60, [quiet, "ppo.learnWhileCollecting=true"], sampler, runs=RUNS / "learning-while-collecting")
    result["learning_while_collecting"] = lagged
    say(f"   PPO Pong, learning while collecting: {lagged.get('env_steps_per_s')} env steps/s, "
        f"GPU {lagged.get('gpu_util_mean')}% busy, {lagged.get('gpu_mem_max_mib')} MiB")
    return result


@section("dqn", 110)
def dqn(sampler: GpuSampler) -> dict:
    starts = 5000
    result = kuberl_run("manifests/examples/pong-dqn-gpu.yaml", 75,
                        [f"dqn.learningStarts={starts}", "dqn.bufferSize=100000", "success.evalEvery=1000000"], sampler)
    result.update({f"after_learning_starts_{k}": v for k, v in progress_rate(RUNS / "pong-dqn-gpu", starts).items()})
    say(f"   DQN Pong: {result.get('after_learning_starts_env_steps_per_s')} env steps/s after learningStarts, "
        f"GPU {result.get('gpu_util_mean')}% busy")
    return result


@section("sb3", 110)
def sb3() -> dict:
    """SB3 2.9.2 on the same game: PPO at the example's rollout shape, DQN at the
    example's 32 envs and one gradient step of 32 per 4 env steps, each for a fixed time
    (SB3 at 8 envs, the issue's baseline, made 378 steps/s on the H100 node)."""
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.backends.cudnn.benchmark = True

    class Clock(BaseCallback):
        def __init__(self, seconds: float, after: int):
            super().__init__()
            self.seconds, self.after, self.mark = seconds, after, None

        def _on_step(self) -> bool:
            now = time.perf_counter()
            if self.mark is None and self.num_timesteps >= self.after:
                self.mark = (now, self.num_timesteps)
            return self.mark is None or now - self.mark[0] < self.seconds

        def rate(self) -> float | None:
            if self.mark is None:
                return None
            return (self.num_timesteps - self.mark[1]) / (time.perf_counter() - self.mark[0])

    results = {}
    envs = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=16, seed=1), 4)
    model = PPO("CnnPolicy", envs, n_steps=128, batch_size=512, n_epochs=4, learning_rate=2.5e-4, clip_range=0.1,
                ent_coef=0.01, device="cuda", verbose=0)
    clock = Clock(30, 2048)
    model.learn(10**8, callback=clock)
    results["ppo_16envs_env_steps_per_s"] = round(clock.rate() or 0)
    envs.close()
    # DQN as pong-dqn-gpu runs it: 32 envs, 8 gradient steps of 32 per vector step of the 32 (one per 4 env steps)
    envs = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=32, seed=1), 4)
    model = DQN("CnnPolicy", envs, buffer_size=100_000, learning_starts=5000, batch_size=32, train_freq=1,
                gradient_steps=8, target_update_interval=2000, optimize_memory_usage=False, device="cuda", verbose=0)
    clock = Clock(35, 5000)
    model.learn(10**8, callback=clock)
    results["dqn_32envs_env_steps_per_s_after_learning_starts"] = round(clock.rate() or 0)
    envs.close()
    say(f"   SB3 PPO (16 envs x 128 steps): {results['ppo_16envs_env_steps_per_s']:,} env steps/s; "
        f"SB3 DQN (32 envs, 1 gradient step per 4 env steps): {results['dqn_32envs_env_steps_per_s_after_learning_starts']:,}")
    return results


@section("solve", 1800)
def solve(sampler: GpuSampler) -> dict:
    job = "pong-ppo-gpu"
    started = time.monotonic()
    overrides = [arg for value in filter(None, os.environ.get("GPU_CHECK_SET", "").split()) for arg in ("--set", value)]
    subprocess.run([sys.executable, "-m", "kuberl.cli", "run", f"manifests/examples/{job}.yaml", "--dir", str(RUNS),
                    "--set", "gpusPerWorker=1", "--workers", "1", *overrides], cwd=ROOT, check=False)
    result = {"launch_to_end_seconds": round(time.monotonic() - started)}
    status = RUNS / job / "status.json"
    if status.exists():
        result["status"] = json.loads(status.read_text()).get("phase")
    return result


def ratios(summary: dict) -> list[str]:
    """kuberl over SB3 from one run's sections, where both ran."""
    summary = {**summary, "ppo_lagged": summary.get("ppo", {}).get("learning_while_collecting", {})}
    pairs = (("PPO Pong", ("ppo", "env_steps_per_s"), ("sb3", "ppo_16envs_env_steps_per_s")),
             ("PPO Pong learning while collecting", ("ppo_lagged", "env_steps_per_s"), ("sb3", "ppo_16envs_env_steps_per_s")),
             ("DQN Pong at 32 envs", ("dqn", "after_learning_starts_env_steps_per_s"),
              ("sb3", "dqn_32envs_env_steps_per_s_after_learning_starts")))
    lines = []
    for name, (ours_section, ours_key), (peer_section, peer_key) in pairs:
        ours, peer = summary.get(ours_section, {}).get(ours_key), summary.get(peer_section, {}).get(peer_key)
        if ours and peer:
            lines.append(f"{name}: kuberl {ours:,.0f} env steps/s, SB3 {peer:,.0f}: {ours / peer:.2f}x")
    return lines


def goals(summary: dict) -> list[str]:
    """Issue 27's goals beside this run's figures (one rank, one GPU): what met its goal and what did not."""
    ppo, dqn_ratio = summary.get("ppo", {}), None
    lagged = ppo.get("learning_while_collecting", {})
    bound = summary.get("update", {}).get("fp32-overlap", {}).get("bound_env_steps_per_s")
    lines = []
    for name, rate in (("PPO Pong", ppo.get("env_steps_per_s")), ("PPO Pong learning while collecting", lagged.get("env_steps_per_s"))):
        if rate:
            of_bound = f", {rate / bound:.0%} of the synchronous bound {bound:,.0f} (goal >= 85%)" if bound else ""
            lines.append(f"{name}: {rate:,.0f} env steps/s (goal >= 10,000: {'met' if rate >= 10_000 else 'not met'}){of_bound}")
    ours = summary.get("dqn", {}).get("after_learning_starts_env_steps_per_s")
    peer = summary.get("sb3", {}).get("dqn_32envs_env_steps_per_s_after_learning_starts")
    if ours and peer:
        dqn_ratio = ours / peer
        lines.append(f"DQN Pong: {dqn_ratio:.2f}x SB3 (goal >= 2x: {'met' if dqn_ratio >= 2 else 'not met'})")
    if ppo.get("gpu_util_mean") is not None:
        lines.append(f"GPU busy during PPO: {ppo['gpu_util_mean']}% (reported)")
    warm = ppo.get("startup_warm")
    if warm:
        lines.append(f"launch to first env step, warm: {warm['seconds']:.1f} s (goal <= 5 s: {'met' if warm['seconds'] <= 5 else 'not met'};"
                     f" {warm['phases']})")
    return lines


def main() -> int:
    try:
        import torch
    except ImportError:
        say("gpu-check: torch is not installed here; skipped")
        return 0
    if not torch.cuda.is_available():
        say("gpu-check: no CUDA GPU here: skipped (the GPU figures are unmeasured on this machine)")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rm", "-rf", str(RUNS)], check=False)
    sampler = GpuSampler()
    try:
        machine()
        if os.environ.get("GPU_CHECK_SOLVE") == "1":
            solve(sampler)
            return 0
        only = set(filter(None, os.environ.get("GPU_CHECK_ONLY", "").split(",")))
        for name, run in (("ceiling", ceiling), ("update", update), ("profile", profile_learning), ("graphs", graphs),
                          ("ppo", lambda: ppo(sampler)),
                          ("dqn", lambda: dqn(sampler)), ("sb3", sb3)):
            if not only or name in only:
                run()
    finally:
        sampler.stop()
    for line in ratios(SUMMARY):
        say(line)
    say("\nissue 27's goals, from this run:")
    for line in goals(SUMMARY) or ["(no section that measures one ran)"]:
        say(f"   {line}")
    say(f"\nsummary: {OUT / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
