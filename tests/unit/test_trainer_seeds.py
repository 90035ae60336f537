"""Seeds as DESIGN.md promises them: each rank's envs distinct from every other rank's, derived from
the job seed, the rank and the restart generation, and the same again for the same three."""

import numpy as np
from kuberl_trainer.envs import make_envs, rank_seed

NUM_ENVS = 8


def test_no_two_ranks_or_restarts_share_an_env_seed():
    """A vector env seeds its copy i with seed + i: ranks whose seeds lie closer than numEnvs would step
    the same episodes."""
    seeds = [rank_seed(1, rank, restart) for rank in range(64) for restart in range(3)]
    per_env = [s + i for s in seeds for i in range(NUM_ENVS)]
    assert len(set(per_env)) == len(per_env)
    assert seeds == [rank_seed(1, rank, restart) for rank in range(64) for restart in range(3)]
    assert rank_seed(2, 0, 0) not in seeds


def test_two_ranks_of_one_job_start_different_episodes_and_a_rerun_the_same_ones():
    def first_observations(rank: int) -> np.ndarray:
        envs = make_envs("CartPole-v1", NUM_ENVS)
        try:
            return envs.reset(seed=rank_seed(1, rank, 0))[0]
        finally:
            envs.close()

    rank0, rank1 = first_observations(0), first_observations(1)
    assert not np.isclose(rank0[:, None], rank1[None]).all(-1).any()  # no episode of rank 0 starts on rank 1 too
    np.testing.assert_array_equal(rank0, first_observations(0))
