"""Rank 0's MLflow run (spec.tracking.mlflow), a second sink beside the TensorBoard writer fed from the same
progress.jsonl lines: their scalars (tensorboard.scalars, CleanRL's names) as metrics against timesteps, the learned
fields as params, the job's name, namespace, uid and generation as tags, the final model as an artifact.

One MLflow run per kuberl run: its id is kept in the checkpoint directory (RUN_RECORD), so a gang restart or a
`kuberl run` resume logs on into the same run and the curve is one. The server and credentials are the client's own
variables (MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, ...), as for any MLflow client.

A call to a server blocks (an HTTP request; MLflow's client retries a refused one for minutes), so nothing here runs
on the training thread but a queue's put: one thread of its own imports the client (1.5 s), starts or resumes the run
and sends each line's points. A server that is down or refuses is said once, and tracking stops while training goes
on; progress.jsonl and TensorBoard still hold every number.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kuberl.core import fingerprint, safetext
from kuberl.core.runrecords import read_regular_file

from .tensorboard import EPISODE_TAGS, EpisodeSample, Renames, scalars

RUN_RECORD = "mlflow-run.json"  # in the checkpoint directory: the run this kuberl run logs into
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
# What rank 0 waits at the end for points still queued (a slow or unreachable server): a stop's grace period is the
# checkpoint's, and the run's end is not held for a tracking server
SEND_DEADLINE_SECONDS = 10.0
QUEUED_LINES_MAX = 10_000  # progress lines not yet sent that are kept; later ones are dropped, said once
# MLflow's limits (mlflow.utils.validation): a param value's length, a key's, and a key's characters (a learned field's
# path from env.kwargs may hold any, and one bad key fails its whole batch); its client splits a long batch itself
PARAM_VALUE_MAX = 6000
KEY_MAX = 250
NOT_A_KEY_CHARACTER = re.compile(r"[^A-Za-z0-9_\-. /]")
TAG_PREFIX = "kuberl."


# --- what is logged (pure) -----------------------------------------------------------------------------------------

def params(learned: Mapping[str, Any]) -> dict[str, str]:
    """The learned fields (fingerprint.learned_values) as MLflow params: a dotted path each, as TensorBoard's
    hyperparameters text names them, strings as they are and other values as JSON, within MLflow's limits."""
    found: dict[str, str] = {}
    for path, value in fingerprint.flat(learned).items():
        if value is None:  # another algorithm's block
            continue
        key = NOT_A_KEY_CHARACTER.sub("_", path)[:KEY_MAX]
        found[key] = (value if isinstance(value, str) else json.dumps(value, sort_keys=True))[:PARAM_VALUE_MAX]
    return found


def tags(job: str, namespace: str, uid: str, restart: int) -> dict[str, str]:
    """The run's tags: which job it is (its uid tells two jobs of one name apart) and the gang generation logging
    now; mlflow.runName names it as the job."""
    return {"mlflow.runName": job, f"{TAG_PREFIX}job": job, f"{TAG_PREFIX}namespace": namespace or "",
            f"{TAG_PREFIX}uid": uid or "", f"{TAG_PREFIX}generation": str(restart)}


def without_credentials(uri: str) -> str:
    """`uri` less a user and password in it (https://user:pass@host): the form kept in RUN_RECORD and said in logs."""
    parts = urllib.parse.urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def run_to_resume(record: object, tracking_uri: str, experiment: str) -> str | None:
    """The MLflow run id in RUN_RECORD to log on into, or None for a new run: only a record of this server and
    experiment (a job pointed at another server, or renamed its experiment, starts a run there)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("runId"), str) or not record["runId"]:
        return None
    if record.get("trackingUri") != without_credentials(tracking_uri) or record.get("experiment") != experiment:
        return None
    return record["runId"]


def read_record(checkpoint_dir: str) -> object:
    """RUN_RECORD's contents, None when it is missing, unreadable or no regular file (a new run is started): the
    checkpoint directory is the tenant's volume, and a FIFO there held the sender thread at open."""
    text = read_regular_file(os.path.join(checkpoint_dir, RUN_RECORD), 64 * 1024)
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None


