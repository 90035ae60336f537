"""Numpy acting computes what the torch agent computes, on the same weights."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl_trainer import fastpolicy
from kuberl_trainer.ppo import Agent


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-2, 2, (2,), np.float32)])
def test_numpy_policy_matches_the_agent(space):
    torch.manual_seed(0)
    agent = Agent(5, space, [16, 16])
    assert fastpolicy.supports(agent, torch.device("cpu"))
    policy = fastpolicy.NumpyPolicy(agent, np.random.default_rng(0))
    obs = np.random.default_rng(1).normal(size=(64, 5)).astype(np.float32)
    action, log_prob, value = policy.act(obs)
    with torch.no_grad():
        expected_log_prob, _, expected_value = agent(torch.from_numpy(obs), torch.as_tensor(action))
        greedy = agent.greedy(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(log_prob, expected_log_prob.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, expected_value.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(policy.greedy(obs), greedy, rtol=1e-4, atol=1e-5)


def test_views_follow_in_place_updates():
    agent = Agent(4, gym.spaces.Discrete(2), [8])
    policy = fastpolicy.NumpyPolicy(agent, np.random.default_rng(0))
    obs = np.ones((1, 4), np.float32)
    before = policy.value(obs).copy()
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.add_(1.0)  # what the optimiser and load_state_dict do
    assert policy.value(obs) != pytest.approx(before)
    assert policy.value(obs)[0] == pytest.approx(agent.value(torch.from_numpy(obs)).item(), rel=1e-5)


def test_discrete_sampling_follows_the_probabilities():
    agent = Agent(1, gym.spaces.Discrete(3), [4])
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    policy = fastpolicy.NumpyPolicy(agent, np.random.default_rng(0))
    actions, _, _ = policy.act(np.zeros((20000, 1), np.float32))
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000, [0.2, 0.3, 0.5], atol=0.015)
