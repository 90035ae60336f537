"""`make gpu-check` (bench/gpu_check.py) off a GPU: what CI can run of it.

Its GPU figures need a GPU; here it must say it skipped, and its learning
profile (the section a GPU session reads to see where an optimiser step's
time goes) must run on the same code with the CPU's profiler."""

import importlib.util
import pathlib

import pytest
import torch

GPU_CHECK = pathlib.Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", GPU_CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
