"""Checkpoint files cannot run code: version 2 is JSON plus tensors read with
weights_only=True, version 1 is read through a numpy-only allowlist, and
whatever fails to decode is skipped, then pruned."""

import errno
import logging
import os
import pathlib
import stat

import numpy as np
import pytest
import torch
from kuberl.core import contract
from kuberl_trainer import checkpoint, envs

from tests.distributed.support import (
    forged_checkpoint,
    garbage_checkpoint,
    old_format_checkpoint,
)


def ppo_like_state(updates: int) -> dict:
    """What a PPO trainer saves, numpy arrays and all."""
    agent = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(agent.parameters())
    agent(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    return {
        "agent": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "obs_norm": {"mean": np.arange(4.0), "var": np.ones(4), "count": np.float64(7.0)},
        "counters": {"global_step": 100 * updates, "updates": updates, "episodes": 3},
        "world_size": 2,
        "elapsed_seconds": 1.5,
        "per_rank": None,
    }


def test_state_round_trips_as_plain_data_with_types_kept():
    state = ppo_like_state(3)
    state["per_rank"] = [{"tracker": (np.zeros(2), np.ones(2, np.int64), np.ones(2, bool)),
                          "np_rng": np.random.default_rng(5).bit_generator.state,
                          "count32": np.float32(0.1), "torch_rng": torch.get_rng_state()}]
    back = checkpoint.decode(checkpoint.encode(state))
    assert set(back["optimizer"]["state"]) == {0, 1}  # int keys stay ints: Adam's moments are found again
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["obs_norm"]["count"].dtype == np.float64 and back["obs_norm"]["mean"].tolist() == [0, 1, 2, 3]
    own = back["per_rank"][0]
    assert isinstance(own["tracker"], tuple) and own["tracker"][1].dtype == np.int64 and own["tracker"][2].dtype == bool
    assert type(own["count32"]) is np.float32 and own["count32"] == np.float32(0.1)
    assert own["np_rng"] == np.random.default_rng(5).bit_generator.state  # 128-bit ints intact
    assert torch.equal(own["torch_rng"], torch.get_rng_state())
    for name, tensor in state["agent"].items():
        assert torch.equal(back["agent"][name], tensor)


def test_anything_but_plain_data_is_refused_when_saving_naming_where():
    with pytest.raises(TypeError, match=r"state\.per_rank\[0\]\.envs: bytes is not plain data"):
        checkpoint.encode({"per_rank": [{"envs": b"\x80\x04pickled"}]})
    with pytest.raises(TypeError, match="Python objects"):
        checkpoint.encode({"x": np.array([object()])})


@pytest.mark.parametrize("version", [1, 2])
def test_a_forged_pickle_newest_is_never_run_and_the_last_good_one_loads(tmp_path, version, caplog):
    marker = tmp_path.parent / f"forged-ran-{version}"
    checkpoint.save(str(tmp_path), 10, ppo_like_state(10), keep=3)
    (tmp_path / "ckpt-9999999999.pt").write_bytes(forged_checkpoint(marker, version))
    with caplog.at_level(logging.WARNING):
        path, state = checkpoint.load_newest(str(tmp_path))
    assert not marker.exists()
    assert path.endswith("ckpt-0000000010.pt") and state["counters"]["updates"] == 10
    assert "skipping checkpoint" in caplog.text and "ckpt-9999999999.pt" in caplog.text


def test_an_old_format_checkpoint_loads_through_the_numpy_allowlist_and_drops_its_pickled_env_state(tmp_path, caplog):
    marker = tmp_path.parent / "old-env-state-ran"
    state = ppo_like_state(20)
    state["per_rank"] = [{"envs": forged_checkpoint(marker, 1), "next_obs": np.zeros((4, 4), np.float32)}]
    (tmp_path / "ckpt-0000000020.pt").write_bytes(old_format_checkpoint(state))
    with caplog.at_level(logging.WARNING):
        path, loaded = checkpoint.load_newest(str(tmp_path))
    assert path.endswith("ckpt-0000000020.pt") and loaded["counters"] == state["counters"]
    np.testing.assert_array_equal(loaded["obs_norm"]["mean"], state["obs_norm"]["mean"])
    assert loaded["per_rank"] is None and "per-rank env state is a pickle" in caplog.text
    assert not marker.exists()
    agent = torch.nn.Linear(4, 2)
    agent.load_state_dict(loaded["agent"])
    # what rank 0 broadcasts: re-encoded in today's format
    assert checkpoint.decode(checkpoint.encode(loaded))["counters"] == state["counters"]


def test_an_old_format_file_with_anything_beyond_numpy_is_skipped(tmp_path):
    (tmp_path / "ckpt-0000000002.pt").write_bytes(old_format_checkpoint({"counters": {}, "odd": logging.getLogger("x")}))
    (tmp_path / "ckpt-0000000001.pt").write_bytes(old_format_checkpoint({"counters": {}, "raw": b"bytes load, but are not state"}))
    assert checkpoint.load_newest(str(tmp_path), start_over=True) is None


@pytest.mark.parametrize("version", [1, 2])
def test_a_garbage_payload_behind_a_valid_header_falls_back(tmp_path, version):
    checkpoint.save(str(tmp_path), 5, ppo_like_state(5), keep=3)
    (tmp_path / "ckpt-0000000006.pt").write_bytes(garbage_checkpoint(version))
    (tmp_path / "ckpt-0000000007.pt").write_bytes(b"not even a header")
    path, _ = checkpoint.load_newest(str(tmp_path))
    assert path.endswith("ckpt-0000000005.pt")


def test_a_file_the_caller_refuses_is_skipped_too(tmp_path):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    checkpoint.save(str(tmp_path), 2, {"counters": "none"}, keep=3)
    path, _ = checkpoint.load_newest(str(tmp_path), accept=lambda s: None if isinstance(s["counters"], dict) else "no counters")
    assert path.endswith("ckpt-0000000001.pt")


def test_an_unknown_format_version_fails_loudly_naming_the_file(tmp_path):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    future = tmp_path / "ckpt-0000000002.pt"
    future.write_bytes(checkpoint._framed(3, b"whatever a newer trainer writes"))
    with pytest.raises(checkpoint.UnknownCheckpointFormat, match=f"{future}.*format version 3"):
        checkpoint.load_newest(str(tmp_path))


def test_files_that_are_not_valid_checkpoints_are_never_kept_among_the_newest(tmp_path):
    marker = tmp_path.parent / "pruned-forgery-ran"
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=2)
    (tmp_path / "ckpt-9999999999.pt").write_bytes(forged_checkpoint(marker, 2))
    (tmp_path / "ckpt-9999999998.pt").write_bytes(garbage_checkpoint())
    future = tmp_path / "ckpt-9999999997.pt"
    future.write_bytes(checkpoint._framed(3, b"a newer trainer's"))
    checkpoint.save(str(tmp_path), 3, ppo_like_state(3), keep=2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-0000000002.pt", "ckpt-0000000003.pt", future.name]
    # moved aside, never deleted: they are the evidence of what went wrong
    assert sorted(p.name for p in (tmp_path / checkpoint.ASIDE).iterdir()) == ["ckpt-9999999998.pt", "ckpt-9999999999.pt"]
    assert not marker.exists()


def flip_one_bit(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_when_every_checkpoint_is_unreadable_loading_fails_naming_each_and_keeps_them(tmp_path, caplog):
    for updates in (1, 2, 3):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=3)
    files = sorted(tmp_path.glob("ckpt-*.pt"))
    for path in files:
        flip_one_bit(path)
    before = {p.name: p.read_bytes() for p in files}
    checkpoint._verified.clear()
    with pytest.raises(checkpoint.NoUsableCheckpoint) as failed:
        checkpoint.load_newest(str(tmp_path))
    message = str(failed.value)
    assert failed.value.reason == "NoUsableCheckpoint"
    assert all(name in message for name in before) and "checksum mismatch" in message and "StartOver" in message
    assert {p.name: p.read_bytes() for p in tmp_path.glob("ckpt-*.pt")} == before  # nothing deleted, nothing moved
    # opting in starts over, and moves them aside before a new save of the same name could replace one
    assert checkpoint.load_newest(str(tmp_path), start_over=True) is None
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    assert {p.name: p.read_bytes() for p in (tmp_path / checkpoint.ASIDE).iterdir()} == before
    assert checkpoint.load_newest(str(tmp_path))[0].endswith("ckpt-0000000001.pt")


def test_no_checkpoint_at_all_is_a_fresh_start_not_a_failure(tmp_path):
    assert checkpoint.load_newest(str(tmp_path)) is None
    (tmp_path / "progress.jsonl").write_text("{}\n")
    assert checkpoint.load_newest(str(tmp_path)) is None


class FlakyReads:
    """checkpoint._read_bytes failing with `error` for the first `failures` calls on `victim`:
    the EIO or ESTALE a network volume answers for a while."""

    def __init__(self, monkeypatch, victim, error: int, failures: int):
        self.real, self.victim, self.error, self.left = checkpoint._read_bytes, str(victim), error, failures
        monkeypatch.setattr(checkpoint, "_read_bytes", self)
        monkeypatch.setattr(checkpoint, "READ_RETRY_SECONDS", (0.0, 0.0, 0.0))

    def __call__(self, path, limit):
        if path == self.victim and self.left > 0:
            self.left -= 1
            raise OSError(self.error, os.strerror(self.error), path)
        return self.real(path, limit)


@pytest.mark.parametrize("error", [errno.EIO, errno.ESTALE])
def test_an_io_error_is_retried_never_taken_for_corruption(tmp_path, monkeypatch, error):
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=3)
    newest = tmp_path / "ckpt-0000000002.pt"
    checkpoint._verified.clear()
    FlakyReads(monkeypatch, newest, error, failures=2)
    path, state = checkpoint.load_newest(str(tmp_path))
    assert path == str(newest) and state["counters"]["updates"] == 2


