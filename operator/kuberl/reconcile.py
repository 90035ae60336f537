"""What the operator's shell decides around `lifecycle.decide`, as pure functions.

The kopf handlers (kuberl.handlers) read the job, its pods and rank 0's
metrics, and write one status patch; everything in between that is not the
gang lifecycle itself lives here, so it is tested without kopf or a cluster:
reading rank 0's metrics text, the status a reconcile writes (observedGeneration,
latestCheckpoint, finalModel, or Failed for a spec only the operator can
judge), the merge patch between two statuses, which 409s are ours, TTL.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from . import lifecycle, metricnames, names
from .spec import Problem

REASON_INVALID_SPEC = "InvalidSpec"
REASON_INVALID_CHILD = "InvalidChild"  # the API server refused an object rendered from the spec


@dataclass(frozen=True)
class Rank0Reading:
    """Rank 0's metrics endpoint at one scrape."""

    timesteps: int
    steps_per_second: float | None = None
    episode_return_mean: float | None = None
    eval_return: float | None = None
    succeeded: bool = False
    last_checkpoint_time: float | None = None  # POSIX seconds; None before the first checkpoint


def parse_rank0_metrics(text: str, job: str) -> Rank0Reading | None:
    """Global rank 0's values from a Prometheus text page; None without a step counter."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get(metricnames.LABEL_RANK, "0") != "0" or labels.get(metricnames.LABEL_RLTJ, job) != job:
                continue
            values[sample.name] = sample.value
    if metricnames.ENV_STEPS_TOTAL not in values:
        return None
    checkpoint = values.get(metricnames.LAST_CHECKPOINT_TIMESTAMP)
    return Rank0Reading(
        timesteps=int(values[metricnames.ENV_STEPS_TOTAL]),
        steps_per_second=values.get(metricnames.STEPS_PER_SECOND),
        episode_return_mean=values.get(metricnames.EPISODE_RETURN),
        eval_return=values.get(metricnames.EVAL_RETURN),
        succeeded=values.get(metricnames.SUCCESS, 0.0) >= 1.0,
        last_checkpoint_time=checkpoint if checkpoint else None,
    )


def progress_of(previous: lifecycle.Rank0Progress | None, generation: int, reading: Rank0Reading | None, now: float) -> lifecycle.Rank0Progress | None:
    """The lifecycle's view of rank 0; an unreadable endpoint keeps the last reading
    (a frozen rank 0 freezes its metrics server too, so the stall clock keeps running)."""
    if reading is None:
        return previous if previous is not None and previous.generation == generation else None
    return lifecycle.next_progress(
        previous, generation, reading.timesteps, now,
        succeeded=reading.succeeded,
        steps_per_second=reading.steps_per_second,
        episode_return_mean=reading.episode_return_mean,
        eval_return=reading.eval_return,
    )


def job_status(
    decided: dict,
    *,
    observed_generation: int,
    reading: Rank0Reading | None,
    checkpoint_dir: str,
    final_model: str,
) -> dict:
    """The status one reconcile writes: the lifecycle's, plus what only the shell knows."""
    status = copy.deepcopy(decided)
    status["observedGeneration"] = observed_generation
    if reading is not None and reading.last_checkpoint_time is not None:
        time = lifecycle.rfc3339(reading.last_checkpoint_time)
        previous = status.get("latestCheckpoint") or {}
        if previous.get("time") != time:
            status["latestCheckpoint"] = {"path": checkpoint_dir, "time": time, "timesteps": reading.timesteps}
    if status.get("phase") == lifecycle.SUCCEEDED and not status.get("finalModel"):
        status["finalModel"] = final_model
    return status


def set_condition(status: dict, type_: str, true: bool, reason: str, message: str, now: float) -> None:
    """Kubernetes-style: lastTransitionTime moves only when the condition's status flips."""
    value = "True" if true else "False"
    conditions = status.get("conditions") or []
    old = next((c for c in conditions if c.get("type") == type_), None)
    moved = old is None or old.get("status") != value
    new = {
        "type": type_, "status": value, "reason": reason, "message": message[: lifecycle.MESSAGE_LIMIT],
        "lastTransitionTime": lifecycle.rfc3339(now) if moved else old["lastTransitionTime"],
    }
    status["conditions"] = [c for c in conditions if c.get("type") != type_] + [new]


def failed_status(status: dict | None, reason: str, message: str, observed_generation: int, now: float) -> dict:
    """A job that can never run: Failed at once, with a condition saying why."""
    out = copy.deepcopy(status or {})
    already = out.get("phase") == lifecycle.FAILED
    out["phase"] = lifecycle.FAILED
    out["observedGeneration"] = observed_generation
    if not already or not out.get("completionTime"):
        out["completionTime"] = lifecycle.rfc3339(now)
    set_condition(out, lifecycle.CONDITION_READY, False, reason, message, now)
    set_condition(out, lifecycle.CONDITION_FAILED, True, reason, message, now)
    return out


def problems_message(problems: list[Problem]) -> str:
    """Every problem with its field path, e.g. `spec.labels.bad key: expected a label key`."""
    return "; ".join(str(p) for p in problems)


def _pruned(value: Any) -> Any:
    """Nulls dropped: a merge patch deletes a key set to null, so both read alike."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def merge_patch(old: dict | None, new: dict) -> dict | None:
    """The JSON merge patch that turns `old` into `new`; None when they already agree."""
    before, after = _pruned(old or {}), _pruned(new)
    if before == after:
        return None
    patch: dict[str, Any] = {}
    for key, value in after.items():
        if key not in before:
            patch[key] = value
        elif isinstance(value, dict) and isinstance(before[key], dict):
            inner = merge_patch(before[key], value)
            if inner is not None:
                patch[key] = inner
        elif before[key] != value:
            patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch


def owned_by(obj: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def is_current_pod(pod: dict, uid: str, generation: int) -> bool:
    """A pod found under a name we create is ours only if it is of this generation and
    not going away: with fixed pod names, a 409 can be the OLD gang's pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        owned_by(pod, uid)
        and labels.get(names.LABEL_RESTART) == str(generation)
        and not meta.get("deletionTimestamp")
    )


def ttl_due(status: dict, ttl_seconds: int | None) -> float | None:
    """When a finished job should be deleted, or None."""
    if ttl_seconds is None or status.get("phase") not in lifecycle.TERMINAL:
        return None
    finished = lifecycle.parse_time(status.get("completionTime"))
    return None if finished is None else finished + ttl_seconds


def restarted(before: dict | None, after: dict) -> dict | None:
    """The restart-history entry a decision just added (for metrics), or None."""
    old = (before or {}).get("generation") or 0
    if (after.get("generation") or 0) <= old:
        return None
    history = after.get("restartHistory") or []
    return history[-1] if history else None


def with_operator_defaults(pod: dict, pull_policy: str | None, pull_secrets: tuple[str, ...]) -> dict:
    """The operator's configured trainer pull policy and pull secrets, where the job sets none."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    if pull_secrets and not spec.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    if pull_policy:
        for container in spec["containers"]:
            if container["name"] == names.TRAINER_CONTAINER:
                container.setdefault("imagePullPolicy", pull_policy)
    return out
