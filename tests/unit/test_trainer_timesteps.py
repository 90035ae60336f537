"""What a timestep is: one real transition, as SB3 and CleanRL count them.

SB3 adds n_envs to num_timesteps per vector step (on_policy_algorithm.py and
off_policy_algorithm.py, `self.num_timesteps += env.num_envs`) and trains
`while self.num_timesteps < total_timesteps`; CleanRL adds num_envs to
global_step per step. Their vector envs reset within the step that ended an
episode (SB3's DummyVecEnv.step_wait; gymnasium 0.29's SyncVectorEnv), so every
step they count is a transition. gymnasium 1.x resets on the NEXT step, which
takes no action and is no transition: kuberl counts it in neither algorithm's
budget or schedules, and neither learns from it.
"""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from kuberl.core.spec import DQNConfig, PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.ppo import PPOTrainer

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)
ENV = "tests.unit.test_trainer_timesteps:ShortEpisodes"


class ShortEpisodes(gym.Env):
    """Episodes of 2 to 4 steps, ended by termination or a time limit by turns: an
    autoreset step in every 3 to 5 vector steps of each env."""

    observation_space = spaces.Box(-1, 1, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.episodes = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episodes += 1
        self.steps, self.length = 0, int(self.np_random.integers(2, 5))
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        ended = self.steps == self.length
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action) + 0.5, ended and self.episodes % 2 == 0, ended and self.episodes % 2 == 1, {}


def trainer(algorithm: str, total: int, fast: bool = True, **hp) -> PPOTrainer | DQNTrainer:
    if algorithm == "ppo":
        return PPOTrainer(ONE_PROCESS, PPOConfig(**{"num_steps": 8, "num_minibatches": 2, "update_epochs": 2, "hidden_sizes": [8], **hp}),
                          ENV, 2, {}, total, seed=1, restart=0, fast=fast)
    return DQNTrainer(ONE_PROCESS, DQNConfig(**{"learning_starts": 16, "batch_size": 8, "train_frequency": 8, "hidden_sizes": [8], **hp}),
                      ENV, 2, {}, total, seed=1, restart=0, fast=fast)


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_the_budget_is_real_transitions_and_the_run_stops_at_the_first_update_that_reaches_it(algorithm):
    """PPO planned ceil(totalTimesteps / rollout) rollouts, autoreset steps included: a run of this env ended
    about a quarter short of totalTimesteps by its own count, and DQN (which counted real steps) did not."""
    total = 200
    run = trainer(algorithm, total)
    reports = []
    while not run.budget_spent():
        reports.append(run.update(False, False))
    steps = [report.local_steps for report in reports]
    assert run.counters.global_step == sum(steps) >= total > sum(steps[:-1])
    assert sum(steps) < len(reports) * run.batch_per_rank  # autoreset steps happened, and were not counted
    run.envs.close()


def test_ppos_learning_rate_anneals_over_real_transitions_as_sb3s_progress_remaining():
    """SB3 anneals by 1 - num_timesteps / total_timesteps; CleanRL by iteration, the same thing when every step
    is a transition. The rate an update learns with is taken before its rollout."""
    total = 200
    run = trainer("ppo", total, learning_rate=1e-3)
    while not run.budget_spent():
        before = run.counters.global_step
        report = run.update(False, False)
        assert report.learning_rate == pytest.approx(1e-3 * (1 - before / total))
        assert report.learning_rate > 0
    run.envs.close()


def _autoreset_rows_scrambled_ppo(run: PPOTrainer) -> None:
    """Every part of an autoreset row that could be learned from, made nonsense; its value stays (the value of
    the episode's final observation, which a time limit bootstraps from)."""
    rng, invalid = np.random.default_rng(9), ~run.buf.valid.astype(bool)
    run.buf.obs[invalid] = rng.uniform(-50, 50, run.buf.obs[invalid].shape)
    run.buf.actions[invalid] = 1 - run.buf.actions[invalid]
    run.buf.log_probs[invalid] = rng.uniform(-9, 0, invalid.sum())
    run.buf.rewards[invalid] = 1e6