def test_an_io_error_that_lasts_fails_the_load_and_pruning_leaves_the_file_alone(tmp_path, monkeypatch):
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=1)
    newest = tmp_path / "ckpt-0000000002.pt"
    checkpoint._verified.clear()
    FlakyReads(monkeypatch, newest, errno.EIO, failures=10**6)
    with pytest.raises(OSError) as failed:
        checkpoint.load_newest(str(tmp_path))
    assert failed.value.errno == errno.EIO and not isinstance(failed.value, checkpoint.CorruptCheckpoint)
    checkpoint.save(str(tmp_path), 3, ppo_like_state(3), keep=1)
    assert newest.exists() and not (tmp_path / checkpoint.ASIDE).exists()


def test_stale_temp_files_are_removed_and_nothing_else(tmp_path):
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    stale = tmp_path / ".tmp-k1ll3d.part"
    stale.write_bytes(b"x" * 4096)
    os.mkfifo(tmp_path / ".tmp-fifo.part")
    (tmp_path / "tmp-not-ours.part").write_text("the tenant's")
    assert checkpoint.remove_stale_temps(str(tmp_path)) == [(str(stale), 4096)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-fifo.part", "ckpt-0000000001.pt", "tmp-not-ours.part"]


def test_native_vector_env_state_is_plain_data_and_continues_the_same_episodes():
    original = envs.make_envs("CartPole-v1", 3)
    original.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(30):
        original.step(rng.integers(0, 2, 3))
    saved = checkpoint.decode(checkpoint.encode({"envs": envs.env_state(original)}))["envs"]
    restored = envs.make_envs("CartPole-v1", 3)
    restored.reset(seed=99)
    envs.restore_env_state(restored, saved)
    for _ in range(200):
        actions = rng.integers(0, 2, 3)
        for a, b in zip(original.step(actions)[:4], restored.step(actions)[:4], strict=True):
            np.testing.assert_array_equal(a, b)


def test_envs_whose_state_is_not_plain_data_have_none():
    assert envs.env_state(envs.make_envs("Acrobot-v1", 2)) is None  # SyncVectorEnv of separate envs



class DirectoryFsync:
    """os.fsync failing with `error` on a directory, as the kernel answers on a filesystem whose
    directories have no fsync (vfs_fsync_range: EINVAL without f_op->fsync): SMB/CIFS (Azure Files
    volumes), some Ceph and FUSE mounts; here only /proc and /sys, where no file can be written."""

    def __init__(self, monkeypatch, error: int):
        self.real, self.error, self.refused = os.fsync, error, 0
        monkeypatch.setattr(checkpoint.os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self.refused += 1
            raise OSError(self.error, os.strerror(self.error))
        self.real(fd)


def test_the_kernel_refuses_fsync_on_a_directory_of_a_filesystem_without_one():
    fd = os.open("/proc", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as refused:
            os.fsync(fd)
    finally:
        os.close(fd)
    assert refused.value.errno == errno.EINVAL


def test_a_filesystem_without_directory_fsync_still_keeps_checkpoints_and_says_so_once(tmp_path, monkeypatch, caplog):
    """Each save used to fail after its rename (OSError EINVAL: a Crashed gang restart per checkpoint)."""
    refusing = DirectoryFsync(monkeypatch, errno.EINVAL)
    with caplog.at_level(logging.WARNING, logger=checkpoint.log.name):
        for updates in (1, 2, 3):
            checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=2)
        checkpoint.write_on_volume(str(tmp_path / "final-model.pt"), b"model")
    assert refusing.refused == 4
    checkpoint._verified.clear()
    path, state = checkpoint.load_newest(str(tmp_path))
    assert path.endswith("ckpt-0000000003.pt") and state["counters"]["updates"] == 3
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt-")) == ["ckpt-0000000002.pt", "ckpt-0000000003.pt"]
    said = [r.getMessage() for r in caplog.records if "cannot fsync a directory" in r.getMessage()]
    assert len(said) == 1 and str(tmp_path) in said[0], said


def test_a_directory_fsync_that_fails_with_an_io_error_fails_the_save(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    DirectoryFsync(monkeypatch, errno.EIO)
    with pytest.raises(OSError) as failed:
        checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=2)
    assert failed.value.errno == errno.EIO


def test_a_claim_over_its_quota_is_a_full_volume_naming_what_a_checkpoint_needs(tmp_path, monkeypatch):
    """CephFS and NFS answer a write past a claim's quota with EDQUOT, not ENOSPC: it was a bare OSError
    ('Crashed: OSError: [Errno 122] Disk quota exceeded'). No filesystem here sets quotas: the write fails as one does."""
    def over_quota(path, data):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), path)

    monkeypatch.setattr(checkpoint, "write_atomic", over_quota)
    with pytest.raises(checkpoint.CheckpointVolumeFull) as full:
        checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3, volume="claim j-checkpoints")
    assert full.value.errno == errno.EDQUOT
    assert "the checkpoint volume (claim j-checkpoints; " in str(full.value) and "is over its quota (EDQUOT): one checkpoint" \
        " needs " in str(full.value), str(full.value)


