"""The GPU tier's device-generic test bodies, run here on the CPU with their GPU set to the CPU.

CI has no GPU, so tests/gpu skips there, and a GPU test's own assertion could be wrong for months:
on an H200 (2026-11-29) the SAC test asked its last update for the actor's losses, which that update,
with no actor step (one in policyFrequency critic steps), did not have. Bodies that only place tensors
and modules on their device run the same on the CPU; those that need CUDA itself (streams' timing,
pinned memory, graphs, NCCL, device memory) stay GPU-only and are not listed."""

import importlib.util
from pathlib import Path

import pytest
import torch

GPU_TIER = Path(__file__).resolve().parents[1] / "gpu" / "test_cuda_paths.py"
DEVICE_GENERIC = [  # (name, arguments); DQN's Pong bodies pass too but take ~100 s of CPU each
    ("test_bf16_autocast_on_the_gpu_keeps_the_rl_maths_in_fp32", {}),
    ("test_a_frozen_copy_evaluates_on_its_own_stream_while_the_update_runs", {}),
    ("test_sac_learns_pendulum_on_one_gpu", {}),
    ("test_td3_learns_pendulum_on_one_gpu", {}),
    ("test_recurrent_ppo_runs_its_lstm_once_per_stretch_without_an_episode_start_on_the_gpu", {"precision": "fp32"}),
]


@pytest.fixture(scope="module")
def gpu_tier_on_cpu():
    spec = importlib.util.spec_from_file_location("gpu_tier_on_cpu", GPU_TIER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.GPU = torch.device("cpu")  # each body reads the module's GPU when it runs
    return module


@pytest.mark.parametrize(("name", "arguments"), DEVICE_GENERIC)
def test_a_gpu_tier_body_holds_on_the_cpu(gpu_tier_on_cpu, name, arguments):
    getattr(gpu_tier_on_cpu, name)(**arguments)


def test_every_listed_body_is_still_in_the_gpu_tier(gpu_tier_on_cpu):
    assert [name for name, _ in DEVICE_GENERIC if not callable(getattr(gpu_tier_on_cpu, name, None))] == []
