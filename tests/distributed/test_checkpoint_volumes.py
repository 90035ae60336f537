"""Checkpoints are never lost in silence, as a rank process lives it: unreadable
ones fail the run by name and stay on disk, a killed writer's temp files go at
start, and a volume that cannot heal (read-only) or is full says so. The
read-only and full volumes are real mounts, made in a private mount namespace
(`unshare`): a read-only bind mount answers EROFS, a small tmpfs ENOSPC."""

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
from kuberl.core import contract
from kuberl_trainer import checkpoint

from tests.unit.test_trainer_checkpoint import flip_one_bit, ppo_like_state

from .support import Ranks, make_job


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"], check=False, capture_output=True)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not _can_mount(), reason="no private mount namespace here (unshare -rm): "
                                  "the read-only and full volume tests need one")

# uid 1 in a user namespace of its own: it owns what this user owns, with no capability to pass a mode that denies the owner.
UNPRIVILEGED = ["unshare", "--user", "--map-user=1", "--map-group=1"]


def _can_drop_privileges() -> bool:
    return shutil.which("unshare") is not None and subprocess.run([*UNPRIVILEGED, "true"], check=False).returncode == 0


needs_user_namespaces = pytest.mark.skipif(not _can_drop_privileges(), reason="no user namespace here (unshare --user): "
                                           "the permission test needs one (root passes any mode)")


def mounted(command: str, directory) -> list[str]:
    """A prefix for Ranks: run the trainer after `command` mounted `directory` ("$1") in a
    private mount namespace."""
    return ["unshare", "-rm", "sh", "-c", f'{command} && shift && exec "$@"', "sh", str(directory)]


def test_unreadable_checkpoints_fail_the_run_by_name_keep_the_files_and_stale_temps_go(tmp_path):
    job = make_job(tmp_path, world_size=1)
    job.checkpoint_dir.mkdir(parents=True)
    for updates in (20, 40):
        checkpoint.save(str(job.checkpoint_dir), updates, ppo_like_state(updates), keep=3)
    files = sorted(job.checkpoint_dir.glob("ckpt-*.pt"))
    for path in files:
        flip_one_bit(path)
    before = {p.name: p.read_bytes() for p in files}
    stale = job.checkpoint_dir / ".tmp-k1ll3d.part"  # a rank killed between writing and renaming
    stale.write_bytes(b"\0" * 100_000)

    assert Ranks(job).wait(timeout=60) == [contract.EXIT_CONFIG_ERROR]
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_NO_USABLE_CHECKPOINT}: {job.checkpoint_dir} holds 2 checkpoint(s)"), reason
    assert all(name in reason for name in before)
    assert {p.name: p.read_bytes() for p in job.checkpoint_dir.glob("ckpt-*.pt")} == before
    assert not stale.exists()


@needs_mounts
def test_a_read_only_checkpoint_volume_fails_at_once_by_name(tmp_path):
    job = make_job(tmp_path, world_size=1, checkpoint={"everyUpdates": 1})
    job.checkpoint_dir.mkdir(parents=True)
    checkpoint.save(str(job.checkpoint_dir), 20, ppo_like_state(20), keep=3)
    started = time.monotonic()
    ranks = Ranks(job, prefix=mounted('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"', job.checkpoint_dir))
    assert ranks.wait(timeout=60) == [contract.EXIT_CONFIG_ERROR], ranks.log(0)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CHECKPOINT_READ_ONLY}: the checkpoint volume at {job.checkpoint_dir} "
                             "is read-only"), reason
    assert "timesteps" not in ranks.log(0)  # before any training: nothing a restart could add
    assert time.monotonic() - started < 30


def remounted_read_only_by_the_kernel(device, then: str = "") -> str:
    """A mount command for `mounted`: a tmpfs at `device`, bind-mounted at "$1" as the kubelet mounts a volume into a
    pod; then (in the background, once `then` holds) its filesystem remounted read-only under the read-write bind
    mount, as ext4's errors=remount-ro leaves a volume after an I/O error."""
    device = shlex.quote(str(device))
    remount = f"mount -o remount,ro {device}"
    if then:
        remount = f"{{ (until {then}; do sleep 0.05; done; {remount}) & }}"
    return f'mount -t tmpfs -o size=64m tmpfs {device} && mount --bind {device} "$1" && {remount}'