def test_a_checkpoint_past_the_file_size_limit_keeps_the_last_good_one_and_says_the_limit(tmp_path):
    """A write past the largest file the volume or the process may write (EFBIG: `ulimit -f` in the shell that runs
    kuberl run, a FUSE volume's object size limit) was a bare 'Crashed: OSError: [Errno 27] File too large' after a
    traceback, counted as a crash with no word of the bytes or the limit. Now a full volume's reason, naming both;
    the last good checkpoint still loads and no temp file is left (Python ignores SIGXFSZ: the write fails)."""
    import resource

    last_good = checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(last_good) + 1, hard))
    bigger = {**ppo_like_state(2), "padding": torch.zeros(10_000)}
    try:
        with pytest.raises(checkpoint.CheckpointVolumeFull) as full:
            checkpoint.save(str(tmp_path), 2, bigger, keep=3, volume="claim j-checkpoints", last_good=last_good)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    said = str(full.value)
    assert full.value.errno == errno.EFBIG and "refuses a file of " in said and "(EFBIG" in said, said
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001.pt"] and checkpoint.read(last_good)["counters"]["updates"] == 1


@pytest.mark.parametrize(("error", "writable_at_start", "reason"), [
    (errno.EIO, True, "CheckpointVolumeUnavailable"),  # a lost disk or network session: uncounted restart
    (errno.ESTALE, True, "CheckpointVolumeUnavailable"),
    (errno.ENOTCONN, True, "CheckpointVolumeUnavailable"),  # a FUSE mount whose daemon died
    (errno.EIO, False, "CheckpointVolumeUnavailable"),
    (errno.EROFS, True, "CheckpointVolumeUnavailable"),  # remounted read-only under the running job
    (errno.EROFS, False, "CheckpointVolumeReadOnly"),  # mounted read-only: permanent, as before
    (errno.ENOSPC, True, "CheckpointVolumeFull"),
    (errno.EDQUOT, True, "CheckpointVolumeFull"),
    (errno.EFBIG, True, "CheckpointVolumeFull"),  # past the largest file the volume or the process may write
    (errno.EACCES, True, "CheckpointVolumeForbidden"),
    (errno.EPERM, False, "CheckpointVolumeForbidden"),
    (errno.EINVAL, True, None),  # not the volume's: raised as it is (Crashed)
    (None, True, None),
])
def test_each_volume_errno_has_one_verdict(error, writable_at_start, reason):
    assert checkpoint.volume_failure(error, writable_at_start) == reason


