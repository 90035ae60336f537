"""`kuberl run` of a job with spec.tracking.mlflow against a real `mlflow server` on 127.0.0.1 (the full mlflow
package, in .tools/mlflow-venv: `make test-e2e` installs it), read back with MLflow's own client: one MLflow run,
continued by a resume, holding every progress line's numbers, the params, the tags and the model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_local_run import (
    JOB,
    checkpoint_dir,
    finish,
    progress,
    start,
    write_job,
)
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MLFLOW = ROOT / ".tools" / "mlflow-venv" / "bin" / "mlflow"
STARTUP_SECONDS = 180  # a cold import of the full package on a loaded 2-core machine: 31 s seen


@pytest.fixture
def mlflow_server(tmp_path):
    """A real MLflow server (sqlite store, artifacts served through it) on a free port of 127.0.0.1, stopped by PID."""
    assert MLFLOW.exists(), f"{MLFLOW} is missing: `make test-e2e` creates it (pip install mlflow in its own venv)"
    port = free_port()
    log = open(tmp_path / "mlflow-server.log", "w")  # noqa: SIM115 — closed after the server stops
    server = subprocess.Popen(
        [str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--artifacts-destination", str(tmp_path / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start:\n{(tmp_path / 'mlflow-server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def tracked_job(tmp_path: Path, uri: str, **spec) -> None:
    write_job(tmp_path, success={"targetReturn": None}, tracking={"mlflow": {"experiment": "e2e-tracking"}},
              template={"spec": {"containers": [{"name": "trainer", "env": [{"name": "MLFLOW_TRACKING_URI", "value": uri}]}]}},
              **spec)


def test_a_local_run_and_its_resume_are_one_mlflow_run_on_a_real_server(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    tracked_job(tmp_path, mlflow_server, totalTimesteps=2000)
    code, out = finish(start(tmp_path), timeout=180)
    assert code == 0 and "not tracked" not in out and "not sent" not in out, out[-3000:]
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("e2e-tracking")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    record = json.loads((checkpoint_dir(tmp_path) / "mlflow-run.json").read_text())
    assert record == {"trackingUri": mlflow_server, "experiment": "e2e-tracking", "runId": run.info.run_id}

    # a larger budget continues it: the same MLflow run, its curve going on
    code, out = finish(start(tmp_path, "--resume", "--set", "totalTimesteps=3000"), timeout=180)
    assert code == 0, out[-3000:]
    [resumed] = client.search_runs([experiment.experiment_id])
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    rows = progress(tmp_path)
    assert {row["restart"] for row in rows} == {0, 1}
    speeds = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "charts/SPS"))
    assert speeds == sorted((row["timesteps"], pytest.approx(row["steps_per_second"])) for row in rows
                            if row.get("steps_per_second") is not None)
    assert max(step for step, _ in speeds) >= 3000
    assert client.get_metric_history(run.info.run_id, "charts/episodic_return")
    assert client.get_metric_history(run.info.run_id, "eval/episodic_return")
    assert resumed.data.params["totalTimesteps"] == "2000"  # as it started: MLflow refuses a param changed
    assert resumed.data.params["workers"] == "2" and resumed.data.params["env.id"] == "CartPole-v1"
    assert resumed.data.tags["kuberl.job"] == JOB and resumed.data.tags["kuberl.generation"] == "1"
    [model] = client.list_artifacts(run.info.run_id, "model")
    assert model.path == "model/final-model.pt"
    downloaded = client.download_artifacts(run.info.run_id, "model/final-model.pt", str(tmp_path / "downloaded"))
    assert Path(downloaded).read_bytes() == (checkpoint_dir(tmp_path) / "final-model.pt").read_bytes()
    assert "MLFLOW" not in json.dumps(yaml.safe_load((tmp_path / "runs" / JOB / "fingerprint.json").read_text()))


def test_a_server_that_is_down_is_said_once_and_the_run_succeeds(tmp_path):
    port = free_port()  # nothing listens on it
    tracked_job(tmp_path, f"http://127.0.0.1:{port}", totalTimesteps=1000)
    code, out = finish(start(tmp_path), timeout=180)
    assert code == 0 and "e2e succeeded" in out, out[-3000:]
    said = [line for line in out.splitlines() if "MLflow" in line]
    assert len(said) == 1 and f"127.0.0.1:{port}" in said[0], said
    assert (checkpoint_dir(tmp_path) / "final-model.pt").exists()
