"""Rank 0 logs a run to Weights & Biases (spec.tracking.wandb) beside TensorBoard, from the same progress.jsonl
lines, through the real trainer and session with the real client in offline mode (no server): the run's transaction
log, read back with W&B's own reader (`wandb leet inspect --json`), holds every point, the config, name, notes, tags
and group; a stop and its resume are one run id; a server that refuses is said once and training goes on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kuberl.core import contract, fingerprint, names, trainerconfig
from kuberl_trainer import session, tracking, tracking_mlflow, tracking_wandb
from kuberl_trainer.tensorboard import (
    EPISODE_TAGS,
    EVALUATION_TAG,
    HYPERPARAMETER_ROWS,
    MORE_FIELDS,
)
from kuberl_trainer.tracking_wandb import RUN_RECORD, STEP_METRIC
from trainer_support import (
    generation,
    one_process_run,
    progress_rows,
    small_job,
    tensorboard_points,
)

pytest.importorskip("wandb", reason="the trainer's wandb extra is not installed")
WANDB = Path(sys.executable).parent / "wandb"  # the client's CLI, beside the interpreter that has the package
FAKE_KEY = "kuberltestkey" + "0" * 27  # 40 characters, as W&B checks a key, that no server ever issued


def tracked_job(**spec):
    defaults = {"totalTimesteps": 1024, "workers": 1, "seed": 1, "success": {"evalEpisodes": 1, "evalEvery": 2},
                "tracking": {"wandb": {"project": "cartpole-tracked", "group": "seeds", "tags": ["ppo", "smoke"]}},
                # a key set as a plain value in the template: what is learned (W&B's config) leaves it out
                "template": {"spec": {"containers": [{"name": "trainer", "env": [{"name": "WANDB_API_KEY", "value": FAKE_KEY}]}]}}}
    return small_job("ppo").with_spec(**{**defaults, **spec}).spec()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path / "fs"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setattr(session, "PROGRESS_EVERY_SECONDS", 0.0)  # a progress line every update


def inspect(run_dir: Path, *flags: str) -> str:
    """An offline run's transaction log (run-<id>.wandb) as W&B's own CLI prints it (JSON)."""
    return subprocess.run([str(WANDB), "leet", "inspect", "--json", *flags, str(run_dir)], capture_output=True,
                          text=True, check=True, stdin=subprocess.DEVNULL, timeout=120).stdout


def records(run_dir: Path) -> list[dict]:
    """Every record of the run's log, a dict each (history rows, config, metrics' definitions, ...)."""
    return [json.loads(line) for line in inspect(run_dir).splitlines() if line.strip()]


def summary(run_dir: Path) -> dict:
    """The run's state, config, names and last values, as `wandb leet inspect --summary` sums them up."""
    return json.loads(inspect(run_dir, "--summary"))


def offline_runs(checkpoint_dir: str) -> list[Path]:
    return sorted((Path(checkpoint_dir) / "wandb").glob("offline-run-*"))


