"""spec.ppo.targetKl as CleanRL's ppo.py reads target_kl: after each epoch, the approximate KL of
that epoch's LAST minibatch (taken before its optimiser step) is compared; above the target, the
epochs stop. A CleanRL config ported with its target_kl stops after the same epoch."""

import numpy as np
import pytest
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer.distributed import Dist
from kuberl_trainer.ppo import PPOTrainer
from kuberl_trainer.ppo_terms import STAT_NAMES

ONE_PROCESS = Dist(0, 1, 0, 1, torch.device("cpu"), None)


class ScriptedKL:
    """A learner whose minibatch steps report the approximate KLs it is given, in turn."""

    def __init__(self, kls):
        self.kls = iter(kls)
        self.steps = 0

    def step(self, obs, rows):
        self.steps += 1
        stats = torch.zeros(len(STAT_NAMES))
        stats[STAT_NAMES.index("approx_kl")] = next(self.kls)
        return stats


def epochs_run(target_kl, minibatch_kls, epochs=4):
    hp = PPOConfig(num_steps=8, hidden_sizes=[8], num_minibatches=len(minibatch_kls), update_epochs=epochs,
                   target_kl=target_kl)
    trainer = PPOTrainer(ONE_PROCESS, hp, "CartPole-v1", 2, {}, 64, seed=1, restart=0)
    trainer.learner = ScriptedKL(minibatch_kls * epochs)
    zeros = np.zeros((hp.num_steps, 2), np.float32)
    return trainer.learn(zeros, zeros)[1], trainer.learner.steps


def test_the_last_minibatchs_kl_stops_the_epochs_as_cleanrl_stops_them():
    """The KL grows through an epoch (each minibatch is measured after more optimiser steps): the last
    is above targetKl while the epoch's mean is below. CleanRL stops after the first epoch; kuberl
    compared the mean and ran all four, so a ported target_kl let the policy move further."""
    assert epochs_run(0.015, [0.0, 0.0, 0.0, 0.03]) == (1, 4)


def test_a_kl_above_the_target_before_the_last_minibatch_does_not_stop_the_epoch_nor_the_next():
    """CleanRL compares approx_kl after the minibatch loop: only the value left by the last one counts."""
    assert epochs_run(0.015, [0.03, 0.0, 0.0, 0.01]) == (4, 16)


@pytest.mark.parametrize("target_kl", [None, 0.25])
def test_without_a_target_or_at_it_every_epoch_runs(target_kl):
    """CleanRL's test is `approx_kl > target_kl`: a KL equal to the target goes on."""
    assert epochs_run(target_kl, [0.0, 0.25]) == (4, 8)
