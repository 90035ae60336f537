"""Rank 0 logs a run to MLflow (spec.tracking.mlflow) beside TensorBoard, from the same progress.jsonl lines: read back
with MLflow's own client from a real tracking store (its file store, no server), through the real trainer and
session; a server that is down or missing is said once and the run goes on."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest
from kuberl.core import contract
from kuberl_trainer import __main__ as entry
from kuberl_trainer import session, tracking, tracking_mlflow
from kuberl_trainer.tensorboard import (
    EPISODE_TAGS,
    EVALUATION_TAG,
    HYPERPARAMETER_ROWS,
    MORE_FIELDS,
)
from kuberl_trainer.tracking_mlflow import RUN_RECORD
from trainer_support import (
    generation,
    one_process_run,
    progress_rows,
    small_job,
    tensorboard_points,
)

mlflow = pytest.importorskip("mlflow", reason="the trainer's mlflow extra (mlflow-skinny) is not installed")
from mlflow.tracking import MlflowClient


def tracked_job(**spec):
    defaults = {"totalTimesteps": 1024, "workers": 1, "seed": 1, "success": {"evalEpisodes": 1, "evalEvery": 2},
                "tracking": {"mlflow": {"experiment": "cartpole-tracked"}}}
    return small_job("ppo").with_spec(**{**defaults, **spec}).spec()


@pytest.fixture
def store(tmp_path, monkeypatch):
    """MLflow's file store under tmp_path as the tracking server (MLflow 3 keeps it behind an opt-in)."""
    monkeypatch.setenv(contract.ENV_FS_ROOT, str(tmp_path / "fs"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, uri)
    monkeypatch.setattr(session, "PROGRESS_EVERY_SECONDS", 0.0)  # a progress line every update
    return uri


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted(((m.step, m.value) for m in client.get_metric_history(run_id, key)), key=lambda p: (p[0], p[1]))


def test_a_stopped_and_resumed_run_is_one_mlflow_run_with_every_point_its_params_tags_and_model(store):
    spec = tracked_job()
    _first, said, outcome = generation(spec, restart=0, stop_after=3)
    assert outcome == "stopped"
    client = MlflowClient(store)
    [experiment] = [e for e in client.search_experiments() if e.name == "cartpole-tracked"]
    [stopped] = client.search_runs([experiment.experiment_id])
    assert stopped.info.status == "KILLED"  # stopped to be resumed
    second, said_later, outcome = generation(spec, restart=1)
    assert outcome == "budget"
    [run] = client.search_runs([experiment.experiment_id])  # the resume logged on into the same run
    assert run.info.run_id == stopped.info.run_id and run.info.status == "FINISHED"
    assert f"MLflow: logging on into run {run.info.run_id} at {store}" in said_later
    rows = progress_rows(second)
    assert {row["restart"] for row in rows} == {0, 1}
    # the same scalars as TensorBoard's, both generations' on one curve; TensorBoard's file drops the points the first
    # generation wrote at the step the second resumed from, which MLflow (no purge) keeps
    [resumed_at] = [row["timesteps"] for row in rows if row.get("resumed")]
    drawn = tensorboard_points(second)
    assert {*EPISODE_TAGS, "charts/SPS", "losses/value_loss", EVALUATION_TAG} <= set(drawn)
    for key, expected in drawn.items():
        logged = [(step, float(np.float32(value))) for step, value in history(client, run.info.run_id, key)]  # as TensorBoard keeps it
        assert [p for p in logged if p[0] != resumed_at] == [p for p in expected if p[0] != resumed_at], key
    sent = {step for step, _ in history(client, run.info.run_id, "charts/SPS")}
    assert sent == {row["timesteps"] for row in rows if row.get("steps_per_second") is not None}  # every progress line's
    assert run.data.params["seed"] == "1" and run.data.params["algorithm"] == "ppo"
    assert run.data.params["ppo.numSteps"] == str(spec.ppo.num_steps) and run.data.params["totalTimesteps"] == "1024"
    assert run.data.tags["kuberl.job"] == "t" and run.data.tags["kuberl.namespace"] == "default"
    assert run.data.tags["kuberl.uid"] == "uid" and run.data.tags["kuberl.generation"] == "1"  # the generation logging last
    assert run.data.tags["mlflow.runName"] == "t"
    [model] = client.list_artifacts(run.info.run_id, "model")
    assert model.path == f"model/{os.path.basename(second.final_model)}" and model.file_size == os.path.getsize(second.final_model)
    assert not [line for line in said + said_later if "not tracked" in line]


def test_a_stop_whose_peer_left_first_ends_the_mlflow_run_as_a_stop_with_every_line(store, monkeypatch):
    """A stopping gang whose peer left at an update boundary: rank 0 checkpoints and ends resumable, as any stop, but
    its MLflow run was left RUNNING and the lines still queued for it were never sent."""
    from kuberl_trainer.distributed import PeerLost

    trainer, run = one_process_run(tracked_job())
    sync, calls = trainer.sync_update, []

    def stop_then_lose_the_peer(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the third update's all-reduce, as the gang stops: updates 1 and 2 are whole
            run.stop.set()
            raise PeerLost("Connection reset by peer")
        return sync(*args, **kwargs)

    monkeypatch.setattr(trainer, "sync_update", stop_then_lose_the_peer)
    with pytest.raises(PeerLost):
        session.run_updates(trainer, run)
    assert run.end_after_peer_lost(trainer) is True
    client = MlflowClient(store)
    run_id = tracking.read_record(os.path.join(run.checkpoint_dir, RUN_RECORD))["runId"]
    assert client.get_run(run_id).info.status == "KILLED"  # resumable, as finish ends a stop's
    sent = {step for step, _ in history(client, run_id, "charts/SPS")}
    assert sent == {row["timesteps"] for row in progress_rows(run) if row.get("steps_per_second") is not None} != set()


def test_the_mlflow_run_is_started_as_training_starts_not_at_the_first_progress_line(store, monkeypatch):
    """The client's import and the run's start overlap training: begun at the first progress line, a short run's
    end waited for both within its deadline, and under load said its lines were not sent (the e2e run of a real
    server). A generation that ends before its first line is a run too, ended as what it is."""
    monkeypatch.setattr(tracking, "SEND_DEADLINE_SECONDS", 600.0)  # which run, and how it ended: not how soon
    monkeypatch.setattr(tracking, "SEND_CAP_SECONDS", 600.0)
    said: list[str] = []
    _trainer, run = one_process_run(tracked_job(), log=said.append)
    run.load()  # the checkpoint volume read, as training starts
    [tracker] = run.trackers
    assert tracker.sender is not None and tracker.queue.empty()  # no line yet
    run.close_tracking("KILLED")
    assert not [line for line in said if "not tracked" in line or "not sent" in line], said
    run_id = tracking.read_record(os.path.join(run.checkpoint_dir, RUN_RECORD))["runId"]
    assert MlflowClient(store).get_run(run_id).info.status == "KILLED"


def test_another_server_or_experiment_starts_a_run_there_and_a_record_is_not_trusted_blindly(tmp_path):
    uri = "https://mlflow.example:5000"
    record = {"trackingUri": uri, "experiment": "e", "runId": "abc"}
    assert tracking_mlflow.run_to_resume(record, uri, "e") == "abc"
    assert tracking_mlflow.run_to_resume(record, "https://user:pw@mlflow.example:5000", "e") == "abc"  # the same server
    assert tracking_mlflow.run_to_resume(record, "https://other:5000", "e") is None
    assert tracking_mlflow.run_to_resume(record, uri, "f") is None
    for broken in (None, [], {"runId": 3, "trackingUri": uri, "experiment": "e"}, {"runId": "", "trackingUri": uri, "experiment": "e"}):
        assert tracking_mlflow.run_to_resume(broken, uri, "e") is None
    (tmp_path / RUN_RECORD).write_text("{not json")
    assert tracking.read_record(str(tmp_path / RUN_RECORD)) is None
    tracking.write_record(str(tmp_path / RUN_RECORD), tracking_mlflow.record("https://user:pw@mlflow.example:5000/", "e", "abc"))
    assert tracking.read_record(str(tmp_path / RUN_RECORD)) == {"trackingUri": "https://mlflow.example:5000/", "experiment": "e", "runId": "abc"}


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_the_run_record_on_the_tenants_volume_is_never_waited_on_nor_written_through(tmp_path, planted):
    """mlflow-run.json lives in the checkpoint directory, the tenant's volume: a FIFO there held the sender thread at
    open until the run's end (nothing tracked, the end waited its deadline), and a link at its temporary name had the
    record written wherever the link pointed. Read only if it is a regular file, written to a new file and renamed."""
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("kept\n")
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    if planted == "fifo":
        os.mkfifo(checkpoints / RUN_RECORD)
        read = []
        reader = threading.Thread(target=lambda: read.append(tracking.read_record(str(checkpoints / RUN_RECORD))), daemon=True)
        reader.start()
        reader.join(10)
        assert read == [None]
    else:
        (checkpoints / f"{RUN_RECORD}.tmp").symlink_to(elsewhere)
        (checkpoints / RUN_RECORD).symlink_to(elsewhere)
        assert tracking.read_record(str(checkpoints / RUN_RECORD)) is None  # a link is no record
    tracking.write_record(str(checkpoints / RUN_RECORD), tracking_mlflow.record("https://mlflow.example", "e", "abc"))
    assert elsewhere.read_text() == "kept\n"
    assert tracking.read_record(str(checkpoints / RUN_RECORD)) == {"trackingUri": "https://mlflow.example", "experiment": "e", "runId": "abc"}
    assert sorted(os.listdir(checkpoints)) == [RUN_RECORD]


def test_a_directory_at_the_run_records_name_is_no_record_and_holds_no_descriptor(tmp_path):
    """A directory made at the record's name (the tenant's volume) raised IsADirectoryError from the reader, whose only
    words were 'Is a directory: 3' (the descriptor it leaked), and the tracker stopped before its run started; every
    reader of a run's records (status.json, job.yaml, fingerprint.json under kuberl run and eval) shares it."""
    (tmp_path / RUN_RECORD).mkdir()
    before = len(os.listdir("/proc/self/fd"))
    assert [tracking.read_record(str(tmp_path / RUN_RECORD)) for _ in range(5)] == [None] * 5
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_recorded_run_id_no_server_takes_starts_a_new_run(store):
    """mlflow-run.json is the tenant's file: a run id the server refuses as no run id at all (an edited record, a
    truncated write) ended tracking for the whole run ("not tracked from here on"), where a run deleted from the server
    starts a new one; it is as gone, and a new run is started and tracked."""
    spec = tracked_job(totalTimesteps=256)
    from trainer_support import one_process_run

    _trainer, run = one_process_run(spec, restart=0)
    os.makedirs(run.checkpoint_dir, exist_ok=True)
    tracking.write_record(os.path.join(run.checkpoint_dir, RUN_RECORD), tracking_mlflow.record(store, "cartpole-tracked", "\x1b[2J\nnot-a-run-id"))
    _run, said, outcome = generation(spec, restart=0)
    assert outcome == "budget" and not [line for line in said if "not tracked" in line], said
    [gone] = [line for line in said if "is gone from" in line]
    assert "\x1b" not in gone and "\n" not in gone, gone
    client = MlflowClient(store)
    [experiment] = [e for e in client.search_experiments() if e.name == "cartpole-tracked"]
    [tracked] = client.search_runs([experiment.experiment_id])
    assert tracked.info.status == "FINISHED" and tracking.read_record(os.path.join(run.checkpoint_dir, RUN_RECORD))["runId"] == tracked.info.run_id


def test_learned_fields_become_params_within_mlflows_limits():
    found = tracking_mlflow.params({"seed": 2, "dqn": None, "algorithm": "ppo", "env": {"id": "CartPole-v1", "kwargs": {"a|b\nc": 1}},
                             "ppo": {"hiddenSizes": [64, 64]}, "note": "x" * 10_000})
    assert found == {"seed": "2", "algorithm": "ppo", "env.id": "CartPole-v1", "env.kwargs.a_b_c": "1",
                     "ppo.hiddenSizes": "[64, 64]", "note": "x" * tracking_mlflow.PARAM_VALUE_MAX}
    assert tracking.without_credentials("http://u:p@[::1]:5000/x") == "http://[::1]:5000/x"
    assert tracking.without_credentials("databricks") == "databricks"
    assert tracking.without_credentials("https://u:p@x@h:1/a@b?c=d@e") == "https://h:1/a@b?c=d@e"  # urlsplit's @


def test_a_spec_of_many_learned_fields_is_as_many_params_as_tensorboards_rows_and_a_count():
    """env.kwargs may nest tens of thousands of fields within the ConfigMap's 1 MiB: each was a param, sent 100 a
    request before the run's first point and stored by the server, where TensorBoard's text keeps 200 rows."""
    found = tracking_mlflow.params({"seed": 2, "env": {"id": "CartPole-v1", "kwargs": {"table": {f"k{i}": i for i in range(50_000)}}}})
    assert len(found) == HYPERPARAMETER_ROWS + 1 and found["seed"] == "2" and found["env.kwargs.table.k0"] == "0"
    assert found[MORE_FIELDS] == f"{50_002 - HYPERPARAMETER_ROWS:,} more fields (env.kwargs)"


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_refuses_is_said_once_and_training_finishes(store, monkeypatch):
    monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once, not after MLflow's minutes of retries
    run, said, outcome = generation(tracked_job(), restart=0)
    assert outcome == "budget" and os.path.isfile(run.final_model)
    [warning] = [line for line in said if line.startswith("MLflow")]
    assert "not tracked from here on" in warning and "training goes on" in warning
    assert not os.path.exists(os.path.join(run.checkpoint_dir, RUN_RECORD))


@pytest.mark.parametrize("uri", ["http://u:pw@host:99999/x", "http://u:pw@[::1/x", "http://u:pw@host:port/x"],
                         ids=["port-past-65535", "unclosed-ipv6", "port-not-a-number"])
def test_a_tracking_uri_that_does_not_parse_is_said_once_without_its_credentials(store, monkeypatch, uri):
    """MLflow's client refuses such a URI, quoting it whole; kuberl's own reading of it, to say where it was not sent,
    then raised in the sender thread, whose traceback (the URL and its password in it) was all the log said."""
    monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, uri)
    run, said, outcome = generation(tracked_job(totalTimesteps=256), restart=0)
    assert outcome == "budget" and os.path.isfile(run.final_model)
    [warning] = [line for line in said if line.startswith("MLflow")]
    assert "not tracked from here on" in warning and "training goes on" in warning
    assert "pw" not in warning and "u:" not in warning, warning


def test_a_server_that_never_answers_holds_the_runs_end_only_until_the_deadline_said_once(store, monkeypatch):
    """A server that accepts and never answers: MLflow's client waits on it for minutes; the run's end waits
    SEND_DEADLINE_SECONDS, says so once, and leaves the sender (a daemon thread) behind."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # connections complete in the backlog; nothing reads them
    try:
        monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(tracking, "SEND_DEADLINE_SECONDS", 0.5)
        run, said, outcome = generation(tracked_job(totalTimesteps=256), restart=0)
        assert outcome == "budget" and os.path.isfile(run.final_model)
        [warning] = [line for line in said if line.startswith("MLflow")]
        assert "not sent to http://127.0.0.1:" in warning and "slow or unreachable" in warning
        assert run.trackers[0].sender.is_alive() and run.trackers[0].sender.daemon
    finally:
        silent.close()


def test_a_stops_wait_for_a_server_that_never_answers_ends_within_the_pods_grace_period(store, monkeypatch):
    """A stop's checkpoint is written first, then the tracked runs' end waited on: up to 30 s for a server that
    answers, 10 s for one that does not, past the 30 s a pod is given by default (less what the save took), so the
    kubelet's (or kuberl run's) SIGKILL came before the termination message. The wait ends within the grace period."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # connections complete in the backlog; nothing reads them
    try:
        monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(tracking, "SEND_DEADLINE_SECONDS", 3.0)  # the grace period, 1 s, ends first
        run, said, outcome = generation(tracked_job(runPolicy={"terminationGracePeriodSeconds": 1}), restart=0, stop_after=1)
        assert outcome == "stopped" and run.last_good is not None  # the stop's checkpoint, before any wait
        [warning] = [line for line in said if line.startswith("MLflow")]
        assert "not sent to http://127.0.0.1:" in warning and "terminationGracePeriodSeconds" in warning, warning
    finally:
        silent.close()