def test_a_stopped_and_resumed_run_is_one_wandb_run_with_every_point_its_config_and_names(offline):
    spec = tracked_job()
    _first, said, outcome = generation(spec, restart=0, stop_after=3)
    assert outcome == "stopped"
    second, said_later, outcome = generation(spec, restart=1)
    assert outcome == "budget"
    [stopped_dir, resumed_dir] = offline_runs(second.checkpoint_dir)  # one directory a generation, offline
    run_id = tracking.read_record(os.path.join(second.checkpoint_dir, RUN_RECORD))["runId"]
    assert stopped_dir.name.endswith(f"-{run_id}") and resumed_dir.name.endswith(f"-{run_id}")  # one W&B run
    assert [line for line in said if line.startswith("W&B")] == [
        f"W&B: started run {run_id} in project cartpole-tracked: offline in {stopped_dir} (upload it with `wandb sync`)"]
    assert [line for line in said_later if line.startswith("W&B")] == [
        f"W&B: logging on into run {run_id} in project cartpole-tracked: offline in {resumed_dir} (upload it with `wandb sync`)"]

    logs = records(stopped_dir) + records(resumed_dir)
    rows = [r["history"]["item"] for r in logs if r["type"] == "history"]
    logged: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for tag, value in row.items():
            if not tag.startswith("_") and tag != STEP_METRIC:
                logged.setdefault(tag, []).append((row[STEP_METRIC], value))
    # every progress line's speed at its timesteps, both generations'; the same scalars as TensorBoard's (which drops
    # the points the first generation wrote at the step the second resumed from)
    lines = progress_rows(second)
    assert {line["restart"] for line in lines} == {0, 1}
    assert sorted(logged["charts/SPS"]) == sorted((line["timesteps"], line["steps_per_second"]) for line in lines
                                                  if line.get("steps_per_second") is not None)
    [resumed_at] = [line["timesteps"] for line in lines if line.get("resumed")]
    drawn = tensorboard_points(second)
    assert {*EPISODE_TAGS, "charts/SPS", "losses/value_loss", EVALUATION_TAG} <= set(drawn) == set(logged)
    for tag, expected in drawn.items():
        as_tensorboard_keeps = sorted((step, float(np.float32(value))) for step, value in logged[tag])
        assert [p for p in as_tensorboard_keeps if p[0] != resumed_at] == [p for p in expected if p[0] != resumed_at], tag
    every_metric = [r["metric"] for r in logs if r["type"] == "metric" and r["metric"].get("glob_name") == "*"]
    assert len(every_metric) == 2 and all(m["step_metric"] == STEP_METRIC for m in every_metric)  # W&B's x-axis

    ended = summary(resumed_dir)
    assert ended["run_id"] == run_id and ended["state"] == "finished" and ended["exit_code"] == 0
    assert ended["name"] == "t" and ended["project"] == "cartpole-tracked" and ended["tags"] == ["ppo", "smoke"]
    assert ended["notes"] == "kuberl job default/t, uid uid"
    # the gang generation logging, as MLflow's kuberl.generation tag: each generation's own
    assert summary(stopped_dir)["summary"][tracking_wandb.GENERATION_KEY] == 0
    assert ended["summary"][tracking_wandb.GENERATION_KEY] == 1
    config = ended["config"]
    assert config["seed"] == 1 and config["algorithm"] == "ppo" and config["totalTimesteps"] == 1024
    assert config["ppo"]["numSteps"] == spec.ppo.num_steps and "dqn" not in config
    [started] = [r["run"] for r in records(resumed_dir) if r["type"] == "run"]
    assert started["run_group"] == "seeds"
    for path in Path(second.checkpoint_dir, "wandb").rglob("*"):  # the key is written nowhere W&B keeps the run
        assert not path.is_file() or FAKE_KEY.encode() not in path.read_bytes(), path
    assert not [line for line in said + said_later if "not tracked" in line or "not sent" in line]


def test_a_recorded_run_id_that_is_no_wandb_id_starts_a_new_run_said_escaped(offline):
    """wandb-run.json is the tenant's file: an id W&B never makes (an edit, a cut write) is not passed to the client,
    whose run would then be someone's choosing; a new run is started, and the id said escaped and cut short."""
    spec = tracked_job(totalTimesteps=256)
    _trainer, run = one_process_run(spec)
    os.makedirs(run.checkpoint_dir, exist_ok=True)
    tracking.write_record(os.path.join(run.checkpoint_dir, RUN_RECORD),
                          tracking_wandb.record("", None, "cartpole-tracked", "\x1b[2J\n../other-run"))
    run, said, outcome = generation(spec, restart=0)
    assert outcome == "budget"
    [refused] = [line for line in said if "is no W&B run id" in line]
    assert "\x1b" not in refused and "\n" not in refused, refused
    run_id = tracking.read_record(os.path.join(run.checkpoint_dir, RUN_RECORD))["runId"]
    [started] = offline_runs(run.checkpoint_dir)
    assert started.name.endswith(f"-{run_id}") and summary(started)["state"] == "finished"


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_refuses_is_said_once_and_training_finishes(offline, monkeypatch):
    """W&B online against a closed port with a key no server issued: the client's bounded retries give up, it is
    said once naming the server, and the run finishes with its model; no run is recorded to resume."""
    port = closed_port()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    run, said, outcome = generation(tracked_job(), restart=0)
    assert outcome == "budget" and os.path.isfile(run.final_model)
    [warning] = [line for line in said if line.startswith("W&B")]
    assert f"project cartpole-tracked at http://127.0.0.1:{port}" in warning, warning
    assert "training goes on" in warning or "left unsent" in warning, warning
    assert not os.path.exists(os.path.join(run.checkpoint_dir, RUN_RECORD))


