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
    as_collected = trainer.obs_norm.normalize(trainer.next_obs).astype(np.float32)
    next_value = trainer.actor.value(as_collected)
    buf = trainer.buf
    trainer.obs_norm.merge(RunningMeanStd.moments(buf.raw_obs[buf.valid.astype(bool)], trainer.obs_shape))  # as update() does
    advantages, _ = trainer.advantages(scale_rewards=False)
    expected, _ = gae(buf.rewards, buf.values, next_value, buf.terminated, buf.truncated, buf.valid,
                      trainer.hp.gamma, trainer.hp.gae_lambda)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-6)