@needs_mounts
def test_a_volume_the_kernel_remounts_read_only_under_the_job_is_unavailable_naming_the_last_good_checkpoint(tmp_path):
    """It failed the job for good (CheckpointVolumeReadOnly), though a new pod re-stages the volume: now the rank
    ends with CheckpointVolumeUnavailable (retried, uncounted), naming what failed, the errno and the checkpoint a
    restart resumes from; every checkpoint written before stays."""
    job = make_job(tmp_path, world_size=1, checkpoint={"everyUpdates": 2})
    job.checkpoint_dir.mkdir(parents=True)
    device = tmp_path / "device"
    device.mkdir()
    mount = remounted_read_only_by_the_kernel(device, then='ls "$1"/ckpt-*.pt >/dev/null 2>&1')
    ranks = Ranks(job, prefix=mounted(mount, job.checkpoint_dir))
    assert ranks.wait(timeout=90) == [1], ranks.log(0)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CHECKPOINT_VOLUME_UNAVAILABLE}: writing {job.checkpoint_dir}/ckpt-"), reason
    assert "failed with EROFS (Read-only file system): the volume turned read-only under the job" in reason, reason
    last_good = re.search(r"last good checkpoint: (ckpt-\d{10}\.pt) \(same directory\)", reason)
    assert last_good is not None and reason.endswith("Restarted, not counted toward backoffLimit"), reason
    # the tmpfs went with the rank's mount namespace: its log is the witness that the named checkpoint was saved
    saved = os.path.relpath(job.checkpoint_dir / last_good.group(1), job.rank_root(0))
    assert f"checkpoint /{saved} (timesteps" in ranks.log(0), ranks.log(0)
    assert "Traceback" not in ranks.log(0), ranks.log(0)


@needs_mounts
def test_a_volume_whose_filesystem_is_read_only_under_a_writable_mount_at_start_is_unavailable_not_permanent(tmp_path):
    """A restart that lands on the node whose filesystem the kernel remounted: read-only at start, but not mounted so
    (the bind mount is read-write), so a later pod may find it healed; a read-only mount stays permanent (above)."""
    job = make_job(tmp_path, world_size=1)
    job.checkpoint_dir.mkdir(parents=True)
    device = tmp_path / "device"
    device.mkdir()
    ranks = Ranks(job, prefix=mounted(remounted_read_only_by_the_kernel(device), job.checkpoint_dir))
    assert ranks.wait(timeout=60) == [1], ranks.log(0)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CHECKPOINT_VOLUME_UNAVAILABLE}: creating a file in {job.checkpoint_dir} "
                             "failed with EROFS"), reason
    assert "its checkpoints are left as they are" in reason and "timesteps" not in ranks.log(0), reason


@needs_mounts
def test_a_full_checkpoint_volume_names_the_claim_its_size_and_what_one_checkpoint_needs(tmp_path):
    """In a pod, the claim and its size (a claim can be expanded); where the pod runs as a process of this machine (its
    KUBERL_FS_ROOT, as `kuberl run` and Ranks start it) there is no claim: the directory, and the bytes to free there."""
    job = make_job(tmp_path, world_size=1, checkpoint={"everyUpdates": 1, "size": "2Gi"})
    job.checkpoint_dir.mkdir(parents=True)
    ranks = Ranks(job, prefix=mounted('mount -t tmpfs -o size=8k tmpfs "$1"', job.checkpoint_dir))
    assert ranks.wait(timeout=60) == [1], ranks.log(0)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CHECKPOINT_VOLUME_FULL}: [Errno 28] the disk holding "
                             f"{job.config['paths']['checkpointDir']}/ is full ("), reason
    assert "bytes free): 4 checkpoints of " in reason and "Free " in reason and "Traceback" not in ranks.log(0)
    volume = "claim t-checkpoints of spec.checkpoint.size 2Gi at /checkpoints"  # what TrainingSession.volume names in a pod
    script = ("import sys; from kuberl_trainer import checkpoint; checkpoint.write_on_volume(sys.argv[1] + "
              f"'/ckpt-0000000001.pt', b'x' * 100_000, volume={volume!r}, keep=3)")
    in_a_pod = subprocess.run(
        [*mounted('mount -t tmpfs -o size=8k tmpfs "$1"', job.checkpoint_dir), sys.executable, "-c", script, str(job.checkpoint_dir)],
        check=False, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != contract.ENV_FS_ROOT})
    assert f"the checkpoint volume ({volume}; 8192 bytes in all, " in in_a_pod.stderr, in_a_pod.stderr[-2000:]
    assert "is full: one checkpoint needs 100000 bytes" in in_a_pod.stderr and "Expand the claim" in in_a_pod.stderr


