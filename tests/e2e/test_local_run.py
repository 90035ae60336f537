"""`kuberl run` as a user calls it: a subprocess, a job file, tiny budgets.

Every rank process is found through /proc by the pod root it was given
(KUBERL_FS_ROOT, inherited by anything it starts), so "nothing left behind"
is checked by PID, not trusted.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kuberl.local.sandbox import pod_roots_dir

from tests.distributed.test_checkpoint_volumes import needs_mounts
from tests.support.jobs import make_job
from tests.support.ports import free_port

KUBERL = [sys.executable, "-m", "kuberl.cli", "run"]
JOB = "e2e"


def write_job(tmp_path: Path, **spec_overrides) -> Path:
    spec = {
        "algorithm": "ppo",
        "ppo": {"numSteps": 16, "numMinibatches": 2, "updateEpochs": 2},
        "env": {"id": "CartPole-v1", "numEnvs": 4},
        "totalTimesteps": 4000,
        "workers": 2,
        "checkpoint": {"everyUpdates": 2, "keep": 3},
        "runPolicy": {"restartBackoffSeconds": 0.2, "backoffLimit": 2, "terminationGracePeriodSeconds": 10},
        "rendezvous": {"port": free_port()},
        "metrics": {"port": free_port()},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job(JOB).from_spec(spec).replace(**spec_overrides).obj()))
    return path


def start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    """In its own session, as a shell runs it: Ctrl-C is SIGINT to that group."""
    return subprocess.Popen([*KUBERL, str(tmp_path / "job.yaml"), "--dir", "runs", *extra], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"kuberl run did not end in {timeout}s:\n{out[-4000:]}")
    return proc.returncode, out


def output_until_resumed(tmp_path: Path) -> str:
    """Run the job again until its trainer says what it resumes from, then Ctrl-C it: what it printed."""
    rerun = start(tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(rerun.stdout.readline, "")), daemon=True)
    reader.start()
    wait_for(lambda: any("resuming from" in line for line in lines), 90, rerun, "the trainer's resume")
    os.killpg(rerun.pid, signal.SIGINT)
    rerun.wait(timeout=30)
    reader.join(10)
    return "".join(lines)


def rank_processes(tmp_path: Path) -> dict[str, list[int]]:
    """Live processes started for this test's pods, by pod name (their KUBERL_FS_ROOT: <pod roots>/<pod>/root)."""
    pods_dir = pod_roots_dir(os.path.realpath(tmp_path / "runs" / JOB)) + "/"
    found: dict[str, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        root = next((v[len(b"KUBERL_FS_ROOT="):].decode() for v in environ if v.startswith(b"KUBERL_FS_ROOT=")), "")
        if root.startswith(pods_dir):
            found.setdefault(root[len(pods_dir):].split("/")[0], []).append(int(entry))
    return found


def status(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "runs" / JOB / "status.json").read_text())


def checkpoint_dir(tmp_path: Path) -> Path:
    uid = (tmp_path / "runs" / JOB / "uid").read_text().strip()
    return tmp_path / "runs" / JOB / "checkpoints" / f"{JOB}-{uid}"


def wait_for(condition, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"kuberl run ended before {what}:\n{proc.communicate()[0][-4000:]}")
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {what} within {timeout}s")
        time.sleep(0.1)


def checkpoints(tmp_path: Path) -> list[Path]:
    return sorted(checkpoint_dir(tmp_path).glob("ckpt-*.pt")) if (tmp_path / "runs" / JOB / "uid").exists() else []