class FailingFileFsync:
    """os.fsync failing with `error` on checkpoint files (not directories), from the `after`-th call on: the
    EIO a volume answers once its disk or network session is lost (write-back fails at fsync)."""

    def __init__(self, monkeypatch, error: int, after: int = 0):
        self.real, self.error, self.calls, self.after = os.fsync, error, 0, after
        monkeypatch.setattr(checkpoint.os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            self.calls += 1
            if self.calls > self.after:
                raise OSError(self.error, os.strerror(self.error))
        self.real(fd)


def test_a_save_the_volume_fails_under_names_the_path_the_errno_and_the_last_good_checkpoint(tmp_path, monkeypatch):
    """It was a bare 'Crashed: OSError: [Errno 5] Input/output error', counted toward backoffLimit: a long storage
    outage failed the job. Now its own reason, uncounted; nothing older is touched and no temp file is left."""
    last_good = checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=2)
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    failing = FailingFileFsync(monkeypatch, errno.EIO)
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as failed:
        checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=2, last_good=last_good)
    said = str(failed.value)
    assert failed.value.errno == errno.EIO and failed.value.reason == "CheckpointVolumeUnavailable"
    assert said == (f"writing {tmp_path}/ckpt-0000000002.pt failed with EIO (Input/output error): the volume failed under "
                    "the job; last good checkpoint: ckpt-0000000001.pt (same directory). Restarted, not counted toward "
                    "backoffLimit"), said
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001.pt"] and failing.calls == 4  # tried, then 3 retries


