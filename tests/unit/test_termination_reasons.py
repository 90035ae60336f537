"""Reasons only from what a container states: the trainer's marked line, else
the container's state, with the END of the log as the message."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from kuberl.core import contract, names, safetext
from kuberl.core import lifecycle as lc

from tests.support.jobs import make_job


def terminated_pod(exit_code: int, message: str, reason: str = "Error") -> dict:
    return {"metadata": {"name": "job-1", "labels": {"kuberl.dev/rank": "1", "kuberl.dev/restart": "0"}},
            "status": {"phase": "Failed" if exit_code else "Succeeded", "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}}}]}}


def test_the_trainers_marked_line_states_its_reason_and_reads_without_the_marker():
    line = contract.termination_line("ConfigError", "spec.env.id: no such env\nsecond line")
    assert line.startswith(contract.TERMINATION_MARKER) and "\n" not in line
    seen = lc.observed_pod(terminated_pod(78, line + "\n"))
    assert seen.reason == "ConfigError"
    assert seen.message == "ConfigError: spec.env.id: no such env second line"


@pytest.mark.parametrize("message", ["é" * 5000, "\U0001f600" * 2000, "quoted \x1b[2J\r\u202e" * 500],
                         ids=["two-byte", "four-byte", "control-characters"])
def test_a_long_stated_line_keeps_its_reason_through_the_kubelets_last_4096_bytes(message):
    # the kubelet keeps a termination message's last 4096 bytes: 4000 characters of 'é' (8 KB) lost the marker,
    # and the ConfigError was read as a crash (retried to the backoffLimit)
    written = (contract.termination_line("ConfigError", message) + "\n").encode()
    kept = written[-4096:].decode(errors="replace")
    seen = lc.observed_pod(terminated_pod(1, kept))
    assert seen.reason == "ConfigError" and not safetext.has_unsafe(contract.stated_line("ConfigError", message))


def test_the_trainer_writes_its_termination_log_with_the_contracts_line(tmp_path, monkeypatch, capsys):
    from kuberl_trainer import termination

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    message = "spec.env.id: no such env\n" + "x" * 5000
    termination.write_reason("ConfigError", message)
    written = (tmp_path / names.TERMINATION_LOG.lstrip("/")).read_text()
    assert written == contract.termination_line("ConfigError", message) + "\n"
    assert len(written) < 4096 and capsys.readouterr().err == contract.stated_line("ConfigError", message) + "\n"
    assert termination.stated() == "ConfigError"  # what the pod's launcher reads back


def test_the_launcher_reads_a_stated_reason_only_from_a_file_a_rank_wrote(tmp_path, monkeypatch):
    import os

    from kuberl_trainer import termination

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    log = tmp_path / names.TERMINATION_LOG.lstrip("/")
    assert termination.stated() is None  # none written
    log.parent.mkdir(parents=True)
    log.write_text("Stopped: a log tail, not the contract's line\n")
    assert termination.stated() is None
    log.unlink()
    os.mkfifo(log)
    assert termination.stated() is None  # a FIFO nobody writes would block the launcher: not opened


@pytest.mark.parametrize("log_tail", [
    "ConfigError: looks like the contract but is a log line",
    "INFO: starting epoch 3",
    "/usr/local/bin/python3.11: can't open file '/app/x.py'",
    "Succeeded: printed by a user's script",
    contract.TERMINATION_MARKER + "NotOneOfOurs: whatever",
])
def test_a_log_tail_states_no_reason_whatever_its_first_word(log_tail):
    assert lc.termination_reason(log_tail) is None
    seen = lc.observed_pod(terminated_pod(1, log_tail))
    assert seen.reason == "Error"


def test_without_a_stated_reason_the_containers_state_is_the_reason():
    assert lc.observed_pod(terminated_pod(137, "", reason="OOMKilled")).reason == "OOMKilled"
    assert lc.observed_pod(terminated_pod(0, "", reason="Completed")).reason == "Completed"
    no_reason = terminated_pod(3, "")
    del no_reason["status"]["containerStatuses"][0]["state"]["terminated"]["reason"]
    assert lc.observed_pod(no_reason).reason == "Error"


def test_the_message_is_the_end_of_the_log_where_the_exception_is():
    log = "\n".join([f"INFO step {i}: loss 0.{i:04d} and some more words to fill the line" for i in range(80)]
                    + ["Traceback (most recent call last):", '  File "/app/train.py", line 9, in <module>',
                       "RuntimeError: the actual cause"])
    seen = lc.observed_pod(terminated_pod(1, log))
    assert seen.message.endswith("RuntimeError: the actual cause")
    assert seen.message.startswith("…\n") and len(seen.message) <= lc.MESSAGE_LIMIT - 128
    one_long_line = "x" * 5000 + " RuntimeError: at the end"
    clipped = lc.observed_pod(terminated_pod(1, one_long_line)).message
    assert clipped.endswith("RuntimeError: at the end") and len(clipped) <= lc.MESSAGE_LIMIT - 128


def test_a_failed_external_script_is_a_counted_crash_not_a_configuration_error():
    """Old code took the log tail's first word: a script printing `ConfigError:` failed the job for good."""
    spec = make_job().env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).run_policy(restartBackoffSeconds=10).spec()
    log = "ConfigError: printed by the script\n" + "\n".join(f"line {i}" for i in range(40)) + "\nValueError: boom"
    up = lc.decide(spec, {"generation": 0}, [], None, 0.0).status
    running = [replace(lc.observed_pod(terminated_pod(0, "")), name=f"job-{r}", rank=r, phase="Running", exit_code=None,
                       reason=None, ready=True, start_time=0.0) for r in range(2)]
    up = lc.decide(spec, up, running, None, 1.0).status
    crashed = [running[0], lc.observed_pod(terminated_pod(1, log))]
    decision = lc.decide(spec, up, crashed, None, 2.0)
    assert decision.phase != lc.FAILED
    assert decision.status["restartHistory"][-1]["reason"] == "Error"
    assert "ValueError: boom" in decision.status["restartHistory"][-1]["message"]


