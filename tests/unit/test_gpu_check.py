"""`make gpu-check` (bench/gpu_check.py) off a GPU: what CI can run of it.

Its GPU figures need a GPU; here it must say it skipped, and its learning
profile (the section a GPU session reads to see where an optimiser step's
time goes) must run on the same code with the CPU's profiler."""

import importlib.util
import json
import pathlib
import re
import sys
import time

import pytest
import torch

GPU_CHECK = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: make gpu-check runs for real")
def test_without_a_gpu_it_says_it_skipped_and_exits_0(gpu_check, capsys):
    assert gpu_check.main() == 0
    assert "no CUDA GPU here: skipped" in capsys.readouterr().out


def test_the_learning_profile_counts_what_one_optimiser_step_costs(gpu_check, capsys):
    result = gpu_check.learning_profile(torch.device("cpu"), ppo_envs=4, ppo_steps=8, dqn_envs=4)
    for algorithm, steps in (("ppo", 16), ("dqn", 1)):
        row = result[algorithm]
        assert row["steps"] == steps and row["wall_ms_per_step"] > 0
        assert 20 < row["aten_ops_per_step"] < 1000  # a forward, a backward and Adam: tens of ops, not one
        assert row["kernel_launches_per_step"] == 0 and row["gpu_busy_ms_per_step"] == 0  # none on a CPU
    out = capsys.readouterr().out
    assert "PPO learn:" in out and "DQN learn:" in out and "Self CPU" in out  # the top-ops tables


def test_the_graphs_section_times_the_trainers_own_steps_and_captures_only_on_cuda(gpu_check, capsys):
    """The eager half runs here on the learners the trainer builds for Pong; capturing
    needs CUDA, so the GPU session's run is the first to replay a graph."""
    result = gpu_check.step_graphs(torch.device("cpu"), ppo_envs=4, ppo_steps=32, dqn_envs=4, steps=2)
    assert set(result) == {"ppo", "dqn"}
    assert all(set(row) == {"eager_ms_per_step"} and row["eager_ms_per_step"] > 0 for row in result.values())
    out = capsys.readouterr().out
    assert "PPO minibatch step: eager" in out and "DQN gradient step: eager" in out and "no CUDA: no graph" in out


def test_the_ratios_to_sb3_come_from_sections_of_the_same_run(gpu_check):
    summary = {"ppo": {"env_steps_per_s": 7834}, "dqn": {"after_learning_starts_env_steps_per_s": 760},
               "sb3": {"ppo_16envs_env_steps_per_s": 754, "dqn_32envs_env_steps_per_s_after_learning_starts": 380}}
    assert gpu_check.ratios(summary) == ["PPO Pong: kuberl 7,834 env steps/s, SB3 754: 10.39x",
                                         "DQN Pong at 32 envs: kuberl 760 env steps/s, SB3 380: 2.00x"]
    assert gpu_check.ratios({"ppo": {"error": "RuntimeError: x"}, "sb3": {}}) == []  # a failed section: no ratio
    summary["ppo"]["learning_while_collecting"] = {"env_steps_per_s": 12000}
    assert gpu_check.ratios(summary)[1] == "PPO Pong learning while collecting: kuberl 12,000 env steps/s, SB3 754: 15.92x"


def test_the_goals_are_judged_from_figures_of_the_same_run(gpu_check):
    summary = {"update": {"fp32-overlap": {"bound_env_steps_per_s": 7300}},
               "ppo": {"env_steps_per_s": 7834, "gpu_util_mean": 18.6,
                       "startup_warm": {"seconds": 15.4, "phases": "python and imports 2.4, envs 12.7"},
                       "learning_while_collecting": {"env_steps_per_s": 12000}},
               "dqn": {"after_learning_starts_env_steps_per_s": 760},
               "sb3": {"dqn_32envs_env_steps_per_s_after_learning_starts": 380}}
    assert gpu_check.goals(summary) == [
        "PPO Pong: 7,834 env steps/s (goal >= 10,000: not met), 107% of the synchronous bound 7,300 (goal >= 85%)",
        "PPO Pong learning while collecting: 12,000 env steps/s (goal >= 10,000: met), 164% of the synchronous bound 7,300 (goal >= 85%)",
        "DQN Pong: 2.00x SB3 (goal >= 2x: met)",
        "GPU busy during PPO: 18.6% (reported)",
        "launch to first env step, warm: 15.4 s (goal <= 5 s: not met; python and imports 2.4, envs 12.7)"]
    assert gpu_check.goals({"ppo": {"error": "RuntimeError: x"}}) == []  # a failed section judges nothing


