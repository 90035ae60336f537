"""A run that diverges, as pods run it: two real ranks, gloo on 127.0.0.1, an env whose rewards turn infinite
after some steps (tests/unit/diverging_envs.py). Before, such a run Succeeded with every checkpoint kept and its
final model holding NaN; now both ranks end Diverged (exit 78, permanent), the finite checkpoints stay, and the
last one loads as `kuberl eval` loads it."""

import numpy as np
import pytest
import yaml
from kuberl.core import contract
from kuberl_trainer import checkpoint, policy

from .support import Ranks, make_job

ENVS = "tests.unit.diverging_envs"


def diverging_job(tmp_path, algorithm: str, env: str, block: dict, kwargs: dict):
    return make_job(tmp_path, algorithm=algorithm, env={"id": f"{ENVS}:{env}", "numEnvs": 2, "kwargs": kwargs},
                    totalTimesteps=3000, checkpoint={"everyUpdates": 5, "keep": 2},
                    success={"evalEvery": 5, "evalEpisodes": 2}, **{algorithm: block})


@pytest.mark.parametrize(("algorithm", "env", "block", "kwargs"), [
    # rank 1's envs alone: DDP's averaged gradients carry it into rank 0's weights within the update
    ("ppo", "DivergingDiscrete", {"numSteps": 32}, {"after": 200, "rank": 1}),
    ("dqn", "DivergingDiscrete", {"learningStarts": 64, "batchSize": 32}, {"after": 100}),
], ids=["ppo-one-rank", "dqn"])
def test_both_ranks_end_diverged_and_the_last_finite_checkpoint_stays_and_loads(tmp_path, algorithm, env, block, kwargs):
    job = diverging_job(tmp_path, algorithm, env, block, kwargs)
    ranks = Ranks(job)
    assert ranks.wait(timeout=300) == [contract.EXIT_CONFIG_ERROR] * 2, ranks.log(0) + ranks.log(1)
    said = job.termination_log(0)
    assert said.startswith(f"{contract.REASON_DIVERGED}: "), ranks.log(0)
    assert job.termination_log(1).startswith(f"{contract.REASON_DIVERGED}: "), ranks.log(1)
    assert " not finite at update " in said and f"try a lower spec.{algorithm}.learningRate" in said
    kept = checkpoint.list_checkpoints(str(job.checkpoint_dir))  # newest first
    assert kept, ranks.log(0)
    for path in kept:
        assert checkpoint.nonfinite(checkpoint.read(path)) == [], path
    newest = checkpoint.read(kept[0])["counters"]["global_step"]
    pod_dir = job.config["paths"]["checkpointDir"]
    assert f"last finite checkpoint kept: {pod_dir}/{kept[0].rsplit('/', 1)[1]} (timesteps {newest})" in said
    assert not job.final_model.exists()  # weights that diverged are no model
    # as `kuberl eval runs/<job>` plays a run whose final model is missing: its newest checkpoint, read with the
    # run's job.yaml (here rank 0's root, whose checkpoints/<job>-<uid>/ holds them as a run directory's does)
    job_yaml = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "t"}, "spec": job.config["spec"]}
    (job.rank_root(0) / "job.yaml").write_text(yaml.safe_dump(job_yaml))
    played = policy.load_policy(str(job.rank_root(0)), env_modules=[ENVS])
    assert played.timesteps == newest
    assert len(played(np.zeros((2, 3), np.float32))) == 2