def test_a_clean_end_is_said_once_per_pod_and_every_ranks_failure_by_each(tmp_path, monkeypatch, capsys):
    """A 4-GPU pod stopped for a suspend said "Stopped: ..." four times in its log."""
    from kuberl_trainer import termination

    assert termination.said_in_the_log(contract.REASON_STOPPED, 0) and termination.said_in_the_log(contract.REASON_SUCCEEDED, 0)
    assert not termination.said_in_the_log(contract.REASON_STOPPED, 3) and not termination.said_in_the_log(contract.REASON_SUCCEEDED, 1)
    assert all(termination.said_in_the_log(reason, 3) for reason in contract.TRAINER_REASONS - {
        contract.REASON_STOPPED, contract.REASON_SUCCEEDED})
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "1")
    termination.write_reason(contract.REASON_STOPPED, "stopped at timesteps 8")
    assert capsys.readouterr().err == "" and termination.stated() == contract.REASON_STOPPED  # the file still says it
    termination.write_reason(contract.REASON_CRASHED, "RuntimeError: boom")
    assert capsys.readouterr().err == contract.stated_line(contract.REASON_CRASHED, "RuntimeError: boom") + "\n"


def test_a_clean_end_of_another_local_rank_leaves_local_rank_0s_words_in_the_termination_log(tmp_path, monkeypatch):
    """Every rank of a pod wrote its ending to the one termination log, the last writer winning: local rank 1's
    "resumable from rank 0's checkpoint" could replace rank 0's line naming the checkpoint (a loaded CI run saw it)."""
    from kuberl_trainer import termination

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    path = tmp_path / termination.names.TERMINATION_LOG.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("")  # as the kubelet makes it: there, empty, before any rank ends
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "1")  # a clean end said first by another local rank is written
    termination.write_reason(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from rank 0's checkpoint")
    assert termination.stated() == contract.REASON_STOPPED
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "0")
    termination.write_reason(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from /checkpoints/j")
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "1")
    termination.write_reason(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from rank 0's checkpoint")
    assert "/checkpoints/j" in path.read_text()
    termination.write_reason(contract.REASON_CRASHED, "RuntimeError: boom")  # a failure is the pod's, whoever says it
    assert termination.stated() == contract.REASON_CRASHED


def test_local_rank_0s_words_stay_when_another_local_rank_read_the_log_before_they_were_written(tmp_path, monkeypatch):
    """The check and the write of a clean end are one step: local rank 1 found the log empty, rank 0 then wrote its
    line naming the checkpoint, and rank 1's write replaced it (CI's distributed tier saw 'resumable from rank 0's
    checkpoint' in a pod's termination log). Here the test holds the log's lock as rank 0 would while writing."""
    import fcntl
    import threading

    from kuberl_trainer import termination

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "1")
    path = tmp_path / termination.names.TERMINATION_LOG.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text("")
    rank_1 = threading.Thread(target=termination.write_reason, daemon=True,
                              args=(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from rank 0's checkpoint"))
    with open(path, "r+") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        rank_1.start()
        rank_1.join(timeout=0.5)
        assert rank_1.is_alive(), "local rank 1 wrote while rank 0 held the log"
        log.write(contract.termination_line(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from /checkpoints/j") + "\n")
        log.flush()
    rank_1.join(timeout=10)
    assert not rank_1.is_alive()
    assert path.read_text().count("Stopped") == 1 and "/checkpoints/j" in path.read_text(), path.read_text()


def test_a_termination_log_that_is_not_a_file_is_left_alone(tmp_path, monkeypatch):
    """A FIFO where the log should be (nothing a rank wrote) would block the read of a clean end: it is left unread."""
    from kuberl_trainer import termination

    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    monkeypatch.setenv(contract.ENV_LOCAL_RANK, "1")
    path = tmp_path / termination.names.TERMINATION_LOG.lstrip("/")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    import threading

    rank_1 = threading.Thread(target=termination.write_reason, daemon=True,
                              args=(contract.REASON_STOPPED, "stopped at timesteps 8; resumable from rank 0's checkpoint"))
    rank_1.start()
    rank_1.join(timeout=10)
    assert not rank_1.is_alive(), "the write blocked on the FIFO"
    assert termination.stated() is None


def test_the_launcher_drops_torchs_per_rank_signal_warnings_and_keeps_its_others(monkeypatch):
    import logging

    from kuberl_trainer import launch

    seen: list[str] = []

    class Recorder(logging.Handler):  # on the loggers themselves: torch's loggers need not propagate
        def emit(self, record):
            seen.append(record.getMessage())

    for name in launch.SIGNAL_RELAY_LOGS:
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "filters", [])  # restored after the test
        monkeypatch.setattr(logger, "handlers", [Recorder()])
    launch.quiet_signal_relay()
    agent, processes = (logging.getLogger(name) for name in launch.SIGNAL_RELAY_LOGS)
    agent.warning(launch.SIGNAL_RELAY_LOGS[agent.name], "SIGTERM")
    processes.warning(launch.SIGNAL_RELAY_LOGS[processes.name], 1234, "SIGTERM")
    processes.warning("Unable to shutdown process %s via %s, forcefully exiting via %s", 1234, "SIGTERM", "SIGKILL")
    assert seen == ["Unable to shutdown process 1234 via SIGTERM, forcefully exiting via SIGKILL"]
    # the torch installed here still logs these very templates from these modules (else the filter is idle)
    import importlib
    import inspect

    for module, template in launch.SIGNAL_RELAY_LOGS.items():
        assert f'"{template}"' in inspect.getsource(importlib.import_module(module)), (module, template)


def test_a_failed_checkpoint_volume_reaches_status_and_events_with_the_path_errno_and_last_good_checkpoint():
    """The operator keeps a pod message's last 384 characters: the first wording (507 characters for a 50-character job
    name) lost the path that failed and the errno from the Ready condition, the restart history and the Event."""
    import errno
    import os

    from kuberl_trainer import checkpoint

    directory = f"/checkpoints/{'j' * 50}-0d3f1b2c-1234-4abc-8def-0123456789ab"
    failed = checkpoint.CheckpointVolumeUnavailable("writing", f"{directory}/ckpt-0000000040.pt",
                                                    OSError(errno.EIO, os.strerror(errno.EIO)), f"{directory}/ckpt-0000000020.pt")
    seen = lc.observed_pod(terminated_pod(1, contract.termination_line(failed.reason, str(failed)) + "\n"))
    said = lc._pod_says(seen)
    assert seen.reason == "CheckpointVolumeUnavailable" and "…" not in said, said
    assert f"writing {directory}/ckpt-0000000040.pt failed with EIO" in said and "ckpt-0000000020.pt" in said, said


def test_a_full_checkpoint_volume_reaches_status_and_events_naming_the_claim_its_size_and_what_a_checkpoint_needs(monkeypatch):
    """The operator keeps a pod message's last 384 characters: a full volume's message (its claim and size, its
    bytes, then the directory again as the OSError's filename) lost its head, the claim and spec.checkpoint.size,
    in every restart (`kuberl run` showed "…-<uid>; 65536 bytes in all, 65536 free) is full: …": bench/chaos.py,
    tmpfs-full)."""
    import os

    from kuberl_trainer import checkpoint

    job = "j" * 50
    directory = f"/checkpoints/{job}-0d3f1b2c-1234-4abc-8def-0123456789ab"
    gib = os.statvfs_result((4096, 4096, 262144, 10, 10, 65536, 60000, 60000, 0, 255))  # a 1Gi claim, 40 KiB free
    monkeypatch.setattr(os, "statvfs", lambda _path: gib)
    volume = f"claim {names.pvc_name(job)} of spec.checkpoint.size 1Gi at {names.CHECKPOINT_MOUNT_DIR}"  # TrainingSession.volume
    full = checkpoint.CheckpointVolumeFull(directory, 134562, volume, keep=3)
    seen = lc.observed_pod(terminated_pod(1, contract.termination_line(contract.REASON_CHECKPOINT_VOLUME_FULL, str(full)) + "\n"))
    said = lc._pod_says(seen)
    assert seen.reason == "CheckpointVolumeFull" and "…" not in said, said
    assert f"claim {names.pvc_name(job)} of spec.checkpoint.size 1Gi" in said and "1073741824 bytes in all, 40960 free" in said, said
    assert "one checkpoint needs 134562 bytes" in said and "538248" in said and "lower spec.checkpoint.keep" in said, said


@pytest.mark.parametrize("keep", [3, 0], ids=["checkpoint", "final-model"])
def test_a_full_disk_under_kuberl_run_keeps_its_directory_and_the_bytes_to_free_in_a_restarts_reason(monkeypatch, tmp_path, keep):
    """Under `kuberl run` a full disk names the run's directory and the bytes to free there (no claim exists); with a
    50-character job name that message must still keep its head, the directory, in the 384 characters a restart keeps."""
    import os

    from kuberl_trainer import checkpoint

    job = "j" * 50
    directory = f"/checkpoints/{job}-0d3f1b2c-1234-4abc-8def-0123456789ab"
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path))
    disk = os.statvfs_result((4096, 4096, 488281250, 2441, 2441, 65536, 60000, 60000, 0, 255))  # 2 TB, 9998336 bytes free
    monkeypatch.setattr(os, "statvfs", lambda _path: disk)
    full = checkpoint.CheckpointVolumeFull(directory, 123456789, f"{directory}/", keep=keep)  # an Atari CNN's is 20 MB
    seen = lc.observed_pod(terminated_pod(1, contract.termination_line(contract.REASON_CHECKPOINT_VOLUME_FULL, str(full)) + "\n"))
    said = lc._pod_says(seen)
    assert "…" not in said and f"the disk holding {directory}/ is full (9998336 bytes free)" in said, said
    if keep:  # nothing on disk here: 4 checkpoints, none held
        assert "4 checkpoints of 123456789 bytes (keep=3, one more being written) need 493827156; those there hold 0" in said
        assert said.endswith("Free 483828820 bytes there (or lower spec.checkpoint.keep), then rerun"), said
    else:
        assert said.endswith("the final model needs 123456789 bytes. Free 113458453 bytes there, then rerun"), said
    assert "claim" not in said


def test_the_launcher_passes_a_signal_on_to_ranks_torch_never_recorded_and_kills_one_past_the_timeout(tmp_path):
    """A signal between torch's first rank start and its record of them all reached no rank (torch passes it to those
    it recorded): kuberl's launcher passes it to every child left and waits, as torch does, then SIGKILLs one that
    outlives TORCH_ELASTIC_SHUTDOWN_TIMEOUT. Here two children stand in for such ranks: one stops on SIGTERM and
    says so, one ignores it."""
    import subprocess
    import sys

    script = f"""
import signal, subprocess, sys, time
from kuberl_trainer import launch
stops = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
    "def stop(*_):\\n open({str(tmp_path / 'stopped')!r}, 'w').write('SIGTERM'); sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, stop); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
deaf = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
assert stops.stdout.readline() == deaf.stdout.readline() == b"ready\\n"
launch.stop_ranks_torch_never_recorded(signal.SIGTERM)
left = launch.children_of_this_process()
print(left)
for child in (stops, deaf):  # any left are this test's to end, not an orphan of it
    child.kill()
"""
    env = {**os.environ, contract.ENV_TORCH_SHUTDOWN_TIMEOUT: "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]"]  # both reaped: the deaf one after the timeout, not its 600 s
    assert (tmp_path / "stopped").read_text() == "SIGTERM"
