"""Scripts written for Kubeflow's PyTorchJob or torchrun, run unchanged by
`kuberl run`: copied into a volume (tests/e2e/scripts), started through
spec.template with `trainer: custom`, from a caller's shell that carries its
own WORLD_SIZE and RANK (a container never sees them)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kuberl.local import process
from kuberl.local.runner import pod_address
from kuberl.local.sandbox import pod_roots_dir

from tests.support.jobs import make_job
from tests.support.ports import free_port, free_ports

SCRIPTS = Path(__file__).resolve().parent / "scripts"
KUBERL = [sys.executable, "-m", "kuberl.cli", "run"]
CALLER_ENV = {**os.environ, "WORLD_SIZE": "99", "RANK": "42", "MASTER_ADDR": "caller.example", "PET_NNODES": "7"}


def script_job(tmp_path: Path, name: str, command: list[str], workers: int, procs: int = 1,
               env: list[dict] | None = None, backoff_limit: int = 0, claims: dict[str, str] | None = None,
               grace_seconds: int = 5) -> subprocess.Popen:
    """`kuberl run` started on a bring-your-own-command job whose scripts live in a volume mounted at /app;
    `claims` mounts PersistentVolumeClaims (name: mountPath) in every worker."""
    trainer = {"name": "trainer", "command": command, "volumeMounts": [{"name": "scripts", "mountPath": "/app", "readOnly": True}]}
    volumes = [{"name": "scripts", "hostPath": {"path": str(SCRIPTS)}}]
    for claim, mount in (claims or {}).items():
        trainer["volumeMounts"].append({"name": claim, "mountPath": mount})
        volumes.append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
    if env:
        trainer["env"] = env
    job = (make_job(name)
           .custom_trainer({"spec": {"containers": [trainer], "volumes": volumes}})
           .workers(workers).with_spec(procsPerWorker=procs, rendezvous={"port": free_port()}).metrics_port(free_ports(procs))
           .run_policy(backoffLimit=backoff_limit, terminationGracePeriodSeconds=grace_seconds, restartBackoffSeconds=1).obj())
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return subprocess.Popen([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def run_script_job(tmp_path: Path, name: str, command: list[str], workers: int, procs: int = 1,
                   env: list[dict] | None = None, backoff_limit: int = 0, claims: dict[str, str] | None = None) -> tuple[int, str, Path]:
    """A bring-your-own-command job run to its end: exit code, output, run directory."""
    proc = script_job(tmp_path, name, command, workers, procs, env, backoff_limit, claims)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"kuberl run did not end:\n{proc.communicate()[0][-4000:]}")
    return proc.returncode, out, tmp_path / "runs" / name


def pod_log(run_dir: Path, rank: int) -> str:
    return (run_dir / "logs" / f"{run_dir.name}-{rank}-g0.log").read_text()


def test_pytorchjob_sendrecv_script_runs_unchanged_with_the_pods_identity(tmp_path):
    code, out, run_dir = run_script_job(tmp_path, "sendrecv", ["python", "/app/dist_sendrecv.py"], workers=3)
    assert code == 0, out[-4000:]
    worker0 = pod_address(str(run_dir), 0)
    for rank in range(3):
        assert f"env WORLD_SIZE=3 RANK={rank} MASTER_ADDR={worker0} " in pod_log(run_dir, rank), pod_log(run_dir, rank)
    assert "rank 0 received [10, 20]" in pod_log(run_dir, 0)
    assert "sendrecv succeeded: every worker exited 0" in out and "final-model.pt" not in out, out[-2000:]


def test_torchrun_c10d_with_no_endpoint_meets_at_worker_0(tmp_path):
    """Kubeflow's elastic echo: `torchrun --rdzv_backend=c10d script` and nothing
    else. Both agents log the launch config (LOGLEVEL=INFO): the endpoint is worker
    0's address and only worker 0 hosts the store; the workers' own process group
    meets at worker 0's address too, not at `localhost` as every pod here could."""
    code, out, run_dir = run_script_job(tmp_path, "echo", ["torchrun", "--rdzv_backend=c10d", "/app/echo.py"],
                                        workers=2, procs=2, env=[{"name": "LOGLEVEL", "value": "INFO"}])
    assert code == 0, out[-4000:]
    worker0 = pod_address(str(run_dir), 0)
    port = yaml.safe_load((tmp_path / "job.yaml").read_text())["spec"]["rendezvous"]["port"]
    for rank, is_host in ((0, "true"), (1, "false")):
        log = pod_log(run_dir, rank)
        assert re.search(rf"rdzv_endpoint\s*: {re.escape(worker0)}:{port}\n", log), log[-3000:]
        assert f"'is_host': '{is_host}'" in log
        assert re.search(r"rdzv_backend\s*: c10d", log)
    # two children of a pod share its stdout, and print writes a line and its newline apart: one line may run on
    # into its neighbour's ('...RUN_ID=default.echo.0echo RANK=0 ...'), as in kubectl logs
    echoed = re.findall(r"echo RANK=(\d) LOCAL_RANK=\d WORLD_SIZE=(\d+) GROUP_RANK=(\d) MASTER_ADDR=(\S+) MASTER_PORT=\d+ "
                        r"TORCHELASTIC_RUN_ID=(\w+\.\w+\.\d+)", out)
    assert sorted(int(r) for r, *_ in echoed) == [0, 1, 2, 3], out[-3000:]
    assert {(w, addr, run_id) for _, w, _, addr, run_id in echoed} == {("4", worker0, "default.echo.0")}
    assert out.count("sum of ranks 6") == 4


