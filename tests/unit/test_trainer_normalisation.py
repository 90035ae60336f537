"""PPO's normalisers as CleanRL's ppo_continuous_action.py (and SB3's VecNormalize) use them: scaled
rewards clipped to +-10, and the last step's bootstrap value taken on the observation normalised as
the rollout's own observations were."""

import numpy as np
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.normalize import RunningMeanStd
from kuberl_trainer.ppo import PPOTrainer, gae

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)


def test_scaled_rewards_are_clipped_at_the_normalisers_clip_as_cleanrl_and_sb3_clip_them():
    """CleanRL: NormalizeReward then TransformReward(clip -10, 10); SB3: VecNormalize(clip_reward=10).
    A reward 100 return-stds large (a crash penalty early in training) reached the value loss whole."""
    returns = RunningMeanStd(())
    returns.merge(RunningMeanStd.moments(np.array([-1.0, 1.0]), ()))  # std 1
    np.testing.assert_allclose(returns.scale(np.array([100.0, -100.0, 0.5, 0.0])), [10.0, -10.0, 0.5, 0.0], rtol=1e-6)


def test_the_bootstrap_value_sees_the_last_observation_normalised_as_the_rollouts_were():
    """The update merged the rollout's observation moments first, then valued the observation after the
    rollout's last step with the merged normaliser: a bootstrap on another scale than values[t] (CleanRL
    normalises each observation once, when the env returns it)."""
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=64, hidden_sizes=[8], normalize_observation=True),
                         "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
    trainer.update(stop_vote=False, success_vote=False)  # the normaliser holds a first rollout's moments
    trainer.collect()
    as_collected = trainer.acting_norm.normalize(trainer.next_obs).astype(np.float32)
    next_value = trainer.actor.value(as_collected)
    buf = trainer.buf
    trainer.obs_norm.merge(RunningMeanStd.moments(buf.raw_obs[buf.valid.astype(bool)], trainer.obs_shape))  # as update() does
    advantages, _ = trainer.advantages(scale_rewards=False)
    expected, _ = gae(buf.rewards, buf.values, next_value, buf.terminated, buf.truncated, buf.valid,
                      trainer.hp.gamma, trainer.hp.gae_lambda)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-6)


def vecnormalize_observations(raw: np.ndarray, valid: np.ndarray, clip: float = 10.0) -> np.ndarray:
    """SB3's VecNormalize (and CleanRL's NormalizeObservation) written out: each step's observations join
    the running statistics, then are normalised with them; (T, N, D) raw observations, (T, N) valid."""
    seen, out = [], np.zeros(raw.shape, np.float64)
    for t in range(raw.shape[0]):
        seen.extend(raw[t][valid[t]])
        mean, var = np.mean(seen, 0), np.var(seen, 0)
        out[t] = np.clip((raw[t] - mean) / np.sqrt(var + 1e-8), -clip, clip)
    return out


def test_the_first_rollout_is_normalised_with_statistics_that_include_each_step_as_sb3_and_cleanrl_do():
    """VecNormalize and NormalizeObservation update the statistics with each step's observations before
    normalising them, the reset's included. kuberl's merged statistics only at the update, so the whole
    first rollout met mean 0, std 1: MountainCarContinuous' velocities (about 0.01) stayed near 0, and an
    observation of scale 100 was clipped to +-10 for every step of it."""
    hp = PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True)
    trainer = PPOTrainer(ONE_PROCESS, hp, "Pendulum-v1", 3, {"max_episode_steps": 6}, 10_000, seed=1, restart=0)
    trainer.collect()
    buf = trainer.buf
    valid = buf.valid.astype(bool)
    assert not valid.all()  # autoreset steps (the episodes end every 6 steps) stay out of the statistics
    np.testing.assert_allclose(buf.obs, vecnormalize_observations(buf.raw_obs, valid), rtol=1e-5, atol=1e-5)


