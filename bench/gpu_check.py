"""`make gpu-check`: what one rank gets out of one GPU node, beside the node's ceiling
and Stable-Baselines3, in one run of about ten minutes.

Sections, in the order they run, each bounded in time, reported even when another fails,
and written to summary.json as soon as it ends:
  machine    GPU, torch, CUDA, Python, cores
  update     PPO's update inside the trainer (samples/s, fp32 and bf16) and its
             rollout with and without stepping overlapped with acting
  ppo        manifests/examples/pong-ppo-gpu.yaml through `kuberl run` with one
             GPU: env steps/s, GPU utilisation and memory, the startup split
             (a second, warm launch resumes it and reports its startup too); then
             again with spec.ppo.learnWhileCollecting
  dqn        pong-dqn-gpu.yaml likewise: env steps/s once learning has started
  tier       tests/gpu (the GPU tier) in a pytest of its own: passed, failed, skipped
  profile    torch.profiler over PPO's and DQN's learning: per optimiser step its
             wall ms, aten ops, kernel launches and GPU-busy ms, and the top ops
  graphs     the trainer's PPO and DQN optimiser steps eager against captured in a
             CUDA graph: ms per step each, and how far their weights differ
  ceiling    ale-py's threaded vector env alone (random actions) at 16/64 envs,
             gymnasium's one-core backend (and EnvPool, where installed) beside it,
             each with the seconds it takes to build its envs
  sb3        SB3's PPO and DQN on the same game with matched settings

Variables:
  GPU_CHECK_ONLY=update,ppo   only these sections (machine always runs); a name it does
                              not know is refused before anything runs
  GPU_CHECK_SECONDS=540       end within this many seconds (a device command's limit): a
                              section whose budget no longer fits is skipped, saying so, and
                              the runs' waits are cut to what is left
  GPU_CHECK_OUT=DIR           where summary.json and the logs go (default runs/gpu-check), e.g.
                              a device machine's $OUT, so a run stopped at its limit keeps
                              what it measured
  GPU_CHECK_SOLVE=1           instead train pong-ppo-gpu to its success target (eval return
                              >= 18) and report launch to success, bounded by GPU_CHECK_SECONDS;
                              GPU_CHECK_SET="ppo.learnWhileCollecting=true" adds `--set` overrides
  GPU_CHECK_REHEARSE=1        every section (and, with GPU_CHECK_SOLVE, solve) on the CPU at
                              tiny sizes: the harness's own code run before a GPU sees it
                              (tests/e2e/test_gpu_check_rehearsal.py)

It prints the plan (sections and seconds) first, the numbers as it goes, then the ratios to
SB3 and issue 27's goals judged from the same run. Without a CUDA GPU (and not rehearsing)
it says so and exits 0.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GAME = "ALE/Pong-v5"
PPO_EXAMPLE = "manifests/examples/pong-ppo-gpu.yaml"
DQN_EXAMPLE = "manifests/examples/pong-dqn-gpu.yaml"
QUIET = "success.evalEvery=1000000"  # no evaluation inside a rate's window
STOP_SECONDS = 40  # after Ctrl-C: ranks stop at an update boundary and save
ORDER = ("update", "ppo", "dqn", "tier", "profile", "graphs", "ceiling", "sb3")
SUMMARY: dict = {}
OUT = ROOT / "runs" / "gpu-check"
RUNS = OUT / "runs"
DEADLINE: float | None = None  # time.monotonic() by which the check ends (GPU_CHECK_SECONDS)


@dataclass(frozen=True)
class Sizes:
    """How large each section runs: a GPU node's (issue 27's shapes, sized so the sections
    GPU_CHECK_ONLY names for a device run fit its ten-minute command), or the CPU rehearsal's."""

    device: str
    budgets: dict[str, float]  # the plan: seconds each section may take
    floors: dict[str, float]  # a section that cuts its own waits starts with this little left
    ceiling: tuple[tuple[str, int], ...]
    ceiling_seconds: float
    update: dict
    profile: dict
    graphs: dict
    launches: dict[str, tuple[float, int | str | None]]  # label: (seconds, or stop sooner: "ready" or N new progress records)
    ppo_sets: tuple[str, ...]
    dqn_sets: tuple[str, ...]
    dqn_starts: int
    dqn_buffer: int
    sb3: dict
    solve_sets: tuple[str, ...] = field(default=())


