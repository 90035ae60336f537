"""Recurrent PPO (spec.ppo.lstm) as pods run it: two real ranks under DDP, stopped by SIGTERM and resumed in
deterministic mode, end bitwise where an uninterrupted run ends: each env's LSTM state and its pending reset
travel in the rank state beside the envs mid-episode (a resume that dropped them acts otherwise from the
first step)."""

import signal

import torch
from kuberl_trainer import checkpoint

from .support import Ranks, make_job, spec
from .test_trainer_processes import assert_same_final_model

UPDATES = 16
LSTM_PPO = {"lstm": {"hiddenSize": 16}, "hiddenSizes": [16], "numSteps": 16}


def test_deterministic_stop_and_resume_of_a_recurrent_policy_is_bitwise_equal_to_an_uninterrupted_run(tmp_path):
    settings = spec(totalTimesteps=UPDATES * 2 * 4 * 16, deterministic=True, ppo=LSTM_PPO)
    whole = make_job(tmp_path / "whole", raw_spec=settings)
    uninterrupted = Ranks(whole)
    assert uninterrupted.wait(timeout=120) == [0, 0], uninterrupted.log(0)

    split = make_job(tmp_path / "split", raw_spec=settings)
    ranks = Ranks(split)
    ranks.wait_for_updates(4)
    for rank in (0, 1):
        ranks.signal(rank, signal.SIGTERM)
    assert ranks.wait(timeout=30) == [0, 0], ranks.log(0) + ranks.log(1)
    _, saved = checkpoint.load_newest(str(split.checkpoint_dir))
    assert 4 <= saved["counters"]["updates"] < UPDATES, saved["counters"]  # stopped mid-run, resumed from there
    resumed = Ranks(split)
    assert resumed.wait(timeout=120) == [0, 0], resumed.log(0) + resumed.log(1)

    assert_same_final_model(whole, split)
    model = torch.load(whole.final_model, weights_only=True)
    assert model["lstm_hidden_size"] == 16 and "lstm.lstm.weight_hh_l0" in model["agent"]
