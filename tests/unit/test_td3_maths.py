"""TD3's pure pieces against hand-computed cases: exploration noise scaled to the action box, target policy
smoothing (noise clipped, then the action clipped to the box), the clipped double-Q target, the critic and
actor losses, when the delayed actor and target steps fall, and the deterministic actor's bounds."""

import numpy as np
import pytest
import torch
from kuberl_trainer.td3 import (
    Actor,
    actor_loss,
    clipped_double_q_target,
    critic_loss,
    delayed_step_due,
    delayed_steps_between,
    explore,
    smoothed_target_actions,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_exploration_noise_is_scaled_by_the_boxs_half_width_and_the_sum_clipped_to_the_box():
    # box [-2, 2] x [0, 1]: half-widths 2 and 0.5; sigma 0.1
    low, high, scale = np.array([-2.0, 0.0]), np.array([2.0, 1.0]), np.array([2.0, 0.5])
    actions = np.array([[0.0, 0.5], [1.9, 0.95]])
    draws = np.array([[1.0, -2.0], [1.0, 2.0]])
    # [0 + 0.1*2*1, 0.5 - 0.1*0.5*2] = [0.2, 0.4]; [1.9 + 0.2, 0.95 + 0.1] clipped to [2.0, 1.0]
    assert explore(actions, draws, 0.1, scale, low, high) == pytest.approx(np.array([[0.2, 0.4], [2.0, 1.0]]))
    assert explore(actions, draws, 0.0, scale, low, high).tolist() == actions.tolist()  # no noise: the actor's own


def test_target_smoothing_clips_the_noise_then_the_action_to_the_box():
    # box [-2, 2] (scale 2, bias 0) and [0, 1] (scale 0.5, bias 0.5); sigma 0.2, noise clip 0.5
    scale, bias = torch.tensor([2.0, 0.5]), torch.tensor([0.0, 0.5])
    target = torch.tensor([[0.0, 0.5], [0.0, 0.5], [1.5, 0.9], [-1.9, 0.1]])
    draws = torch.tensor([[1.0, -1.0], [4.0, -4.0], [5.0, 1.0], [-10.0, -10.0]])
    # noise = clamp(0.2 * eps, -0.5, 0.5) * scale:
    #   [0.2*2, -0.2*0.5] = [0.4, -0.1]               -> [0.4, 0.4]
    #   [clamp(0.8)=0.5 * 2, clamp(-0.8)=-0.5 * 0.5]   -> [1.0, 0.25] (the clip, then the scale)
    #   [clamp(1.0)=0.5 * 2, 0.2*0.5] = [1.0, 0.1]     -> [2.5, 1.0] clipped to [2.0, 1.0]
    #   [-0.5 * 2, -0.5 * 0.5] = [-1.0, -0.25]        -> [-2.9, -0.15] clipped to [-2.0, 0.0]
    smoothed = smoothed_target_actions(target, draws, 0.2, 0.5, scale, bias)
    assert smoothed.numpy() == pytest.approx(np.array([[0.4, 0.4], [1.0, 0.25], [2.0, 1.0], [-2.0, 0.0]]))


def test_the_target_takes_the_smaller_target_critic_and_no_bootstrap_at_termination():
    rewards, discount = torch.tensor([1.0, 2.0, -1.0]), torch.tensor([0.9, 0.0, 0.5])
    next_q1, next_q2 = torch.tensor([10.0, 5.0, -4.0]), torch.tensor([8.0, 7.0, -2.0])
    # min = [8, 5, -4]: 1 + 0.9 * 8, 2 (terminated), -1 + 0.5 * -4
    assert clipped_double_q_target(rewards, discount, next_q1, next_q2).tolist() == pytest.approx([8.2, 2.0, -3.0])


def test_critic_loss_sums_both_critics_mean_squared_errors_against_one_target():
    q1, q2, target = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]), torch.tensor([1.0, 3.0])
    assert critic_loss(q1, q2, target).item() == pytest.approx((0 + 1) / 2 + (1 + 1) / 2)


def test_actor_loss_is_minus_the_first_critics_mean_and_its_gradient_raises_q():
    q1_pi = torch.tensor([3.0, -1.0], requires_grad=True)
    loss = actor_loss(q1_pi)
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    assert q1_pi.grad.tolist() == pytest.approx([-0.5, -0.5])  # descent raises each Q


@pytest.mark.parametrize(("delay", "due"), [(1, [1, 2, 3, 4, 5, 6]), (2, [2, 4, 6]), (3, [3, 6])])
def test_the_actor_and_the_targets_step_after_every_policy_delay_th_critic_step(delay, due):
    assert [step for step in range(1, 7) if delayed_step_due(step, delay)] == due
    assert delayed_steps_between(0, 6, delay) == len(due)
    assert delayed_steps_between(1, 3, 2) == 1 and delayed_steps_between(2, 3, 2) == 0 and delayed_steps_between(3, 6, 2) == 2


def test_the_actor_is_deterministic_inside_the_box_and_greedy_is_its_action():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = Actor(3, low, high, [16, 16])
    obs = torch.randn(64, 3) * 100  # large inputs saturate tanh at the bounds
    actions = actor(obs)
    assert actions.shape == (64, 2) and ((actions >= low) & (actions <= high)).all()
    assert torch.equal(actions, actor(obs)) and torch.equal(actor.greedy(obs), actions)
    assert actor.action_scale.tolist() == [2.0, 0.5] and actor.action_bias.tolist() == [0.0, 0.5]
    with torch.no_grad():
        actor.net[-1].weight.zero_()
        actor.net[-1].bias.zero_()
    assert actor(obs[:1]).tolist() == [[0.0, 0.5]]  # tanh(0): the box's centre