def test_client_variables_w_and_b_refuses_are_said_by_name_with_what_it_expects(tmp_path):
    """WANDB_MODE or WANDB_BASE_URL in the pod template that W&B's settings refuse was said as pydantic's first line,
    'ValidationError: 1 validation error for Settings', naming neither the variable nor what W&B takes."""
    said: list[str] = []
    environ = {"WANDB_MODE": "onlin", "WANDB_BASE_URL": "ftp://user:secret@wandb.example", "WANDB_API_KEY": FAKE_KEY}
    run = tracking_wandb.wandb_run(str(tmp_path), "p", None, None, [], {}, "job", "ns", "uid", 0, environ=environ,
                                   log=said.append)
    run.write({"timesteps": 1, "episode_return_mean": 1.0, "steps_per_second": 1.0})
    run.sender.join(120)
    [line] = said
    assert "WANDB_BASE_URL: URL scheme should be 'http' or 'https'" in line and "WANDB_MODE: Input should be 'online'," in line, line
    assert "secret" not in line and "\n" not in line and os.listdir(tmp_path) == [], line


def test_points_become_history_rows_against_global_step():
    """One row a step, as W&B's run.log takes them; a tag again at one step (two episodes ending together) a row
    of its own, so no point overwrites another."""
    points = [("charts/episodic_return", 9.0, 40), ("charts/episodic_length", 9.0, 40),
              ("charts/episodic_return", 12.0, 40), ("charts/episodic_length", 12.0, 40),
              ("charts/episodic_return", 20.0, 56), ("charts/episodic_length", 20.0, 56),
              ("charts/SPS", 800.0, 64), ("losses/value_loss", 0.5, 64)]
    assert tracking_wandb.rows(points) == [
        {STEP_METRIC: 40, "charts/episodic_return": 9.0, "charts/episodic_length": 9.0},
        {STEP_METRIC: 40, "charts/episodic_return": 12.0, "charts/episodic_length": 12.0},
        {STEP_METRIC: 56, "charts/episodic_return": 20.0, "charts/episodic_length": 20.0},
        {STEP_METRIC: 64, "charts/SPS": 800.0, "losses/value_loss": 0.5}]
    assert tracking_wandb.rows([]) == []


def test_learned_fields_become_config_and_only_a_record_of_this_project_is_resumed():
    assert tracking_wandb.config({"seed": 2, "dqn": None, "algorithm": "ppo",
                                  "env": {"id": "CartPole-v1", "kwargs": {"max.steps": 3}}, "ppo": {"hiddenSizes": [64]}}) == {
        "seed": 2, "algorithm": "ppo", "env": {"id": "CartPole-v1", "kwargs": {"max_steps": 3}}, "ppo": {"hiddenSizes": [64]}}
    assert tracking_wandb.notes("cartpole", "ml", "1234") == "kuberl job ml/cartpole, uid 1234"
    record = tracking_wandb.record("https://user:pw@wandb.example", "team", "p", "ab12cd34")
    assert record == {"baseUrl": "https://wandb.example", "entity": "team", "project": "p", "runId": "ab12cd34"}
    assert tracking_wandb.run_to_resume(record, "https://wandb.example", "team", "p") == ("ab12cd34", None)
    for elsewhere in (("", "team", "p"), ("https://wandb.example", None, "p"), ("https://wandb.example", "team", "q")):
        assert tracking_wandb.run_to_resume(record, *elsewhere) == (None, None)  # another server, entity, project
    for broken in (None, [], {**record, "runId": 3}):
        assert tracking_wandb.run_to_resume(broken, "https://wandb.example", "team", "p") == (None, None)
    for hostile in ("", "a/b", "a:b", "x" * 65, "id with spaces"):
        run_id, refused = tracking_wandb.run_to_resume({**record, "runId": hostile}, "https://wandb.example", "team", "p")
        assert run_id is None and "is no W&B run id" in refused, hostile


def test_a_spec_of_many_learned_fields_is_as_many_config_keys_as_mlflows_params_and_a_count():
    """env.kwargs may nest tens of thousands of fields within the ConfigMap's 1 MiB: each was a config key W&B's
    server stored, where MLflow's params and TensorBoard's text keep 200."""
    learned = {"seed": 2, "dqn": None, "env": {"id": "CartPole-v1", "kwargs": {"a.b": None, "table": {f"k{i}": i for i in range(50_000)}}}}
    found = tracking_wandb.config(learned)
    kwargs = found["env"]["kwargs"]["table"]
    assert found["seed"] == 2 and "dqn" not in found and "a_b" not in found["env"]["kwargs"]
    assert len(kwargs) == HYPERPARAMETER_ROWS - 2 and kwargs["k0"] == 0 and f"k{HYPERPARAMETER_ROWS - 3}" in kwargs
    assert found[MORE_FIELDS] == f"{50_002 - HYPERPARAMETER_ROWS:,} more fields (env.kwargs)"
    assert set(fingerprint.flat(found)) == set(tracking_mlflow.params(learned))  # the same fields, the same count


