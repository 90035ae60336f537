"""SAC's pure pieces against hand-computed cases: the tanh-squashed Gaussian's log-probability
(with the change of variables), the soft Q target, the critic, actor and temperature losses,
and the networks' shapes and bounds."""

import math

import pytest
import torch
from kuberl_trainer.continuous import Critics
from kuberl_trainer.sac import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Actor,
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_q_target,
    squash,
    squashed_log_prob,
)
from torch import distributions as D

pytestmark = pytest.mark.usefixtures("one_thread")


def test_log_prob_at_the_centre_is_the_gaussians_alone_less_the_log_of_the_scale():
    u = torch.zeros(1, 2)
    at_unit_scale = squashed_log_prob(u, u, u, torch.ones(2))
    assert at_unit_scale.item() == pytest.approx(-math.log(2 * math.pi))  # 2 dims of -0.5 log(2 pi); tanh'(0) = 1
    at_scale_2 = squashed_log_prob(u, u, u, torch.full((2,), 2.0))
    assert at_scale_2.item() == pytest.approx(-math.log(2 * math.pi) - 2 * math.log(2))


def test_log_prob_off_centre_by_hand():
    # u = 1 from N(0.5, 0.5): z = 1, log N = -0.5 - log 0.5 - 0.5 log(2 pi); tanh'(1) = 1 - tanh(1)^2
    u, mean, log_std = torch.tensor([[1.0]]), torch.tensor([[0.5]]), torch.tensor([[math.log(0.5)]])
    by_hand = -0.5 - math.log(0.5) - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(1.0) ** 2)
    assert squashed_log_prob(u, mean, log_std, torch.ones(1)).item() == pytest.approx(by_hand, rel=1e-6)


def test_log_prob_equals_torchs_transformed_distribution_and_cleanrls_form_where_that_is_exact():
    torch.manual_seed(0)
    mean, log_std = torch.randn(5, 3), torch.randn(5, 3).clamp(-1, 1)
    scale, bias = torch.tensor([2.0, 0.5, 1.0]), torch.tensor([0.0, 1.0, -1.0])
    u = mean + log_std.exp() * torch.randn(5, 3)
    ours = squashed_log_prob(u, mean, log_std, scale)
    squashed = D.TransformedDistribution(D.Normal(mean, log_std.exp()),
                                         [D.TanhTransform(), D.AffineTransform(bias, scale)])
    assert torch.allclose(ours, squashed.log_prob(squash(u, scale, bias)).sum(-1), atol=1e-4)
    y = torch.tanh(u)
    cleanrl = (D.Normal(mean, log_std.exp()).log_prob(u) - torch.log(scale * (1 - y**2) + 1e-6)).sum(-1)
    assert torch.allclose(ours, cleanrl, atol=1e-4)


def test_log_prob_stays_exact_far_in_the_tails_where_1_minus_tanh_squared_rounds_to_zero():
    u = torch.tensor([[20.0]])
    value = squashed_log_prob(u, u, torch.zeros(1, 1), torch.ones(1)).item()
    # log(1 - tanh(20)^2) = log(4) - 40 - 2 log(1 + e^-40), to float precision log(4) - 40
    assert value == pytest.approx(-0.5 * math.log(2 * math.pi) - (math.log(4) - 40), rel=1e-6)


def test_soft_q_target_takes_the_smaller_critic_less_the_entropy_term_and_no_bootstrap_at_termination():
    rewards, discount = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.0])
    next_q1, next_q2 = torch.tensor([10.0, 5.0]), torch.tensor([8.0, 7.0])
    next_log_prob = torch.tensor([-1.0, 3.0])
    # min Q' = [8, 5]; minus 0.5 * log pi' = [8.5, 3.5]; the second terminated
    target = soft_q_target(rewards, discount, next_q1, next_q2, next_log_prob, 0.5)
    assert target.tolist() == pytest.approx([1 + 0.9 * 8.5, 2.0])


def test_critic_loss_sums_both_critics_mean_squared_errors():
    q1, q2, target = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]), torch.tensor([1.0, 3.0])
    assert critic_loss(q1, q2, target).item() == pytest.approx(0.5 + 1.0)


def test_actor_loss_by_hand_and_its_gradient_reaches_the_log_prob_scaled_by_alpha():
    log_prob = torch.tensor([-1.0, 2.0], requires_grad=True)
    q1, q2 = torch.tensor([3.0, 1.0]), torch.tensor([2.0, 5.0])
    loss = actor_loss(log_prob, q1, q2, 0.5)  # [-0.5 - 2, 1 - 1]
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    assert log_prob.grad.tolist() == pytest.approx([0.25, 0.25])


def test_alpha_falls_while_the_entropy_is_above_its_target_and_the_loss_leaves_log_pi_alone():
    log_alpha = torch.zeros((), requires_grad=True)
    log_prob = torch.tensor([-1.0, -3.0], requires_grad=True)  # entropy about 2, target 1 (target_entropy -1)
    loss = alpha_loss(log_alpha, log_prob, -1.0)  # -log_alpha * mean([-2, -4]) = 3 log_alpha
    assert loss.item() == 0.0
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(3.0)  # descent lowers log alpha
    assert log_prob.grad is None
    below = torch.zeros((), requires_grad=True)
    alpha_loss(below, torch.tensor([2.0, 2.0]), -1.0).backward()  # entropy -2, below the target
    assert below.grad.item() == pytest.approx(-1.0)  # descent raises log alpha


def test_the_actor_samples_inside_the_action_box_with_the_log_prob_of_its_distribution_and_a_bounded_std():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = Actor(3, low, high, [16, 16])
    obs = torch.randn(64, 3) * 100  # large inputs push log_std to its bounds
    generator = torch.Generator().manual_seed(1)
    actions, log_prob = actor(obs, generator)
    assert actions.shape == (64, 2) and log_prob.shape == (64,)
    assert ((actions >= low) & (actions <= high)).all()
    mean, log_std = actor.distribution(obs)
    assert ((log_std >= LOG_STD_MIN) & (log_std <= LOG_STD_MAX)).all()
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(1))
    u = mean + log_std.exp() * noise
    assert torch.allclose(actions, squash(u, actor.action_scale, actor.action_bias))
    assert torch.allclose(log_prob, squashed_log_prob(u, mean, log_std, actor.action_scale))
    assert torch.allclose(actor.greedy(obs), squash(mean, actor.action_scale, actor.action_bias))


def test_the_critics_are_two_networks_of_observation_and_action():
    critics = Critics(3, 2, [8])
    q1, q2 = critics(torch.randn(5, 3), torch.randn(5, 2))
    assert q1.shape == q2.shape == (5,)
    assert not torch.equal(q1, q2)  # independently initialised
