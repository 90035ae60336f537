"""A pod of several processes (procsPerWorker > 1) runs kuberl_trainer.launch, torch's launcher:
what it does when the kubelet sends the pod SIGTERM (a node drained, a job suspended)."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch
from kuberl.core import contract
from kuberl.core.render import render_pod
from kuberl.local.containerenv import container_env
from kuberl_trainer import checkpoint
from kuberl_trainer.distributed import placement

from tests.distributed.support import Ranks, make_job
from tests.support.jobs import make_job as job_builder
from tests.support.ports import free_ports


def launcher(port: int, procs: int) -> list[str]:
    """The command render.trainer_command gives such a pod, with this machine's rendezvous."""
    return ["-m", "kuberl_trainer.launch", "--nnodes=1", "--node-rank=0", f"--nproc-per-node={procs}",
            "--master-addr=127.0.0.1", f"--master-port={port}", "--rdzv-backend=static", "--max-restarts=0",
            "-m", "kuberl_trainer"]



def stopped_with_a_checkpoint(job, pod, code: int) -> str:
    """The pod's log, after checking it stopped cleanly (exit 0) with a checkpoint saved."""
    log = pod.log(0)
    assert job.termination_log(0).startswith("Stopped: stopped at timesteps"), (job.termination_log(0), log[-3000:])
    assert checkpoint.load_newest(str(job.checkpoint_dir)) is not None, log[-3000:]
    assert code == 0, log[-3000:]
    return log

def test_a_pod_of_two_ranks_stopped_by_sigterm_checkpoints_and_exits_0_as_a_one_process_pod(tmp_path):
    """torchrun re-raised the SIGTERM it passed on as a SignalException: a traceback and exit 1,
    which the operator counts against backoffLimit, where a one-process pod exits 0 with
    "Stopped". The ranks get the pod's grace period (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), save,
    state "Stopped", and the launcher exits 0."""
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)})
    pod = Ranks(job, extra_env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}, program=launcher(free_ports(1), 2))
    try:
        pod.wait_for_updates(3, timeout=90)
        pod.signal(0, signal.SIGTERM)
        started = time.monotonic()
        [code] = pod.wait(timeout=90)
    finally:
        pod.kill()
    log = pod.log(0)
    assert code == 0, log[-3000:]
    assert time.monotonic() - started < 60
    assert job.termination_log(0).startswith("Stopped: stopped at timesteps"), job.termination_log(0)
    assert list(job.checkpoint_dir.glob("ckpt-*.pt")), "the stop's checkpoint"
    assert "SignalException" not in log and "Traceback" not in log, log[-3000:]
    assert "kuberl launcher: SIGTERM passed on to the ranks; they have exited" in log
    # said once for the pod: no stated line per rank, no torch warning per rank it signalled
    assert [line for line in log.splitlines() if line.startswith("Stopped: ")] == [job.termination_log(0).strip()]
    assert "death signal" not in log and "closing signal" not in log, log[-3000:]


def test_a_pod_whose_ranks_fail_says_so_in_one_line_after_their_own_errors(tmp_path):
    """torch's launcher re-raised the ranks' failure with its own traceback and a 40-line table;
    each rank has already printed its error (here: its stated ConfigError)."""
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)},
                   env={"id": "NoSuchEnv-v0", "numEnvs": 2})
    pod = Ranks(job, program=launcher(free_ports(1), 2))
    [code] = pod.wait(timeout=90)
    log = pod.log(0)
    assert code == 1, log[-3000:]  # as torch's launcher exits: the ranks' stated reason is what the operator reads
    stated = [line for line in log.splitlines() if line.startswith("ConfigError: spec.env.id: 'NoSuchEnv-v0'")]
    assert len(stated) == 2 and all(line.count("ConfigError") == 1 for line in stated), log[-3000:]  # whole lines
    assert "kuberl launcher: 2 of 2 rank(s) failed; first rank " in log and "exit code 78" in log
    assert "Traceback" not in log and "Root Cause" not in log, log[-3000:]
    assert job.termination_log(0).startswith("ConfigError: spec.env.id")