def test_a_run_that_restarted_does_not_meet_its_rate_goal(gpu_check):
    """On an H200 learnWhileCollecting crashed near update 60, restarted from its checkpoint, and its rate
    (13,081 env steps/s, read from the first generation's records) was judged met. kuberl run's own line says so."""
    log = ("[rank 0] timesteps 122758  steps/s 13,082  return -20.4  eval -\n[kuberl] GangRestart: generation 0 -> 1 in 10s"
           " (counted): Crashed: worker 0 (pong-ppo-gpu-0): Crashed: RuntimeError: Attempt to increase offset\n")
    assert gpu_check.GANG_RESTART.findall(log) == [
        "generation 0 -> 1 in 10s (counted): Crashed: worker 0 (pong-ppo-gpu-0): Crashed: RuntimeError: Attempt to increase offset"]
    summary = {"ppo": {"env_steps_per_s": 13650, "learning_while_collecting": {"env_steps_per_s": 13081, "restarts": ["x"]}},
               "dqn": {"after_learning_starts_env_steps_per_s": 2432, "restarts": ["y"]},
               "sb3": {"dqn_32envs_env_steps_per_s_after_learning_starts": 572}}
    assert gpu_check.goals(summary) == [
        "PPO Pong: 13,650 env steps/s (goal >= 10,000: met)",
        "PPO Pong learning while collecting: 13,081 env steps/s (goal >= 10,000: not met: the run restarted)",
        "DQN Pong: 4.25x SB3 (goal >= 2x: not met: the run restarted)"]
    # the ratios to SB3 (the docs' "11.6x" rows come from them) say it too
    summary["sb3"]["ppo_16envs_env_steps_per_s"] = 1179
    assert gpu_check.ratios(summary) == [
        "PPO Pong: kuberl 13,650 env steps/s, SB3 1,179: 11.58x",
        "PPO Pong learning while collecting: kuberl 13,081 env steps/s, SB3 1,179: 11.09x (the run restarted: not the example's rate)",
        "DQN Pong at 32 envs: kuberl 2,432 env steps/s, SB3 572: 4.25x (the run restarted: not the example's rate)"]


def test_the_gpu_tiers_goal_counts_what_this_machine_can_run(gpu_check):
    """tests/gpu/test_nccl_ranks.py needs two GPUs, and another test exactly one: on any machine one skips, which
    made "all passed" unmeetable. Skips are said beside the count; a failure or an error is still not met."""
    tier = {"passed": 16, "failed": 0, "errors": 0, "skipped": 1}
    assert gpu_check.goals({"tier": tier}) == ["tests/gpu: 16/16 passed, 1 skipped here (tier.log says why) (goal: all: met)"]
    assert gpu_check.goals({"tier": {**tier, "failed": 1}})[0].endswith("16/17 passed, 1 skipped here (tier.log says why) (goal: all: not met)")
    assert gpu_check.goals({"tier": {**tier, "passed": 0}})[0] == "tests/gpu: 0/0 passed, 1 skipped here (tier.log says why) (goal: all: not met)"
    assert gpu_check.goals({"tier": {**tier, "skipped": 0}}) == ["tests/gpu: 16/16 passed (goal: all: met)"]