def write_record(checkpoint_dir: str, tracking_uri: str, experiment: str, run_id: str) -> None:
    """RUN_RECORD written to a new file and renamed onto its name: a link left at either name is replaced, never
    written through (it had the record written wherever it pointed)."""
    path = os.path.join(checkpoint_dir, RUN_RECORD)
    temp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as f:
        json.dump({"trackingUri": without_credentials(tracking_uri), "experiment": experiment, "runId": run_id}, f)
    os.replace(temp, path)


# --- the sink (rank 0's thread of its own) ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Points:
    """One progress.jsonl line's scalars and the episodes that ended before it, (tag, value, timesteps) each, at the
    wall time the line was written."""

    values: list[tuple[str, float, int]]
    timestamp_ms: int


@dataclass(frozen=True)
class End:
    """The generation's end: the run's status (FINISHED, KILLED when stopped to resume) and the final model."""

    status: str
    model: str | None


class MlflowRun:
    """Rank 0's MLflow run for one generation: `write` queues a line's points (the training thread's only cost),
    `close` ends the generation, waiting at most SEND_DEADLINE_SECONDS for the sender."""

    def __init__(self, checkpoint_dir: str, experiment: str, learned: Mapping[str, Any], run_tags: Mapping[str, str],
                 environ: Mapping[str, str] = os.environ, log: Callable[[str], None] = print):
        self.checkpoint_dir, self.experiment, self.log = checkpoint_dir, experiment, log
        self.params, self.tags = params(learned), dict(run_tags)
        self.tracking_uri = environ.get(ENV_TRACKING_URI, "")
        self.queue: queue.Queue[Points | End] = queue.Queue(QUEUED_LINES_MAX)
        self.sender: threading.Thread | None = None
        self.failed = threading.Event()
        self.said = threading.Lock()  # the one failure said, by whichever thread meets it first
        self.run_id: str | None = None
        self.dropped = 0
        self.pending = EpisodeSample()  # finished episodes, sent with the next line's points
        if not self.tracking_uri:
            self.fail(f"spec.tracking.mlflow is set but {ENV_TRACKING_URI} is not in the trainer's environment (set it"
                      " through spec.template's env, or envFrom a Secret): not tracked")

    def episodes(self, ended: list[tuple[int, float, int]]) -> None:
        """Finished episodes, (global step, return, length) each, as the TensorBoard writer gets them (Scalars.episodes):
        charts/episodic_return and charts/episodic_length at the step each ended, sent with the next progress line."""
        if not self.failed.is_set():
            self.pending.add(ended)

    def write(self, line: Mapping[str, Any], renames: Renames | None = None) -> None:
        if self.failed.is_set():
            return
        episodes = [(tag, float(value), step) for step, episode_return, length in self.pending.take()
                    for tag, value in zip(EPISODE_TAGS, (episode_return, length), strict=True)]
        points = [*episodes, *((tag, value, int(line["timesteps"])) for tag, value in scalars(line, renames))]
        if not points:
            return
        if self.sender is None:
            self.sender = threading.Thread(target=self.send, name="mlflow", daemon=True)
            self.sender.start()
        try:
            self.queue.put_nowait(Points(points, int(time.time() * 1000)))
        except queue.Full:  # a server slower than training: the newest points wait in progress.jsonl instead
            self.dropped += 1
            if self.dropped == 1:
                self.log(f"MLflow: {QUEUED_LINES_MAX} progress lines wait for {self.where()}; later ones are dropped"
                         " (progress.jsonl and TensorBoard keep them)")

    def close(self, status: str, model: str | None = None) -> None:
        """End the generation: the run marked `status` (FINISHED; KILLED when stopped, to be resumed), the model
        logged as an artifact; what is not sent by SEND_DEADLINE_SECONDS is said once and left."""
        if self.sender is None or self.failed.is_set():
            return
        deadline = time.monotonic() + SEND_DEADLINE_SECONDS
        try:
            self.queue.put(End(status, model), timeout=SEND_DEADLINE_SECONDS)
        except queue.Full:
            pass
        self.sender.join(max(0.0, deadline - time.monotonic()))
        if self.sender.is_alive():
            self.fail(f"MLflow: {self.queue.qsize()} line(s) not sent to {self.where()} within {SEND_DEADLINE_SECONDS:.0f} s"
                      " of the run's end (the server is slow or unreachable): left unsent; progress.jsonl and"
                      " TensorBoard hold them")

    def where(self) -> str:
        return without_credentials(self.tracking_uri) + (f" (run {self.run_id})" if self.run_id else "")

    def fail(self, message: str) -> None:
        """Said once, whichever thread fails first; nothing is sent after it."""
        if self.said.acquire(blocking=False):
            self.failed.set()
            self.log(message)

    def send(self) -> None:
        """The sender thread: the client imported, the run started or resumed, then each queued line's points in one
        log_batch (what queued while one was sent goes in the next), until End."""
        try:
            client = self.connect()
            from mlflow.entities import Metric

            while True:
                items = [self.queue.get()]
                while not isinstance(items[-1], End) and not self.queue.empty():
                    items.append(self.queue.get_nowait())
                metrics = [Metric(tag, value, item.timestamp_ms, step)
                           for item in items if isinstance(item, Points) for tag, value, step in item.values]
                if metrics:  # the client splits a batch past the server's limits (1,000 metrics) itself
                    client.log_batch(self.run_id, metrics=metrics)
                if isinstance(items[-1], End):
                    self.end(client, items[-1])
                    return
        except Exception as e:  # noqa: BLE001 — whatever the client raises (refused, unreachable, not installed), training goes on
            self.fail(f"MLflow: not tracked from here on ({self.where()}): {type(e).__name__}: {_first_line(e)};"
                      " training goes on, progress.jsonl and TensorBoard keep every number")

    def connect(self) -> Any:
        # the client's import, here: a run without tracking pays nothing
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking_uri)
        run_id = run_to_resume(read_record(self.checkpoint_dir), self.tracking_uri, self.experiment)
        if run_id is not None and not _exists(client, run_id):
            self.log(f"MLflow: run {safetext.one_line(run_id)[:80]} (recorded in {RUN_RECORD}) is gone from {without_credentials(self.tracking_uri)}:"
                     " starting a new one")
            run_id = None
        if run_id is None:
            experiment = client.get_experiment_by_name(self.experiment)
            experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(self.experiment)
            run_id = client.create_run(experiment_id, tags=self.tags).info.run_id
            # params only as the run starts: MLflow refuses a param changed (a `kuberl run --resume` onto another value)
            from mlflow.entities import Param

            client.log_batch(run_id, params=[Param(k, v) for k, v in self.params.items()])
            write_record(self.checkpoint_dir, self.tracking_uri, self.experiment, run_id)
            self.log(f"MLflow: run {run_id} in experiment {self.experiment!r} at {without_credentials(self.tracking_uri)}")
        else:
            client.update_run(run_id, status="RUNNING")
            from mlflow.entities import RunTag

            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in self.tags.items()])  # this generation's
            self.log(f"MLflow: logging on into run {run_id} at {without_credentials(self.tracking_uri)}")
        self.run_id = run_id
        return client

    def end(self, client: Any, end: End) -> None:
        if end.model is not None and os.path.isfile(end.model):
            client.log_artifact(self.run_id, end.model, artifact_path="model")
        client.set_terminated(self.run_id, status=end.status)


def _exists(client: Any, run_id: str) -> bool:
    """Whether the recorded run is there to log into (not deleted); a server that fails to answer raises."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.lifecycle_stage != "deleted"
    except MlflowException as e:
        # no such run, or no run id at all (the record is the tenant's file, edited or cut short): a new run, tracked
        if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return False
        raise


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [""])[0][:300]