def test_a_rank_killed_by_a_signal_is_named_by_the_signal(tmp_path):
    """torch reports a rank killed by a signal (the OOM killer's SIGKILL) as exit code -9."""
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)})
    pod = Ranks(job, program=[*launcher(free_ports(1), 2)[:-2], str(script)])
    [code] = pod.wait(timeout=60)
    log = pod.log(0)
    assert code == 1 and "kuberl launcher: 2 of 2 rank(s) failed; first rank " in log, log[-3000:]
    assert "killed by SIGKILL (the kernel's OOM killer sends it)" in log and "Traceback" not in log, log[-3000:]


def test_how_a_rank_ended_reads_as_a_person_would_say_it():
    from kuberl_trainer.launch import how_it_ended

    assert how_it_ended(78) == "exit code 78"
    assert how_it_ended(-9) == "killed by SIGKILL (the kernel's OOM killer sends it)"
    assert how_it_ended(-11) == "killed by SIGSEGV"
    assert how_it_ended(-200) == "killed by signal 200"


def test_a_shutdown_timeout_torchs_launcher_cannot_read_is_a_configuration_error_naming_it(tmp_path):
    """A spec.template may set TORCH_ELASTIC_SHUTDOWN_TIMEOUT (a tuning name); torch's launcher reads it
    with int() and failed every start with a ValueError traceback, a crash each restart met again."""
    from kuberl_trainer.launch import shutdown_timeout_problem

    assert shutdown_timeout_problem(None) is None and shutdown_timeout_problem("120") is None
    assert shutdown_timeout_problem("999999999999") is None  # 12 digits: any grace period a spec can give
    for hostile in ("abc", "-5", "1e3", "", "../x", "9" * 10_000):
        assert shutdown_timeout_problem(hostile).startswith(
            "spec.template: environment variable TORCH_ELASTIC_SHUTDOWN_TIMEOUT="), hostile
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)})
    pod = Ranks(job, extra_env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "abc"}, program=launcher(free_ports(1), 2))
    [code] = pod.wait(timeout=60)
    assert code == 78 and "Traceback" not in pod.log(0), pod.log(0)[-3000:]
    assert job.termination_log(0).startswith("ConfigError: spec.template: environment variable "
                                             "TORCH_ELASTIC_SHUTDOWN_TIMEOUT='abc': expected whole seconds")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_pod_of_two_ranks_stopped_while_its_launcher_imports_checkpoints_at_the_first_update_and_exits_0(tmp_path, signum):
    """A pod of one process stopped in its first seconds stops at its first update, rank 0 saving
    (test_trainer_processes); a pod of several ranks stopped while its launcher imported torch (the
    first two seconds and more) died of the signal (SIGTERM), or of a KeyboardInterrupt's traceback
    (Ctrl-C), with no checkpoint. It now behaves as the one-process pod does."""
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)}, checkpoint={"everyUpdates": 1000})
    pod = Ranks(job, extra_env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}, program=launcher(free_ports(1), 2))
    try:
        # the launcher's first lines ran (python's own SIGINT handler is there from the start; SIGTERM's is kuberl's),
        # and torch's import takes seconds more
        catches(pod.procs[0].pid, signal.SIGTERM)
        pod.signal(0, signum)
        [code] = pod.wait(timeout=90)
    finally:
        pod.kill()
    log = stopped_with_a_checkpoint(job, pod, code)
    assert "kuberl launcher: told to stop while starting; the ranks stopped at their first update" in log


def test_a_pod_of_two_ranks_stopped_as_its_launcher_starts_them_checkpoints_at_the_first_update_and_exits_0(tmp_path):
    """torch's launcher passes a SIGTERM on to ranks it has just started, still in python's own start-up
    (30 to 100 ms before a rank's first line can catch it): they died of it, with no checkpoint. The
    launcher starts its ranks with SIGTERM and SIGINT blocked, and each rank unblocks them once it can
    catch them: the signal waits for it. Sent as soon as both ranks exist, it can also come before torch's
    launcher has recorded them (torch passes it to none of them then): kuberl's launcher passes it on itself."""
    job = make_job(tmp_path, world_size=1, procsPerWorker=2, metrics={"port": free_ports(2)}, checkpoint={"everyUpdates": 1000})
    pod = Ranks(job, extra_env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}, program=launcher(free_ports(1), 2))
    try:
        wait_for_children(pod.procs[0].pid, 2)
        pod.signal(0, signal.SIGTERM)
        [code] = pod.wait(timeout=90)
    finally:
        pod.kill()
    stopped_with_a_checkpoint(job, pod, code)