def test_a_save_that_meets_a_passing_io_error_is_retried_in_place_and_said(tmp_path, monkeypatch, caplog):
    """A network volume's few seconds of EIO (a server failing over) cost a gang restart; now the save is tried
    again after 1, 4 and 15 s, each retry said in the log. A read-only remount is not retried: it never heals in place."""
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    failing = FailingFileFsync(monkeypatch, errno.EIO)
    failing.after, healed_after = 0, 2

    def fsync(fd: int) -> None:
        if failing.calls >= healed_after and not stat.S_ISDIR(os.fstat(fd).st_mode):
            return failing.real(fd)
        return failing(fd)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    with caplog.at_level(logging.WARNING, logger=checkpoint.log.name):
        path = checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=2)
    checkpoint._verified.clear()
    assert checkpoint.read(path)["counters"]["updates"] == 1
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001.pt"]
    assert len([r for r in caplog.records if "failed with EIO (Input/output error): retrying in" in r.getMessage()]) == 2
    assert not checkpoint.retried_save(errno.EROFS) and not checkpoint.retried_save(errno.ENOSPC)
    assert checkpoint.retried_save(errno.EIO) and checkpoint.retried_save(errno.ESTALE)


def test_a_volume_remounted_read_only_under_the_job_is_unavailable_not_permanently_read_only(tmp_path, monkeypatch):
    """ext4's errors=remount-ro after an I/O error: it failed the job at once (CheckpointVolumeReadOnly), though a new
    pod re-stages the volume. The rank found it writable at its start, so a read-only one now is a failure under it."""
    def remounted(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    monkeypatch.setattr(checkpoint, "write_atomic", remounted)
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as failed:
        checkpoint.save(str(tmp_path), 3, ppo_like_state(3), keep=2)
    assert "failed with EROFS (Read-only file system): the volume turned read-only under the job" in str(failed.value)
    assert "no checkpoint saved yet by this run" in str(failed.value)
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as final:
        checkpoint.write_on_volume(str(tmp_path / "final-model.pt"), b"model", last_good="/c/ckpt-0000000002.pt")
    assert "last good checkpoint: /c/ckpt-0000000002.pt." in str(final.value), str(final.value)


def test_an_io_error_after_the_new_checkpoint_read_back_names_it_as_the_last_good_one(tmp_path, monkeypatch):
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=1)

    def unlink(path, *a, **k):
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    monkeypatch.setattr(checkpoint.os, "unlink", unlink)
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    checkpoint._verified.clear()
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as failed:
        checkpoint.save(str(tmp_path), 3, ppo_like_state(3), keep=1, last_good=str(tmp_path / "ckpt-0000000002.pt"))
    assert "last good checkpoint: ckpt-0000000003.pt (same directory)" in str(failed.value), str(failed.value)


