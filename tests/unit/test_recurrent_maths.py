"""Recurrent PPO's pure pieces against hand-computed cases: where each env's LSTM state resets under
next-step autoreset, minibatches of whole envs whose rows replay each sequence in order, micro-batches
of whole sequences, and the LSTM core stepping with resets as one step at a time would."""

import numpy as np
import pytest
import torch
from kuberl_trainer.device import autocast
from kuberl_trainer.recurrent import (
    LSTMCore,
    env_minibatches,
    episode_starts,
    micro_slices,
    parameters_of,
    reset_state,
    segments,
    sequence_rows,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_state_resets_on_the_step_after_an_autoreset_step_not_on_it():
    # env 0: step 1 ended its episode, step 2 is the autoreset step (valid False, it reads the final
    # observation), step 3 the new episode's first; env 1: the previous rollout's last step was an autoreset step
    valid = np.array([[1, 1], [1, 1], [0, 1], [1, 0]], bool)
    first = np.array([0.0, 1.0])
    assert episode_starts(valid, first).tolist() == [[0, 1], [0, 0], [0, 0], [1, 0]]


def test_a_rollout_of_one_step_starts_where_the_previous_one_left_off():
    assert episode_starts(np.array([[0, 1]], bool), np.array([1.0, 0.0])).tolist() == [[1, 0]]


def test_minibatches_hold_every_env_once_in_groups_differing_by_one_at_most():
    groups = env_minibatches(5, 2, np.random.default_rng(0))
    assert sorted(len(g) for g in groups) == [2, 3]
    assert sorted(np.concatenate(groups).tolist()) == [0, 1, 2, 3, 4]
    # the same generator state, the same shuffle: every rank replays its envs as a resumed run would
    again = env_minibatches(5, 2, np.random.default_rng(0))
    assert [g.tolist() for g in groups] == [g.tolist() for g in again]


@pytest.mark.parametrize("minibatches", [0, 4])
def test_more_minibatches_than_envs_is_refused_naming_both(minibatches):
    with pytest.raises(ValueError, match=f"{minibatches} minibatches of whole envs need 1 to 3"):
        env_minibatches(3, minibatches, np.random.default_rng(0))


def test_sequence_rows_are_each_envs_steps_in_order_env_after_env():
    # a (T=3, N=4) rollout flattened time-major: row t * 4 + e
    assert sequence_rows(np.array([2, 0]), 3, 4).tolist() == [2, 6, 10, 0, 4, 8]
    table = np.arange(12).reshape(3, 4)  # each row's own index, laid out as the rollout
    assert table.reshape(-1)[sequence_rows(np.array([3]), 3, 4)].tolist() == [3, 7, 11]


def test_micro_slices_cut_between_sequences_never_inside_one():
    assert micro_slices(5, 3, 2) == [slice(0, 6), slice(6, 15)]
    assert micro_slices(2, 4, 1) == [slice(0, 8)]
    # more parts asked than sequences: one sequence each, no empty part
    assert micro_slices(2, 4, 3) == [slice(0, 4), slice(4, 8)]


def test_reset_state_zeroes_the_starting_envs_only():
    h, c = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[5.0, 6.0], [7.0, 8.0]])
    h1, c1 = reset_state((h, c), torch.tensor([1.0, 0.0]))
    assert h1.tolist() == [[0, 0], [3, 4]] and c1.tolist() == [[0, 0], [7, 8]]


def test_the_core_over_a_sequence_is_the_core_stepped_one_step_at_a_time():
    torch.manual_seed(0)
    core = LSTMCore(3, 4)
    batch, steps = 2, 5
    features = torch.randn(batch * steps, 3)
    starts = torch.zeros(batch * steps)
    starts[3] = 1.0  # env 0's step 3 starts an episode
    state = (torch.randn(batch, 4), torch.randn(batch, 4))
    whole, (h, c) = core(features, state, starts)
    per_env = features.reshape(batch, steps, 3)
    stepped, s = [], state
    for t in range(steps):
        out, s = core(per_env[:, t], s, starts.reshape(batch, steps)[:, t])
        stepped.append(out)
    assert torch.allclose(whole.reshape(batch, steps, 4), torch.stack(stepped, 1), atol=1e-6)
    assert torch.allclose(h, s[0], atol=1e-6) and torch.allclose(c, s[1], atol=1e-6)


def test_segments_cut_a_sequence_before_each_step_where_some_env_starts_an_episode():
    assert segments(np.array([0, 0, 1, 0, 0, 1, 1, 0], np.float32)) == [(0, 2), (2, 5), (5, 6), (6, 8)]
    assert segments(np.array([1, 0, 0], np.float32)) == [(0, 3)]  # a start at step 0 is a reset before the first call
    assert segments(np.zeros(1, np.float32)) == [(0, 1)]


def test_on_the_cpu_the_core_takes_a_run_without_resets_in_one_call():
    """128 steps of 4 envs with one episode starting at step 40: two LSTM calls, not 128 (the recurrent PPO example
    stepped at about 300 env steps/s, its minibatches' LSTM one step a call)."""
    core, calls = LSTMCore(3, 4), []
    core.lstm.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape[0]))
    starts = torch.zeros(4, 128)
    starts[2, 40] = 1.0
    core(torch.randn(4 * 128, 3), core.zero_state(4, torch.device("cpu")), starts.reshape(-1))
    assert calls == [40, 88]


def test_under_bf16_autocast_the_core_runs_in_fp32_as_acting_does():
    """Acting carries the state in fp32 (it never autocasts); learning's bf16 autocast leaves the LSTM in fp32 too, so
    it replays what acted. A CPU without bf16 instructions (this one) refused oneDNN's bf16 LSTM outright: "could not
    create a primitive descriptor for the LSTM forward propagation primitive", in the first update."""
    torch.manual_seed(0)
    core = LSTMCore(3, 4)
    features, starts = torch.randn(2 * 6, 3), torch.zeros(2 * 6)
    starts[3] = 1.0
    plain, (h, c) = core(features, core.zero_state(2, torch.device("cpu")), starts)
    with autocast(torch.device("cpu"), "bf16"):
        mixed, (h16, c16) = core(features, core.zero_state(2, torch.device("cpu")), starts)
    assert mixed.dtype == h16.dtype == c16.dtype == torch.float32
    assert torch.equal(mixed, plain) and torch.equal(h16, h) and torch.equal(c16, c)


def test_a_reset_forgets_everything_before_it():
    torch.manual_seed(0)
    core = LSTMCore(3, 4)
    features = torch.randn(4, 3)  # one env, four steps; the episode starts at step 2
    starts = torch.tensor([0.0, 0.0, 1.0, 0.0])
    before = (torch.randn(1, 4), torch.randn(1, 4))
    out, _ = core(features, before, starts)
    fresh, _ = core(features[2:], core.zero_state(1, torch.device("cpu")), torch.zeros(2))
    assert torch.allclose(out[2:], fresh, atol=1e-6)
    unreset, _ = core(features, before, torch.zeros(4))
    assert not torch.allclose(unreset[2:], fresh, atol=1e-3)  # without it the old episode leaks in


def test_parameters_of_counts_the_cores_weights():
    assert parameters_of(4, 3) == sum(p.numel() for p in LSTMCore(3, 4).parameters())