def test_after_each_update_every_rank_acts_with_the_merged_statistics_again():
    """Within a rollout a rank's statistics gain its own observations; at the update the ranks' moments are
    all-reduced and every rank starts the next rollout from the same merged statistics (the checkpointed
    ones, which evaluation and the final model use)."""
    hp = PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True)
    trainer = PPOTrainer(ONE_PROCESS, hp, "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
    for _ in range(2):
        trainer.update(stop_vote=False, success_vote=False)
        assert trainer.obs_norm.count == trainer.acting_norm.count == trainer.counters.global_step
        np.testing.assert_allclose(trainer.acting_norm.mean, trainer.obs_norm.mean, rtol=1e-12)
        np.testing.assert_allclose(trainer.acting_norm.std, np.sqrt(trainer.obs_norm.var + 1e-8), rtol=1e-12)


def test_a_resumed_rank_normalises_its_next_rollout_bit_for_bit_as_the_uninterrupted_one():
    """Deterministic mode's promise with normalisation on: the statistics a rank acts with restart from the
    checkpointed ones on load, as they restart from the merged ones at each update."""
    import copy

    hp = PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True, normalize_reward=True)
    uninterrupted = PPOTrainer(ONE_PROCESS, hp, "CartPole-v1", 2, {}, 10_000, seed=1, restart=0)
    uninterrupted.update(stop_vote=False, success_vote=False)
    shared, rank = copy.deepcopy(uninterrupted.shared_state()), copy.deepcopy(uninterrupted.rank_state())
    uninterrupted.update(stop_vote=False, success_vote=False)
    resumed = PPOTrainer(ONE_PROCESS, hp, "CartPole-v1", 2, {}, 10_000, seed=1, restart=0)
    resumed.load_shared(shared)
    resumed.load_rank(rank)
    resumed.update(stop_vote=False, success_vote=False)
    np.testing.assert_array_equal(resumed.buf.obs, uninterrupted.buf.obs)
    for a, b in zip(resumed.agent.parameters(), uninterrupted.agent.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_of_a_rank_with_reward_normalisation_is_taken_back_by_the_same_job():
    """The return normaliser's statistics are of shape (): its merge turned the 0-d arrays into numpy scalars,
    which the resume's check (checkpoint.mismatch) refused against a fresh trainer's arrays, so every job with
    normalizeReward failed its first resume: 'ConfigError: checkpoint … was not written by this job's trainer
    (state.ret_norm.mean is float64, not ndarray)'. Checkpoints written so that still resume."""
    from kuberl_trainer import checkpoint

    hp = PPOConfig(num_steps=16, hidden_sizes=[8], normalize_observation=True, normalize_reward=True)
    trained = PPOTrainer(ONE_PROCESS, hp, "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
    trained.update(stop_vote=False, success_vote=False)
    saved = checkpoint.decode(checkpoint.encode(trained.shared_state()))
    fresh = PPOTrainer(ONE_PROCESS, hp, "Pendulum-v1", 2, {}, 10_000, seed=1, restart=0)
    assert checkpoint.mismatch(fresh.shared_state(), saved) is None
    assert isinstance(trained.ret_norm.mean, np.ndarray) and isinstance(trained.ret_norm.var, np.ndarray)
    as_written_before = {**saved, "ret_norm": {**saved["ret_norm"], "mean": np.float64(0.5), "var": np.float64(2.0)}}
    assert checkpoint.mismatch(fresh.shared_state(), checkpoint.decode(checkpoint.encode(as_written_before))) is None
    fresh.load_shared(as_written_before)
    assert isinstance(fresh.ret_norm.mean, np.ndarray) and fresh.ret_norm.var.shape == ()


def sb3_scaled_rewards(rewards, done, valid, state: dict, gamma: float) -> np.ndarray:
    """SB3's VecNormalize reward path, step by step (vec_normalize.py: returns = returns * gamma + reward;
    ret_rms.update(returns); reward / sqrt(ret_rms.var + 1e-8), clipped to 10; returns[dones] = 0; its
    RunningMeanStd starts at count 1e-4, var 1). Autoreset rows are no steps there."""
    scaled = np.zeros_like(rewards)
    for t in range(len(rewards)):
        real = valid[t]
        state["returns"][real] = state["returns"][real] * gamma + rewards[t][real]
        batch = state["returns"][real]
        if len(batch):
            delta, total = batch.mean() - state["mean"], state["count"] + len(batch)
            m2 = state["var"] * state["count"] + batch.var() * len(batch) + delta**2 * state["count"] * len(batch) / total
            state["mean"], state["var"], state["count"] = state["mean"] + delta * len(batch) / total, m2 / total, total
        scaled[t] = np.clip(rewards[t] / np.sqrt(state["var"] + 1e-8), -10, 10)
        state["returns"][done[t] & real] = 0.0
    return scaled


def test_reward_scaling_once_per_rollout_meets_sb3s_per_step_scaling_after_the_first_rollout():
    """kuberl scales a rollout's rewards once, with return statistics that include that rollout; SB3 each
    step's with the statistics as they stand then. The first rollout differs most (SB3 scales its first
    steps by the std of a few returns); later ones differ by a few percent while the policy, and so the
    returns, change (CartPole, 4 envs x 64 steps: 78% on the first, 0.3-7% on the next 29 rollouts).
    docs/spec-reference.md (ppo.normalizeReward) says so."""
    hp = PPOConfig(num_steps=64, normalize_reward=True, hidden_sizes=[16])
    trainer = PPOTrainer(ONE_PROCESS, hp, "CartPole-v1", 4, {}, 10**6, seed=1, restart=0)
    sb3 = {"returns": np.zeros(4), "mean": 0.0, "var": 1.0, "count": 1e-4}
    differences = []
    for _ in range(30):
        trainer.update(False, False)
        buf = trainer.buf
        valid = buf.valid.astype(bool)
        theirs = sb3_scaled_rewards(buf.rewards, (buf.terminated + buf.truncated) > 0, valid, sb3, hp.gamma)
        ours = trainer.ret_norm.scale(buf.rewards)  # what advantages() scaled this rollout with
        differences.append(np.abs(ours[valid] - theirs[valid]).mean() / np.abs(theirs[valid]).mean())
    assert differences[0] > 0.3
    assert np.median(differences[1:]) < 0.03 and max(differences[1:]) < 0.15, np.round(differences, 3)
    trainer.envs.close()
