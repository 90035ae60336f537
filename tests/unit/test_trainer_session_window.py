"""The training return a rank reports: the mean over the latest updates that hold
RECENT_EPISODES ended episodes, kept in a window whose cost per update does not grow
with the episodes' length (DQN ends an update every few env steps; a Pong episode
lasts about 900 of them per env)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from kuberl.core import contract, trainerconfig
from kuberl_trainer import session
from kuberl_trainer.distributed import Dist
from kuberl_trainer.dqn import DQNTrainer
from kuberl_trainer.session import RECENT_EPISODES, Counters, UpdateReport

from tests.support.jobs import make_job


@pytest.fixture
def training(tmp_path, monkeypatch) -> session.TrainingSession:
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    spec = make_job().algorithm("dqn").with_spec(totalTimesteps=10**6, workers=1, seed=1, checkpoint={"everyUpdates": 10**6},
                                                 success={"evalEvery": 10**6}).spec()  # no algorithm here to evaluate
    config = trainerconfig.load(trainerconfig.trainer_config("t", "default", "uid", spec))
    return session.TrainingSession(config, Dist(0, 1, 0, 1, torch.device("cpu"), None), None, 0,
                                   threading.Event(), log=lambda _line: None)


def latest_mean(history: list[tuple[float, int]]) -> float | None:
    """By definition: the fewest latest updates that hold RECENT_EPISODES episodes (all of
    them while fewer ended), their returns summed oldest first."""
    start, held = len(history), 0
    while start > 0 and held < RECENT_EPISODES:
        start -= 1
        held += history[start][1]
    count = sum(c for _, c in history[start:])
    return sum(s for s, _ in history[start:]) / count if count else None


def test_the_reported_return_is_the_latest_episodes_mean_and_its_window_stays_small(training):
    rng = np.random.default_rng(0)
    history = []
    for update in range(6_000):  # 8 envs, 300-step episodes: one ends every ~37 updates per env
        ended = int(rng.poisson(8 / 300))
        history.append((float(rng.normal(size=ended).sum() * 10), ended))
        counters = Counters(updates=update + 1, global_step=8 * (update + 1))
        training.after_update(UpdateReport(counters, 8, *history[-1], learning_rate=1e-4, losses={}, rollout_seconds=0.0,
                                           update_seconds=0.0, allreduce_seconds=0.0, epochs_run=1),
                              algorithm=DQNTrainer)  # its class: no evaluation is due, and its tags are a class's
        if update % 13 == 0 or ended:
            assert training.episode_return_mean == latest_mean(history)  # bit for bit
    assert len(training.recent) <= RECENT_EPISODES  # it held one entry per update: thousands, summed every update
