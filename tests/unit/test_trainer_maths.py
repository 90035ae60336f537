"""The pure pieces of the trainer: loss weighting, normalisers, checkpoint files."""

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from kuberl.core.spec import PPOConfig
from kuberl_trainer import checkpoint
from kuberl_trainer.normalize import RunningMeanStd
from kuberl_trainer.ppo import ppo_loss


def loss_inputs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(n, generator=g) for _ in range(7)]
    valid = (torch.rand(n, generator=g) < 0.8).float()
    return parts, valid


def test_micro_batch_losses_add_up_to_the_minibatch_loss():
    hp = PPOConfig(ent_coef=0.01)
    parts, valid = loss_inputs(12)
    weight = valid / valid.sum()
    whole, whole_stats = ppo_loss(*parts, weight, hp)
    halves = [ppo_loss(*[p[s] for p in parts], weight[s], hp) for s in (slice(0, 5), slice(5, 12))]
    assert torch.allclose(whole, halves[0][0] + halves[1][0])
    assert torch.allclose(whole_stats["approx_kl"], halves[0][1]["approx_kl"] + halves[1][1]["approx_kl"])


def test_autoreset_rows_do_not_change_the_loss():
    hp = PPOConfig()
    parts, valid = loss_inputs(10)
    weight = valid / valid.sum()
    loss, _ = ppo_loss(*parts, weight, hp)
    garbage = [p.clone() for p in parts]
    for p in garbage:
        p[valid == 0] = 1e3
    assert torch.allclose(loss, ppo_loss(*garbage, weight, hp)[0])


def test_clipped_policy_loss_by_hand():
    hp = PPOConfig(clip_coef=0.2, vf_coef=0.0, ent_coef=0.0)
    one = torch.ones(1)
    # ratio e^1 with a positive advantage is clipped to 1.2: loss = -1.2
    loss, _ = ppo_loss(one, one * 0, one * 0, one * 0, one * 0, one, one * 0, one, hp)
    assert loss.item() == pytest.approx(-1.2)


def test_normaliser_merging_two_ranks_equals_the_concatenated_batch():
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(3, 2, (50, 4)), rng.normal(-1, 5, (70, 4)), rng.normal(0, 1, (30, 4))
    merged = RunningMeanStd((4,))
    merged.merge(RunningMeanStd.moments(a, (4,)))
    merged.merge(RunningMeanStd.moments(b, (4,)) + RunningMeanStd.moments(c, (4,)))  # an all-reduce of two ranks
    everything = np.concatenate([a, b, c])
    np.testing.assert_allclose(merged.mean, everything.mean(0), rtol=1e-9)
    np.testing.assert_allclose(merged.var, everything.var(0), rtol=1e-9)
    assert merged.count == 150


def test_checkpoints_keep_the_newest_and_skip_a_corrupted_one(tmp_path, caplog):
    for updates in (10, 20, 30):
        checkpoint.save(str(tmp_path), updates, {"updates": updates, "w": torch.arange(4.0)}, keep=2)
    assert [p.rsplit("/", 1)[1] for p in checkpoint.list_checkpoints(str(tmp_path))] == [
        "ckpt-0000000030.pt", "ckpt-0000000020.pt"]
    newest = tmp_path / "ckpt-0000000030.pt"
    newest.write_bytes(newest.read_bytes()[:-7])  # truncated
    with caplog.at_level(logging.WARNING):
        path, state = checkpoint.load_newest(str(tmp_path))
    assert state["updates"] == 20 and path.endswith("ckpt-0000000020.pt")
    assert "ckpt-0000000030.pt" in caplog.text


def test_a_flipped_byte_fails_the_checksum(tmp_path):
    path = checkpoint.save(str(tmp_path), 1, {"w": torch.ones(8)}, keep=1)
    data = bytearray(Path(path).read_bytes())
    data[-20] ^= 0xFF
    with pytest.raises(checkpoint.CorruptCheckpoint):
        checkpoint.decode(bytes(data))
    Path(path).write_bytes(bytes(data))
    with pytest.raises(checkpoint.NoUsableCheckpoint, match="ckpt-0000000001.pt: checksum mismatch"):
        checkpoint.load_newest(str(tmp_path))


def test_no_temporary_files_are_left(tmp_path):
    checkpoint.save(str(tmp_path), 1, {"w": 1}, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000000001.pt"]
