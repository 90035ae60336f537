"""`kuberl run` of a job with spec.tracking.wandb, its pods started from a clean environment as a node starts them:
with WANDB_MODE=offline in the template the run is kept in the checkpoint volume (wandb/offline-run-*), read back
with W&B's own CLI (`wandb leet inspect`): a run and its resume are one W&B run id holding every progress line's
speed; a server that refuses is said once and the run succeeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_local_run import (
    JOB,
    checkpoint_dir,
    finish,
    progress,
    start,
    write_job,
)
from tests.support.ports import free_port

pytest.importorskip("wandb", reason="the trainer's wandb extra is not installed")
WANDB = Path(sys.executable).parent / "wandb"
FAKE_KEY = "kuberltestkey" + "0" * 27  # 40 characters, as W&B checks a key, that no server ever issued


def tracked_job(tmp_path: Path, *env: dict, **spec) -> None:
    write_job(tmp_path, success={"targetReturn": None}, tracking={"wandb": {"project": "e2e-tracking", "tags": ["e2e"]}},
              template={"spec": {"containers": [{"name": "trainer", "env": list(env)}]}}, **spec)


def inspect(run_dir: Path, *flags: str) -> str:
    return subprocess.run([str(WANDB), "leet", "inspect", "--json", *flags, str(run_dir)], capture_output=True,
                          text=True, check=True, stdin=subprocess.DEVNULL, timeout=120).stdout


def test_a_local_run_and_its_resume_are_one_offline_wandb_run_in_the_checkpoint_volume(tmp_path):
    tracked_job(tmp_path, {"name": "WANDB_MODE", "value": "offline"}, totalTimesteps=2000)
    code, out = finish(start(tmp_path), timeout=240)
    assert code == 0 and "not tracked" not in out and "not sent" not in out, out[-3000:]
    code, out_later = finish(start(tmp_path, "--resume", "--set", "totalTimesteps=3000"), timeout=240)
    assert code == 0 and "not tracked" not in out_later, out_later[-3000:]

    record = json.loads((checkpoint_dir(tmp_path) / "wandb-run.json").read_text())
    runs = sorted((checkpoint_dir(tmp_path) / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.name.endswith(f"-{record['runId']}") for run in runs), runs
    [said] = [line for line in out.splitlines() if "W&B:" in line]  # the path as the user, where they ran kuberl run, syncs it
    assert said.endswith(f"offline in {runs[0].relative_to(tmp_path)} (upload it with `wandb sync`)"), said
    speeds = sorted((row["history"]["item"]["global_step"], row["history"]["item"]["charts/SPS"])
                    for run in runs for row in map(json.loads, inspect(run).splitlines())
                    if row["type"] == "history" and "charts/SPS" in row["history"]["item"])
    rows = progress(tmp_path)
    assert {row["restart"] for row in rows} == {0, 1}
    assert speeds == sorted((row["timesteps"], row["steps_per_second"]) for row in rows if row.get("steps_per_second") is not None)
    assert max(step for step, _ in speeds) >= 3000
    summary = json.loads(inspect(runs[1], "--summary"))
    assert summary["state"] == "finished" and summary["name"] == JOB and summary["tags"] == ["e2e"]
    assert summary["config"]["totalTimesteps"] == 3000 and summary["config"]["workers"] == 2
    assert "WANDB" not in json.dumps(json.loads((tmp_path / "runs" / JOB / "fingerprint.json").read_text()))


def test_a_server_that_refuses_is_said_once_and_the_run_succeeds(tmp_path):
    port = free_port()  # nothing listens on it
    tracked_job(tmp_path, {"name": "WANDB_MODE", "value": "online"}, {"name": "WANDB_BASE_URL", "value": f"http://127.0.0.1:{port}"},
                {"name": "WANDB_API_KEY", "value": FAKE_KEY}, totalTimesteps=1000)
    code, out = finish(start(tmp_path), timeout=240)
    assert code == 0 and "e2e succeeded" in out, out[-3000:]
    said = [line for line in out.splitlines() if "W&B" in line]
    assert len(said) == 1 and f"127.0.0.1:{port}" in said[0], said
    assert FAKE_KEY not in out and (checkpoint_dir(tmp_path) / "final-model.pt").exists()