@pytest.mark.parametrize("fast", [True, False], ids=["fused", "autograd"])
def test_ppo_learns_nothing_from_autoreset_steps(fast):
    run = trainer("ppo", 10**6, fast)
    run.collect()
    twin = trainer("ppo", 10**6, fast)  # the same seeds (torch's global one reset too): the same rollout
    twin.collect()
    assert not run.buf.valid.all() and np.array_equal(run.buf.obs, twin.buf.obs)
    _autoreset_rows_scrambled_ppo(twin)
    for each in (run, twin):
        advantages, returns = each.advantages(False)
        assert not advantages[~each.buf.valid.astype(bool)].any() and not returns[~each.buf.valid.astype(bool)].any()
        each.learn(advantages, returns)
    for mine, theirs in zip(run.agent.parameters(), twin.agent.parameters(), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("fast", [True, False], ids=["fused", "autograd"])
def test_dqn_learns_nothing_from_autoreset_steps(fast):
    run = trainer("dqn", 10**6, fast)
    while not run.learning():
        run.collect(1.0)
    twin = trainer("dqn", 10**6, fast)  # the same seeds: the same transitions
    while not twin.learning():
        twin.collect(1.0)
    assert not run.replay.valid.all() and np.array_equal(run.replay.obs, twin.replay.obs)
    invalid = ~twin.replay.valid
    twin.replay.actions[invalid] = 1 - twin.replay.actions[invalid]
    twin.replay.rewards[invalid] = 1e6
    twin.replay.terminated[invalid] = ~twin.replay.terminated[invalid]
    for each in (run, twin):
        each.learn()
    for mine, theirs in zip(run.agent.parameters(), twin.agent.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_dqns_target_network_is_copied_every_interval_of_real_transitions():
    """SB3 copies every target_update_interval // n_envs vector steps, all transitions there; the autoreset
    steps counted toward it here copied the target early on envs of short episodes."""
    run = trainer("dqn", 10**6, target_update_interval=40)
    copies = []  # (real transitions per rank at the copy, real transitions taken by then)
    for _ in range(30):
        before = run.last_target_update
        run.update(False, False)
        if run.last_target_update != before:
            copies.append((run.last_target_update, run.counters.global_step))
    assert len(copies) >= 3
    assert all(at == real for at, real in copies)  # one rank: its own real transitions
    at = [0] + [at for at, _ in copies]
    assert all(b - a >= 40 for a, b in itertools.pairwise(at))
    run.envs.close()


def test_advantages_are_normalised_per_minibatch_as_cleanrl_and_sb3_do_over_its_real_rows():
    """CleanRL and SB3: (a - a.mean()) / (a.std() + 1e-8), torch's std with Bessel's correction; kuberl
    divided by the population std (sqrt(5/6) of the spread in a minibatch of 6 real rows)."""
    from kuberl_trainer.ppo_terms import minibatch_columns, minibatch_table

    rng = np.random.default_rng(3)
    n = 8
    valid = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)
    advantages = rng.normal(size=n).astype(np.float32)
    scalars = np.stack([rng.normal(size=n), rng.normal(size=n), advantages, rng.normal(size=n), valid], -1).astype(np.float32)
    rows = minibatch_table(torch.zeros(n, 1), torch.from_numpy(scalars))
    normalised = minibatch_columns(rows, norm_advantage=True)[3]
    real = torch.from_numpy(advantages[valid == 1])
    expected = (real - real.mean()) / (real.std() + 1e-8)
    torch.testing.assert_close(normalised[torch.from_numpy(valid) == 1], expected)


def test_every_row_of_a_rollout_is_learned_from_in_each_epoch_when_minibatches_do_not_divide_it():
    """numSteps x numEnvs = 16 in 3 minibatches: a row a epoch was never learned from (CleanRL and SB3 learn
    from every row, in a last, shorter minibatch); here in 3 minibatches of 6, 5 and 5."""
    run = trainer("ppo", 10**6, fast=False, num_minibatches=3)
    run.collect()
    seen = []
    step = run.learner.step
    run.learner.step = lambda obs, rows: seen.append(len(rows)) or step(obs, rows)
    advantages, returns = run.advantages(False)
    _, epochs = run.learn(advantages, returns)
    assert seen == [6, 5, 5] * epochs
    run.envs.close()


def test_dqn_learning_starts_after_learning_starts_transitions_not_replay_rows():
    """SB3 trains once num_timesteps passes learning_starts (off_policy_algorithm.py), a count of transitions;
    kuberl compared its replay rows, one autoreset row per episode included, and on this env of 2-4 step
    episodes learned from an update about a quarter early."""
    run = trainer("dqn", 10**6, learning_starts=64)
    before = 0
    while True:
        report = run.update(False, False)
        if report.losses:
            break
        before = run.counters.global_step
    assert before < 64 <= run.counters.global_step
    assert run.counters.updates * run.batch_per_rank > run.counters.global_step  # autoreset rows were there
    run.envs.close()


class ResumeFrom:
    """A session that resumes from `shared` and keeps the lines it logs."""

    restart, resumed_from = 0, "ckpt-legacy"

    def __init__(self, shared: dict, max_updates: int):
        from kuberl_trainer.session import BareSession

        self.shared, self.bare = shared, BareSession(max_updates)
        self.stop_requested, self.success_vote, self.divergence_vote, self.after_update = (
            self.bare.stop_requested, self.bare.success_vote, self.bare.divergence_vote, self.bare.after_update)
        self.logged = self.bare.logged
        self.log = self.bare.log

    def load(self):
        return self.shared, None


def test_a_checkpoint_from_before_transitions_resumes_its_target_copy_clock_converted():
    """Before 3c20512 the target-copy clock was replay rows per rank (updates x batch_per_rank), saved as
    last_target_update; read as transitions, the next copy waited for every autoreset row of the run
    (on this env 4 intervals late). It resumes converted: the next copy at the update that passes an interval after the save."""
    from kuberl_trainer.dqn import LEGACY_TARGET_CLOCK, TARGET_CLOCK
    from kuberl_trainer.session import run_updates

    interval = 16
    run = trainer("dqn", 10**6, target_update_interval=interval)
    for _ in range(40):
        run.update(False, False)
    legacy = run.shared_state()
    rows = run.counters.updates * run.batch_per_rank
    del legacy[TARGET_CLOCK]
    legacy[LEGACY_TARGET_CLOCK] = rows - run.batch_per_rank  # as pre-3c20512 code wrote it: copied an update ago
    saved_at = run.counters.global_step
    assert rows - saved_at > 3 * interval  # autoreset rows: the old clock ran ahead of transitions

    resumed = trainer("dqn", 10**6, target_update_interval=interval)
    copies = []
    update = resumed.update

    def update_and_watch(stop_vote, success_vote):
        before = resumed.last_target_update
        report = update(stop_vote, success_vote)
        if resumed.last_target_update != before:
            copies.append(resumed.counters.global_step)
        return report

    resumed.update = update_and_watch
    session = ResumeFrom(legacy, max_updates=12)
    assert run_updates(resumed, session) == "stopped"
    taken = round(run.batch_per_rank * saved_at / rows)  # the update's rows, at the run's transitions per row
    assert len(session.logged) == 2 and f"taken as {taken} transitions" in session.logged[0]
    assert copies and copies[0] - saved_at < interval + run.batch_per_rank  # due within the update that passes it
    assert resumed.shared_state()[TARGET_CLOCK] == copies[-1]
    run.envs.close()
    resumed.envs.close()