# /proc/self/mountinfo as the kernel wrote it (proc(5)) for: a tmpfs remounted read-only (its superblock), a bind
# mount of it that stays read-write, a read-only bind mount (a readOnly volume), and a path with a space
MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
63 22 0:39 / /tmp/mi/x ro,relatime - tmpfs tmpfs ro
64 22 0:39 / /tmp/mi/y rw,relatime - tmpfs tmpfs ro
65 22 254:0 /srv /tmp/mi/z ro,relatime shared:7 master:2 - ext4 /dev/vda rw,discard
66 22 0:40 / /tmp/mi/with\\040space rw,relatime - tmpfs tmpfs ro
"""


@pytest.mark.parametrize(("path", "by"), [
    ("/tmp/mi/x/ckpt", "mount"),
    ("/tmp/mi/y/job-uid", "filesystem"),  # the kernel's error remount: a new pod's mount heals it
    ("/tmp/mi/z", "mount"),  # with optional fields before the separator
    ("/tmp/mi/with space/a", "filesystem"),
    ("/tmp/mi/yy", None),  # not under /tmp/mi/y: the root filesystem, read-write
    ("/elsewhere", None),
])
def test_who_made_a_path_read_only_is_read_from_mountinfo(path, by):
    assert checkpoint.read_only_by(MOUNTINFO, path) == by


def test_a_volume_read_only_at_start_is_permanent_unless_only_its_filesystem_is(tmp_path, monkeypatch):
    directory = "/tmp/mi/y/job-uid"
    table = tmp_path / "mountinfo"
    table.write_text(MOUNTINFO)

    def read_only(dir, prefix, suffix):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), dir)

    monkeypatch.setattr(checkpoint.os, "makedirs", lambda *a, **k: None)
    monkeypatch.setattr(checkpoint.tempfile, "mkstemp", read_only)
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as remounted:
        checkpoint.check_writable(directory, mountinfo=str(table))
    assert str(remounted.value).startswith(f"creating a file in {directory} failed with EROFS")
    assert "its checkpoints are left as they are" in str(remounted.value)
    with pytest.raises(checkpoint.CheckpointVolumeReadOnly):
        checkpoint.check_writable("/tmp/mi/x/job-uid", mountinfo=str(table))
    with pytest.raises(checkpoint.CheckpointVolumeReadOnly):  # no table to read: as before
        checkpoint.check_writable(directory, mountinfo=str(tmp_path / "absent"))


def test_a_corrupt_newest_checkpoint_is_kept_aside_before_the_resumed_run_saves_under_its_name(tmp_path):
    """A run resumed past a corrupt ckpt-N saves ckpt-N again after everyUpdates more updates: the same name.
    The corrupt file was moved aside only at that save, after the new one had replaced it: the evidence was lost."""
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=3)
    corrupt = tmp_path / "ckpt-0000000002.pt"
    flip_one_bit(corrupt)
    evidence = corrupt.read_bytes()
    checkpoint._verified.clear()
    assert checkpoint.load_newest(str(tmp_path))[0].endswith("ckpt-0000000001.pt")
    assert corrupt.read_bytes() == evidence, "a reader that will not save (kuberl eval) moves nothing"
    path, _ = checkpoint.load_newest(str(tmp_path), set_aside=True)  # as the trainer loads
    assert path.endswith("ckpt-0000000001.pt")
    checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=3)  # the resumed run's next save
    assert (tmp_path / checkpoint.ASIDE / "ckpt-0000000002.pt").read_bytes() == evidence
    assert checkpoint.read(str(corrupt))["counters"]["updates"] == 2


def test_an_old_checkpoint_the_trainer_may_not_remove_is_left_said_and_the_save_stands(tmp_path, monkeypatch, caplog):
    """Pruning is housekeeping: a PermissionError there (a file of another user's under a sticky directory) failed
    the save that had just succeeded, every everyUpdates."""
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=1)
    oldest = str(tmp_path / "ckpt-0000000002.pt")
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if str(path) == oldest:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.os, "unlink", unlink)
    with caplog.at_level(logging.WARNING, logger=checkpoint.log.name):
        path = checkpoint.save(str(tmp_path), 3, ppo_like_state(3), keep=1)
    assert checkpoint.read(path)["counters"]["updates"] == 3 and os.path.exists(oldest)
    assert any(f"could not remove {oldest}" in r.getMessage() for r in caplog.records), caplog.text


def test_keep_1_never_removes_the_last_valid_checkpoint_for_a_new_one_that_does_not_read_back(tmp_path, monkeypatch):
    """The new file was taken for valid unread: one that does not decode (a state that does not round-trip, a
    write the storage garbled) cost the only checkpoint that loaded."""
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=1)
    monkeypatch.setattr(checkpoint, "encode", lambda state: garbage_checkpoint())
    with pytest.raises(checkpoint.CheckpointReadBackFailed, match="ckpt-0000000002.pt was written but does not read back"):
        checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=1)
    monkeypatch.undo()
    checkpoint._verified.clear()
    path, state = checkpoint.load_newest(str(tmp_path))
    assert path.endswith("ckpt-0000000001.pt") and state["counters"]["updates"] == 1
    assert (tmp_path / checkpoint.ASIDE / "ckpt-0000000002.pt").exists()


def test_a_skipped_checkpoint_that_cannot_be_moved_aside_stays_said_and_the_resume_goes_on(tmp_path, monkeypatch, caplog):
    """Moving aside at load is housekeeping: on a volume too full for unreadable/ it failed the resume itself."""
    for updates in (1, 2):
        checkpoint.save(str(tmp_path), updates, ppo_like_state(updates), keep=3)
    corrupt = tmp_path / "ckpt-0000000002.pt"
    flip_one_bit(corrupt)
    checkpoint._verified.clear()

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(checkpoint.os, "makedirs", full)
    with caplog.at_level(logging.WARNING, logger=checkpoint.log.name):
        path, _ = checkpoint.load_newest(str(tmp_path), set_aside=True)
    assert path.endswith("ckpt-0000000001.pt") and corrupt.exists()
    assert any(f"could not move {corrupt} aside" in r.getMessage() for r in caplog.records), caplog.text


def make_aside_name_hostile(tmp_path, kind: str):
    """`unreadable` in the checkpoint directory as a tenant may leave it; returns what a move must not touch."""
    aside = tmp_path / "ckpts" / checkpoint.ASIDE
    outside = tmp_path / "another-job"
    outside.mkdir()
    if kind == "symlink to a directory":
        aside.symlink_to(outside)
    elif kind == "dangling symlink":
        aside.symlink_to(tmp_path / "nowhere")
    elif kind == "file":
        aside.write_bytes(b"mine")
    else:
        os.mkfifo(aside)
    return outside


ASIDE_KINDS = ["symlink to a directory", "dangling symlink", "file", "fifo"]


@pytest.mark.parametrize("kind", ASIDE_KINDS)
def test_a_resume_never_moves_a_skipped_checkpoint_through_an_unreadable_that_is_no_directory(tmp_path, kind, caplog):
    """A symlink named unreadable moved the skipped file out of the volume (into another job's directory,
    where it became that job's newest checkpoint); a file or FIFO of that name is left as it is."""
    ckpts = tmp_path / "ckpts"
    for updates in (1, 2):
        checkpoint.save(str(ckpts), updates, ppo_like_state(updates), keep=3)
    corrupt = ckpts / "ckpt-0000000002.pt"
    flip_one_bit(corrupt)
    checkpoint._verified.clear()
    outside = make_aside_name_hostile(tmp_path, kind)
    with caplog.at_level(logging.WARNING, logger=checkpoint.log.name):
        path, _ = checkpoint.load_newest(str(ckpts), set_aside=True)
    assert path.endswith("ckpt-0000000001.pt") and corrupt.exists()
    assert list(outside.iterdir()) == []
    assert any(f"could not move {corrupt} aside" in r.getMessage() and "not a directory" in r.getMessage()
               for r in caplog.records), caplog.text


@pytest.mark.parametrize("kind", ASIDE_KINDS)
def test_a_save_stands_when_pruning_cannot_move_a_bad_file_into_an_unreadable_that_is_no_directory(tmp_path, kind):
    """Pruning moves an older file that does not load aside: a file named unreadable failed every save after its
    write (FileExistsError), a gang restart every everyUpdates; a symlink took the file out of the volume."""
    ckpts = tmp_path / "ckpts"
    checkpoint.save(str(ckpts), 1, ppo_like_state(1), keep=3)
    (ckpts / "ckpt-0000000000.pt").write_bytes(garbage_checkpoint())
    outside = make_aside_name_hostile(tmp_path, kind)
    path = checkpoint.save(str(ckpts), 2, ppo_like_state(2), keep=3)
    assert checkpoint.read(path)["counters"]["updates"] == 2
    assert (ckpts / "ckpt-0000000000.pt").exists() and list(outside.iterdir()) == []


def test_a_checkpoint_that_does_not_read_back_is_still_refused_when_unreadable_is_a_symlink(tmp_path, monkeypatch):
    ckpts = tmp_path / "ckpts"
    checkpoint.save(str(ckpts), 1, ppo_like_state(1), keep=1)
    outside = make_aside_name_hostile(tmp_path, "symlink to a directory")
    monkeypatch.setattr(checkpoint, "encode", lambda state: garbage_checkpoint())
    with pytest.raises(checkpoint.CheckpointReadBackFailed, match="does not read back .*: it is left where it is"):
        checkpoint.save(str(ckpts), 2, ppo_like_state(2), keep=1)
    assert list(outside.iterdir()) == [] and (ckpts / "ckpt-0000000001.pt").exists()


def test_moving_aside_takes_a_free_name_never_replacing_a_link_and_stops_when_none_is_left(tmp_path, monkeypatch):
    """Names in unreadable/ the tenant took (a symlink to a file elsewhere among them) are passed over, each
    looked at once: a bounded walk, never a replace."""
    ckpts = tmp_path / "ckpts"
    aside = ckpts / checkpoint.ASIDE
    aside.mkdir(parents=True)
    elsewhere = tmp_path / "precious"
    elsewhere.write_bytes(b"precious")
    (aside / "ckpt-0000000001.pt").symlink_to(elsewhere)
    (aside / "ckpt-0000000001.pt.1").write_bytes(b"taken")
    (ckpts / "ckpt-0000000001.pt").write_bytes(b"bad")
    moved = checkpoint.move_aside(str(ckpts / "ckpt-0000000001.pt"), "test")
    assert moved == str(aside / "ckpt-0000000001.pt.2") and elsewhere.read_bytes() == b"precious"
    monkeypatch.setattr(checkpoint, "MAX_ASIDE_NAMES", 3)
    (ckpts / "ckpt-0000000001.pt").write_bytes(b"bad again")
    with pytest.raises(checkpoint.AsideUnusable, match="full of names taken"):
        checkpoint.move_aside(str(ckpts / "ckpt-0000000001.pt"), "test")
    assert (ckpts / "ckpt-0000000001.pt").read_bytes() == b"bad again"


def test_a_new_checkpoint_that_does_not_read_back_and_cannot_be_moved_aside_is_still_a_read_back_failure(tmp_path, monkeypatch):
    """An unreadable/ the trainer may not write into (EACCES) surfaced as a bare PermissionError from the save."""
    checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=1)

    def denied(src, dst, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), dst)

    monkeypatch.setattr(checkpoint, "encode", lambda state: garbage_checkpoint())
    monkeypatch.setattr(checkpoint.os, "rename", denied)
    with pytest.raises(checkpoint.CheckpointReadBackFailed, match="it is left where it is"):
        checkpoint.save(str(tmp_path), 2, ppo_like_state(2), keep=1)
    assert (tmp_path / "ckpt-0000000001.pt").exists()