def test_the_tier_gets_the_nccl_tests_time_on_a_machine_of_two_gpus_or_more(gpu_check):
    """tests/gpu/test_nccl_ranks.py runs only there: on one GPU the tier's 75 s budget stands."""
    assert gpu_check.tier_for_gpus(gpu_check.GPU, 1) is gpu_check.GPU
    more = gpu_check.tier_for_gpus(gpu_check.GPU, 4)
    assert more.budgets["tier"] == gpu_check.GPU.budgets["tier"] + gpu_check.MULTI_GPU_TIER_SECONDS
    assert {k: v for k, v in more.budgets.items() if k != "tier"} == {k: v for k, v in gpu_check.GPU.budgets.items() if k != "tier"}
    assert gpu_check.GPU.budgets["tier"] == 75  # the one-GPU sizes are untouched


def test_a_section_gpu_check_only_does_not_know_is_refused_before_anything_runs(gpu_check, monkeypatch, capsys):
    """A typo (graph for graphs) would otherwise spend a GPU session's only run measuring nothing."""
    monkeypatch.setenv("GPU_CHECK_ONLY", "update,graph")
    assert gpu_check.main() == 2
    out = capsys.readouterr().out
    assert "GPU_CHECK_ONLY names no section graph" in out and "graphs" in out and "plan" not in out


