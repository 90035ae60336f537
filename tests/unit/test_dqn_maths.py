"""DQN's pure pieces (epsilon, TD targets, loss, target update, config
rules) and resuming: a trainer's state equal after a load."""

import numpy as np
import pytest
import torch
from kuberl.core.spec import DQNConfig
from kuberl.core.validation import InvalidJob
from kuberl_trainer import learners
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import (
    DQNTrainer,
    dqn_loss,
    epsilon,
    soft_update,
    td_targets,
)
from kuberl_trainer.session import BareSession

from tests.support.jobs import make_job

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_epsilon_decays_linearly_then_stays():
    hp = DQNConfig(exploration_initial_eps=1.0, exploration_final_eps=0.1, exploration_fraction=0.5)
    assert epsilon(0, 1000, hp) == 1.0
    assert epsilon(250, 1000, hp) == pytest.approx(0.55)
    assert epsilon(500, 1000, hp) == pytest.approx(0.1)
    assert epsilon(900, 1000, hp) == pytest.approx(0.1)


def test_td_targets_double_and_vanilla_by_hand():
    returns = torch.tensor([1.0, 2.0])
    discount = torch.tensor([0.5, 0.0])  # the second one terminated: no bootstrap
    next_q_target = torch.tensor([[10.0, 4.0], [7.0, 9.0]])
    next_q_online = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    # vanilla: max of the target network
    assert td_targets(returns, discount, next_q_target, None).tolist() == [6.0, 2.0]
    # double: the online network picks action 1 in row 0, valued by the target at 4
    assert td_targets(returns, discount, next_q_target, next_q_online).tolist() == [3.0, 2.0]


def test_huber_loss_of_the_taken_action():
    q = torch.tensor([[1.0, 5.0], [0.0, 2.0]])
    actions = torch.tensor([1, 0])
    targets = torch.tensor([5.5, 3.0])  # errors 0.5 (quadratic) and 3 (linear)
    assert dqn_loss(q, actions, targets).item() == pytest.approx((0.5 * 0.25 + (3 - 0.5)) / 2)


def test_mse_loss_of_the_taken_action_as_cleanrls_dqn():
    """spec.dqn.loss: mse regresses as CleanRL's dqn.py (F.mse_loss), no half, no clipping of the error."""
    q = torch.tensor([[1.0, 5.0], [0.0, 2.0]])
    actions = torch.tensor([1, 0])
    targets = torch.tensor([5.5, 3.0])
    assert dqn_loss(q, actions, targets, "mse").item() == pytest.approx((0.25 + 9.0) / 2)
    with pytest.raises(ValueError, match="huber or mse"):
        dqn_loss(q, actions, targets, "l1")


def test_the_loss_is_a_spec_field_huber_by_default():
    assert DQNConfig().loss == "huber" and DQNConfig(loss="mse").loss == "mse"
    with pytest.raises(ValueError, match="loss"):
        DQNConfig(loss="l1")


def test_soft_update_moves_by_tau_and_hard_copy_at_one():
    online, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    before = target.weight.detach().clone()
    soft_update(target, online, 0.25)
    assert torch.allclose(target.weight, before + 0.25 * (online.weight - before))
    soft_update(target, online, 1.0)
    assert torch.equal(target.weight, online.weight)


def dqn_spec(**dqn):
    return make_job().minimal().algorithm("dqn", **dqn).spec()


@pytest.mark.parametrize("dqn, field", [
    ({"explorationInitialEps": 0.1, "explorationFinalEps": 0.5}, "spec.dqn.explorationFinalEps"),
    ({"bufferSize": 100, "batchSize": 128, "learningStarts": 50}, "spec.dqn.batchSize"),
    ({"bufferSize": 100, "batchSize": 32, "learningStarts": 1000}, "spec.dqn.learningStarts"),
])
def test_inconsistent_hyperparameters_are_the_specs_to_refuse_naming_the_field(dqn, field):
    with pytest.raises(InvalidJob) as refused:
        dqn_spec(**dqn)
    assert [p.path for p in refused.value.problems] == [field]
    assert dqn_spec().hyperparameters == DQNConfig()


def small_trainer(total=600, **hp):
    config = DQNConfig(learning_starts=64, batch_size=32, train_frequency=16, gradient_steps=4,
                       target_update_interval=48, hidden_sizes=[16], **hp)
    return DQNTrainer(ONE_PROCESS, config, "CartPole-v1", 4, {}, total, seed=3, restart=0)


def test_iteration_sizes_keep_the_update_to_data_ratio():
    trainer = small_trainer()
    # trainFrequency 16 over 4 envs: 4 vector steps, 4 gradient steps per iteration
    assert (trainer.vector_steps, trainer.batch_per_rank, trainer.gradient_steps) == (4, 16, 4)
    odd = DQNTrainer(ONE_PROCESS, DQNConfig(train_frequency=4, gradient_steps=1, hidden_sizes=[8]),
                     "CartPole-v1", 8, {}, 1000, seed=1, restart=0)
    assert (odd.vector_steps, odd.batch_per_rank, odd.gradient_steps) == (1, 8, 2)
    assert odd.update_to_data == 0.25