def test_the_final_model_is_written_with_the_same_retries_in_place(tmp_path, monkeypatch):
    """The run's last write (session.write_final_model) met a passing EIO with a gang restart that trained the tail again."""
    monkeypatch.setattr(checkpoint, "WRITE_RETRY_SECONDS", (0.0, 0.0, 0.0))
    real, tries = checkpoint.write_atomic, []

    def flaky(path, data):
        tries.append(path)
        if len(tries) < 3:
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE), path)
        real(path, data)

    monkeypatch.setattr(checkpoint, "write_atomic", flaky)
    model = str(tmp_path / "final-model.pt")
    checkpoint.retrying(model, lambda: checkpoint.write_on_volume(model, b"model", last_good="/c/ckpt-0000000002.pt"))
    assert (tmp_path / "final-model.pt").read_bytes() == b"model" and len(tries) == 3

    def dead(path, data):
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    monkeypatch.setattr(checkpoint, "write_atomic", dead)  # never heals: raised after the retries, naming the last good
    with pytest.raises(checkpoint.CheckpointVolumeUnavailable) as failed:
        checkpoint.retrying(model, lambda: checkpoint.write_on_volume(model, b"model", last_good="/c/ckpt-0000000002.pt"))
    assert "last good checkpoint: /c/ckpt-0000000002.pt" in str(failed.value)