def progress(tmp_path: Path) -> list[dict]:
    path = checkpoint_dir(tmp_path) / "progress.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_two_rank_job_runs_to_success(tmp_path):
    write_job(tmp_path, success={"targetReturn": None})
    code, out = finish(start(tmp_path, "--plot"), timeout=120)
    assert code == 0, out
    last = out.strip().splitlines()[-1]
    assert "e2e succeeded" in out and "timesteps" in out and "final-model.pt" in out, out[-2000:]
    assert "[rank 0]" in out and "[rank 1]" in out
    done = status(tmp_path)
    assert done["phase"] == "Succeeded" and done["restarts"] == 0 and done["workers"]["succeeded"] >= 1
    assert (checkpoint_dir(tmp_path) / "final-model.pt").exists()
    assert (tmp_path / "runs" / JOB / "learning-curve.png").stat().st_size > 1000, last
    assert rank_processes(tmp_path) == {}
    # the model it wrote plays again, through the loader, from the run directory
    played = subprocess.run([sys.executable, "-m", "kuberl.cli", "eval", "runs/e2e", "--episodes", "2"], check=False, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert played.returncode == 0 and "CartPole-v1: mean return" in played.stdout and "final-model.pt" in played.stdout, played


def listeners(pids: set[int]) -> list[str]:
    """The local addresses `ss -ltn` shows these processes listening on."""
    if shutil.which("ss") is None:
        pytest.fail("ss (iproute2) is needed to see the run's listening sockets")
    table = subprocess.run(["ss", "-Hltnp"], check=True, capture_output=True, text=True).stdout
    return [line.split()[3] for line in table.splitlines() if pids & {int(p) for p in re.findall(r"pid=(\d+)", line)}]


def loopback(local: str) -> bool:
    host = local.rsplit(":", 1)[0].strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*": every address
        return False


@pytest.mark.parametrize("procs", [1, 2], ids=["one-process-pods", "torchrun-pods"])
def test_no_listener_of_a_local_run_is_on_a_wildcard_or_outside_address(tmp_path, procs):
    """Rank 0's rendezvous store listened on *:port (TCPStore binds every interface whatever host it is
    given), and so did torchrun's agent store in pods of several processes: anyone on the network could
    join or break the run. Now each pod's listeners (store, gloo, metrics) are on its own 127.x address,
    seen with `ss -ltn` while the run lasts."""
    path = write_job(tmp_path, success={"targetReturn": None}, procsPerWorker=procs)
    port = yaml.safe_load(path.read_text())["spec"]["rendezvous"]["port"]
    proc = start(tmp_path)
    seen: set[str] = set()
    while proc.poll() is None:
        pids = {pid for found in rank_processes(tmp_path).values() for pid in found}
        seen.update(listeners(pids) if pids else [])
        time.sleep(0.05)
    code, out = finish(proc, timeout=10)
    assert code == 0, out[-3000:]
    assert any(local.endswith(f":{port}") for local in seen), (port, seen)  # the store was seen listening
    assert [local for local in seen if not loopback(local)] == [], seen


def test_a_custom_torchruns_store_is_unreachable_with_a_private_network(tmp_path):
    """A command of the user's own that starts torchrun has torch's agent host the store on every address
    (the documented residual risk, shown first); `--private-network` runs the whole run in a network
    namespace of its own, where `ss` here sees none of its listeners at all."""
    port = free_port()
    command = ["python", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1", f"--master-port={port}",
               "--no-python", "python", "-c", "import time; time.sleep(4)"]
    job = make_job(JOB).from_spec({"trainer": "custom", "runPolicy": {"backoffLimit": 0}, "rendezvous": {"port": port},
                                   "template": {"spec": {"containers": [{"name": "trainer", "command": command}]}}}).obj()
    for private in (False, True):
        here = tmp_path / ("private" if private else "shared")
        here.mkdir()
        (here / "job.yaml").write_text(yaml.safe_dump(job))
        proc = start(here, *(["--private-network"] if private else []))
        seen: set[str] = set()
        ran = set()
        while proc.poll() is None:
            pids = {pid for found in rank_processes(here).values() for pid in found}
            ran |= pids
            seen.update(listeners(pids) if pids else [])
            time.sleep(0.05)
        code, out = finish(proc, timeout=10)
        assert code == 0 and ran and "e2e succeeded" in out, out[-3000:]
        if private:
            assert seen == set(), seen
        else:
            assert f"*:{port}" in seen or f"0.0.0.0:{port}" in seen, seen


def test_a_killed_rank_restarts_the_gang_from_its_checkpoint(tmp_path):
    budget = 10_000  # the kill comes at the second checkpoint (512 timesteps); after the restart the run trains to its end
    write_job(tmp_path, totalTimesteps=budget, success={"targetReturn": None})
    proc = start(tmp_path)
    wait_for(lambda: len(checkpoints(tmp_path)) >= 2 and len(rank_processes(tmp_path)) == 2, 90, proc, "checkpoint")
    victim = min(rank_processes(tmp_path)[f"{JOB}-1"])
    os.kill(victim, signal.SIGKILL)
    code, out = finish(proc, timeout=150)
    assert code == 0, out[-4000:]
    done = status(tmp_path)
    assert done["restarts"] == 1 and done["generation"] == 1, done
    assert [h["counted"] for h in done["restartHistory"]] == [True]
    resumed_at = int(re.search(r"resuming from \S+ \(timesteps (\d+)\)", out).group(1))
    rows = progress(tmp_path)
    # the generation's first row marks where it resumed (kuberl plot's dotted line); its training rows go on from there
    assert resumed_at > 0 and [r["timesteps"] for r in rows if r.get("resumed")] == [resumed_at], rows
    assert min(r["timesteps"] for r in rows if r["restart"] == 1 and not r.get("resumed")) > resumed_at, rows
    assert max(r["timesteps"] for r in rows) > budget - 1000  # the budget, in whole updates
    assert rank_processes(tmp_path) == {}


def test_a_configuration_error_fails_at_once_naming_the_field(tmp_path):
    write_job(tmp_path, env={"id": "nosuchpkg.envs:Env", "numEnvs": 2})
    started = time.time()
    code, out = finish(start(tmp_path), timeout=90)
    assert code == 1, out
    assert "ConfigError" in out.strip().splitlines()[-1] and "spec.env.id" in out.strip().splitlines()[-1], out[-2000:]
    done = status(tmp_path)
    assert done["phase"] == "Failed" and done["restarts"] == 0 and done["restartHistory"] == []
    assert time.time() - started < 60
    assert rank_processes(tmp_path) == {}


def test_a_rank_crashing_on_every_start_exhausts_the_backoff_and_leaves_nothing(tmp_path):
    # the kubelet's SIGKILL and the group kill must clean up after this script
    script = (Path(__file__).parent / "scripts" / "crash_on_every_start.py").read_text()
    write_job(tmp_path, template={"spec": {"containers": [{"name": "trainer", "command": ["python", "-c", script]}]}},
              runPolicy={"restartBackoffSeconds": 0.2, "backoffLimit": 2, "terminationGracePeriodSeconds": 1})
    code, out = finish(start(tmp_path), timeout=90)
    assert code == 1, out
    assert "BackoffLimitExceeded" in out.strip().splitlines()[-1], out[-2000:]
    done = status(tmp_path)
    assert done["phase"] == "Failed" and done["restarts"] == 2
    # two restarts, then the failure that spent the budget: recorded too, with its reason (issue 31)
    assert [h["counted"] for h in done["restartHistory"]] == [True, True, True]
    assert rank_processes(tmp_path) == {}


def test_ctrl_c_stops_every_rank_within_the_grace_period_and_the_run_resumes(tmp_path):
    from kuberl_trainer import checkpoint

    write_job(tmp_path, totalTimesteps=40000, success={"targetReturn": None})
    proc = start(tmp_path)
    wait_for(lambda: checkpoints(tmp_path) and len(rank_processes(tmp_path)) == 2, 90, proc, "checkpoint")
    interrupted = time.time()
    os.killpg(proc.pid, signal.SIGINT)
    code, out = finish(proc, timeout=30)
    assert code == 130, out[-3000:]
    assert time.time() - interrupted < 10 + 3
    assert rank_processes(tmp_path) == {}
    assert "run the same command again to resume" in out.strip().splitlines()[-1]
    assert "Suspended: job suspended" not in out, "no suspension line before the ranks have saved"
    assert "[rank 0] checkpoint " not in out, "checkpoint lines only with -v"
    _, state = checkpoint.load_newest(str(checkpoint_dir(tmp_path)))
    saved = state["counters"]["global_step"]
    assert 0 < saved < 40000
    assert status(tmp_path)["generation"] == 1  # the suspend's: the next start runs it, no pod has yet
    # a stopped run plays from its newest checkpoint
    played = subprocess.run([sys.executable, "-m", "kuberl.cli", "eval", "runs/e2e", "--episodes", "2"], check=False, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert played.returncode == 0 and "ckpt-" in played.stdout and f"{saved:,} timesteps" in played.stdout, played

    # a changed budget learns something else (its schedules run over it): only --resume continues the run
    code, out = finish(start(tmp_path, "--resume", "--set", "totalTimesteps=" + str(saved + 1500)), timeout=90)
    assert code == 0, out[-3000:]
    assert f"totalTimesteps 40000 -> {saved + 1500}" in out, out[-3000:]
    assert re.search(rf"resuming from \S+ \(timesteps {saved}\)", out), out[-3000:]
    rows = [r for r in progress(tmp_path) if r["restart"] == status(tmp_path)["generation"]]
    assert rows[0] == {**rows[0], "timesteps": saved, "resumed": True}, rows[0]  # kuberl plot's marker: where it resumed
    assert min(r["timesteps"] for r in rows[1:]) > saved
    # a local stop is a suspend: the rerun is generation 1, as a cluster's resume would be (it ran 2, skipping 1)
    assert status(tmp_path)["generation"] == 1 and {r["restart"] for r in progress(tmp_path)} == {0, 1}


def test_a_rerun_after_the_newest_checkpoint_was_truncated_names_the_one_the_trainer_resumes_from(tmp_path):
    """Chaos: the rerun's first line said "resuming e2e from ckpt-0000000640.pt" (the newest, truncated) while the
    trainer skipped that file and resumed from an older one."""
    write_job(tmp_path, workers=1, totalTimesteps=40000, success={"targetReturn": None})
    proc = start(tmp_path)
    wait_for(lambda: len(checkpoints(tmp_path)) >= 2, 90, proc, "two checkpoints")
    os.killpg(proc.pid, signal.SIGINT)
    code, out = finish(proc, timeout=30)
    assert code == 130, out[-3000:]
    *_, older, newest = checkpoints(tmp_path)
    os.truncate(newest, newest.stat().st_size - 100)  # a disk that filled, a copy cut short

    out = output_until_resumed(tmp_path)
    said = re.search(r"resuming e2e from (\S+) at [\d,]+ timesteps \(last run: stopped\); newer one is not whole \((\S+): "
                     r"checksum mismatch \(truncated or corrupted\)\): the trainer sets it aside", out)
    assert said and said.groups() == (older.name, newest.name), out[-3000:]
    assert re.search(rf"resuming from \S+/{older.name} \(timesteps \d+\)", out), out[-3000:]
    assert (checkpoint_dir(tmp_path) / "unreadable" / newest.name).exists()
    assert rank_processes(tmp_path) == {}


def test_two_runs_started_together_meet_on_ports_of_their_own(tmp_path):
    """Two `kuberl run`s started at once, the rendezvous port left to kuberl: each checked that the default port
    was free before either's rank 0 bound it, both took it, and the second's torchrun failed on it (EADDRINUSE)
    after its peer had started. A port a run takes is now reserved among kuberl runs here until that run ends."""
    command = ["python", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1",  # meets at PET_MASTER_PORT
               "--no-python", "python", "-c", "import time; time.sleep(3)"]
    job = make_job(JOB).from_spec({"trainer": "custom", "runPolicy": {"backoffLimit": 0},
                                   "template": {"spec": {"containers": [{"name": "trainer", "command": command}]}}}).obj()
    runs = []
    for side in ("left", "right"):
        here = tmp_path / side
        here.mkdir()
        (here / "job.yaml").write_text(yaml.safe_dump(job))
        runs.append(here)
    procs = [start(here) for here in runs]
    outs = [finish(proc, timeout=90) for proc in procs]
    for code, out in outs:
        assert code == 0 and "e2e succeeded" in out, out[-3000:]
    ports = [yaml.safe_load((here / "runs" / JOB / "job.yaml").read_text())["spec"].get("rendezvous", {}).get("port", 29500)
             for here in runs]
    assert ports[0] != ports[1], (ports, outs)


# Rank 0 of the test's job: waits until something else listens on its rendezvous port (the test, after the runner's
# own check found the port free), then starts torch's launcher, whose store fails to bind it (EADDRINUSE).
RANK0_AFTER_THE_PORT_IS_TAKEN = """
import os, socket, sys, time
port = int(os.environ["MASTER_PORT"])
while True:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            break
    time.sleep(0.05)
os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1",
                          "--no-python", "true"])
"""


def test_a_rendezvous_port_taken_after_the_run_checked_it_stops_the_run_with_exit_3(tmp_path):
    """Another process (a second user's run: port reservations are per user; anything else) binds the rendezvous
    port after `kuberl run` found it free and before rank 0's store does: rank 0 fails EADDRINUSE. The runner restarted
    the gang, which met the same taken port, until runPolicy.backoffLimit was spent (exit 1). A port still taken
    when the gang fails is what the start's check refuses: the run stops there, exit 3, naming the port."""
    port = free_port()
    write_job(tmp_path, trainer="custom", workers=1, rendezvous={"port": port},
              template={"spec": {"containers": [{"name": "trainer",
                                                  "command": ["python", "-c", RANK0_AFTER_THE_PORT_IS_TAKEN]}]}},
              runPolicy={"restartBackoffSeconds": 0.2, "backoffLimit": 2, "terminationGracePeriodSeconds": 1})
    proc = start(tmp_path)
    wait_for(lambda: rank_processes(tmp_path).get(f"{JOB}-0"), 30, proc, "rank 0's process")  # the runner's check is done
    with socket.create_server(("0.0.0.0", port)):  # every address, as torch's own store takes it
        code, out = finish(proc, timeout=60)
    assert code == 3, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert f"rendezvous port {port} is taken here" in last and "--set rendezvous.port=N" in last, out[-3000:]
    assert "generation 1" not in out and status(tmp_path)["restarts"] == 0, out[-3000:]
    assert rank_processes(tmp_path) == {}


@needs_mounts
def test_a_disk_that_fills_during_a_save_names_the_run_directory_and_the_bytes_to_free_and_keeps_the_newest_checkpoint(tmp_path):
    """The run directory's checkpoints on a disk too small for keep+1 checkpoints (a 320 KiB tmpfs in a private mount
    namespace: two fit). The user read "the checkpoint volume (claim e2e-checkpoints of spec.checkpoint.size 1Gi at
    /checkpoints; ...): ... Expand the claim": a claim and a mount path that do not exist on their machine, and no
    figure of what to free. Now the run directory's path where it lies here, and the bytes to free there; what was
    saved stays whole and the summary names the newest."""
    write_job(tmp_path, workers=1, totalTimesteps=40000, success={"targetReturn": None},
              runPolicy={"restartBackoffSeconds": 0.2, "backoffLimit": 0, "terminationGracePeriodSeconds": 10})
    volume, saved = tmp_path / "runs" / JOB / "checkpoints", tmp_path / "volume-copy"
    volume.mkdir(parents=True)
    saved.mkdir()
    script = (f'mount -t tmpfs -o size=320k tmpfs "{volume}" && "$@"; code=$?; cp -a "{volume}/." "{saved}/"; exit $code')
    proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script, "sh", *KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    code, out = finish(proc, timeout=120)
    assert code == 1 and "Traceback" not in out, out[-4000:]
    uid = (tmp_path / "runs" / JOB / "uid").read_text().strip()
    here = f"runs/{JOB}/checkpoints/{JOB}-{uid}/"
    said = re.search(rf"the disk holding {re.escape(here)} is full \((\d+) bytes free\): 4 checkpoints of (\d+) bytes "
                     r"\(keep=3, one more being written\) need (\d+); those there hold (\d+)\. Free (\d+) bytes there "
                     r"\(or lower spec\.checkpoint\.keep\), then rerun", out)
    assert said, out[-4000:]
    free, one, wanted, held, to_free = map(int, said.groups())
    assert wanted == 4 * one and held == 2 * one and to_free == wanted - held - free, said.group(0)
    last = out.strip().splitlines()[-1]
    assert f"the disk holding {here}" in last, last  # the summary shows the path where it lies here too
    kept = sorted(saved.glob(f"{JOB}-{uid}/ckpt-*.pt"))
    assert len(kept) == 2 and not list(saved.glob(f"{JOB}-{uid}/.tmp-*")), sorted(p.name for p in saved.rglob("*"))
    from kuberl_trainer import checkpoint
    for path in kept:
        checkpoint.read(str(path))  # whole: the failed save touched neither
    assert f"(newest checkpoint {kept[-1].name} at " in last, last


def test_a_rank_killed_when_its_grace_period_ends_is_said_then_and_its_lost_checkpoint_at_the_rerun(tmp_path):
    """Ctrl-C while rank 0's updates take 3 s each (bench/chaos_hook.py's sleep at each update boundary) and the grace
    period is 1 s: the runner SIGKILLs rank 0 inside an update, before its stop's checkpoint. It did so without a word,
    and the rerun resumed from an older checkpoint in silence. Now the kill is said when it happens, and the rerun's
    trainer says the stop's checkpoint was never written and what it resumes from."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "plan.json").write_text(json.dumps({"point": "update", "rank": 0, "sleep": 3.0}))
    repo = Path(__file__).resolve().parents[2]
    write_job(tmp_path, workers=1, totalTimesteps=40000, success={"targetReturn": None}, checkpoint={"everyUpdates": 1, "keep": 3},
              runPolicy={"restartBackoffSeconds": 0.2, "backoffLimit": 2, "terminationGracePeriodSeconds": 1},
              template={"spec": {"containers": [{"name": "trainer", "env": [{"name": "PYTHONPATH", "value": "/chaos"}],
                                                 "volumeMounts": [{"name": "chaos", "mountPath": "/chaos"}]}],
                                 "volumes": [{"name": "chaos", "configMap": {"name": "chaos-hook"}}]}})
    documents = [yaml.safe_load((tmp_path / "job.yaml").read_text()),
                 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chaos-hook"},
                  "data": {"sitecustomize.py": (repo / "bench" / "chaos_hook.py").read_text().replace("@STATE@", str(hook))}}]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all(documents))
    proc = start(tmp_path)
    wait_for(lambda: len(checkpoints(tmp_path)) >= 1, 90, proc, "a checkpoint")
    os.killpg(proc.pid, signal.SIGINT)
    code, out = finish(proc, timeout=30)
    assert code == 130, out[-3000:]
    assert (f"[kuberl] {JOB}-0 (worker 0) was still running 1s after its SIGTERM (spec.runPolicy.terminationGracePeriodSeconds):"
            " killed, so what it had not saved is lost, its stop's checkpoint among it") in out, out[-3000:]
    (hook / "plan.json").unlink()  # the rerun's updates take their own time

    said = output_until_resumed(tmp_path)
    assert "the last stop asked of rank 0 (" in said and "ended before its checkpoint was written" in said, said[-3000:]
    assert rank_processes(tmp_path) == {}


def test_a_run_without_plot_names_the_command_that_draws_its_learning_curve(tmp_path):
    """The README promises a last line saying where the learning curve is; without --plot (the README's third
    command) it named none, and nothing said how to draw one."""
    write_job(tmp_path, workers=1, totalTimesteps=300, success={"targetReturn": None})
    code, out = finish(start(tmp_path), timeout=90)
    assert code == 0, out
    last = out.strip().splitlines()[-1]
    assert last.endswith("; learning curve: kuberl plot runs/e2e"), last
    drawn = subprocess.run([sys.executable, "-m", "kuberl.cli", "plot", "runs/e2e"], check=False, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert drawn.returncode == 0 and (tmp_path / "runs" / JOB / "learning-curve.png").stat().st_size > 1000, drawn
