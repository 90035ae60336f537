"""Rank 0's MLflow run (spec.tracking.mlflow), one backend of tracking.TrackedRun: the scalars as metrics against
timesteps, the learned fields as params, the job's name, namespace, uid and generation as tags, the final model as an
artifact. The server and credentials are the client's own variables (MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN,
...), as for any MLflow client; the run's id is kept in RUN_RECORD in the checkpoint directory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from kuberl.core import fingerprint, safetext

from .tensorboard import MORE_FIELDS, shown_fields
from .tracking import (
    End,
    Points,
    TrackedRun,
    read_record,
    without_credentials,
    write_record,
)

RUN_RECORD = "mlflow-run.json"  # in the checkpoint directory: the run this kuberl run logs into
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
# MLflow's limits (mlflow.utils.validation): a param value's length, a key's, and a key's characters (a learned field's
# path from env.kwargs may hold any, and one bad key fails its whole batch); its client splits a long batch itself
PARAM_VALUE_MAX = 6000
KEY_MAX = 250
NOT_A_KEY_CHARACTER = re.compile(r"[^A-Za-z0-9_\-. /]")
TAG_PREFIX = "kuberl."


# --- what is logged (pure) -----------------------------------------------------------------------------------------

def params(learned: Mapping[str, Any]) -> dict[str, str]:
    """The learned fields (fingerprint.learned_values) as MLflow params: a dotted path each, as TensorBoard's
    hyperparameters text names them, strings as they are and other values as JSON, within MLflow's limits; the
    fields that text shows, then MORE_FIELDS counting the rest (tensorboard.shown_fields). env.kwargs may nest tens
    of thousands of fields within the ConfigMap's 1 MiB, each a param the server stores (sent 100 a request: 500
    requests before the run's first point, for 50,000)."""
    found: dict[str, str] = {}
    shown, more = shown_fields(learned)
    for path, value in (fingerprint.flat(shown) if shown else {}).items():
        key = NOT_A_KEY_CHARACTER.sub("_", path)[:KEY_MAX]
        found[key] = (value if isinstance(value, str) else json.dumps(value, sort_keys=True))[:PARAM_VALUE_MAX]
    if more:
        found[MORE_FIELDS] = more
    return found


def tags(job: str, namespace: str, uid: str, restart: int) -> dict[str, str]:
    """The run's tags: which job it is (its uid tells two jobs of one name apart) and the gang generation logging
    now; mlflow.runName names it as the job."""
    return {"mlflow.runName": job, f"{TAG_PREFIX}job": job, f"{TAG_PREFIX}namespace": namespace or "",
            f"{TAG_PREFIX}uid": uid or "", f"{TAG_PREFIX}generation": str(restart)}


def record(tracking_uri: str, experiment: str, run_id: str) -> dict[str, str]:
    return {"trackingUri": without_credentials(tracking_uri), "experiment": experiment, "runId": run_id}


def run_to_resume(recorded: object, tracking_uri: str, experiment: str) -> str | None:
    """The MLflow run id in RUN_RECORD to log on into, or None for a new run: only a record of this server and
    experiment (a job pointed at another server, or renamed its experiment, starts a run there)."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("runId"), str) or not recorded["runId"]:
        return None
    if recorded.get("trackingUri") != without_credentials(tracking_uri) or recorded.get("experiment") != experiment:
        return None
    return recorded["runId"]


# --- the client (the tracker's sender thread) ------------------------------------------------------------------------

def mlflow_run(checkpoint_dir: str, experiment: str, learned: Mapping[str, Any], run_tags: Mapping[str, str],
               environ: Mapping[str, str] = os.environ, log: Callable[[str], None] = print) -> TrackedRun:
    """Rank 0's tracker of spec.tracking.mlflow; without MLFLOW_TRACKING_URI, one that says so once and sends nothing."""
    backend = MlflowBackend(checkpoint_dir, experiment, learned, run_tags, environ.get(ENV_TRACKING_URI, ""), log)
    unusable = None if backend.tracking_uri else (
        f"spec.tracking.mlflow is set but {ENV_TRACKING_URI} is not in the trainer's environment (set it through"
        " spec.template's env, or envFrom a Secret): not tracked")
    return TrackedRun(backend, log, unusable)


class MlflowBackend:
    name = "MLflow"

    def __init__(self, checkpoint_dir: str, experiment: str, learned: Mapping[str, Any], run_tags: Mapping[str, str],
                 tracking_uri: str, log: Callable[[str], None]):
        self.checkpoint_dir, self.experiment, self.tracking_uri, self.log = checkpoint_dir, experiment, tracking_uri, log
        self.params, self.tags = params(learned), dict(run_tags)
        self.run_id: str | None = None
        self.client: Any = None

    def where(self) -> str:
        return without_credentials(self.tracking_uri) + (f" (run {self.run_id})" if self.run_id else "")

    def connect(self) -> None:
        # the client's import, here: a run without tracking pays nothing
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking_uri)
        path = os.path.join(self.checkpoint_dir, RUN_RECORD)
        run_id = run_to_resume(read_record(path), self.tracking_uri, self.experiment)
        if run_id is not None and not _exists(client, run_id):
            self.log(f"MLflow: run {safetext.one_line(run_id)[:80]} (recorded in {RUN_RECORD}) is gone from"
                     f" {without_credentials(self.tracking_uri)}: starting a new one")
            run_id = None
        if run_id is None:
            experiment = client.get_experiment_by_name(self.experiment)
            experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(self.experiment)
            run_id = client.create_run(experiment_id, tags=self.tags).info.run_id
            # params only as the run starts: MLflow refuses a param changed (a `kuberl run --resume` onto another value)
            client.log_batch(run_id, params=[Param(k, v) for k, v in self.params.items()])
            write_record(path, record(self.tracking_uri, self.experiment, run_id))
            self.log(f"MLflow: run {run_id} in experiment {self.experiment!r} at {without_credentials(self.tracking_uri)}")
        else:
            client.update_run(run_id, status="RUNNING")
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in self.tags.items()])  # this generation's
            self.log(f"MLflow: logging on into run {run_id} at {without_credentials(self.tracking_uri)}")
        self.client, self.run_id = client, run_id

    def send(self, lines: list[Points]) -> None:
        """Every queued line's points in one log_batch (the client splits one past the server's limits, 1,000
        metrics, itself)."""
        from mlflow.entities import Metric

        self.client.log_batch(self.run_id, metrics=[Metric(tag, value, line.timestamp_ms, step)
                                                    for line in lines for tag, value, step in line.values])

    def end(self, end: End) -> None:
        if end.model is not None and os.path.isfile(end.model):
            self.client.log_artifact(self.run_id, end.model, artifact_path="model")
        self.client.set_terminated(self.run_id, status=end.status)


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
