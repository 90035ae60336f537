"""Pong from pixels under DDP: two real rank processes over gloo, the Nature
CNN, frames as uint8, about 1k env steps per algorithm split across a run
and its resume from the checkpoint; plus the configuration errors a pixel
job can hit. Kept tiny: the machine has two shared cores."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
from kuberl.core import contract, metricnames

from .support import Job, Ranks, make_job, write_config

RANK_SCRIPT = Path(__file__).with_name("atari_rank.py")
PONG = {"id": "ALE/Pong-v5", "numEnvs": 2}
ALGORITHMS = {
    # 2 ranks x 2 envs x 32 steps = 128 steps per update; bf16 autocast on CPU runs the GPU's code path under DDP
    "ppo": {"ppo": {"numSteps": 32, "numMinibatches": 2, "updateEpochs": 1, "learningRate": 2.5e-4, "precision": "bf16"},
            "checkpoint": {"everyUpdates": 2, "keep": 2}},
    # 2 ranks x 2 envs x 8 vector steps = 32 steps per iteration, one gradient step each, from step 128 per rank
    "dqn": {"dqn": {"bufferSize": 2000, "batchSize": 16, "learningStarts": 128, "trainFrequency": 16,
                    "targetUpdateInterval": 200, "nStep": 3},
            "checkpoint": {"everyUpdates": 8, "keep": 2}},
}


def launch(job: Job, timeout: float = 300) -> list[int]:
    """Every rank as a process running atari_rank.py, the way a pod runs the trainer; returns exit codes."""
    return Ranks(job, extra_env={"OMP_NUM_THREADS": "1"}, program=[str(RANK_SCRIPT)]).wait(timeout)


def logs(job: Job) -> str:
    return "\n".join((job.root / f"rank-{r}.log").read_text() for r in range(job.world_size))


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_two_ranks_learn_pong_from_pixels_and_resume(tmp_path, algorithm):
    # no evaluation (a budget under evalEvery updates): one Pong episode of an untrained policy steps 760 times or more
    overrides = {"algorithm": algorithm, "env": PONG, "totalTimesteps": 512,
                 "success": {"evalEvery": 1_000_000, "evalEpisodes": 1},
                 **ALGORITHMS[algorithm]}
    job = make_job(tmp_path, **overrides)
    assert launch(job) == [0, 0], logs(job)

    params = [torch.load(job.rank_root(r) / "params.pt") for r in (0, 1)]
    assert any("convs" in key for key in params[0]), "the Nature CNN, chosen from the pixel observations"
    for key in params[0]:
        torch.testing.assert_close(params[0][key], params[1][key], rtol=0, atol=0, msg=f"{key} differs across ranks")
    losses = json.loads((job.rank_root(0) / "losses.json").read_text())
    learned = [value for update in losses for value in update.values()]
    assert learned and all(abs(v) < float("inf") for v in learned), losses
    page = (job.rank_root(1) / "metrics.txt").read_text()
    assert metric(page, metricnames.ENV_STEPS_TOTAL) >= 512 and metric(page, metricnames.WORLD_SIZE) == 2
    assert 'rank="1"' in page
    checkpoints = sorted(job.checkpoint_dir.glob("ckpt-*.pt"))
    assert checkpoints, logs(job)

    # the same job with twice the budget resumes from the newest checkpoint
    job.config["spec"]["totalTimesteps"] = 1024
    write_config(job)
    assert launch(job) == [0, 0], logs(job)
    resumed = re.search(r"resuming from \S+/(ckpt-\d+\.pt) \(timesteps (\d+)\)", (job.root / "rank-0.log").read_text())
    assert resumed and resumed.group(1) == checkpoints[-1].name and int(resumed.group(2)) >= 512, logs(job)
    final = torch.load(job.final_model, weights_only=False)
    assert final["timesteps"] >= 1024
    assert job.termination_log(0).startswith(f"{contract.REASON_SUCCEEDED}: budget of 1024"), logs(job)


@pytest.mark.parametrize(("overrides", "field"), [
    ({"env": {**PONG, "id": "ALE/Pongg-v5"}}, "spec.env.id"),
    ({"env": PONG, "ppo": {"policy": "mlp"}}, "spec.ppo.policy"),
    # a game ALE ships and EnvPool does not; without envpool installed, the backend itself is refused
    ({"env": {**PONG, "id": "ALE/TicTacToe3D-v5", "backend": "envpool"}},
     "spec.env.id" if importlib.util.find_spec("envpool") else "spec.env.backend"),
])
def test_pixel_jobs_that_cannot_run_exit_with_a_configuration_error_naming_the_field(tmp_path, overrides, field):
    job = make_job(tmp_path, world_size=1, **overrides)
    assert launch(job, timeout=60) == [contract.EXIT_CONFIG_ERROR], logs(job)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CONFIG_ERROR}: {field}"), reason