GPU = Sizes(
    device="cuda",
    budgets={"machine": 10, "update": 75, "ppo": 170, "dqn": 80, "tier": 75, "profile": 40, "graphs": 40,
             "ceiling": 50, "sb3": 110, "solve": 1800},
    floors={"ppo": 100, "dqn": 50, "solve": 120},
    ceiling=(("ale", 16), ("ale", 64), ("gymnasium", 16)),  # 128 ale envs stepped no faster than 64 (2026-11-27)
    ceiling_seconds=3.0,
    update={"num_envs": 64, "num_steps": 32, "warm_ups": 2, "timed": 4},  # 2 warm-ups: cudnn autotuning
    profile={"ppo_envs": 16, "ppo_steps": 128, "dqn_envs": 16},
    graphs={"ppo_envs": 16, "ppo_steps": 128, "dqn_envs": 16, "steps": 32},
    launches={"ppo-cold": (60, None), "ppo-warm": (25, None), "ppo-lagged-cold": (45, None), "dqn-cold": (60, None),
              "solve": (1800, None)},
    ppo_sets=(), dqn_sets=(), dqn_starts=5000, dqn_buffer=100_000,
    sb3={"ppo_envs": 16, "ppo_steps": 128, "ppo_batch": 512, "ppo_seconds": 30, "ppo_after": 2048,
         "dqn_envs": 32, "dqn_starts": 5000, "dqn_buffer": 100_000, "dqn_seconds": 35},
)

# The same sections on the CPU, small: every code path of a GPU run but the CUDA-only ones
# (graph capture, kernel counts, nvidia-smi). A launch stops as soon as rank 0 is ready (warm)
# or has written one periodic progress record (every 5 s, the trainer's): the record its stop
# writes makes two, what a rate needs.
REHEARSAL = Sizes(
    device="cpu",
    budgets={"machine": 5, "update": 30, "ppo": 90, "dqn": 45, "tier": 60, "profile": 30, "graphs": 30,
             "ceiling": 15, "sb3": 45, "solve": 60},
    floors={},
    ceiling=(("ale", 2), ("gymnasium", 2)),
    ceiling_seconds=0.3,
    update={"num_envs": 2, "num_steps": 8, "warm_ups": 0, "timed": 1},
    profile={"ppo_envs": 2, "ppo_steps": 8, "dqn_envs": 2},
    graphs={"ppo_envs": 2, "ppo_steps": 16, "dqn_envs": 2, "steps": 2},
    launches={"ppo-cold": (40, 1), "ppo-warm": (30, "ready"), "ppo-lagged-cold": (40, 1), "dqn-cold": (40, 1),
              "solve": (60, None)},
    ppo_sets=("env.numEnvs=2", "ppo.numSteps=16"), dqn_sets=("env.numEnvs=2",), dqn_starts=32, dqn_buffer=1000,
    sb3={"ppo_envs": 2, "ppo_steps": 16, "ppo_batch": 16, "ppo_seconds": 1, "ppo_after": 32,
         "dqn_envs": 2, "dqn_starts": 64, "dqn_buffer": 1000, "dqn_seconds": 1},
    solve_sets=("env.numEnvs=2", "ppo.numSteps=16", "totalTimesteps=160"),
)
SIZES = GPU


# tests/gpu/test_nccl_ranks.py runs where two GPUs or more are (two NCCL ranks, then two `kuberl run` trainings):
# about 90 s more than the tier's 19 s on one H200, a guess until a multi-GPU node has timed it
MULTI_GPU_TIER_SECONDS = 120


def tier_for_gpus(sizes: Sizes, gpus: int) -> Sizes:
    """`sizes` with the tier's budget raised on a machine of two GPUs or more, whose tests/gpu runs the NCCL tests."""
    if gpus < 2:
        return sizes
    return replace(sizes, budgets={**sizes.budgets, "tier": sizes.budgets["tier"] + MULTI_GPU_TIER_SECONDS})


def say(line: str = "") -> None:
    print(line, flush=True)


def seconds_left() -> float:
    return math.inf if DEADLINE is None else DEADLINE - time.monotonic()


def write_summary() -> None:
    """summary.json as it stands: rewritten after every section, so a run stopped at a
    limit keeps every figure measured before it (a temporary file, then a rename)."""
    temporary = OUT / "summary.json.tmp"
    temporary.write_text(json.dumps(SUMMARY, indent=1, default=str))
    temporary.replace(OUT / "summary.json")


