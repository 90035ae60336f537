"""GAE and the autoreset mask against a hand-built episode boundary."""

import gymnasium as gym
import numpy as np
import pytest
from kuberl_trainer.envs import EpisodeTracker
from kuberl_trainer.ppo import gae

# One env, six steps: an episode that terminates at t1, the autoreset step t2,
# an episode truncated at t3, the autoreset step t4 (its value is the value of
# the truncated episode's final observation), and an episode still running.
REWARDS = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 2.0])
VALUES = np.array([0.5, 0.6, 0.7, 0.2, 0.9, 0.3])
TERMINATED = np.array([0, 1, 0, 0, 0, 0.0])
TRUNCATED = np.array([0, 0, 0, 1, 0, 0.0])
VALID = np.array([1, 1, 0, 1, 0, 1.0])
NEXT_VALUE = 0.4
GAMMA, LAMBDA = 0.9, 0.5


def column(x):
    return np.asarray(x, np.float32).reshape(-1, 1)


def test_gae_hand_built_boundary():
    advantages, returns = gae(
        column(REWARDS), column(VALUES), np.array([NEXT_VALUE], np.float32),
        column(TERMINATED), column(TRUNCATED), column(VALID), GAMMA, LAMBDA,
    )
    a5 = 2 + GAMMA * NEXT_VALUE - 0.3  # running: bootstrap from the next value
    a3 = 1 + GAMMA * 0.9 - 0.2  # truncated: bootstrap from the final observation, no continuation
    a1 = 1 - 0.6  # terminated: no bootstrap
    a0 = (1 + GAMMA * 0.6 - 0.5) + GAMMA * LAMBDA * a1
    expected = [a0, a1, 0.0, a3, 0.0, a5]
    np.testing.assert_allclose(advantages[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [a0 + 0.5, a1 + 0.6, 0.0, a3 + 0.2, 0.0, a5 + 0.3], rtol=1e-6)


def test_gae_terminated_and_truncated_differ():
    kwargs = {"values": column([0.0]), "next_value": np.array([10.0], np.float32), "valid": column([1.0]),
                  "gamma": 0.5, "gae_lambda": 1.0}
    terminated, _ = gae(column([1.0]), terminated=column([1.0]), truncated=column([0.0]), **kwargs)
    truncated, _ = gae(column([1.0]), terminated=column([0.0]), truncated=column([1.0]), **kwargs)
    assert terminated[0, 0] == pytest.approx(1.0)
    assert truncated[0, 0] == pytest.approx(1.0 + 0.5 * 10.0)


def test_gae_matches_columns_independently():
    rng = np.random.default_rng(0)
    shape = (16, 3)
    data = {
        "rewards": rng.normal(size=shape).astype(np.float32),
        "values": rng.normal(size=shape).astype(np.float32),
        "terminated": (rng.random(shape) < 0.1).astype(np.float32),
        "truncated": (rng.random(shape) < 0.1).astype(np.float32),
        "valid": (rng.random(shape) < 0.9).astype(np.float32),
    }
    next_value = rng.normal(size=3).astype(np.float32)
    both, _ = gae(next_value=next_value, gamma=0.99, gae_lambda=0.95, **data)
    for n in range(3):
        one, _ = gae(next_value=next_value[n : n + 1], gamma=0.99, gae_lambda=0.95,
                     **{k: v[:, n : n + 1] for k, v in data.items()})
        np.testing.assert_allclose(both[:, n], one[:, 0], rtol=1e-6)


def test_tracker_masks_the_autoreset_step():
    tracker = EpisodeTracker(1)
    seen_valid = []
    for reward, done in zip(REWARDS, TERMINATED + TRUNCATED, strict=True):
        seen_valid.append(float(tracker.valid[0]))
        tracker.step(np.array([reward]), np.array([bool(done)]))
    assert seen_valid == VALID.tolist()
    returns, lengths = tracker.drain()
    assert returns == [2.0, 1.0] and lengths == [2, 1]


def test_tracker_agrees_with_gymnasium_next_step_autoreset():
    envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    envs.reset(seed=3)
    tracker = EpisodeTracker(4)
    rng = np.random.default_rng(3)
    ended = autoresets = 0
    for _ in range(300):
        valid = tracker.valid.copy()
        _, reward, terminated, truncated, _ = envs.step(rng.integers(0, 2, 4))
        done = terminated | truncated
        assert (reward[~valid] == 0).all() and not done[~valid].any()  # the reset step is no transition
        autoresets += int((~valid).sum())
        tracker.step(reward, done)
        ended += int(done.sum())
    returns, _ = tracker.drain()
    assert len(returns) == ended > 10
    assert autoresets >= ended - 4  # every ended episode but the last per env was followed by its reset step
    assert sum(returns) > 0


def test_a_time_limit_in_a_real_rollout_bootstraps_from_the_episodes_final_observation():
    """Pendulum never terminates: every episode ends by its time limit. The rollout stores the final observation
    at the autoreset step after it (replayed here from the same seed and actions), its value is what the
    truncated step's advantage bootstraps from, and the autoreset step itself carries nothing."""
    import torch
    from kuberl.core.spec import PPOConfig
    from kuberl_trainer.distributed import Dist
    from kuberl_trainer.ppo import PPOTrainer

    hp = PPOConfig(num_steps=16, hidden_sizes=[8], gamma=GAMMA, gae_lambda=LAMBDA)
    trainer = PPOTrainer(Dist(0, 1, 0, 1, torch.device("cpu"), None), hp, "Pendulum-v1", 2, {"max_episode_steps": 5},
                         1000, seed=1, restart=0)
    trainer.collect()
    buf = trainer.buf
    advantages, returns = trainer.advantages(scale_rewards=False)
    assert not buf.terminated.any() and buf.truncated[4].all() and not buf.valid[5].any()
    for e in range(2):
        env = gym.make("Pendulum-v1", max_episode_steps=5)
        env.reset(seed=trainer.seed + e)  # gymnasium seeds copy e of a vector env with seed + e
        for t in range(5):
            final, *_ = env.step(np.clip(buf.actions[t, e], -2, 2))
        np.testing.assert_allclose(buf.obs[5, e], final, rtol=1e-6)
    final_value = trainer.actor.value(buf.obs[5])
    np.testing.assert_allclose(advantages[4], buf.rewards[4] + GAMMA * final_value - buf.values[4], rtol=1e-5, atol=1e-5)
    assert (advantages[5] == 0).all() and (returns[5] == 0).all()