def test_a_stops_grace_period_bounds_the_tracking_wait_and_no_stop_none():
    assert session.stop_deadline(None, 30) is None
    assert session.stop_deadline(100.0, 30) == 100.0 + 30 - session.EXIT_MARGIN_SECONDS


def test_what_fails_as_a_crashed_runs_tracking_ends_leaves_the_crash_to_be_reported(store, monkeypatch):
    """A crash ends the tracked runs FAILED, waiting on their services: a second Ctrl-C in that wait (here as the
    wait says what it left unsent) raised from the crash's handler, and the termination log reported the interrupt,
    not the crash. The crash stays what ended the run; what failed in the wait is said."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        monkeypatch.setenv(tracking_mlflow.ENV_TRACKING_URI, f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(tracking, "SEND_DEADLINE_SECONDS", 0.5)

        def interrupted(line: str) -> None:
            if "not sent" in line:
                raise KeyboardInterrupt

        _trainer, run = one_process_run(tracked_job(), log=interrupted)
        run.load()
        entry.end_tracking(run, RuntimeError("the env's own bug"))  # returns: its caller raises the crash
    finally:
        silent.close()


def test_no_tracking_uri_is_said_once_and_no_client_is_started(store, monkeypatch):
    monkeypatch.delenv(tracking_mlflow.ENV_TRACKING_URI)
    before = set(threading.enumerate())
    run, said, outcome = generation(tracked_job(totalTimesteps=256), restart=0)
    assert outcome == "budget"
    [warning] = [line for line in said if "MLFLOW_TRACKING_URI" in line]
    assert "spec.tracking.mlflow" in warning and "spec.template" in warning
    assert run.trackers[0].sender is None and not [t for t in threading.enumerate() if t not in before and "MLflow" in t.name]


def test_a_job_without_tracking_has_no_sink(store):
    _trainer, run = one_process_run(small_job("ppo").with_spec(totalTimesteps=256, workers=1).spec())
    assert run.trackers == []



class HeldService:
    """A tracking backend that answers nothing until released: what a hung server is to the sender thread."""

    name = "Held"

    def __init__(self):
        self.released = threading.Event()
        self.sent: list[tracking.Points] = []
        self.ended: tracking.End | None = None

    def where(self) -> str:
        return "a held service"

    def connect(self) -> None:
        self.released.wait(60)

    def send(self, lines) -> None:
        self.sent.extend(lines)

    def end(self, end) -> None:
        self.ended = end


def test_what_waits_for_a_hung_service_is_bounded_in_points_said_once_and_sent_once_it_answers(monkeypatch):
    """A line carries up to 2,000 episode points: bounded in lines alone, what waited behind a server that hangs
    without failing grew to about 2 GB."""
    monkeypatch.setattr(tracking, "QUEUED_POINTS_MAX", 100)
    service, said = HeldService(), []
    run = tracking.TrackedRun(service, log=said.append)
    for step in range(1, 21):
        run.episodes([(step, 1.0, 10)] * 5)  # 10 points a line: return and length of 5 episodes
        run.write({"timesteps": step})
        assert run.queued_points <= 100
    assert run.queued_points == 100 and run.dropped == 10
    [warning] = said
    assert warning.startswith("Held: 10 progress lines (100 points) wait for a held service; later ones are dropped")
    service.released.set()
    run.close("FINISHED")
    assert sum(len(line.values) for line in service.sent) == 100 and run.queued_points == 0
    assert service.ended == tracking.End("FINISHED", None) and said == [warning]


class SlowService(HeldService):
    """A service that answers every call, each a second after it is made (a real server on a loaded machine)."""

    def connect(self) -> None:
        time.sleep(1.0)

    def send(self, lines) -> None:
        time.sleep(1.0)
        super().send(lines)

    def end(self, end) -> None:
        time.sleep(1.0)
        super().end(end)


def test_a_service_that_answers_slowly_has_the_runs_end_wait_for_it_while_it_answers(monkeypatch):
    """Through a real MLflow server on a loaded machine the run's start, its last lines, the model and the run's end
    outlasted the 10 s the run's end waited in all: said not sent, the run left RUNNING. The end waits while each call
    is answered, and SEND_DEADLINE_SECONDS for one that is not (a hung service: the test above)."""
    monkeypatch.setattr(tracking, "SEND_DEADLINE_SECONDS", 2.0)  # three calls of 1 s each: 3 s in all
    service, said = SlowService(), []
    run = tracking.TrackedRun(service, log=said.append)
    run.write({"timesteps": 8, "steps_per_second": 1.0})
    run.close("FINISHED")
    assert said == [] and [line.values for line in service.sent] == [[("charts/SPS", 1.0, 8)]]
    assert service.ended == tracking.End("FINISHED", None)