def run_section(name: str, fn, *args) -> dict:
    """Run one section within its budget: skipped (and said) when the deadline leaves less than
    it needs; its failure reported, never hiding the other sections' figures."""
    budget = SIZES.budgets[name]
    say(f"\n== {name} (budget {budget:.0f} s)")
    started = time.monotonic()
    left, floor = seconds_left(), SIZES.floors.get(name, budget)
    if left < floor:
        result = {"skipped": f"{max(0, left):.0f} s left of GPU_CHECK_SECONDS; {name} needs {floor:.0f}"}
        say(f"   {name} SKIPPED: {result['skipped']}")
    else:
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 -- one broken section must not hide the others' figures
            say(f"   {name} FAILED: {type(e).__name__}: {e}")
            result = {"error": f"{type(e).__name__}: {e}"}
    SUMMARY[name] = result
    SUMMARY.setdefault("seconds", {})[name] = round(time.monotonic() - started, 1)
    release_gpu_memory()
    say(f"   ({time.monotonic() - started:.0f} s)")
    write_summary()
    return result


def release_gpu_memory() -> None:
    """What an in-process section's tensors left in torch's cache goes back to the GPU, before
    the next section's `kuberl run` ranks want it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def plan(names: list[str], total: float | None) -> dict:
    """The sections about to run and the seconds each may take, printed first so that a run
    stopped part-way still says what it set out to do; and what will not fit the deadline."""
    budgets = {name: SIZES.budgets[name] for name in names}
    say(f"gpu-check plan (device {SIZES.device}{', rehearsal' if SIZES is REHEARSAL else ''}; "
        f"GPU_CHECK_SECONDS {total if total is not None else 'unset'}; summary and logs in {OUT}):")
    spent = 0.0
    for name, seconds in budgets.items():
        spent += seconds
        late = ""
        if total is not None and spent > total:
            late = (f"   past GPU_CHECK_SECONDS: cut to what is left, if {SIZES.floors[name]:.0f} s are" if name in SIZES.floors
                    else "   past GPU_CHECK_SECONDS: runs only if those before end early")
        say(f"   {name:<8} {seconds:>5.0f} s{late}")
    say(f"   {'total':<8} {spent:>5.0f} s" + (f" of {total:.0f}" if total is not None else ""))
    return {"device": SIZES.device, "budgets": budgets, "total_seconds": spent, "deadline_seconds": total}


# --- GPU sampling ------------------------------------------------------------------


class GpuSampler:
    """nvidia-smi's utilisation and memory once a second while a run lasts; where there is
    no nvidia-smi, every window says so instead of a figure."""

    def __init__(self, command: str = "nvidia-smi"):
        self.samples: list[tuple[float, float, float]] = []
        self.missing: str | None = None
        try:
            self.proc = subprocess.Popen(
                [command, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "1000"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            self.proc, self.missing = None, f"{command} could not be started ({type(e).__name__}): GPU utilisation and memory unmeasured"
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, mem))

    def window(self, start: float, end: float) -> dict:
        if self.missing:
            return {"gpu_util_mean": None, "gpu_mem_max_mib": None, "gpu_sampler": self.missing}
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return {"gpu_util_mean": None, "gpu_mem_max_mib": None}
        return {"gpu_util_mean": round(sum(u for u, _ in inside) / len(inside), 1),
                "gpu_mem_max_mib": max(m for _, m in inside), "samples": len(inside)}

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()


def device():
    import torch

    return torch.device("cuda", 0) if SIZES.device == "cuda" else torch.device("cpu")


# --- sections ----------------------------------------------------------------------


def machine() -> dict:
    import torch

    info = {"device": SIZES.device, "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "cpus": os.cpu_count()}
    if SIZES.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_mem_gib=round(props.total_memory / 2**30), gpus=torch.cuda.device_count())
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10, check=True).stdout.split("\n")[0]
    say("   " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return info


def ceiling() -> dict:
    """Each backend's env-only rate, and how long it takes to build its envs and
    reset them with a seed (most of a rank's startup: docs/gpus-and-atari.md)."""
    import importlib.util

    import numpy as np
    from kuberl_trainer import atari, envs

    threads = atari.env_threads(os.cpu_count() or 1)
    plan = list(SIZES.ceiling)
    if importlib.util.find_spec("envpool") and SIZES is GPU:
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
        while time.perf_counter() - started < SIZES.ceiling_seconds:
            vec.step(rng.integers(0, 6, num_envs))
            steps += num_envs
        rate = steps / (time.perf_counter() - started)
        vec.close()
        rates[f"{backend}x{num_envs}"] = round(rate)
        rates[f"{backend}x{num_envs}_build_s"] = round(built, 2)
        say(f"   {backend:<9} {num_envs:>3} envs ({1 if backend == 'gymnasium' else threads} threads): "
            f"{rate:>8,.0f} env steps/s, built and reset in {built:.1f} s")
    return rates


def update() -> dict:
    """PPO at the GPU example's shape (64 envs x 32 steps, 4 epochs, 4 minibatches),
    inside the trainer: rollout rate (acting + stepping) and update rate."""
    from kuberl.core.spec import PPOConfig
    from kuberl_trainer import device as devices
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    on = device()
    devices.tune(on, deterministic=False)
    ctx = Dist(0, 1, 0, 1, on, None)
    shape, results = SIZES.update, {}
    for precision in ("fp32", "bf16"):
        for overlap in (False, True):
            if precision == "bf16" and not overlap:
                continue
            hp = PPOConfig(num_steps=shape["num_steps"], num_minibatches=4, update_epochs=4, precision=precision)
            trainer = PPOTrainer(ctx, hp, GAME, shape["num_envs"], {}, 10**9, 1, 0, overlap=overlap)
            reports = [trainer.update(False, False) for _ in range(shape["warm_ups"] + shape["timed"])][shape["warm_ups"]:]
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


def progress_records(run_dir: Path) -> list[dict]:
    records = []
    for path in sorted(run_dir.rglob("progress.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


STARTUP_LINE = re.compile(r"rank 0 ready to step ([\d.]+) s after launch \(([^)]*)\)")
# learners.StepGraph's line when a step cannot be captured and stays eager: the rates then are eager ones
GRAPH_FAILED = re.compile(r"kuberl trainer: (.+? stays eager: CUDA graph capture failed: [^\n]*)")
# kuberl run's line when a gang restarts (a rank crashed, stalled, lost a peer): a rate measured across one is
# not the example's rate (learnWhileCollecting crashed near update 60 on an H200 and its rate still read 13,081)
GANG_RESTART = re.compile(r"\[kuberl\] GangRestart: ([^\n]*)")


def launch(example: str, label: str, overrides: list[str], runs: Path) -> dict:
    """One `kuberl run` of the example with one GPU for the launch's seconds (cut to what
    GPU_CHECK_SECONDS leaves), then Ctrl-C; its output in OUT/<label>.log. Rank 0's startup
    line, and the window it ran in."""
    job = Path(example).stem
    seconds, until = SIZES.launches[label]
    seconds = max(1.0, min(seconds, seconds_left() - STOP_SECONDS))
    command = [sys.executable, "-m", "kuberl.cli", "run", example, "--dir", str(runs), "--set", "gpusPerWorker=1",
               "--workers", "1"]
    for override in overrides:
        command += ["--set", override]
    log_path = OUT / f"{label}.log"
    records_before = len(progress_records(runs / job)) if (runs / job).exists() else 0
    started = time.monotonic()
    with log_path.open("w") as log:
        # a process group of its own, to Ctrl-C as a whole, but not a session of its own: whatever ends
        # this check (a device command's limit) ends it too, instead of leaving it on the GPU
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, process_group=0)
        stopped_by = "itself"
        try:
            while proc.poll() is None:
                if time.monotonic() - started >= seconds:
                    stopped_by = "time"
                    break
                if until == "ready" and STARTUP_LINE.search(log_path.read_text(errors="replace")):
                    stopped_by = "rank 0 ready"
                    break
                if isinstance(until, int) and (runs / job).exists() \
                        and len(progress_records(runs / job)) >= records_before + until:
                    stopped_by = "progress records"
                    break
                time.sleep(0.25)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C: ranks stop at an update boundary and save
                try:
                    proc.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    stopped_by += ", then killed"
    ended = time.monotonic()
    text = log_path.read_text(errors="replace")
    pod_logs = sorted((runs / job / "logs").glob("*.log")) if (runs / job / "logs").exists() else []
    ready = STARTUP_LINE.findall(text)
    if not ready:  # the line lives in the pod's own log
        for pod_log in pod_logs:
            ready += STARTUP_LINE.findall(pod_log.read_text(errors="replace"))
    say(f"   {label}: rank 0 ready to step after {ready[-1][0] if ready else '?'} s "
        f"({ready[-1][1] if ready else 'no startup line: see ' + log_path.name}); stopped by {stopped_by}")
    eager = graph_failures([text, *(pod_log.read_text(errors="replace") for pod_log in pod_logs)])
    for line in eager:
        say(f"   {label}: {line}")
    restarts = [line[:300] for line in GANG_RESTART.findall(text)]
    for line in restarts:
        say(f"   {label}: RESTARTED: {line}")
    return {"startup": {"seconds": float(ready[-1][0]), "phases": ready[-1][1]} if ready else None,
            "started": started, "ended": ended, "exit_code": proc.returncode, "stopped_by": stopped_by,
            "graph_capture_failed": eager, "restarts": restarts}


def graph_failures(logs: list[str]) -> list[str]:
    """Each distinct step that stayed eager because its CUDA graph capture failed, as the trainer said it."""
    return list(dict.fromkeys(line[:300] for log in logs for line in GRAPH_FAILED.findall(log)))


def kuberl_run(example: str, label: str, overrides: list[str], sampler: GpuSampler, warm_relaunch: bool = False,
               runs: Path | None = None) -> dict:
    """`kuberl run` the example with one GPU (and, on request, a second launch that resumes
    it warm): the rate from progress.jsonl, the GPU over the run's second half, rank 0's startup."""
    runs = RUNS if runs is None else runs
    result = {}
    for attempt in ("cold", "warm") if warm_relaunch else ("cold",):
        ran = launch(example, f"{label}-{attempt}", overrides, runs)
        result[f"startup_{attempt}"] = ran["startup"]
        result["restarts"] = result.get("restarts", []) + ran["restarts"]
        if attempt == "cold":
            result.update(sampler.window(ran["started"] + 0.5 * (ran["ended"] - ran["started"]), ran["ended"]))
            result["wall_seconds"] = round(ran["ended"] - ran["started"], 1)
            result.update(progress_rate(runs / Path(example).stem))
    return result


def progress_rate(run_dir: Path, after_timesteps: int = 0) -> dict:
    """Env steps/s over the first generation's records past `after_timesteps`
    (and past the first 20% of them: warm-up), from every progress.jsonl."""
    records = progress_records(run_dir)
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
    start: the reference learners (fast=False) here, the case for the trainer's graphed ones
    (learners.GraphedQLearner, GraphedPPOLearner, which the other sections run). On a CPU only
    the eager half runs."""
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
    ppo_trainer = PPOTrainer(ctx, hp, GAME, ppo_envs, {}, 10**9, 1, 0, fast=False)  # the reference: eager, then captured here
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
    # the reference learner (fast=False): the trainer's own replays graphs already (learners.GraphedQLearner)
    dqn_trainer = DQNTrainer(ctx, dqn_hp, GAME, dqn_envs, {}, 10**9, 1, 0, fast=False)
    while not dqn_trainer.learning():
        dqn_trainer.collect(1.0)  # random actions until the buffer holds learning_starts
    drawn = dqn_trainer.to_tensors(dqn_trainer.replay.sample(32 * 8, dqn_hp.gamma, dqn_trainer.np_rng))
    drawn = (*drawn[:-1], dqn_trainer.learner.inputs(drawn[-1]))  # as DQNTrainer.learn hands a draw over
    next_q_target = dqn_trainer.learner.target_q(drawn[-1])
    batches = list(zip(*(t.split(32) for t in (*drawn, next_q_target)), strict=True))
    result["dqn"] = compare("DQN gradient step", dqn_trainer.learner, batches)
    dqn_trainer.envs.close()
    return result


def graphs() -> dict:
    return step_graphs(device(), **SIZES.graphs)


def profile_learning() -> dict:
    return learning_profile(device(), **SIZES.profile)


def ppo(sampler: GpuSampler) -> dict:
    """The example as it ships, then with spec.ppo.learnWhileCollecting (the next rollout
    collected while the update learns): the synchronous bound is 1 / (1/rollout + 1/update),
    the overlapped one min(rollout, update)."""
    sets = [QUIET, *SIZES.ppo_sets]
    result = kuberl_run(PPO_EXAMPLE, "ppo", sets, sampler, warm_relaunch=True)
    say(f"   PPO Pong: {result.get('env_steps_per_s')} env steps/s, GPU {result.get('gpu_util_mean')}% busy, "
        f"{result.get('gpu_mem_max_mib')} MiB")
    lagged = kuberl_run(PPO_EXAMPLE, "ppo-lagged", [*sets, "ppo.learnWhileCollecting=true"], sampler,
                        runs=RUNS / "learning-while-collecting")
    result["learning_while_collecting"] = lagged
    say(f"   PPO Pong, learning while collecting: {lagged.get('env_steps_per_s')} env steps/s, "
        f"GPU {lagged.get('gpu_util_mean')}% busy, {lagged.get('gpu_mem_max_mib')} MiB")
    return result


def dqn(sampler: GpuSampler) -> dict:
    starts = SIZES.dqn_starts
    result = kuberl_run(DQN_EXAMPLE, "dqn", [f"dqn.learningStarts={starts}", f"dqn.bufferSize={SIZES.dqn_buffer}", QUIET,
                                             *SIZES.dqn_sets], sampler)
    result.update({f"after_learning_starts_{k}": v for k, v in progress_rate(RUNS / Path(DQN_EXAMPLE).stem, starts).items()})
    say(f"   DQN Pong: {result.get('after_learning_starts_env_steps_per_s')} env steps/s after learningStarts, "
        f"GPU {result.get('gpu_util_mean')}% busy")
    return result


PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b")
PYTEST_OUTCOME = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


def pytest_counts(output: str) -> dict:
    """pytest's closing counts ("7 passed, 2 failed, 1 skipped in 40.1s") and the failed tests' ids;
    where it was stopped before its closing line, counted from -v's line per test so far."""
    lines = output.splitlines()
    closing = [line for line in lines if PYTEST_COUNT.search(line) and " in " in line]
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    if closing:
        for number, word in PYTEST_COUNT.findall(closing[-1]):
            key = "errors" if word.startswith("error") else word
            counts[key] = counts.get(key, 0) + int(number)
        failures = [line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    else:
        outcomes = [match.groups() for match in map(PYTEST_OUTCOME.match, lines) if match]
        for _, outcome in outcomes:
            key = {"ERROR": "errors", "XFAIL": "xfailed", "XPASS": "xpassed"}.get(outcome, outcome.lower())
            counts[key] = counts.get(key, 0) + 1
        failures = [test for test, outcome in outcomes if outcome in ("FAILED", "ERROR")]
    counts["failures"] = failures
    return counts


def tier() -> dict:
    """tests/gpu in a pytest of its own, within the section's budget: its counts are a
    figure (issue 27: 9/9), and its failures must not stop the sections after it."""
    seconds = max(1.0, min(SIZES.budgets["tier"], seconds_left()))
    log_path = OUT / "tier.log"
    command = [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "tests/gpu"]
    with log_path.open("w") as log:
        try:
            code = subprocess.run(command, check=False, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                  timeout=seconds).returncode
        except subprocess.TimeoutExpired:
            code = None
    result = {**pytest_counts(log_path.read_text(errors="replace")), "exit_code": code}
    if code is None:
        result["timed_out_after_s"] = round(seconds)
    say(f"   tests/gpu: {result['passed']} passed, {result['failed']} failed, {result['errors']} errors, "
        f"{result['skipped']} skipped" + (f" (stopped after {seconds:.0f} s)" if code is None else "")
        + (f"; failed: {', '.join(result['failures'])}" if result["failures"] else "") + f" ({log_path.name})")
    return result


def sb3() -> dict:
    """SB3 2.9.2 on the same game: PPO at the example's rollout shape, DQN at the
    example's 32 envs and one gradient step of 32 per 4 env steps, each for a fixed time
    (SB3 at 8 envs, the issue's baseline, made 378 steps/s on the H100 node)."""
    import importlib.util

    if SIZES is REHEARSAL and importlib.util.find_spec("stable_baselines3") is None:
        say("   stable_baselines3 is not installed here: not rehearsed (make gpu-wheels brings it for a GPU node)")
        return {"skipped": "stable_baselines3 is not installed here"}
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.backends.cudnn.benchmark = True
    shape, on = SIZES.sb3, SIZES.device

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
            if self.mark is None or self.num_timesteps == self.mark[1]:
                return None
            return (self.num_timesteps - self.mark[1]) / (time.perf_counter() - self.mark[0])

    results = {}
    n = shape["ppo_envs"]
    envs = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=n, seed=1), 4)
    model = PPO("CnnPolicy", envs, n_steps=shape["ppo_steps"], batch_size=shape["ppo_batch"], n_epochs=4,
                learning_rate=2.5e-4, clip_range=0.1, ent_coef=0.01, device=on, verbose=0)
    clock = Clock(shape["ppo_seconds"], shape["ppo_after"])
    model.learn(10**8, callback=clock)
    results[sb3_keys()[0]] = round(clock.rate() or 0)
    envs.close()
    # DQN as pong-dqn-gpu runs it: 32 envs, 8 gradient steps of 32 per vector step of the 32 (one per 4 env steps)
    n_dqn = shape["dqn_envs"]
    envs = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=n_dqn, seed=1), 4)
    model = DQN("CnnPolicy", envs, buffer_size=shape["dqn_buffer"], learning_starts=shape["dqn_starts"], batch_size=32,
                train_freq=1, gradient_steps=max(1, n_dqn // 4), target_update_interval=2000,
                optimize_memory_usage=False, device=on, verbose=0)
    clock = Clock(shape["dqn_seconds"], shape["dqn_starts"])
    model.learn(10**8, callback=clock)
    results[sb3_keys()[1]] = round(clock.rate() or 0)
    envs.close()
    say(f"   SB3 PPO ({n} envs x {shape['ppo_steps']} steps): {results[sb3_keys()[0]]:,} env steps/s; "
        f"SB3 DQN ({n_dqn} envs, 1 gradient step per 4 env steps): {results[sb3_keys()[1]]:,}")
    return results


def solve(sampler: GpuSampler) -> dict:
    """pong-ppo-gpu as it ships (plus GPU_CHECK_SET) until it succeeds or GPU_CHECK_SECONDS
    runs out (then Ctrl-C): launch to end, the phase, and the best evaluation it reached."""
    job = Path(PPO_EXAMPLE).stem
    sets = [*SIZES.solve_sets, *filter(None, os.environ.get("GPU_CHECK_SET", "").split())]
    ran = launch(PPO_EXAMPLE, "solve", sets, RUNS)
    result = {"launch_to_end_seconds": round(ran["ended"] - ran["started"]), "ended_by": ran["stopped_by"],
              "startup": ran["startup"], "restarts": ran["restarts"], **sampler.window(ran["started"], ran["ended"])}
    status = RUNS / job / "status.json"
    if status.exists():
        result["phase"] = json.loads(status.read_text()).get("phase")
    ends = re.findall(r"\[rank 0\] (?:Succeeded|Failed|Stopped): ([^\n]*)", (OUT / "solve.log").read_text(errors="replace"))
    result["reason"] = ends[-1][:200] if ends else None  # Succeeded also ends a spent budget: the reason says which
    records = progress_records(RUNS / job)
    evals = [r["eval_return"] for r in records if r.get("eval_return") is not None]
    result.update(timesteps=records[-1]["timesteps"] if records else None, eval_return_best=max(evals) if evals else None,
                  evaluations=len(evals))
    say(f"   solve: {result.get('phase')} ({result['reason']}) after {result['launch_to_end_seconds']} s (ended by {result['ended_by']}), "
        f"{result['timesteps']} timesteps, best eval return {result['eval_return_best']} over {len(evals)} evaluations")
    return result


def sb3_keys() -> tuple[str, str]:
    """The sb3 section's PPO and DQN rates, named by their env counts."""
    return (f"ppo_{SIZES.sb3['ppo_envs']}envs_env_steps_per_s",
            f"dqn_{SIZES.sb3['dqn_envs']}envs_env_steps_per_s_after_learning_starts")


def ratios(summary: dict) -> list[str]:
    """kuberl over SB3 from one run's sections, where both ran."""
    summary = {**summary, "ppo_lagged": summary.get("ppo", {}).get("learning_while_collecting", {})}
    sb3_ppo, sb3_dqn = sb3_keys()
    pairs = (("PPO Pong", ("ppo", "env_steps_per_s"), ("sb3", sb3_ppo)),
             ("PPO Pong learning while collecting", ("ppo_lagged", "env_steps_per_s"), ("sb3", sb3_ppo)),
             (f"DQN Pong at {SIZES.sb3['dqn_envs']} envs", ("dqn", "after_learning_starts_env_steps_per_s"), ("sb3", sb3_dqn)))
    lines = []
    for name, (ours_section, ours_key), (peer_section, peer_key) in pairs:
        ours, peer = summary.get(ours_section, {}).get(ours_key), summary.get(peer_section, {}).get(peer_key)
        # a rate read across a gang restart is the first generation's, not the example's (as goals says)
        restarted = " (the run restarted: not the example's rate)" if summary.get(ours_section, {}).get("restarts") else ""
        if ours and peer:
            lines.append(f"{name}: kuberl {ours:,.0f} env steps/s, SB3 {peer:,.0f}: {ours / peer:.2f}x{restarted}")
    return lines


def verdict(met: bool, run: dict) -> str:
    """A rate goal's word: a rate read across a gang restart (kuberl run's GangRestart line) meets none."""
    return "not met: the run restarted" if run.get("restarts") else "met" if met else "not met"


def goals(summary: dict) -> list[str]:
    """Issue 27's goals beside this run's figures (one rank, one GPU): what met its goal and what did not."""
    ppo, dqn_ratio = summary.get("ppo", {}), None
    lagged = ppo.get("learning_while_collecting", {})
    bound = summary.get("update", {}).get("fp32-overlap", {}).get("bound_env_steps_per_s")
    lines = []
    tests = summary.get("tier", {})
    if "passed" in tests:
        # a skip is the machine's shape (test_nccl_ranks needs two GPUs, another test exactly one), said in tier.log;
        # the goal is that what this machine can run passes
        ran = tests["passed"] + tests["failed"] + tests["errors"]
        met = ran and tests["passed"] == ran
        skipped = f", {tests['skipped']} skipped here (tier.log says why)" if tests["skipped"] else ""
        lines.append(f"tests/gpu: {tests['passed']}/{ran} passed{skipped} (goal: all: {'met' if met else 'not met'})")
    for name, run in (("PPO Pong", ppo), ("PPO Pong learning while collecting", lagged)):
        if rate := run.get("env_steps_per_s"):
            of_bound = f", {rate / bound:.0%} of the synchronous bound {bound:,.0f} (goal >= 85%)" if bound else ""
            lines.append(f"{name}: {rate:,.0f} env steps/s (goal >= 10,000: {verdict(rate >= 10_000, run)}){of_bound}")
    ours = summary.get("dqn", {}).get("after_learning_starts_env_steps_per_s")
    peer = summary.get("sb3", {}).get(sb3_keys()[1])
    if ours and peer:
        dqn_ratio = ours / peer
        lines.append(f"DQN Pong: {dqn_ratio:.2f}x SB3 (goal >= 2x: {verdict(dqn_ratio >= 2, summary.get('dqn', {}))})")
    if ppo.get("gpu_util_mean") is not None:
        lines.append(f"GPU busy during PPO: {ppo['gpu_util_mean']}% (reported)")
    warm = ppo.get("startup_warm")
    if warm:
        lines.append(f"launch to first env step, warm: {warm['seconds']:.1f} s (goal <= 5 s: {'met' if warm['seconds'] <= 5 else 'not met'};"
                     f" {warm['phases']})")
    return lines


SECTIONS = {"update": update, "ppo": ppo, "dqn": dqn, "tier": tier, "profile": profile_learning, "graphs": graphs,
            "ceiling": ceiling, "sb3": sb3}
NEEDS_SAMPLER = ("ppo", "dqn")


def main() -> int:
    global SIZES, OUT, RUNS, DEADLINE
    rehearse = os.environ.get("GPU_CHECK_REHEARSE") == "1"
    only = [name for name in os.environ.get("GPU_CHECK_ONLY", "").replace(" ", "").split(",") if name]
    unknown = [name for name in only if name not in SECTIONS and name != "machine"]
    if unknown:  # a typo would spend a GPU session on nothing
        say(f"gpu-check: GPU_CHECK_ONLY names no section {', '.join(unknown)}: the sections are machine, {', '.join(ORDER)}")
        return 2
    total = os.environ.get("GPU_CHECK_SECONDS")
    try:
        total = float(total) if total else None
    except ValueError:
        say(f"gpu-check: GPU_CHECK_SECONDS={total!r}: expected a number of seconds")
        return 2
    try:
        import torch
    except ImportError:
        say("gpu-check: torch is not installed here; skipped")
        return 0
    if not rehearse and not torch.cuda.is_available():
        say("gpu-check: no CUDA GPU here: skipped (the GPU figures are unmeasured on this machine; "
            "GPU_CHECK_REHEARSE=1 runs every section on the CPU, small)")
        return 0
    started = time.monotonic()
    DEADLINE = None if total is None else started + total
    SIZES = REHEARSAL if rehearse else tier_for_gpus(GPU, torch.cuda.device_count())
    default_out = ROOT / "runs" / ("gpu-check-rehearsal" if rehearse else "gpu-check")
    OUT = Path(os.environ.get("GPU_CHECK_OUT") or default_out)
    RUNS = Path(os.environ.get("GPU_CHECK_RUNS") or default_out / "runs")
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rm", "-rf", str(RUNS)], check=False)
    RUNS.mkdir(parents=True, exist_ok=True)
    SUMMARY.clear()
    solving = os.environ.get("GPU_CHECK_SOLVE") == "1"
    names = ["machine", "solve"] if solving else ["machine", *(name for name in ORDER if not only or name in only)]
    SUMMARY["plan"] = plan(names, total)
    write_summary()
    sampler = GpuSampler()
    if sampler.missing:
        say(f"gpu-check: {sampler.missing}")
    try:
        for name in names:
            fn = {"machine": machine, "solve": solve, **SECTIONS}[name]
            run_section(name, fn, *((sampler,) if name in (*NEEDS_SAMPLER, "solve") else ()))
    finally:
        sampler.stop()
    say()
    for line in ratios(SUMMARY):
        say(line)
    say("\nissue 27's goals, from this run:")
    for line in goals(SUMMARY) or ["(no section that measures one ran)"]:
        say(f"   {line}")
    failed = [name for name in names if "error" in SUMMARY[name]]
    skipped = [name for name in names if isinstance(SUMMARY[name].get("skipped"), str)]  # the tier's is a count
    SUMMARY.update(failed_sections=failed, skipped_sections=skipped, seconds_total=round(time.monotonic() - started, 1))
    write_summary()
    say(f"\nsections: {len(names) - len(failed) - len(skipped)} ran without error, {len(skipped)} skipped"
        + (f" ({', '.join(skipped)})" if skipped else "") + f", {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else "")
        + f"; {SUMMARY['seconds_total']:.0f} s in all")
    say(f"summary: {OUT / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
