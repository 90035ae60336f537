"""Launch trainer ranks as real processes, the way pods run them: each rank
its own filesystem root (KUBERL_FS_ROOT), env contract variables, gloo on
127.0.0.1 with free ports."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
from kuberl.core import contract, metricnames, names, trainerconfig
from kuberl.core.rules import parse_spec

from tests.support.jobs import make_job as job_builder
from tests.support.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
JOB = "t"


def spec(**overrides) -> dict:
    base = {
        "algorithm": "ppo",
        "env": {"id": "CartPole-v1", "numEnvs": 4},
        "totalTimesteps": 10_000_000,
        "workers": 2,
        "seed": 1,
        "metrics": {"port": free_ports(2)},
        "checkpoint": {"everyUpdates": 1000, "keep": 3},
    }
    return job_builder().from_spec(base).with_spec(**overrides).obj()["spec"]


@dataclass
class Job:
    root: Path
    config: dict
    world_size: int

    def rank_root(self, rank: int) -> Path:
        return self.root / f"rank-{rank}"

    @property
    def checkpoint_dir(self) -> Path:
        return self.rank_root(0) / self.config["paths"]["checkpointDir"].lstrip("/")

    @property
    def final_model(self) -> Path:
        return self.rank_root(0) / self.config["paths"]["finalModel"].lstrip("/")

    def termination_log(self, rank: int) -> str:
        path = self.rank_root(rank) / names.TERMINATION_LOG.lstrip("/")
        text = path.read_text().strip() if path.exists() else ""
        return text.removeprefix(contract.TERMINATION_MARKER)  # the reason as the trainer stated it

    def metrics_port(self, rank: int) -> int:
        return self.config["spec"]["metrics"]["port"] + rank


def make_job(tmp_path: Path, world_size: int = 2, raw_spec: dict | None = None, **overrides) -> Job:
    job_spec = raw_spec if raw_spec is not None else spec(workers=world_size, **overrides)
    config = trainerconfig.trainer_config(JOB, "default", "uid", parse_spec(job_spec))
    return write_config(Job(tmp_path, config, world_size))


def write_config(job: Job) -> Job:
    for rank in range(job.world_size):
        path = job.rank_root(rank) / names.CONFIG_MOUNT_DIR.lstrip("/") / names.CONFIG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(job.config))
    return job


class Ranks:
    """The job's rank processes; output of each goes to rank-N.log."""

    def __init__(self, job: Job, extra_env: dict | None = None, prefix: list[str] | None = None,
                 program: list[str] | None = None):
        """`prefix` runs before the trainer's command (e.g. `unshare` to mount a volume first); `program`
        replaces the trainer's module (`-m kuberl_trainer`) with a script of the test's own."""
        self.job = job
        port = free_ports(1)
        self.procs: list[subprocess.Popen] = []
        for rank in range(job.world_size):
            env = {
                **os.environ,
                "RANK": str(rank), "WORLD_SIZE": str(job.world_size),
                "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(job.world_size),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "KUBERL_METRICS_ADDR": "127.0.0.1", "KUBERL_FS_ROOT": str(job.rank_root(rank)),
                "KUBERL_JOB": JOB, "KUBERL_RESTART": "0",
                "OMP_NUM_THREADS": str(job.world_size), "PYTHONUNBUFFERED": "1",
                **(extra_env or {}),
            }
            with open(job.root / f"rank-{rank}.log", "a") as log:  # the child keeps its own handle
                self.procs.append(subprocess.Popen(
                    [*(prefix or []), sys.executable, *(program or ["-m", "kuberl_trainer"]), "--config", f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"],
                    env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                ))

    def wait(self, timeout: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout
        try:
            return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in self.procs]
        finally:
            self.kill()

    def wait_for_handler(self, rank: int, signum: int = signal.SIGTERM, timeout: float = 60) -> None:
        """Until the rank catches `signum` (its SigCgt mask in /proc): a signal sent before then kills it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.procs[rank].poll() is None, self.log(rank)
            try:
                with open(f"/proc/{self.procs[rank].pid}/status") as f:
                    caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
            except FileNotFoundError:  # it ended since the poll: said by the next one
                caught = 0
            if caught >> (signum - 1) & 1:
                return
            time.sleep(0.002)
        raise AssertionError(f"rank {rank} did not catch signal {signum} in {timeout}s:\n{self.log(rank)}")

    def signal(self, rank: int, signum: int = signal.SIGTERM) -> None:
        self.procs[rank].send_signal(signum)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def log(self, rank: int) -> str:
        return (self.job.root / f"rank-{rank}.log").read_text()

    def metric(self, rank: int, name: str) -> float | None:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.job.metrics_port(rank)}/metrics", timeout=2).read().decode()
        except OSError:
            return None
        match = re.search(rf'^{name}\{{([^}}]*)\}} (\S+)$', text, re.MULTILINE)
        return float(match.group(2)) if match else None

    def wait_for_updates(self, updates: int, timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.metric(0, metricnames.POLICY_UPDATES_TOTAL)
            if value is not None and value >= updates:
                return value
            if any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"a rank exited early:\n{self.log(0)}\n{self.log(1) if len(self.procs) > 1 else ''}")
            time.sleep(0.05)
        raise AssertionError(f"no {updates} updates in {timeout}s:\n{self.log(0)}")


# --- checkpoint files as an older trainer or an attacker writes them ----------


def old_format_checkpoint(state: dict) -> bytes:
    """Version 1, as trainers before the versioned format wrote it: a plain
    torch.save (numpy arrays inside) behind its sha256."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return b"KUBERLCKPT1 " + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


class _TouchMarker:
    """Unpickling this runs `touch <marker>`: the forged payload."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def forged_checkpoint(marker: Path, version: int) -> bytes:
    """A torch.save payload that would run a shell command when unpickled,
    behind a header whose checksum is recomputed (anyone can)."""
    buffer = io.BytesIO()
    torch.save({"counters": {"global_step": 10**9, "updates": 10**6, "episodes": 0}, "agent": _TouchMarker(marker)}, buffer)
    payload = buffer.getvalue()
    return f"KUBERLCKPT{version} ".encode() + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def garbage_checkpoint(version: int = 2) -> bytes:
    """A valid header and checksum over a payload that is not a checkpoint."""
    payload = b"PK\x03\x04 not a zip archive at all " * 50
    return f"KUBERLCKPT{version} ".encode() + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def rank_env(rank: int, world_size: int, port: int, threads: int) -> dict[str, str]:
    """The environment of rank `rank` of one pod (LOCAL_RANK = RANK) meeting at 127.0.0.1:`port`."""
    return {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": str(threads)}


def launch_rank(code: str, rank: int, world_size: int, port: int, threads: int = 1) -> subprocess.Popen:
    """`python -c CODE` as that rank, from the repository root (so `tests.distributed.…` imports)."""
    return subprocess.Popen([sys.executable, "-c", code], env=rank_env(rank, world_size, port, threads), cwd=REPO)


def run_workers(scenario: str, out, world_size: int, timeout: float = 120) -> list[dict]:
    """`python -m tests.distributed.workers SCENARIO OUT` as ranks 0..world_size-1 of one pod (LOCAL_RANK = RANK),
    each rank's saved record back; a rank that has not ended by `timeout` fails the test (a hang, a deadlock)."""
    port = free_ports(1)
    procs = []
    for rank in range(world_size):
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.distributed.workers", scenario, str(out)],
                                      env=rank_env(rank, world_size, port, world_size), cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [p.communicate(timeout=timeout)[0].decode() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * world_size, "\n".join(outputs)
    return [torch.load(out / f"rank-{rank}.pt", weights_only=False) for rank in range(world_size)]


def check_graphed_ranks(ranks: list[dict], backend: str) -> None:
    """What workers.graphed_ranks saw on two ranks, as it must be on any backend (gloo here, NCCL in tests/gpu)."""
    for rank, seen in enumerate(ranks):
        assert seen["backend"] == backend
        assert seen["sum"] == [2.0, 1.0] and seen["object"] == {"rank": 0} and seen["broadcast"] == b"from rank 0"
        assert seen["gathered"] == ([b"\x00", b"\x01\x01"] if rank == 0 else None)
        assert not [w for w in seen["warnings"] if "barrier()" in w], seen["warnings"]  # torch: "using the device under current context"
    for name in ranks[0]["learners"]:
        for a, b in zip(ranks[0]["learners"][name]["agent"], ranks[1]["learners"][name]["agent"], strict=True):
            assert torch.equal(a, b), name  # rank 0's weights, then the same summed gradients, everywhere
    for kind in ("q", "ppo"):
        graphed, reference = ranks[0]["learners"][f"{kind} graphed"], ranks[0]["learners"][f"{kind} reference"]
        for a, b in zip(graphed["agent"], reference["agent"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # a sum then / 2 against DDP's / 2 then sum
