"""Recurrent PPO (spec.ppo.lstm) as pods run it: two real ranks under DDP, stopped by SIGTERM and resumed in
deterministic mode, end bitwise where an uninterrupted run ends: each env's LSTM state and its pending reset
travel in the rank state beside the envs mid-episode (a resume that dropped them acts otherwise from the
first step)."""

import torch

from .support import spec
from .test_trainer_processes import (
    assert_same_final_model,
    uninterrupted_and_stopped_then_resumed,
)

UPDATES = 16
LSTM_PPO = {"lstm": {"hiddenSize": 16}, "hiddenSizes": [16], "numSteps": 16}


def test_deterministic_stop_and_resume_of_a_recurrent_policy_is_bitwise_equal_to_an_uninterrupted_run(tmp_path):
    settings = spec(totalTimesteps=UPDATES * 2 * 4 * 16, deterministic=True, ppo=LSTM_PPO)
    whole, split = uninterrupted_and_stopped_then_resumed(tmp_path, settings, stop_after=4, updates=UPDATES)
    assert_same_final_model(whole, split)
    model = torch.load(whole.final_model, weights_only=True)
    assert model["lstm_hidden_size"] == 16 and "lstm.lstm.weight_hh_l0" in model["agent"]
