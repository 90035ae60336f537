"""`make gpu-check`'s whole path rehearsed on the CPU (GPU_CHECK_REHEARSE=1), before a lent GPU
machine's one run meets it: every section's code, the Pong examples through `kuberl run` cold, warm
and learning while collecting, the GPU tier in its own pytest, the profiler, the eager half of the
graphs, the sampler without nvidia-smi, ratios, goals and summary.json. The CPU's figures mean
nothing; that every section produced its fields and none failed is what is checked."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECK = ROOT / "bench" / "gpu_check.py"
FIELDS = {
    "machine": {"device", "torch", "cuda", "python", "cpus"},
    "update": {"fp32", "fp32-overlap", "bf16-overlap"},
    "ppo": {"startup_cold", "startup_warm", "env_steps_per_s", "gpu_util_mean", "gpu_mem_max_mib", "wall_seconds",
            "learning_while_collecting"},
    "dqn": {"startup_cold", "env_steps_per_s", "after_learning_starts_env_steps_per_s", "gpu_util_mean"},
    "tier": {"passed", "failed", "skipped", "errors", "failures", "exit_code"},
    "profile": {"ppo", "dqn"},
    "graphs": {"ppo", "dqn"},
    "ceiling": {"alex2", "alex2_build_s", "gymnasiumx2", "gymnasiumx2_build_s"},
    "sb3": {"ppo_2envs_env_steps_per_s", "dqn_2envs_env_steps_per_s_after_learning_starts"},
}


def rehearse(tmp_path: Path, **variables: str) -> tuple[str, dict, Path]:
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPU_CHECK_")}
    env.update(GPU_CHECK_REHEARSE="1", GPU_CHECK_OUT=str(out), GPU_CHECK_RUNS=str(tmp_path / "runs"),
               PYTHONUNBUFFERED="1", **variables)
    done = subprocess.run([sys.executable, str(GPU_CHECK)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, json.loads((out / "summary.json").read_text()), out


def test_every_section_of_gpu_check_runs_on_the_cpu_and_reports_its_fields(tmp_path):
    out, summary, files = rehearse(tmp_path)
    assert summary["failed_sections"] == [], {name: summary[name] for name in summary["failed_sections"]}
    sb3_here = importlib.util.find_spec("stable_baselines3") is not None
    for section, fields in FIELDS.items():
        if section == "sb3" and not sb3_here:
            assert summary["sb3"] == {"skipped": "stable_baselines3 is not installed here"}
            continue
        assert fields <= set(summary[section]), (section, summary[section])
    ppo, lagged, dqn = summary["ppo"], summary["ppo"]["learning_while_collecting"], summary["dqn"]
    # a rate each, whatever its size: a rehearsal's launch ends at its first new progress record, and on a loaded CPU
    # the records it is computed from may hold no env steps between them (DQN's was 0 at load 9)
    rates = (ppo["env_steps_per_s"], lagged["env_steps_per_s"], dqn["after_learning_starts_env_steps_per_s"])
    assert all(isinstance(rate, int) and rate >= 0 for rate in rates), rates
    assert ppo["startup_cold"]["seconds"] > 0 and "python and imports" in ppo["startup_warm"]["phases"]
    assert ppo["gpu_util_mean"] is None and "nvidia-smi could not be started" in ppo["gpu_sampler"]
    assert summary["tier"]["skipped"] > 0 and summary["tier"]["failed"] == summary["tier"]["errors"] == 0
    assert summary["machine"]["device"] == "cpu" and list(summary["plan"]["budgets"]) == list(FIELDS)
    # the report's shape: the plan first, each section as it runs, then the goals and the tally
    assert out.startswith("gpu-check plan (device cpu, rehearsal;")
    positions = [out.index(f"\n== {name} (budget ") for name in FIELDS]
    assert positions == sorted(positions)
    assert "issue 27's goals, from this run:\n   tests/gpu: 0/" in out and "PPO Pong: " in out
    ran = "9 ran without error, 0 skipped" if sb3_here else "8 ran without error, 1 skipped (sb3)"
    assert f"sections: {ran}, 0 failed; " in out
    logs = {path.name for path in files.iterdir()}
    assert {"summary.json", "tier.log", "ppo-cold.log", "ppo-warm.log", "ppo-lagged-cold.log", "dqn-cold.log"} <= logs
    assert len(logs) <= 7  # a device run brings back 8 files from $OUT: these and the tee'd output


def test_solve_runs_the_example_to_its_end_and_says_why_it_ended(tmp_path):
    out, summary, _ = rehearse(tmp_path, GPU_CHECK_SOLVE="1", GPU_CHECK_SET="ppo.learnWhileCollecting=true")
    solve = summary["solve"]
    assert solve["phase"] == "Succeeded" and solve["ended_by"] == "itself" and solve["timesteps"] == 160
    assert solve["reason"].startswith("budget of 160 timesteps spent")  # Succeeded, but not by reaching the target
    assert solve["startup"]["seconds"] > 0 and list(summary["plan"]["budgets"]) == ["machine", "solve"]
    assert "solve: Succeeded (budget of 160 timesteps spent" in out