def test_a_job_tracked_in_both_services_has_two_trackers(offline, monkeypatch):
    spec = tracked_job(totalTimesteps=256, tracking={"wandb": {"project": "p"}, "mlflow": {}})
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _trainer, run = one_process_run(spec)
    assert [t.backend.name for t in run.trackers] == ["MLflow", "W&B"]


def test_wandb_disabled_is_said_once_and_starts_nothing(offline, monkeypatch):
    """W&B's disabled mode hands out a run id all the same: recorded, a resume would log on into a run that never was."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run, said, outcome = generation(tracked_job(totalTimesteps=256), restart=0)
    assert outcome == "budget"
    assert [line for line in said if "W&B" in line or "wandb" in line] == [
        "spec.tracking.wandb is set but WANDB_MODE is disabled in the trainer's environment: not tracked"]
    assert run.trackers[0].sender is None and not os.path.exists(os.path.join(run.checkpoint_dir, RUN_RECORD))


def test_a_link_at_the_run_files_directory_is_not_written_through(offline, tmp_path):
    """The checkpoint volume is the tenant's (a shared runs/ under kuberl run): a link named wandb there had W&B write
    its run's files wherever it pointed. Tracking stops, said once naming it; training goes on."""
    spec = tracked_job(totalTimesteps=256)
    _trainer, run = one_process_run(spec)
    os.makedirs(run.checkpoint_dir, exist_ok=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, os.path.join(run.checkpoint_dir, "wandb"))
    run, said, outcome = generation(spec, restart=0)
    assert outcome == "budget" and os.path.isfile(run.final_model)
    [warning] = [line for line in said if line.startswith("W&B")]
    assert f"{run.checkpoint_dir}/wandb is a link" in warning and "training goes on" in warning, warning
    assert list(elsewhere.iterdir()) == [] and not os.path.exists(os.path.join(run.checkpoint_dir, RUN_RECORD))


def test_a_run_started_whose_record_cannot_be_written_is_finished_failed_not_left_open(offline):
    """The record is written after wandb.init starts the run: where it cannot be (the tenant's volume holds a directory
    at its temporary name), the tracker stops, said once, and the run it started was left open, never finished."""
    spec = tracked_job(totalTimesteps=256)
    _trainer, run = one_process_run(spec)
    os.makedirs(os.path.join(run.checkpoint_dir, f"{RUN_RECORD}.tmp", "planted"))
    run, said, outcome = generation(spec, restart=0)
    assert outcome == "budget"
    [warning] = [line for line in said if line.startswith("W&B")]
    assert "not tracked from here on" in warning and "IsADirectoryError" in warning, warning
    [started] = offline_runs(run.checkpoint_dir)
    ended = summary(started)
    assert ended["state"] == "failed" and ended["exit_code"] == 1, ended  # as W&B shows a run ended with exit code 1


def trainer_process(tmp_path: Path, spec, env: dict[str, str], wrapper: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The trainer run on `spec` in a process of its own, as a pod runs it (KUBERL_FS_ROOT: tmp_path), W&B offline and
    with a W&B service of its own: this process's (WANDB_SERVICE, set by a run started here) would serve its runs."""
    config = tmp_path / names.CONFIG_MOUNT_DIR.lstrip("/") / names.CONFIG_FILE
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(trainerconfig.trainer_config("t", "default", "uid", spec)))
    return subprocess.run([*wrapper, sys.executable, "-m", "kuberl_trainer", "--config", f"{names.CONFIG_MOUNT_DIR}/{names.CONFIG_FILE}"],
                          check=False, env={**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"},
                                            contract.ENV_FS_ROOT: str(tmp_path), "WANDB_MODE": "offline", **env},
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])