@pytest.mark.parametrize("fused_path", [True, False])
def test_a_precomputed_target_gives_the_step_computing_it_would(fused_path, monkeypatch):
    """learn() computes the target network's Q-values for a chunk of steps at
    once (the target is fixed within one learn()); a step must not tell."""
    from kuberl_trainer import fused

    if not fused_path:
        monkeypatch.setattr(fused, "supports_q", lambda *args, **kwargs: False)
    trainer, twin = small_trainer(double_dqn=False), small_trainer(double_dqn=False)
    assert isinstance(trainer.learner, learners.FusedQLearner) == fused_path
    while not trainer.learning():
        trainer.update(False, False), twin.update(False, False)
    batch = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))
    computed = trainer.gradient_step(*batch)
    given = twin.gradient_step(*batch, twin.learner.target_q(batch[-1]))
    assert torch.equal(computed, given)
    for mine, theirs in zip(trainer.agent.parameters(), twin.agent.parameters(), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("fused_path", [True, False], ids=["fused", "reference"])
@pytest.mark.parametrize("double_dqn", [True, False], ids=["double", "vanilla"])
def test_an_update_reports_the_mean_q_of_the_taken_actions_before_each_step(fused_path, double_dqn, monkeypatch):
    """kuberl_trainer_q_value for DQN (SB3's and CleanRL's q_values.mean()): each gradient step's mean Q(s, a) of
    its batch's taken actions, by the online network before the step, averaged over the update's steps."""
    from kuberl_trainer import fused

    if not fused_path:
        monkeypatch.setattr(fused, "supports_q", lambda *args, **kwargs: False)
    trainer = small_trainer(double_dqn=double_dqn)
    assert isinstance(trainer.learner, learners.FusedQLearner) == fused_path
    while not trainer.learning():
        trainer.update(False, False)
    # each step's batch, scored by the online network as the step begins (the fused learner's steps are step_towards)
    stepper, name = (trainer.learner.fused, "step_towards") if fused_path else (trainer.learner, "step")
    step, expected = getattr(stepper, name), []

    def scored_step(obs, actions, *rest):
        with torch.no_grad():
            expected.append(trainer.agent(obs).gather(1, actions.long().reshape(-1, 1)).mean().item())
        return step(obs, actions, *rest)

    setattr(stepper, name, scored_step)
    report = trainer.update(False, False)
    assert len(expected) == trainer.gradient_steps == 4 and len(set(expected)) == 4  # the weights moved between
    assert report.losses["q_value"] == pytest.approx(sum(expected) / 4, rel=1e-5)
    assert report.losses["q_value"] != 0.0
    batch = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))  # one step alone: the same
    with torch.no_grad():
        before = trainer.agent(batch[0]).gather(1, batch[1].long().reshape(-1, 1)).mean().item()
    assert trainer.gradient_step(*batch)[1].item() == pytest.approx(before, rel=1e-5)


def test_learn_draws_a_bounded_chunk_at_once():
    """CartPole's whole iteration in one draw; Atari's frame stacks a few
    steps at a time, under DRAW_BYTES; a huge observation one step at a time."""
    from kuberl_trainer.dqn import DRAW_BYTES, steps_per_draw

    assert steps_per_draw(128, 64, (4,), np.float32) == 128
    atari = steps_per_draw(128, 32, (4, 84, 84), np.uint8)
    assert atari == 18 and atari * 32 * 2 * 4 * 84 * 84 <= DRAW_BYTES < (atari + 1) * 32 * 2 * 4 * 84 * 84
    assert steps_per_draw(128, 32, (3, 1024, 1024), np.float32) == 1
    cartpole = DQNTrainer(ONE_PROCESS, DQNConfig(batch_size=64, train_frequency=256, gradient_steps=128, hidden_sizes=[8]),
                          "CartPole-v1", 1, {}, 1000, seed=1, restart=0)
    assert cartpole.steps_per_draw == 128


def test_state_is_equal_after_a_load_and_training_continues():
    trainer = small_trainer()
    assert trainer.train(BareSession()) == "budget"
    assert trainer.counters.global_step >= 600 and trainer.last_target_update > 0
    assert not torch.equal(trainer.agent.net[0].weight, trainer.target.net[0].weight)  # target lags
    saved = trainer.shared_state()

    resumed = small_trainer(total=1200)
    resumed.load_shared(saved)
    for name, value in trainer.agent.state_dict().items():
        assert torch.equal(value, resumed.agent.state_dict()[name]), name
    for name, value in trainer.target.state_dict().items():
        assert torch.equal(value, resumed.target.state_dict()[name]), name
    a, b = trainer.optimizer.state_dict(), resumed.optimizer.state_dict()
    for key, state in a["state"].items():
        for name, tensor in state.items():
            assert torch.equal(tensor, b["state"][key][name]), (key, name)
    assert vars(resumed.counters) == vars(trainer.counters)
    assert resumed.last_target_update == trainer.last_target_update
    assert epsilon(resumed.counters.global_step, 1200, resumed.hp) < 1.0

    # the replay buffer is not part of it: the resumed rank refills, then learns on
    assert len(resumed.replay) == 0 and not resumed.learning()
    assert resumed.train(BareSession()) == "budget"
    assert resumed.counters.global_step >= 1200 > saved["counters"]["global_step"]
    assert not torch.equal(resumed.agent.net[0].weight, trainer.agent.net[0].weight)


def test_only_real_transitions_are_counted():
    trainer = small_trainer(total=1000)
    trainer.train(BareSession())
    autoresets = trainer.counters.updates * trainer.batch_per_rank - trainer.counters.global_step
    pending = np.count_nonzero(~trainer.tracker.valid)  # episodes whose autoreset step is still to come
    assert autoresets == trainer.counters.episodes - pending > 0