@needs_mounts
def test_a_final_model_that_does_not_fit_names_the_volume_and_leaves_no_temp_file(tmp_path):
    script = (
        "import os, sys\n"
        "from kuberl_trainer import checkpoint\n"
        "try:\n"
        "    checkpoint.write_on_volume(sys.argv[1] + '/final-model.pt', b'x' * 100_000, volume='claim j-checkpoints')\n"
        "except checkpoint.CheckpointVolumeFull as e:\n"
        "    print(e, sorted(os.listdir(sys.argv[1])))\n"
    )
    volume = tmp_path / "volume"
    volume.mkdir()
    out = subprocess.run([*mounted('mount -t tmpfs -o size=16k tmpfs "$1"', volume), sys.executable, "-c", script, str(volume)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "claim j-checkpoints" in out and "the final model needs 100000 bytes" in out and out.rstrip().endswith("[]"), out


@needs_user_namespaces
@pytest.mark.parametrize("denied", ["directory", "newest"])
def test_a_checkpoint_volume_the_trainer_may_not_read_fails_at_once_by_name_and_keeps_the_files(tmp_path, denied):
    """As a claim owned by another user (no fsGroup, or a template's runAsUser) gives: EACCES, which no
    restart heals; it was a retried Crashed with a traceback, after 7.5 s of read retries for a file."""
    job = make_job(tmp_path, world_size=1)
    job.checkpoint_dir.mkdir(parents=True)
    for updates in (20, 40):
        checkpoint.save(str(job.checkpoint_dir), updates, ppo_like_state(updates), keep=3)
    before = {p.name: p.read_bytes() for p in job.checkpoint_dir.glob("ckpt-*.pt")}
    locked = job.checkpoint_dir if denied == "directory" else job.checkpoint_dir / checkpoint.checkpoint_name(40)
    locked.chmod(0)
    started = time.monotonic()
    try:
        ranks = Ranks(job, prefix=UNPRIVILEGED)
        assert ranks.wait(timeout=60) == [contract.EXIT_CONFIG_ERROR], ranks.log(0)
    finally:
        locked.chmod(0o755)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CHECKPOINT_FORBIDDEN}: the checkpoint volume at {job.checkpoint_dir} "
                             f"denies this trainer (uid 1, gid 1) access to {locked}"), reason
    assert "mode 0o000" in reason and "spec.template.spec.securityContext.fsGroup" in reason, reason
    assert "timesteps" not in ranks.log(0) and "Traceback" not in ranks.log(0), ranks.log(0)
    assert time.monotonic() - started < 30
    assert {p.name: p.read_bytes() for p in job.checkpoint_dir.glob("ckpt-*.pt")} == before


def test_a_file_written_over_the_checkpoint_directory_while_training_fails_the_run_naming_it(tmp_path):
    """A tenant's sidecar (or a hand) replaced the job's checkpoint directory by a file between two saves: the rank
    crashed with `FileExistsError: [Errno 17] File exists`, and so did every restart at its start, each counted
    toward backoffLimit. No restart heals it: the run fails at once (the configuration-error exit), naming what is in the way."""
    job = make_job(tmp_path, world_size=1, checkpoint={"everyUpdates": 2})
    ranks = Ranks(job)
    deadline = time.monotonic() + 60
    while not list(job.checkpoint_dir.glob("ckpt-*.pt")):
        assert time.monotonic() < deadline and ranks.procs[0].poll() is None, ranks.log(0)
        time.sleep(0.05)
    for taken_away in itertools.count():  # the trainer may make it again between the two steps: take that one too
        job.checkpoint_dir.rename(tmp_path / f"moved-{taken_away}")
        try:
            with open(job.checkpoint_dir, "x") as blocking:
                blocking.write("not a directory\n")
            break
        except (IsADirectoryError, FileExistsError):
            continue
    assert ranks.wait(timeout=60) == [contract.EXIT_CONFIG_ERROR], ranks.log(0)
    reason = job.termination_log(0)
    assert reason.startswith(f"{contract.REASON_CONFIG_ERROR}: the checkpoint directory {job.checkpoint_dir} cannot be a "
                             f"directory: {job.checkpoint_dir} is a regular file of 16 bytes. Move that away"), reason
    assert "Traceback" not in ranks.log(0), ranks.log(0)
    # a restart's start says the same, before anything is trained
    assert Ranks(job).wait(timeout=60) == [contract.EXIT_CONFIG_ERROR]
    assert job.termination_log(0) == reason
