"""TD3's trainer in one process: its iteration sizes, exploration inside the box, the delayed actor and target
updates (one actor step every policyDelay critic steps, both targets following by tau), what its steps move,
the statistics it reports, and the boxes and checkpoints it refuses. What TD3 promises as SAC does (an exact
resume, evaluation and model) is in test_continuous_trainers.py."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from kuberl.core import envspaces
from kuberl.core.spec import SACConfig, TD3Config
from kuberl_trainer import checkpoint
from kuberl_trainer.distributed import Dist
from kuberl_trainer.envs import UnknownEnv
from kuberl_trainer.sac import SACTrainer
from kuberl_trainer.session import BareSession
from kuberl_trainer.td3 import TD3Trainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
pytestmark = pytest.mark.usefixtures("one_thread")


def small_trainer(total=400, restart=0, **hp):
    config = TD3Config(**{"learning_starts": 64, "batch_size": 32, "train_frequency": 8, "gradient_steps": 4,
                          "hidden_sizes": [16], "buffer_size": 1000, **hp})
    return TD3Trainer(ONE_PROCESS, config, "Pendulum-v1", 4, {}, total, seed=3, restart=restart)


def sac_trainer(total=400, restart=0):
    config = SACConfig(learning_starts=64, batch_size=32, train_frequency=8, gradient_steps=4, hidden_sizes=[16], buffer_size=1000)
    return SACTrainer(ONE_PROCESS, config, "Pendulum-v1", 4, {}, total, seed=3, restart=restart)


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def equal(module: torch.nn.Module, saved: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, module.state_dict()[k]) for k, v in saved.items())


def learning(trainer: TD3Trainer) -> TD3Trainer:
    while not trainer.learning():
        trainer.update(False, False)
    return trainer


def test_random_actions_until_learning_starts_then_the_noisy_actor_inside_the_box():
    trainer = small_trainer()
    assert (trainer.vector_steps, trainer.batch_per_rank, trainer.gradient_steps) == (2, 8, 4)
    before = weights(trainer.agent)
    report = trainer.update(False, False)
    while not report.losses:
        assert equal(trainer.agent, before)
        report = trainer.update(False, False)
    assert trainer.steps_per_rank == 64 and trainer.critic_updates == 4 and report.epochs_run == 4
    assert set(report.losses) == {"value_loss", "q_value", "policy_loss", "q1_value", "q2_value", "q1_loss", "q2_loss"}
    added = trainer.replay.added
    trainer.update(False, False)  # the actor's own actions, with noise, now
    held = trainer.replay.actions[added: trainer.replay.added].reshape(-1)
    assert held.size == 8 and (np.abs(held) <= 2.0).all() and np.unique(held).size == held.size


def test_exploration_noise_is_the_actors_action_plus_sigma_times_the_half_width():
    trainer = learning(small_trainer(exploration_noise=0.0))
    obs = trainer.next_obs.copy()
    with torch.no_grad():
        expected = trainer.agent(torch.as_tensor(obs)).numpy()
    added = trainer.replay.added
    trainer.collect()
    assert np.allclose(trainer.replay.actions[added].reshape(expected.shape), expected)  # sigma 0: the actor's own


def test_one_actor_step_every_policy_delay_critic_steps_and_both_targets_follow_by_tau_then_only():
    trainer = learning(small_trainer(policy_delay=3, tau=0.5))
    trainer.critic_updates = 0  # the clock the schedule reads, from here
    batch = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))
    actor, target_actor, target_critics = weights(trainer.agent), weights(trainer.target_actor), weights(trainer.target_critics)
    for _ in range(2):  # critic steps 1 and 2: the critics move; the actor and both targets do not
        critics = weights(trainer.critics)
        trainer.gradient_step(*batch)
        assert not equal(trainer.critics, critics)
    assert equal(trainer.agent, actor) and equal(trainer.target_actor, target_actor) and equal(trainer.target_critics, target_critics)
    trainer.gradient_step(*batch)  # step 3: one actor step, then the targets half way to the online networks
    assert not equal(trainer.agent, actor)
    for name in ("net.0.weight", "net.2.bias"):
        expected = target_actor[name] + 0.5 * (trainer.agent.state_dict()[name] - target_actor[name])
        assert torch.allclose(trainer.target_actor.state_dict()[name], expected), name
    expected = target_critics["q2.0.weight"] + 0.5 * (trainer.critics.q2[0].weight - target_critics["q2.0.weight"])
    assert torch.allclose(trainer.target_critics.q2[0].weight, expected)


def test_an_actor_step_moves_the_actor_and_never_the_critics():
    trainer = learning(small_trainer())
    obs = trainer.to_tensors(trainer.replay.sample(32, 0.99, np.random.default_rng(0)))[0]
    actor, critics = weights(trainer.agent), weights(trainer.critics)
    trainer.policy_step(obs)
    assert equal(trainer.critics, critics) and not equal(trainer.agent, actor)
    assert all(p.requires_grad for p in trainer.critics.parameters())  # unfrozen after


def test_an_update_reports_its_critics_mean_q_and_loss_over_its_steps_and_its_actor_steps_loss():
    trainer = learning(small_trainer(policy_delay=2))
    trainer.critic_updates = 1  # this update's 4 critic steps are numbers 2..5: actor steps after 2 and 4
    steps, real = [], trainer.gradient_step
    trainer.gradient_step = lambda *batch: steps.append(real(*batch)) or steps[-1]
    report = trainer.update(False, False)
    assert len(steps) == 4 and report.epochs_run == 4
    assert report.losses["value_loss"] == pytest.approx(sum(s[0].item() for s in steps) / 4)
    assert report.losses["q_value"] == pytest.approx(sum(s[1].item() for s in steps) / 4)
    # each critic's own, as CleanRL writes them (losses/qf1_values, …): their mean is q_value, their losses' sum value_loss
    assert (report.losses["q1_value"] + report.losses["q2_value"]) / 2 == pytest.approx(report.losses["q_value"])
    assert report.losses["q1_loss"] + report.losses["q2_loss"] == pytest.approx(report.losses["value_loss"])
    assert report.losses["q1_value"] != report.losses["q2_value"]  # two critics, two initialisations
    assert [s[2].item() == 0 for s in steps] == [False, True, False, True]
    assert report.losses["policy_loss"] == pytest.approx((steps[0][2].item() + steps[2][2].item()) / 2)


class _OneStep(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)

    def reset(self, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, True, {}


class HugeBox(_OneStep):
    action_space = gym.spaces.Box(-3e38, 3e38, (1,), np.float32)  # finite, as its half-width and centre


class HugeFloat64Box(_OneStep):
    action_space = gym.spaces.Box(-1e300, 1e300, (1,), np.float64)  # finite; -inf and inf as float32


class PointBox(_OneStep):
    action_space = gym.spaces.Box(np.array([-1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float32))


class NoActionBox(_OneStep):
    action_space = gym.spaces.Box(-1, 1, (0,), np.float32)


@pytest.mark.parametrize("trainer", [TD3Trainer, SACTrainer])
@pytest.mark.parametrize(("env", "words"), [
    (HugeBox, "bounded past +-1e+09: the critics' squared errors overflow float32 (NaN losses); rescale the env's actions"),
    (HugeFloat64Box, "bounded past +-1e+09"),
    (PointBox, "whose dimension 1 has no width (low 2, high 2): no action there to learn"),
    (NoActionBox, "with no action to take; supported by this algorithm: float Box actions of at least one dimension"),
])
def test_a_box_the_squashed_actor_cannot_learn_in_is_refused_naming_spec_env_id(trainer, env, words):
    """Schema-valid jobs on boxes that passed the finite-bounds check: TD3 and SAC trained on NaN losses from the first
    step at +-3e38 (or a float64 box's +-1e300), SAC on a dimension of no width (its log-probability -inf), and TD3's
    critics raised a RuntimeError of tensor sizes on a box of no dimension. `kuberl validate` says the same."""
    env_id = f"tests.unit.test_td3_trainer:{env.__name__}"
    config = (TD3Config if trainer is TD3Trainer else SACConfig)(hidden_sizes=[8])
    with pytest.raises(UnknownEnv) as refused:
        trainer(ONE_PROCESS, config, env_id, 2, {}, 1000, seed=1, restart=0)
    assert str(refused.value).startswith(f"spec.env.id: {env_id!r} has action space ") and words in str(refused.value), refused.value
    assert envspaces.spaces_problem(env.observation_space, env.action_space, "td3") == str(refused.value).split(" has ", 1)[1]
    assert envspaces.spaces_problem(env.observation_space, env.action_space, "ppo") is None  # PPO's Gaussian is not squashed


class Resuming(BareSession):
    """A session whose checkpoint is `saved` (a tenant's edited file, decoded as the trainer reads it)."""
    resumed_from = "ckpt-000012.pt"

    def __init__(self, saved: dict):
        super().__init__()
        self.saved = saved

    def load(self):
        return self.saved, None


@pytest.mark.parametrize("critic_steps", [1.5, float("nan")])
def test_a_checkpoint_whose_critic_step_count_is_no_whole_number_is_refused_naming_it(critic_steps):
    """A checkpoint is on the tenant's volume: critic_updates of 1.5 or NaN passed the check of its kinds (a number,
    as this job's) and never came round to TD3's delayed step, so the resumed run trained on with its actor, the
    model, as loaded, reporting a NaN actor loss."""
    trainer = small_trainer()
    for _ in range(12):
        trainer.update(False, False)
    saved = checkpoint.decode(checkpoint.encode({**trainer.shared_state(), "critic_updates": critic_steps}))

    with pytest.raises(checkpoint.CheckpointMismatch) as refused:
        small_trainer(restart=1).train(Resuming(saved))
    assert "state.critic_updates is float, not int" in str(refused.value), refused.value


@pytest.mark.parametrize("make, module, value", [
    (small_trainer, "agent.action_scale", 0.0),
    (small_trainer, "target_actor.action_scale", 1e30),
    (small_trainer, "agent.action_bias", float("nan")),
    (sac_trainer, "agent.action_scale", 0.0),
], ids=["td3-no-width", "td3-target-1e30", "td3-nan-centre", "sac-no-width"])
def test_a_checkpoint_whose_actor_carries_another_action_box_is_refused_naming_it(make, module, value):
    """An actor's action_scale and action_bias are the env's box (its half-width and centre), buffers among the
    weights, not learned: a checkpoint on the tenant's volume edited to a box of no width resumed acting at the box's
    centre alone, one of 1e30 in TD3's target actor trained on an infinite critic loss, and both runs succeeded.
    kuberl eval refuses such a model; the trainer resumed it."""
    trainer = make()
    for _ in range(12):
        trainer.update(False, False)
    state = trainer.shared_state()
    key, name = module.split(".")
    state[key][name] = torch.full_like(state[key][name], value)
    saved = checkpoint.decode(checkpoint.encode(state))

    with pytest.raises(checkpoint.CheckpointMismatch) as refused:
        make(restart=1).train(Resuming(saved))
    assert f"state.{module} is [{value:g}], this job's env's action box gives [" in str(refused.value), refused.value