def test_a_deadline_that_leaves_no_time_skips_every_section_saying_so_and_still_writes_the_summary(
        gpu_check, monkeypatch, capsys, tmp_path):
    for name in ("SIZES", "OUT", "RUNS", "DEADLINE"):  # main() sets them: restored for the other tests
        monkeypatch.setattr(gpu_check, name, getattr(gpu_check, name))
    monkeypatch.setenv("GPU_CHECK_REHEARSE", "1")
    monkeypatch.setenv("GPU_CHECK_SECONDS", "0")
    monkeypatch.setenv("GPU_CHECK_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("GPU_CHECK_RUNS", str(tmp_path / "runs"))
    assert gpu_check.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check plan (device cpu, rehearsal; GPU_CHECK_SECONDS 0.0")  # the plan comes first
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    sections = ["machine", *gpu_check.ORDER]
    assert list(summary["plan"]["budgets"]) == sections
    for name in sections:
        assert summary[name]["skipped"].startswith("0 s left of GPU_CHECK_SECONDS"), name
        assert f"{name} SKIPPED" in out
    assert summary["failed_sections"] == [] and summary["skipped_sections"] == sections
    assert "sections: 0 ran without error, 9 skipped (machine, update, ppo, dqn, tier, profile, graphs, ceiling, sb3), 0 failed" in out


def test_without_nvidia_smi_the_gpu_windows_say_so_instead_of_a_figure(gpu_check):
    sampler = gpu_check.GpuSampler("no-such-nvidia-smi")
    window = sampler.window(0, time.monotonic())
    sampler.stop()
    assert window["gpu_util_mean"] is None and window["gpu_mem_max_mib"] is None
    assert "no-such-nvidia-smi could not be started" in window["gpu_sampler"]


def test_the_gpu_tiers_counts_and_failures_are_read_from_pytests_closing_lines(gpu_check):
    output = ("....FF.ss\nFAILED tests/gpu/test_cuda_paths.py::test_dqn_learns_pong_from_pixels_on_one_gpu[fp32] - RuntimeError\n"
              "ERROR tests/gpu/test_cuda_paths.py::test_x - ImportError\n"
              "2 failed, 7 passed, 2 skipped, 1 error in 41.20s\n")
    counts = gpu_check.pytest_counts(output)
    assert {k: counts[k] for k in ("passed", "failed", "skipped", "errors")} == {"passed": 7, "failed": 2, "skipped": 2, "errors": 1}
    assert counts["failures"] == ["tests/gpu/test_cuda_paths.py::test_dqn_learns_pong_from_pixels_on_one_gpu[fp32]",
                                  "tests/gpu/test_cuda_paths.py::test_x"]
    stopped = ("tests/gpu/test_cuda_paths.py::test_a PASSED [  7%]\n"
               "tests/gpu/test_cuda_paths.py::test_b[fp32] FAILED [ 14%]\n"
               "tests/gpu/test_cuda_paths.py::test_c SKIPPED (no bf16) [ 21%]\n")  # stopped at its budget: pytest -v's lines so far
    counts = gpu_check.pytest_counts(stopped)
    assert {k: counts[k] for k in ("passed", "failed", "skipped", "errors")} == {"passed": 1, "failed": 1, "skipped": 1, "errors": 0}
    assert counts["failures"] == ["tests/gpu/test_cuda_paths.py::test_b[fp32]"]


def test_a_rate_comes_from_the_first_generations_records_past_its_warm_up(gpu_check, tmp_path):
    run = tmp_path / "pong-ppo-gpu" / "checkpoints" / "x"
    run.mkdir(parents=True)
    records = [{"timesteps": 1000 * i, "wall_seconds": float(i), "restart": 0, "episode_return_mean": -21.0 + i}
               for i in range(1, 11)]
    records += [{"timesteps": 99_000, "wall_seconds": 1.0, "restart": 1}]  # a later generation's clock starts again
    (run / "progress.jsonl").write_text("\n".join(map(json.dumps, records)) + "\nnot json\n")
    assert gpu_check.progress_rate(tmp_path / "pong-ppo-gpu") == {"env_steps_per_s": 1000, "timesteps": 10_000,
                                                                  "return_last": -11.0}
    assert gpu_check.progress_rate(tmp_path / "pong-ppo-gpu", after_timesteps=9000)["env_steps_per_s"] is None


def test_the_device_command_in_the_docs_fits_its_limit_with_the_sections_it_names(gpu_check):
    """docs/testing.md's command for a lent GPU machine: its sections' budgets within its
    GPU_CHECK_SECONDS, and that with the venv's minute within the command's timeout_s."""
    text = (pathlib.Path(gpu_check.ROOT) / "docs" / "testing.md").read_text()
    command = next(line for line in text.splitlines() if "make gpu-check-offline" in line and "GPU_CHECK_OUT=$OUT" in line)
    only = re.search(r"GPU_CHECK_ONLY=([\w,]+)", command).group(1).split(",")
    seconds = float(re.search(r"GPU_CHECK_SECONDS=(\d+)", command).group(1))
    timeout_s = float(re.search(r"timeout_s (\d+)", text).group(1))
    assert set(only) <= set(gpu_check.ORDER)
    planned = gpu_check.GPU.budgets["machine"] + sum(gpu_check.GPU.budgets[name] for name in only)
    assert planned <= seconds and seconds + 60 <= timeout_s <= 600, (planned, seconds, timeout_s)
    launches = gpu_check.GPU.launches
    assert launches["ppo-cold"][0] + launches["ppo-warm"][0] + launches["ppo-lagged-cold"][0] < gpu_check.GPU.budgets["ppo"]
    assert launches["dqn-cold"][0] < gpu_check.GPU.budgets["dqn"]


def test_a_step_left_eager_by_a_failed_capture_is_reported_once_per_step(gpu_check):
    """The rates of a run whose graphs failed are eager ones: gpu-check says so, from the trainer's own line."""
    kuberl_run_output = ("[rank 0] kuberl trainer: DQN's forward and backward stays eager: CUDA graph capture failed: "
                         "operation not permitted when stream is capturing\n[rank 0] timesteps 7808  steps/s 1,559\n")
    pod_log = ("kuberl trainer: DQN's forward and backward stays eager: CUDA graph capture failed: "
               "operation not permitted when stream is capturing\nkuberl trainer: the optimiser step stays eager: "
               "CUDA graph capture failed: Attempting CUDA graph capture of step()\n")
    assert gpu_check.graph_failures([kuberl_run_output, pod_log]) == [
        "DQN's forward and backward stays eager: CUDA graph capture failed: operation not permitted when stream is capturing",
        "the optimiser step stays eager: CUDA graph capture failed: Attempting CUDA graph capture of step()"]
    assert gpu_check.graph_failures(["[rank 0] timesteps 7808  steps/s 1,559\n"]) == []
