"""PPO's spec.ppo.learnWhileCollecting: the next rollout is collected on a thread
while the update learns, acting with the weights from before that update."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.session import BareSession

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)


def lagged_trainer(fast: bool = True, updates: int = 4, total: int | None = None, **hp) -> PPOTrainer:
    config = PPOConfig(num_steps=16, hidden_sizes=[16], learn_while_collecting=True, **hp)
    return PPOTrainer(ONE_PROCESS, config, "CartPole-v1", 4, {}, total or updates * 16 * 4, seed=5, restart=0, fast=fast)


def recorded_under(trainer: PPOTrainer, weights: dict, buf=None) -> tuple[np.ndarray, np.ndarray]:
    """The log-probs and values of the rollout in `buf` (else trainer.buf), of its actions, under `weights`."""
    probe = copy.deepcopy(trainer.agent)
    probe.load_state_dict(weights)
    buf = trainer.buf if buf is None else buf
    with torch.no_grad():
        log_prob, _, value = probe(torch.from_numpy(buf.obs.reshape(-1, 4)), torch.from_numpy(buf.actions.reshape(-1)))
    return log_prob.numpy(), value.numpy()


@pytest.mark.parametrize("fast", [True, False], ids=["numpy-actor", "torch-actor"])
def test_the_rollout_collected_during_an_update_is_acted_by_the_weights_before_it(fast):
    trainer = lagged_trainer(fast)
    assert type(trainer.behaviour).__name__ == ("NumpyPolicy" if fast else "TorchPolicy")
    for _ in range(3):
        before = {k: v.clone() for k, v in trainer.agent.state_dict().items()}
        trainer.update(False, False)
        after = trainer.agent.state_dict()
        assert trainer.rollout_ready  # the next update learns from it without collecting
        log_prob, value = recorded_under(trainer, before)
        np.testing.assert_allclose(trainer.buf.log_probs.reshape(-1), log_prob, atol=1e-5)
        np.testing.assert_allclose(trainer.buf.values.reshape(-1), value, atol=1e-5)
        stale, _ = recorded_under(trainer, after)  # the update changed the policy: the lag is real
        assert np.abs(trainer.buf.log_probs.reshape(-1) - stale).max() > 1e-4


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"], ids=["discrete", "continuous"])
def test_the_collecting_threads_torch_actor_leaves_torchs_default_generator_alone(env_id):
    """A CUDA graph capture on the main thread takes torch's default generator, and a thread that advances it
    meanwhile fails the capture (tests/gpu, H200). The torch actor of the rollouts samples from a generator of
    its own, seeded from the rank's: updates that collect ahead leave torch's default generator where it was."""
    def lagged(env_id: str) -> PPOTrainer:
        return PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[16], learn_while_collecting=True),
                          env_id, 4, {}, 10**6, seed=5, restart=0, fast=False)

    trainer, again = lagged(env_id), lagged(env_id)
    before = torch.get_rng_state()  # as the trainer seeded it
    for _ in range(3):
        trainer.update(False, False)
    assert trainer.rollout_ready  # a rollout was collected ahead, on the collecting thread
    assert torch.equal(torch.get_rng_state(), before)
    for _ in range(3):
        again.update(False, False)
    assert np.array_equal(again.buf.actions, trainer.buf.actions)  # seeded from the rank's generator: repeatable


def test_the_first_rollout_after_a_resume_is_acted_by_the_weights_it_loaded():
    trained = lagged_trainer()
    trained.train(BareSession(max_updates=3))
    resumed = lagged_trainer()
    resumed.load_shared(trained.shared_state())
    loaded = {k: v.clone() for k, v in resumed.agent.state_dict().items()}
    learn, checked = resumed.learn, []

    def learn_checking_who_acted(advantages, returns, buf=None, stop_vote=False):
        np.testing.assert_allclose(buf.log_probs.reshape(-1), recorded_under(resumed, loaded, buf)[0], atol=1e-5)
        checked.append(buf)
        return learn(advantages, returns, buf, stop_vote)

    resumed.learn = learn_checking_who_acted
    resumed.update(False, False)
    assert checked


def test_an_update_learns_from_the_rollout_collected_during_the_update_before():
    trainer = lagged_trainer()
    trainer.update(False, False)
    collected_ahead = trainer.buf.obs.copy()
    learn, learned_from = trainer.learn, []

    def learn_recording(advantages, returns, buf=None, stop_vote=False):
        learned_from.append(buf.obs.copy())
        return learn(advantages, returns, buf, stop_vote)

    trainer.learn = learn_recording
    trainer.update(False, False)
    np.testing.assert_array_equal(learned_from[0], collected_ahead)


def test_nothing_is_collected_ahead_of_a_voted_stop_or_the_last_update():
    trainer = lagged_trainer(updates=3)
    trainer.update(False, False)
    report = trainer.update(True, False)  # a stop vote: this is the last update
    assert report.stop and not trainer.rollout_ready
    # more transitions than two rollouts hold, fewer than three do (their autoreset steps are none): three updates
    trainer = lagged_trainer(total=2 * 16 * 4 + 1)
    step, steps = trainer.envs.step, []
    trainer.envs.step = lambda actions: (steps.append(1), step(actions))[1]
    session = BareSession()
    assert trainer.train(session) == "budget"
    assert len(session.reports) == 3 and not trainer.rollout_ready
    assert len(steps) == 3 * 16  # three rollouts, each learned from: none collected for nothing


def test_an_error_on_the_collecting_thread_ends_the_update_that_started_it():
    trainer = lagged_trainer()
    trainer.update(False, False)
    step = trainer.envs.step

    def failing_step(actions):
        if failing_step.calls == 5:
            raise RuntimeError("the emulator broke")
        failing_step.calls += 1
        return step(actions)

    failing_step.calls = 0
    trainer.envs.step = failing_step
    with pytest.raises(RuntimeError, match="the emulator broke"):
        trainer.update(False, False)


def test_the_collecting_thread_samples_from_a_generator_of_its_own():
    trainer = lagged_trainer()
    assert trainer.behaviour.rng is not trainer.np_rng  # learn() draws minibatch orders from np_rng meanwhile
    assert trainer.actor.rng is trainer.np_rng  # evaluation and synchronous runs: the rank's generator, as before


def test_without_the_option_one_buffer_and_the_current_weights_act():
    trainer = PPOTrainer(ONE_PROCESS, PPOConfig(num_steps=16, hidden_sizes=[16]), "CartPole-v1", 4, {}, 128, seed=5, restart=0)
    assert trainer.behaviour is trainer.actor and not hasattr(trainer, "spare_buf")
    trainer.update(False, False)
    assert not trainer.rollout_ready