def wait_for_children(pid: int, count: int, timeout: float = 30.0) -> None:
    """Until process `pid` has `count` children that run kuberl's trainer (exec'd: torch's launcher returned
    from starting them), then at once: they are in python's start-up, which takes tens of milliseconds more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        commands = []
        for child in children:
            try:
                commands.append(pathlib.Path(f"/proc/{child}/cmdline").read_bytes())
            except FileNotFoundError:
                pass
        # a child forked and not yet exec'd still shows the launcher's own command line
        if sum(b"-m\x00kuberl_trainer\x00" in c and b"kuberl_trainer.launch" not in c for c in commands) >= count:
            return
        time.sleep(0.001)
    raise AssertionError(f"process {pid} started no {count} ranks in {timeout}s")


def catches(pid: int, signum: int, timeout: float = 10.0) -> None:
    """Wait until process `pid` has a handler for `signum` (SigCgt in /proc/PID/status, a hex mask)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if caught >> (signum - 1) & 1:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} installed no handler for signal {signum} in {timeout}s")


def test_the_stop_the_launcher_hands_its_ranks_is_the_contracts_name():
    """Both ends spell it before kuberl.core is imported, so neither can name the constant."""
    from kuberl.core import contract
    from kuberl_trainer import launch

    assert launch.STOP_REQUESTED == contract.ENV_STOP_REQUESTED
    main_source = pathlib.Path(launch.__file__).with_name("__main__.py").read_text()
    assert f'os.environ.get("{contract.ENV_STOP_REQUESTED}")' in main_source


def test_two_pods_of_four_gpu_processes_give_each_rank_its_own_global_rank_and_the_gpu_of_its_local_rank(tmp_path):
    """Two rendered pods of gpusPerWorker 4 (limits.cpu 16), each its launcher as rendered (kuberl_trainer.launch,
    torch's static rendezvous) starting 4 children: each child's RANK, LOCAL_RANK and LOCAL_WORLD_SIZE as torch's
    launcher really sets them, then distributed.placement for a pod that sees its 4 GPUs. No GPU here: the
    children only report their env (tests/unit/test_trainer_placement.py holds the same table for 1-8 GPUs)."""
    script = tmp_path / "report.py"
    script.write_text("import json, os, pathlib, sys\n"
                      "names = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'OMP_NUM_THREADS')\n"
                      "pathlib.Path(sys.argv[1], os.environ['RANK']).write_text(json.dumps({n: os.environ[n] for n in names}))\n")
    port = free_ports(1)
    job = job_builder("pong").env("ALE/Pong-v5").workers(2).replace(
        gpusPerWorker=4, resources={"limits": {"cpu": "16"}}, rendezvous={"port": port}).obj()
    pods = []
    for node in (0, 1):
        pod = render_pod(job, "team-rl", "0f0e0d0c-1111-2222-3333-444455556666", node)
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
        env = container_env(pod, container, "127.0.0.1", {}, lambda _name: "127.0.0.1", node_cpus=64)
        command = [contract.expand(word, env) for word in container["command"]]
        assert command[:3] == ["python", "-m", "kuberl_trainer.launch"] and command[-2:] == ["-m", "kuberl_trainer"]
        argv = [sys.executable, *command[1:-2], str(script), str(tmp_path)]
        pods.append(subprocess.Popen(argv, env={"PATH": os.environ["PATH"], **env}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
    try:
        for pod in pods:
            out, _ = pod.communicate(timeout=120)
            assert pod.returncode == 0, out[-3000:]
    finally:
        for pod in pods:
            pod.kill()
    seen = {int(p.name): json.loads(p.read_text()) for p in tmp_path.iterdir() if p.name.isdigit()}
    assert sorted(seen) == list(range(8))
    for rank, env in seen.items():
        where = placement("nccl", int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"]), 4, int(env["OMP_NUM_THREADS"]), range(64))
        assert (int(env["GROUP_RANK"]), int(env["LOCAL_RANK"]), env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (rank // 4, rank % 4, "8", "4")
        assert (where.device, where.threads) == (torch.device("cuda", rank % 4), 4)