@pytest.mark.parametrize("in_the_way", ["a file above it", "a symlink to a file", "a dangling symlink"])
def test_a_checkpoint_directory_something_else_holds_the_place_of_is_named_for_what_is_there(tmp_path, in_the_way):
    """os.makedirs says FileExistsError or NotADirectoryError naming the directory only: what blocks it is named."""
    (tmp_path / "file").write_bytes(b"12345")
    if in_the_way == "a file above it":
        directory, blocking = tmp_path / "file" / "job-uid", f"{tmp_path / 'file'} is a regular file of 5 bytes"
    elif in_the_way == "a symlink to a file":
        (tmp_path / "job-uid").symlink_to(tmp_path / "file")
        directory, blocking = tmp_path / "job-uid", f"{tmp_path / 'job-uid'} (a symlink to '{tmp_path / 'file'}') is a regular file"
    else:
        (tmp_path / "job-uid").symlink_to(tmp_path / "gone")
        directory, blocking = tmp_path / "job-uid", f"{tmp_path / 'job-uid'} (a symlink to '{tmp_path / 'gone'}') leads nowhere"
    for attempt in (lambda: checkpoint.check_writable(str(directory)),
                    lambda: checkpoint.save(str(directory), 1, ppo_like_state(1), keep=1)):
        with pytest.raises(checkpoint.CheckpointDirectoryNotADirectory) as refused:
            attempt()
        assert f"the checkpoint directory {directory} cannot be a directory: {blocking}" in str(refused.value)
    assert (tmp_path / "file").read_bytes() == b"12345"


@pytest.mark.parametrize("moment", ["read back", "pruning"])
def test_a_checkpoint_directory_replaced_by_a_file_during_a_save_is_named_not_crashed(tmp_path, monkeypatch, moment):
    """The directory was one when the save began and a file by its read-back or its pruning (a tenant's sidecar
    racing the trainer): `NotADirectoryError` escaped as a crash, counted toward backoffLimit, where the same file
    at a save's start fails the run naming it (seen once under load in tests/distributed/test_checkpoint_volumes.py)."""
    directory = tmp_path / "job-uid"
    checkpoint.save(str(directory), 1, ppo_like_state(1), keep=3)
    step = checkpoint.read if moment == "read back" else checkpoint.list_checkpoints

    def after_the_swap(*args, **kwargs):
        if directory.is_dir():
            directory.rename(tmp_path / "moved")
            directory.write_text("not a directory\n")
        return step(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "read" if moment == "read back" else "list_checkpoints", after_the_swap)
    with pytest.raises(checkpoint.CheckpointDirectoryNotADirectory) as refused:
        checkpoint.save(str(directory), 2, ppo_like_state(2), keep=3)
    assert f"the checkpoint directory {directory} cannot be a directory: {directory} is a regular file of 16 bytes" in str(
        refused.value)


@pytest.mark.parametrize("damage", ["none", "truncated", "one-bit", "grown", "bad-header", "empty", "fifo"])
def test_kuberl_runs_frame_check_agrees_with_the_trainers_decode(tmp_path, damage):
    """`kuberl run` names the checkpoint it expects the trainer to resume from by contract.checkpoint_flaw (no
    torch there): its verdict on a file's frame is the trainer's, word for word."""
    path = pathlib.Path(checkpoint.save(str(tmp_path), 1, ppo_like_state(1), keep=3))
    data = path.read_bytes()
    if damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        path.write_bytes({"none": data, "truncated": data[:-100], "grown": data + b"\0", "bad-header": b"PK" + data,
                          "empty": b"", "one-bit": data}[damage])
        if damage == "one-bit":
            flip_one_bit(path)
    flaw = contract.checkpoint_flaw(str(path))
    try:
        checkpoint.read(str(path))
    except checkpoint.NotAFile:
        assert flaw == "not a regular file"
    except checkpoint.CorruptCheckpoint as e:
        assert flaw == str(e) and flaw in (contract.CHECKSUM_MISMATCH, contract.NOT_A_CHECKPOINT)
    else:
        assert damage == "none" and flaw is None