def test_a_script_that_spawns_its_own_processes_gets_pytorchjobs_world_size_and_rank(tmp_path):
    code, out, _ = run_script_job(tmp_path, "spawn", ["python", "/app/spawn.py", "2"], workers=2, procs=2)
    assert code == 0, out[-4000:]
    answered = re.findall(r"spawn rank (\d) of 4: 4 processes answered", out)
    assert sorted(int(r) for r in answered) == [0, 1, 2, 3], out[-3000:]


def test_a_path_that_leaves_the_pods_root_is_refused_before_anything_runs(tmp_path):
    escape = "/.." * 40 + str(tmp_path / "escaped")
    trainer = {"name": "trainer", "command": ["python", "-c", "print('ran')"], "terminationMessagePath": escape,
               "volumeMounts": [{"name": "x", "mountPath": escape + "-dir"}]}
    job = (make_job("escape").custom_trainer({"spec": {"containers": [trainer], "volumes": [{"name": "x", "emptyDir": {}}]}})
           .workers(2).with_spec(rendezvous={"port": free_port()}).obj())
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    done = subprocess.run([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 3, done.stdout + done.stderr  # could not run here
    # refused before a run directory is made, on stderr as an invalid job is (docs/troubleshooting.md)
    assert "terminationMessagePath" in done.stderr and ".mountPath" in done.stderr, done.stdout + done.stderr
    assert "ran" not in done.stdout.splitlines() and not (tmp_path / "runs").exists()
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "escaped-dir").exists()


def test_a_rendezvous_url_composed_in_the_manifests_env_resolves(tmp_path):
    """`value: tcp://$(MASTER_ADDR):$(MASTER_PORT)` holds worker 0's cluster name
    inside a URL: it resolves here as a pod's DNS resolves it in a cluster."""
    env = [{"name": "INIT_METHOD", "value": "tcp://$(MASTER_ADDR):$(MASTER_PORT)"}]
    code, out, _ = run_script_job(tmp_path, "initenv", ["python", "/app/init_from_env.py"], workers=2, env=env)
    assert code == 0, out[-4000:]
    assert out.count("hosts ['initenv-0', 'initenv-1'] pair 2") == 2, out[-3000:]


def test_a_shell_line_with_torchruns_flags_spelled_out_runs_the_volumes_script(tmp_path):
    """`command: [sh, -c, "torchrun --nnodes=$NNODES ... /app/echo.py"]`, as many PyTorchJob manifests say it."""
    line = ("torchrun --nnodes=$NNODES --nproc-per-node=$NPROC_PER_NODE --node-rank=$NODE_RANK"
            " --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT /app/echo.py")
    code, out, _ = run_script_job(tmp_path, "shline", ["sh", "-c", line], workers=2, procs=2)
    assert code == 0, out[-4000:]
    assert out.count("sum of ranks 6") == 4, out[-3000:]


def test_configmaps_beside_the_job_serve_its_env_and_its_script(tmp_path):
    """A file of ConfigMaps and the job, as `kubectl apply -f` takes it: the script
    itself comes from a ConfigMap volume, settings through envFrom and configMapKeyRef."""
    script = "import os\nprint('from configmap', os.environ['EPOCHS'], os.environ['LR'], os.environ['RANK'], flush=True)\n"
    trainer = {"name": "trainer", "command": ["python", "/scripts/train.py"],
               "envFrom": [{"configMapRef": {"name": "settings"}}],
               "env": [{"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "lr"}}}],
               "volumeMounts": [{"name": "scripts", "mountPath": "/scripts"}]}
    job = (make_job("cmjob").custom_trainer({"spec": {"containers": [trainer], "volumes": [{"name": "scripts", "configMap": {"name": "scripts"}}]}})
           .workers(2).with_spec(rendezvous={"port": free_port()}).run_policy(backoffLimit=0).obj())
    configmaps = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": d}
                  for n, d in (("settings", {"EPOCHS": "3"}), ("tuning", {"lr": "0.01"}), ("scripts", {"train.py": script}))]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump_all([*configmaps, job]))
    done = subprocess.run([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "from configmap 3 0.01 0" in done.stdout and "from configmap 3 0.01 1" in done.stdout, done.stdout[-3000:]


def test_a_pytorchjob_converted_by_kuberl_convert_runs_with_world_size_2(tmp_path):
    """The migration path end to end: a Master + Worker PyTorchJob whose command runs Kubeflow's
    dist_sendrecv pattern, through `kuberl convert` (its pytorchjob-port becoming the rendezvous port)
    and `kuberl run`."""
    pod = {"spec": {"containers": [{"name": "pytorch", "image": "registry.example.com/rl/ppo-pair:1",
                                    "command": ["python", "/app/dist_sendrecv.py"],
                                    "ports": [{"name": "pytorchjob-port", "containerPort": free_port()}],
                                    "volumeMounts": [{"name": "scripts", "mountPath": "/app", "readOnly": True}]}],
                    "volumes": [{"name": "scripts", "hostPath": {"path": str(SCRIPTS)}}]}}
    pytorchjob = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ppo-pair"},
                  "spec": {"nprocPerNode": "1", "pytorchReplicaSpecs": {
                      "Master": {"replicas": 1, "restartPolicy": "Never", "template": pod},
                      "Worker": {"replicas": 1, "restartPolicy": "Never", "template": pod}}}}
    (tmp_path / "pytorchjob.yaml").write_text(yaml.safe_dump(pytorchjob))
    converted = subprocess.run([sys.executable, "-m", "kuberl.cli", "convert", "pytorchjob.yaml"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=60, check=False)
    assert converted.returncode == 0, converted.stderr
    assert "spec.pytorchReplicaSpecs.Master.restartPolicy: a failed pod failed the PyTorchJob" in converted.stderr
    (tmp_path / "job.yaml").write_text(converted.stdout)
    done = subprocess.run([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    run_dir = tmp_path / "runs" / "ppo-pair"
    worker0 = pod_address(str(run_dir), 0)
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    for rank in range(2):
        assert f"env WORLD_SIZE=2 RANK={rank} MASTER_ADDR={worker0} MASTER_PORT={port}" in pod_log(run_dir, rank), pod_log(run_dir, rank)
    assert "rank 0 received [10]" in pod_log(run_dir, 0)
    assert "ppo-pair succeeded: every worker exited 0" in done.stdout, done.stdout[-2000:]
    # The PyTorchJob file itself runs too, as the RLTrainingJob kuberl convert printed (a fresh run directory).
    direct = subprocess.run([*KUBERL, "pytorchjob.yaml", "--dir", "direct"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                            text=True, timeout=240, check=False)
    assert direct.returncode == 0, direct.stdout[-4000:] + direct.stderr
    assert "run as an RLTrainingJob" in direct.stderr and "Master.restartPolicy" in direct.stderr
    assert "rank 0 received [10]" in pod_log(tmp_path / "direct" / "ppo-pair", 0)


def test_the_ddp_elastic_tutorial_runs_under_torchs_launcher_from_the_pet_names_alone(tmp_path):
    """`python -m torch.distributed.run --nproc_per_node=2 script` and no other flag, as PyTorchJob users
    write it: PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR/PORT place it; the script reads every name
    torch's agent sets (local_elastic_agent.py) with os.environ[...] and checks them against the group."""
    code, out, run_dir = run_script_job(tmp_path, "eddp", ["python", "-m", "torch.distributed.run", "--nproc_per_node=2",
                                                          "/app/elastic_ddp.py"], workers=2, procs=2)
    assert code == 0, out[-4000:]
    worker0 = pod_address(str(run_dir), 0)
    seen = re.findall(r"elastic_ddp rank (\d)/4 group (\d) local (\d)/2 restart 0 master (\S+):\d+ heard "
                      r"'from rank 0 of run default\.eddp\.0'", out)
    assert sorted((int(r), int(g), int(lr)) for r, g, lr, _ in seen) == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)], out[-3000:]
    assert {addr for *_, addr in seen} == {worker0}
    # each line is marked with the pod it came from: worker 1 holds ranks 2 and 3
    # (rank 3's line may run on from rank 2's: the pod's two children share its stdout, see below)
    assert re.search(r"^\[worker 1\] [^\n]*?elastic_ddp rank 3/4 ", out, re.MULTILINE) and "[rank 1]" not in out, out[-3000:]
    # the pod sets no OMP_NUM_THREADS for a custom command of 2 processes, so torchrun gives each child 1
    # (torch/distributed/run.py), as under PyTorchJob; the pod's CPU limit in each child oversubscribed it
    # (not greedy: the pod's two children share its stdout, and an unbuffered print writes its text and its
    # newline apart, so one child's line may run on into the other's, in a cluster's pod log as here; seen in CI)
    assert re.findall(r"elastic_ddp rank \d/4 .*? threads (\d+)", out) == ["1"] * 4, out[-3000:]


def test_a_worker_only_pytorchjob_whose_pod_env_says_pet_nproc_per_node_runs_that_many_processes(tmp_path):
    """Without a Master, PyTorchJob appends no PET_NPROC_PER_NODE of its own: torchrun read the pod's 2. The
    PyTorchJob file runs as it stands (kuberl converts it), its torchrun named as PyTorch's images place it.
    kuberl convert dropped the value, so 2 pods ran 2 ranks, not 4; and /opt/conda/bin/torchrun did not start."""
    pod = {"spec": {"containers": [{"name": "pytorch", "image": "registry.example.com/ml/elastic:1",
                                    "command": ["/opt/conda/bin/torchrun", "/app/elastic_ddp.py"],
                                    "env": [{"name": "PET_NPROC_PER_NODE", "value": "2"}],
                                    "ports": [{"name": "pytorchjob-port", "containerPort": free_port()}],
                                    "volumeMounts": [{"name": "scripts", "mountPath": "/app", "readOnly": True}]}],
                    "volumes": [{"name": "scripts", "hostPath": {"path": str(SCRIPTS)}}]}}
    pytorchjob = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pjnproc"},
                  "spec": {"runPolicy": {"backoffLimit": 0}, "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": pod}}}}
    (tmp_path / "pytorchjob.yaml").write_text(yaml.safe_dump(pytorchjob))
    done = subprocess.run([*KUBERL, "pytorchjob.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "PET_NPROC_PER_NODE=2 is now spec.procsPerWorker" in done.stderr, done.stderr
    ranks = re.findall(r"elastic_ddp rank (\d)/(\d) ", done.stdout)
    assert sorted(ranks) == [("0", "4"), ("1", "4"), ("2", "4"), ("3", "4")], done.stdout[-3000:]


def test_one_rank_raising_under_torchrun_fails_the_job_at_once_with_its_recorded_traceback(tmp_path):
    """`@record` writes the traceback to TORCHELASTIC_ERROR_FILE (in the pod's TMPDIR); torch's agent names it
    the root cause; the pod of the ranks left waiting in all_reduce is stopped, and the job's message is the
    failed rank's exception, not the peers' 'Connection closed'."""
    started = time.monotonic()
    code, out, run_dir = run_script_job(tmp_path, "failrec", ["torchrun", "/app/fail_one_rank.py"], workers=2, procs=2)
    assert code == 1, out[-4000:]
    # 21.6 s at load 12 (90 s left 4.2 times that); ranks left waiting in all_reduce hold the run to its 240 s timeout
    assert time.monotonic() - started < 120, out[-3000:]
    final = next(line for line in out.splitlines() if line.startswith("[kuberl] failrec failed"))
    assert "worker 1 (failrec-1)" in final, final
    assert "ValueError: rank 3 read a corrupt batch 17" in out[out.index(final):], out[-3000:]
    log = pod_log(run_dir, 1)
    # in the pod's own /tmp, under its root (sandbox.pod_roots_dir's <pod>/root, outside the run directory)
    assert re.search(r"error_file: \S*/failrec-1/root/tmp/torchelastic_\S+/error\.json", log), log[-3000:]
    assert re.findall(r"fail_one_rank rank (\d)/4 error file (\S+)", out) and "error file None" not in out


def test_a_script_resumes_from_its_checkpoint_after_a_gang_restart(tmp_path):
    """Rank 0 crashes once at step 4; kuberl restarts the gang (backoffLimit 1) and rank 0 reads the checkpoint
    it wrote to the job's claim at /checkpoints and broadcasts it (TORCHELASTIC_RESTART_COUNT is 0 again, as
    for a restarted PyTorchJob pod). torchrun's own --max-restarts is not tested here: in torch 2.13 its
    restarted gloo workers fail to connect in about half the runs on a plain machine too (pytorch#167288)."""
    code, out, _ = run_script_job(tmp_path, "resume", ["python", "/app/resume_steps.py", "/checkpoints"], workers=2,
                                  backoff_limit=1)
    assert code == 0, out[-4000:]
    assert "GangRestart: generation 0 -> 1" in out and out.count("restart_count 0 starts at step 4 weight 12.0") == 2, out[-3000:]
    assert out.count("done: step 8 weight 24.0") == 2


def stop_with_ctrl_c(proc: subprocess.Popen, ready: str, count: int) -> tuple[str, float]:
    """Ctrl-C once `ready` was printed `count` times (the ranks are in their loops): the output and how long
    kuberl took to end after it."""
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while "".join(out).count(ready) < count and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"kuberl run did not end after Ctrl-C:\n{''.join(out)[-4000:]}")
    reader.join(timeout=5)
    return "".join(out), time.monotonic() - sent


def test_ctrl_c_reaches_every_rank_and_one_that_ignores_sigterm_ends_with_its_grace_period(tmp_path):
    """Ranks that save on SIGTERM stop at once, and say so; under torchrun, ranks that ignore SIGTERM are
    killed when terminationGracePeriodSeconds (5 s) runs out, as a kubelet kills them, and nothing is left.
    The ranks that stop at once are given 60 s of grace: waiting for it would take 60 s, and `at once` may
    take a loaded machine's seconds (the bound was 4 s against a 5 s grace period)."""
    proc = script_job(tmp_path / "graceful", "sigstop", ["python", "/app/sigterm_steps.py"], workers=2, grace_seconds=60)
    out, took = stop_with_ctrl_c(proc, "training", 2)
    assert proc.returncode == 130, out[-3000:]
    assert re.findall(r"sigterm_steps rank (\d) got SIGTERM after \d+ steps", out) in (["0", "1"], ["1", "0"]), out[-3000:]
    assert took < 10, (took, out[-3000:])  # 0.8 s here (load ~10); 10 s is near the geometric middle of it and 60 s
    proc = script_job(tmp_path / "stubborn", "sigstop", ["torchrun", "/app/sigterm_steps.py"], workers=2, procs=2,
                      env=[{"name": "IGNORE_SIGTERM", "value": "1"}])
    out, took = stop_with_ctrl_c(proc, "training", 4)
    assert proc.returncode == 130, out[-3000:]
    assert "got SIGTERM" not in out and 4.5 < took < 15, (took, out[-3000:])
    assert not process.processes_under(pod_roots_dir(os.path.realpath(tmp_path / "stubborn" / "runs" / "sigstop")))


def test_a_chatty_script_is_logged_whole_and_a_last_line_without_newline_too(tmp_path):
    """A progress bar drawn with carriage returns, 20,000 logger lines on stderr, a 3 MB line, bytes that are
    not UTF-8 and a last line with no newline: every rank's log has them all, and the job succeeds."""
    code, out, run_dir = run_script_job(tmp_path, "chatty", ["python", "/app/chatty.py"], workers=2,
                                        env=[{"name": "CHATTY_LINES", "value": "20000"}])
    assert code == 0, out[-3000:]
    for rank in range(2):
        log = pod_log(run_dir, rank)
        assert log.count(f"INFO rank {rank} step ") == 20000
        assert "| 1999/2000 [loss=0.1999]" in log and "bad bytes \ufffd\ufffd\ufffd end" in log
        assert log.count("x" * 16384) >= 183
        assert log.endswith(f"chatty rank {rank} done, no newline\n"), log[-200:]
        assert f"[rank {rank}] chatty rank {rank} done, no newline" in out


def test_the_job_names_the_rank_that_failed_first_not_the_lowest_rank_that_echoed_it(tmp_path):
    """Rank 2 exits 3; ranks 0 and 1 exit 1 a few ms later, usually before kuberl's next look (0.2 s) at its
    pods, which then named worker 0's 'peer gone' as the job's failure."""
    code, out, _ = run_script_job(tmp_path, "firstfail", ["python", "/app/first_failure.py"], workers=3)
    assert code == 1, out[-3000:]
    final = next(line for line in out.splitlines() if line.startswith("[kuberl] firstfail failed"))
    assert "worker 2 (firstfail-2) exit code 3: first_failure rank 2: bad batch 17, exiting 3" in final, out[-3000:]


def test_a_manifests_gloo_socket_ifname_eth0_works_on_a_machine_without_that_interface(tmp_path):
    """PyTorchJob manifests often pin gloo to the pod's eth0; a laptop's card is wlp2s0 or en0, and every
    local pod failed 'Unable to find address for: eth0' (here: an eth<N> this machine lacks)."""
    here = {name for _, name in socket.if_nameindex()}
    absent = next(f"eth{i}" for i in range(100) if f"eth{i}" not in here)
    code, out, _ = run_script_job(tmp_path, "ifname", ["python", "/app/dist_sendrecv.py"], workers=2,
                                  env=[{"name": "GLOO_SOCKET_IFNAME", "value": absent}])
    assert code == 0, out[-3000:]
    assert "rank 0 received [10]" in out


def test_an_fsdp2_dcp_checkpoint_saved_to_a_shared_claim_by_one_job_loads_resharded_in_the_next(tmp_path):
    """A model sharded with fully_shard over init_device_mesh("cpu", ...), saved by torch.distributed.checkpoint
    from every rank into CHECKPOINT_DIR=/shared/ckpt, a claim both jobs mount (a ReadWriteMany PVC in a cluster:
    one volume for every job of the namespace); the next job, 3 ranks where the first had 2, loads it resharded.
    The claim was a directory per job here, and the env's /shared/ckpt was this machine's own /shared: the
    second job found nothing and saved afresh."""
    env = [{"name": "CHECKPOINT_DIR", "value": "/shared/ckpt"}]
    code, out, _ = run_script_job(tmp_path, "dcp-save", ["python", "/app/dcp_reshard.py"], workers=2, env=env,
                                  claims={"shared": "/shared"})
    assert code == 0, out[-3000:]
    assert len(re.findall(r"dcp rank \d/2 saved shard \(3, 4\) to \S+/root/shared/ckpt\n", out)) == 2, out[-3000:]
    code, out, _ = run_script_job(tmp_path, "dcp-load", ["python", "/app/dcp_reshard.py"], workers=3, env=env,
                                  claims={"shared": "/shared"})
    assert code == 0, out[-3000:]
    loaded = re.findall(r"dcp rank (\d)/3 loaded step 7 shard \(2, 4\) weight sum 276\n", out)
    assert sorted(loaded) == ["0", "1", "2"], out[-3000:]
    assert (tmp_path / "runs" / "_claims" / "shared" / "ckpt" / ".metadata").is_file()


def test_python_m_through_pythonpath_and_a_file_rendezvous_on_a_shared_claim(tmp_path):
    """`python -m file_store_init --dist-url file:///shared/pg-init --world-size $(WORLD_SIZE) --rank $(RANK)`
    with PYTHONPATH=/app (the scripts' volume): the env names its volumes as the command does, and so does a
    file:// URL (torch's file rendezvous, PyTorch's ImageNet example's flag). PYTHONPATH named this machine's
    /app ('No module named file_store_init'), and the URL its /shared: each rank waited there forever."""
    command = ["python", "-m", "file_store_init", "--dist-url", "file:///shared/pg-init",
               "--world-size=$(WORLD_SIZE)", "--rank=$(RANK)"]
    code, out, _ = run_script_job(tmp_path, "filestore", command, workers=2, env=[{"name": "PYTHONPATH", "value": "/app"}],
                                  claims={"shared": "/shared"})
    assert code == 0, out[-3000:]
    assert sorted(re.findall(r"file_store_init rank (\d)/2: sum 3 width 8", out)) == ["0", "1"], out[-3000:]


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a machine with a GPU runs NCCL")
def test_a_script_that_asks_for_nccl_on_a_machine_without_gpus_fails_at_once_saying_so(tmp_path):
    """backend="nccl" here: every rank fails in init_process_group (a CPU build: 'Distributed package doesn't
    have NCCL built in'; a CUDA one without GPUs: 'ProcessGroupNCCL is only supported with GPUs'), and the job
    fails within seconds naming it, instead of a rank waiting in the rendezvous for one that is gone."""
    started = time.monotonic()
    code, out, _ = run_script_job(tmp_path, "nccl", ["python", "/app/nccl_backend.py"], workers=2)
    assert code == 1 and time.monotonic() - started < 60, out[-3000:]
    final = out[out.index("[kuberl] nccl failed"):]
    assert "NCCL" in final, final


def test_a_jobset_in_the_shape_of_jobsets_pytorch_examples_runs_as_it_stands(tmp_path):
    """A JobSet as JobSet's PyTorch examples write one (tests/fixtures/peers/jobset): Indexed pods whose own env
    names worker 0's host (<jobset>-<replicatedJob>-0-0.<subdomain>), a MASTER_PORT and RANK from the completion
    index, read by torchrun's flags in a bash script. The JobSet file runs as it stands (kuberl converts it): the
    same rendezvous, every name torch's agent sets in each child. kuberl left the JobSet out ('kubectl apply the
    rest yourself')."""
    port = free_port()
    script = ("torchrun --rdzv_id=ppo7 --nnodes=2 --nproc_per_node=2 --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT"
              " --node_rank=$RANK /app/elastic_ddp.py")
    container = {"name": "learner", "image": "registry.example.com/rl/ppo-ddp:1", "ports": [{"containerPort": port}],
                 "env": [{"name": "MASTER_ADDR", "value": "ppo-gang-learners-0-0.ppo-gang"},
                         {"name": "MASTER_PORT", "value": str(port)},
                         {"name": "RANK", "valueFrom": {"fieldRef": {
                             "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                         {"name": "PYTHONUNBUFFERED", "value": "0"}],
                 "command": ["bash", "-xc", script],
                 "volumeMounts": [{"name": "scripts", "mountPath": "/app", "readOnly": True}]}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "ppo-gang"},
              "spec": {"replicatedJobs": [{"name": "learners", "template": {"spec": {
                  "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
                      "containers": [container], "volumes": [{"name": "scripts", "hostPath": {"path": str(SCRIPTS)}}]}}}}}]}}
    (tmp_path / "jobset.yaml").write_text(yaml.safe_dump(jobset))
    done = subprocess.run([*KUBERL, "jobset.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"MASTER_PORT={port} is now spec.rendezvous.port" in done.stderr, done.stderr
    seen = re.findall(r"elastic_ddp rank (\d)/4 group (\d) local (\d)/2 restart 0 master \S+:(\d+) heard 'from rank 0 of run ppo7'",
                      done.stdout)
    assert sorted((int(r), int(g), int(lr)) for r, g, lr, _ in seen) == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)], done.stdout[-3000:]
    assert {int(p) for *_, p in seen} == {port}
    assert "ppo-gang succeeded: every worker exited 0" in done.stdout, done.stdout[-2000:]


def test_each_pod_sees_its_own_share_of_the_callers_gpus_and_too_few_are_refused_before_anything_runs(tmp_path):
    """As a device plugin gives each cluster pod GPUs of its own: two pods of gpusPerWorker 2 on a machine whose
    caller shows 4 (CUDA_VISIBLE_DEVICES) get 2 each; every pod saw all 4, and the ranks of both took cuda:0 and
    cuda:1 (cuda:LOCAL_RANK), which NCCL refuses. With 3 the job cannot run here, and says so at once."""
    trainer = {"name": "trainer", "command": ["sh", "-c", "echo visible=[$CUDA_VISIBLE_DEVICES]"]}
    job = (make_job("gpus").custom_trainer({"spec": {"containers": [trainer]}}).workers(2)
           .with_spec(gpusPerWorker=2, procsPerWorker=1, rendezvous={"port": free_port()}).obj())
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    for shown, dir_ in (("GPU-a,GPU-b,GPU-c,GPU-d", "runs"), ("0,1,2", "short")):
        done = subprocess.run([*KUBERL, "job.yaml", "--dir", dir_], cwd=tmp_path, env={**CALLER_ENV, "CUDA_VISIBLE_DEVICES": shown},
                              capture_output=True, text=True, timeout=120, check=False)
        if dir_ == "runs":
            assert done.returncode == 0, done.stdout[-3000:]
            assert "visible=[GPU-a,GPU-b]" in pod_log(tmp_path / "runs" / "gpus", 0)
            assert "visible=[GPU-c,GPU-d]" in pod_log(tmp_path / "runs" / "gpus", 1)
        else:
            assert done.returncode == 3, done.stdout[-3000:]
            assert ("gpus cannot run here: this machine offers 3 GPU(s), and 2 pods of spec.gpusPerWorker 2 take 4"
                    in done.stdout + done.stderr)
            assert not (tmp_path / "short" / "gpus" / "logs").exists()


PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"


def test_kubeflow_trainers_multi_node_example_runs_beside_its_runtime(tmp_path):
    """A TrainJob in the shape of kubeflow/trainer's examples/yaml/01-multi-node.yaml (`torchrun --no-python python3 -c`
    and a gloo group, tests/fixtures/peers) in one
    file with the torch-distributed ClusterTrainingRuntime it names, as `kubectl get -o yaml` gives it: the runtime
    gives the image, Trainer's one process per node (no resources), and the three nodes meet at worker 0."""
    (tmp_path / "job.yaml").write_text(f"{(PEERS / 'trainer' / 'runtime_torch_distributed.yaml').read_text()}\n---\n"
                                       f"{(PEERS / 'trainer' / '01-multi-node.yaml').read_text()}")
    done = subprocess.run([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "sets PET_NPROC_PER_NODE to 1" in done.stderr, done.stderr
    for rank in range(3):
        assert f"WORLD_SIZE: 3\nRANK: {rank}\nLOCAL_RANK: 0" in pod_log(tmp_path / "runs" / "kr-three-nodes", rank)
    assert "kr-three-nodes succeeded: every worker exited 0" in done.stdout, done.stdout[-2000:]


def test_kubeflow_trainers_volcano_example_reads_its_node_rank_and_count(tmp_path):
    """A TrainJob in the shape of kubeflow/trainer's examples/yaml/04-volcano-integration.yaml: a plain `python3 -c`
    that prints PET_NODE_RANK of
    PET_NNODES, which Trainer's torch plugin set (torch.go); the file's runtime gives the image."""
    done = subprocess.run([*KUBERL, str(PEERS / "trainer" / "04-volcano-integration.yaml"), "--dir", "runs"], cwd=tmp_path,
                          env=CALLER_ENV, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for rank in range(4):
        log = pod_log(tmp_path / "runs" / "kr-gang-four", rank)
        assert f"node {rank} of 4 up" in log and f"node {rank} done" in log, log


def test_kueues_suspended_trainjob_is_refused_here_and_runs_once_unsuspended(tmp_path):
    """A TrainJob in the shape of kubeflow/trainer's examples/yaml/03-kueue-integration.yaml is created with
    suspend: true, for Kueue to admit.
    Nothing here unsuspends it: kuberl run said 'job suspended: pods deleted' and then waited for ever; now it stops
    at once (exit 3, could not run here) naming the field, and `--set runPolicy.suspend=false` runs the three nodes."""
    example = str(PEERS / "trainer" / "03-kueue-integration.yaml")
    refused = subprocess.run([*KUBERL, example, "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                             text=True, timeout=60, check=False)
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "kr-queued-three cannot run here: spec.runPolicy.suspend is true" in refused.stderr, refused.stderr
    assert not (tmp_path / "runs").exists()
    done = subprocess.run([*KUBERL, example, "--dir", "runs", "--set", "runPolicy.suspend=false"], cwd=tmp_path,
                          env=CALLER_ENV, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for rank in range(3):
        assert "tick 5 of 5\nall ticks done" in pod_log(tmp_path / "runs" / "kr-queued-three", rank)


def test_kubeflow_trainers_runtime_patches_example_runs_a_process_per_cpu_of_its_resources(tmp_path):
    """A TrainJob in the shape of kubeflow/trainer's examples/yaml/02-runtime-patches.yaml beside its runtime:
    resourcesPerNode requests 2 CPUs and
    names no GPU, so Trainer's torch plugin set PET_NPROC_PER_NODE=2 (torch.go); its runtimePatches (a ServiceAccount,
    a nodeSelector, a toleration) and KR_MARK reach the pods, and 2 nodes x 2 processes meet as one world of 4."""
    (tmp_path / "job.yaml").write_text(f"{(PEERS / 'trainer' / 'runtime_torch_distributed.yaml').read_text()}\n---\n"
                                       f"{(PEERS / 'trainer' / '02-runtime-patches.yaml').read_text()}")
    done = subprocess.run([*KUBERL, "job.yaml", "--dir", "runs"], cwd=tmp_path, env=CALLER_ENV, capture_output=True,
                          text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    logs = [pod_log(tmp_path / "runs" / "kr-patched-pair", node) for node in range(2)]  # two children's lines each
    assert [sorted(re.findall(r"^RANK: (\d)$", log, re.MULTILINE)) for log in logs] == [["0", "1"], ["2", "3"]], done.stdout[-3000:]
    # the two children's prints share the pod's stdout, each text and its newline two writes: one child's text may
    # run on into the other's ('KR_MARK: markedWORLD_SIZE: 4'), so no newline is counted
    assert all(log.count("WORLD_SIZE: 4") == log.count("KR_MARK: marked") == 2 for log in logs), logs
