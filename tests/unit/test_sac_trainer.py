"""SAC's trainer in one process: its iteration sizes, the delayed actor and target updates, what
its gradient steps move and the statistics it reports. What SAC promises as TD3 does (an exact resume,
evaluation and model) is in test_continuous_trainers.py."""

import numpy as np
import pytest
import torch
from kuberl.core.spec import SACConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.sac import SACTrainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
pytestmark = pytest.mark.usefixtures("one_thread")


def small_trainer(total=400, restart=0, **hp):
    config = SACConfig(**{"learning_starts": 64, "batch_size": 32, "train_frequency": 8, "gradient_steps": 4,
                          "hidden_sizes": [16], "buffer_size": 1000, **hp})
    return SACTrainer(ONE_PROCESS, config, "Pendulum-v1", 4, {}, total, seed=3, restart=restart)


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def test_iteration_sizes_keep_the_update_to_data_ratio():
    trainer = small_trainer()  # trainFrequency 8 over 4 envs: 2 vector steps, 4 critic steps
    assert (trainer.vector_steps, trainer.batch_per_rank, trainer.gradient_steps) == (2, 8, 4)
    assert trainer.target_entropy == -1.0  # Pendulum's one action dimension


def test_random_actions_fill_the_buffer_until_learning_starts_then_the_actor_acts_inside_the_box():
    trainer = small_trainer()
    before = weights(trainer.agent)
    report = trainer.update(False, False)
    while not report.losses:
        assert all(torch.equal(v, trainer.agent.state_dict()[k]) for k, v in before.items())
        report = trainer.update(False, False)
    assert trainer.steps_per_rank == 64 and trainer.critic_updates == 4
    assert set(report.losses) == {"value_loss", "q_value", "entropy_coefficient", "policy_loss", "entropy", "q1_value", "q2_value",
                                  "q1_loss", "q2_loss"}
    assert report.epochs_run == 4
    trainer.update(False, False)  # the actor's own actions now
    held = trainer.replay.actions[: trainer.replay.added].reshape(-1)
    assert (np.abs(held) <= 2.0).all() and np.unique(held).size == held.size


def test_the_actor_steps_policy_frequency_times_every_policy_frequency_critic_steps_and_targets_follow_by_tau():
    trainer = small_trainer(policy_frequency=3, target_network_frequency=2, tau=0.5)
    while not trainer.learning():
        trainer.update(False, False)
    trainer.critic_updates = 0  # the clock the schedule reads, from here
    policy_steps = []
    real = trainer.policy_step
    trainer.policy_step = lambda obs: policy_steps.append(trainer.critic_updates) or real(obs)
    batch = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))
    critics_before, target_before = weights(trainer.critics), weights(trainer.target)
    trainer.gradient_step(*batch)  # critic step 1: neither the actor (every 3rd) nor the targets (every 2nd)
    assert policy_steps == [] and all(torch.equal(v, trainer.target.state_dict()[k]) for k, v in target_before.items())
    assert not torch.equal(critics_before["q1.0.weight"], trainer.critics.q1[0].weight)
    critics_now = weights(trainer.critics)
    trainer.gradient_step(*batch)  # step 2: the targets move half way to the critics
    expected = target_before["q1.0.weight"] + 0.5 * (trainer.critics.q1[0].weight - target_before["q1.0.weight"])
    assert torch.allclose(trainer.target.q1[0].weight, expected)
    assert not torch.equal(critics_now["q1.0.weight"], trainer.critics.q1[0].weight)
    trainer.gradient_step(*batch)  # step 3: three actor steps
    assert policy_steps == [3, 3, 3]


def test_an_actor_step_moves_the_actor_and_alpha_never_the_critics():
    trainer = small_trainer()
    while not trainer.learning():
        trainer.update(False, False)
    obs = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))[0]
    actor, critics, alpha = weights(trainer.agent), weights(trainer.critics), trainer.temperature().item()
    trainer.policy_step(obs)
    assert all(torch.equal(v, trainer.critics.state_dict()[k]) for k, v in critics.items())
    assert not torch.equal(actor["mean.weight"], trainer.agent.mean.weight)
    assert trainer.temperature().item() != alpha
    assert all(p.requires_grad for p in trainer.critics.parameters())  # unfrozen after


def test_a_fixed_alpha_stays_put():
    trainer = small_trainer(autotune=False, alpha=0.3)
    while not trainer.learning():
        trainer.update(False, False)
    report = trainer.update(False, False)
    assert trainer.temperature().item() == pytest.approx(0.3) == report.losses["entropy_coefficient"]


def test_an_update_reports_its_critics_mean_q_over_its_steps_and_the_alpha_it_leaves():
    """q_value and entropy_coefficient (metricnames.LOSS_GAUGES): each critic step's mean of Q1 and Q2 on its
    batch, before the step moves them, averaged over the update's steps; alpha after its actor steps."""
    trainer = small_trainer()
    while not trainer.learning():
        trainer.update(False, False)
    batch = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))
    with torch.no_grad():
        q1, q2 = trainer.critics(batch[0], batch[1])
    assert trainer.gradient_step(*batch)[1].item() == pytest.approx((q1.mean().item() + q2.mean().item()) / 2)
    steps, real = [], trainer.gradient_step
    trainer.gradient_step = lambda *batch: steps.append(real(*batch)) or steps[-1]
    report = trainer.update(False, False)
    assert len(steps) == 4 and report.losses["q_value"] == pytest.approx(sum(s[1].item() for s in steps) / 4)
    # each critic's own, as CleanRL writes them (losses/qf1_values, …): their mean is q_value, their losses' sum value_loss
    assert (report.losses["q1_value"] + report.losses["q2_value"]) / 2 == pytest.approx(report.losses["q_value"])
    assert report.losses["q1_loss"] + report.losses["q2_loss"] == pytest.approx(report.losses["value_loss"])
    assert report.losses["q1_value"] != report.losses["q2_value"]  # two critics, two initialisations
    assert report.losses["entropy_coefficient"] == pytest.approx(trainer.temperature().item())
    assert report.losses["entropy_coefficient"] != pytest.approx(1.0)  # autotuned from 1: its steps moved it