def test_a_crash_ends_both_tracked_runs_failed_not_running(tmp_path, monkeypatch):
    """A rank 0 that crashes (an exception in training: here the user's env raising mid-run) ends its MLflow run
    FAILED and its W&B run with exit code 1: both were left RUNNING, the process gone."""
    mlflow = pytest.importorskip("mlflow", reason="the trainer's mlflow extra (mlflow-skinny) is not installed")
    spec = tracked_job(totalTimesteps=100_000, env={"id": "tests.unit.crashing_envs:CrashingDiscrete", "kwargs": {"after": 100}},
                       tracking={"wandb": {"project": "crashed"}, "mlflow": {"experiment": "crashed"}})
    store = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind an opt-in
    crashed = trainer_process(tmp_path, spec, {"MLFLOW_ALLOW_FILE_STORE": "true", tracking_mlflow.ENV_TRACKING_URI: store})
    assert crashed.returncode == 1 and "the env's own bug" in crashed.stderr, crashed.stderr[-3000:]
    checkpoints = tmp_path / "checkpoints" / "t-uid"
    run_id = tracking.read_record(str(checkpoints / tracking_mlflow.RUN_RECORD))["runId"]
    assert mlflow.tracking.MlflowClient(store).get_run(run_id).info.status == "FAILED"
    [started] = offline_runs(str(checkpoints))
    ended = summary(started)
    assert ended["state"] == "failed" and ended["exit_code"] == 1, ended


def read_only(home: Path) -> tuple[str, ...]:
    """A wrapper of the trainer's command under which `home` is read-only, as a pod's / is: its mode, or for root
    (whom modes do not bind) a read-only bind mount in a mount namespace of its own."""
    home.chmod(0o555)
    if os.geteuid() != 0:
        return ()
    if subprocess.run(["unshare", "-m", "true"], check=False, capture_output=True).returncode != 0:
        pytest.skip("root, and no mount namespace to make a read-only HOME in (unshare -m)")
    return ("unshare", "-m", "sh", "-c", 'mount --bind -o ro "$HOME" "$HOME" && exec "$@"', "sh")


def test_a_read_only_home_has_w_and_bs_service_write_its_log_to_a_writable_cache(tmp_path):
    """A pod's HOME is / on a read-only root filesystem: wandb-core found no cache directory for its debug log and
    rank 0's log got "main: failed to get logger path" and a dozen of its INFO lines. The trainer points its own
    XDG_CACHE_HOME (this process's, not the pod's env) at a writable one first."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CACHE_HOME": ""}
    done = trainer_process(tmp_path, tracked_job(totalTimesteps=256), env, read_only(home))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed to get logger path" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert list(home.iterdir()) == []
    [started] = offline_runs(str(tmp_path / "checkpoints" / "t-uid"))
    log = started / "logs" / "debug-core.log"
    assert log.is_symlink() and log.resolve().is_relative_to(tracking_wandb.FALLBACK_CACHE_HOME), log.resolve()
    assert summary(started)["state"] == "finished"


def test_a_cache_home_the_user_named_or_one_that_is_writable_is_kept():
    writable = {"/home/u/.cache"}.__contains__
    assert tracking_wandb.cache_home({"HOME": "/home/u"}, writable) is None
    assert tracking_wandb.cache_home({"HOME": "/", "XDG_CACHE_HOME": "/mine"}, writable) is None  # theirs, as it is
    assert tracking_wandb.cache_home({"HOME": "/"}, writable) == tracking_wandb.FALLBACK_CACHE_HOME
    assert tracking_wandb.cache_home({}, writable) == tracking_wandb.FALLBACK_CACHE_HOME  # wandb-core: no HOME, no cache


@pytest.mark.parametrize("planted", ["link", "another user's directory"])
def test_a_fallback_cache_home_planted_by_another_user_is_not_written_into(tmp_path, monkeypatch, planted):
    """The cache home that replaces an unwritable one is a fixed name in the temp directory: where that is shared (a
    trainer started outside a pod and kuberl run), another user could make it first, or a link there, and wandb-core
    wrote its logs where they chose. Such a one is passed by for a directory of this process's own."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    fixed = tmp_path / "kuberl-cache"
    if planted == "link":
        fixed.symlink_to(theirs)
    else:
        fixed.mkdir(mode=0o777)
        fixed.chmod(0o777)
        if os.geteuid() == 0:
            os.chown(fixed, 12345, 12345)
    monkeypatch.setattr(tracking_wandb, "FALLBACK_CACHE_HOME", str(fixed))
    environ: dict[str, str] = {"WANDB_MODE": "offline"}  # no HOME: wandb-core has no cache home of its own
    tracking_wandb.wandb_run(str(tmp_path / "checkpoints"), "p", None, None, [], {}, "j", "default", "uid", 0,
                             environ=environ, log=lambda _line: None)
    home = Path(environ[tracking_wandb.ENV_CACHE_HOME])
    assert not home.is_symlink() and home.is_dir() and home.resolve() not in (theirs, fixed), home
    assert home.stat().st_uid == os.geteuid() and home.stat().st_mode & 0o077 == 0
