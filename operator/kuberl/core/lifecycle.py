"""The gang lifecycle: what a cluster reports in, the next phase and actions out.

`decide(spec, status, pods, rank0, now)` is ONE pure function shared by the
operator and `kuberl run`. Its inputs are what a cluster reports (pods with
their restart label, phase, exit code, termination reason, waiting and
scheduling reasons, deletion timestamp, DisruptionTarget condition) and rank
0's step counter; its output is the status to write and a list of plain
actions.

The caller writes `decision.status` FIRST, then carries out the actions in
order, and emits the events only after the write succeeded: so a new
generation is on record before the old gang is deleted, and a pod carrying an
older `kuberl.dev/restart` label or a deletion timestamp is never taken for
the new generation.

Rules (the project design, Operator):
- a failed pod restarts the whole gang, after restartBackoffSeconds * 2^n
  (capped); crashes and stalls count toward backoffLimit; disruptions
  (DisruptionTarget, a pod deleted or lost, a stated Stop) and a checkpoint
  volume that failed under the job (CheckpointVolumeUnavailable) do not, and
  back off in a row from 10 s like kubelet's CrashLoopBackOff;
- failures that are all PeerLost (another rank's echo) wait, at most
  PEER_LOST_CAUSE_SECONDS, for a pod not yet failed to report the cause;
- a generation that never had all its pods started is a start-up problem:
  reported with its reason, retried after startupTimeoutSeconds up to
  maxStartupRetries, never spending the backoff budget;
- the configuration-error reason fails the job at once;
- rank 0's step counter standing still for stallTimeoutSeconds (once the gang
  is up) is a counted restart;
- suspend deletes the pods, resume starts a new generation (not counted);
- activeDeadlineSeconds fails the job; success is rank 0 exiting 0 having
  reported the criterion met, or every rank exiting 0;
- pods stuck terminating (a lost node) are force-deleted, and that is recorded;
- a refusal fails the job at once, whatever it was doing: a spec only the
  operator can judge (InvalidSpec), a pod over the pod security level
  (PodSecurity, the operator's or the namespace's Pod Security Admission), a
  child a cluster's admission policy denied (AdmissionPolicy), a child the API
  server refused otherwise (InvalidChild); a quota
  refusal instead keeps it Pending and retries, bounded by startupTimeoutSeconds;
- a finished job is deleted once ttlSecondsAfterFinished has passed, and its
  Kueue pod group is marked finished so the queue's quota is released.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import names, rootcause, safetext
from .contract import (
    EXIT_CONFIG_ERROR,
    EXIT_OK,
    PERMANENT_REASONS,
    REASON_CONFIG_ERROR,
    REASON_PEER_LOST,
    REASON_STOPPED,
    REASON_SUCCEEDED,
    TRAINER_REASONS,
    UNCOUNTED_REASONS,
    parse_final_numbers,
    stated_reason,
)
from .spec import JobSpec

PENDING = "Pending"
RUNNING = "Running"
RESTARTING = "Restarting"
SUSPENDED = "Suspended"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL = (SUCCEEDED, FAILED)

# Condition types (Kubernetes-style: type, status, reason, message, lastTransitionTime).
CONDITION_READY = "Ready"
CONDITION_SUSPENDED = "Suspended"
CONDITION_SUCCEEDED = "Succeeded"
CONDITION_FAILED = "Failed"

# Reasons the lifecycle itself gives (the trainer's are in kuberl.core.contract).
REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
REASON_DEADLINE = "DeadlineExceeded"
REASON_STALLED = "Stalled"
REASON_POD_DELETED = "PodDeleted"
REASON_POD_LOST = "PodLost"
REASON_FORCE_DELETED = "ForceDeleted"
REASON_STALE = "StaleGeneration"
REASON_SUSPEND = "Suspended"
REASON_RESUMED = "Resumed"
REASON_GANG_RESTART = "GangRestart"
REASON_CREATING = "Creating"
REASON_BACKOFF = "BackoffWait"
REASON_OLD_PODS = "WaitingForOldPods"
REASON_ALL_RUNNING = "AllWorkersRunning"
REASON_RANK0_SUCCEEDED = "RankZeroSucceeded"
REASON_ALL_SUCCEEDED = "AllWorkersSucceeded"
REASON_WORKER0_SUCCEEDED = "WorkerZeroSucceeded"
REASON_STARTING = "ContainerCreating"
# Refusals: the job cannot run as written (see Refusal).
REASON_INVALID_SPEC = "InvalidSpec"  # a spec only the operator can judge
REASON_INVALID_CHILD = "InvalidChild"  # the API server refused an object rendered from the spec
REASON_POD_SECURITY = "PodSecurity"  # a rendered pod over the operator's pod security level, or the namespace's
REASON_ADMISSION_POLICY = "AdmissionPolicy"  # a cluster's policy (ValidatingAdmissionPolicy; Kyverno, Gatekeeper: webhooks) denied a child
REASON_QUOTA = "QuotaExceeded"  # a ResourceQuota refused a pod: retried, it may fit later
REASON_NAME_IN_USE = "NameInUse"  # a child's name is held by an object this job did not create: retried, it may go
REASON_OPERATOR_FORBIDDEN = "OperatorForbidden"  # RBAC forbids the operator a child: retried without end (not the job's fault)
REASON_API_SERVER_ERROR = "APIServerError"  # the API server failed a create (5xx: a webhook it cannot call): retried without end
REASON_CHILD_TERMINATING = "ChildTerminating"  # a child's name is held by an object being deleted (a finalizer holds it): waited for
REASON_CHILD_AWAITING_COLLECTION = "ChildAwaitingCollection"  # held by a deleted same-named job's child the garbage collector has yet to delete: waited for
RETRIED_REFUSALS = frozenset({REASON_QUOTA, REASON_NAME_IN_USE, REASON_OPERATOR_FORBIDDEN, REASON_API_SERVER_ERROR,
                              REASON_CHILD_TERMINATING, REASON_CHILD_AWAITING_COLLECTION})  # a Ready condition that keeps quoting the refusal
REASON_TTL = "TTLExpired"

HISTORY_LIMIT = 10  # restart history and force-deletion records kept in status
MESSAGE_LIMIT = 512  # characters of any message kept in status
MAX_RESTART_BACKOFF_SECONDS = 600.0
# Uncounted restarts in a row back off as kubelet's CrashLoopBackOff does: from 10 s, starting over when two
# are twice the longest wait apart (kubelet: 10 min for its 5 min cap; so a gang ran at least 10 minutes).
UNCOUNTED_FLOOR_SECONDS = 10.0
UNCOUNTED_RESET_SECONDS = 600.0 + MAX_RESTART_BACKOFF_SECONDS
MAX_BACKOFF_DOUBLINGS = 64  # any base of a millisecond or more has reached the cap long before
# How long a gang whose only failures are PeerLost waits for the rank that left to report its own reason.
PEER_LOST_CAUSE_SECONDS = 10.0
# A pod still present this long after its grace period ended is on a lost node.
FORCE_DELETE_AFTER_SECONDS = 60.0
# Requeue while waiting on something no timer covers (old pods going away).
POLL_SECONDS = 5.0
MAX_FORBIDDEN_RETRY_SECONDS = 30.0  # how long a job waits, at most, after the operator is granted what it lacked
MIN_QUOTA_RETRY_SECONDS = 1.0  # the first retry after a quota refusal; each later one waits as long as all before
TERMINATING_RETRY_SECONDS = 2.0  # how often a name held by an object being deleted is tried again: it is free when it goes


@dataclass(frozen=True)
class ObservedPod:
    """One pod as the cluster reports it. Times are POSIX seconds."""

    name: str
    rank: int
    generation: int  # the pod's kuberl.dev/restart label
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool = False
    exit_code: int | None = None  # of the trainer container, once terminated
    reason: str | None = None  # termination message's first word, else the container's terminated reason
    message: str | None = None  # the termination message
    waiting_reason: str | None = None  # ImagePullBackOff, ErrImagePull, CreateContainerConfigError, ...
    waiting_message: str | None = None
    scheduling_reason: str | None = None  # PodScheduled=False reason: Unschedulable, SchedulingGated
    scheduling_message: str | None = None
    deletion_timestamp: float | None = None  # as Kubernetes sets it: when the grace period ends
    disruption: str | None = None  # DisruptionTarget reason: PreemptionByScheduler, EvictionByEvictionAPI, ...
    # what the disruption's author said: the pod's status.reason (the kubelet's Evicted, Terminated, Preempting, which
    # share one DisruptionTarget reason, TerminationByKubelet) and the condition's message (which resource ran low)
    disruption_detail: str | None = None
    start_time: float | None = None
    finished_at: float | None = None  # the trainer container's terminated.finishedAt
    group_finished: bool = False  # marked not retriable in its Kueue pod group (the group may end)

    @property
    def started(self) -> bool:
        """Its container ran: a crash after this is the workload's, not start-up's."""
        return self.phase in ("Running", "Succeeded") or self.exit_code is not None

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running", "Unknown")


@dataclass(frozen=True)
class Rank0Progress:
    """Rank 0's metrics as last scraped; `changed_at` is when timesteps last moved."""

    generation: int
    timesteps: int
    changed_at: float
    succeeded: bool = False  # rank 0 reported the success criterion met
    steps_per_second: float | None = None
    episode_return_mean: float | None = None
    eval_return: float | None = None


def next_progress(previous: Rank0Progress | None, generation: int, timesteps: int, now: float, **gauges: Any) -> Rank0Progress:
    """Rank 0's latest reading; `changed_at` moves only when the counter moves
    (or a new generation reports), which is what stall detection measures."""
    moved = previous is None or previous.generation != generation or previous.timesteps != timesteps
    return Rank0Progress(generation, timesteps, now if moved else previous.changed_at, **gauges)


def progress_from_status(status: dict) -> Rank0Progress | None:
    """The last reading decide() recorded, so a restarted operator keeps the stall clock; None when there is none,
    or none this operator can read (see _initial_status)."""
    seen = (status or {}).get("rank0Progress")
    if not isinstance(seen, dict):
        return None
    generation, timesteps, changed = seen.get("generation"), seen.get("timesteps"), readable_time(seen.get("changedTime"))
    if not (_whole(generation) and _whole(timesteps)) or changed is None:
        return None
    return Rank0Progress(int(generation), int(timesteps), changed)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Refusal:
    """Why the job cannot run as written: found by the operator (a spec it alone can judge, a pod
    over the pod security level) or answered by the API server to a create (a refused child).
    `retryable`: the same request may be admitted later (a ResourceQuota refusal, a name that
    another object holds now). `deleting`: the API server refused a delete, not a create (RBAC
    without `delete` on pods): what was to go stays, and the delete is asked again. `patching`: RBAC
    refused the patch that marks a finished job's Kueue pod group finished (`patch` on pods): the
    job's phase stands, Kueue keeps the group's quota, and the patch is asked again."""

    reason: str
    message: str
    retryable: bool = False
    deleting: bool = False
    patching: bool = False


@dataclass(frozen=True)
class CreatePods:
    generation: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]
    reason: str
    force: bool = False  # grace period 0: the node is gone


@dataclass(frozen=True)
class DeleteJob:
    """Delete the job itself (its TTL after finishing has passed); owner references take its children."""

    reason: str


@dataclass(frozen=True)
class FinishPodGroup:
    """Mark these pods not retriable in their Kueue pod group: Kueue then finishes the group and
    releases its quota (a pod already marked is left alone)."""

    pods: tuple[str, ...]


@dataclass(frozen=True)
class CheckNetworkPolicy:
    """Bring the job's existing NetworkPolicy to the form this operator renders (its own and the
    monitoring namespace admitted): a policy written by an operator elsewhere, or edited by hand,
    would keep the scrapes of a running job out, and nothing would say why."""


@dataclass(frozen=True)
class Wait:
    """Reconcile again after this long (sooner if something changes)."""

    seconds: float


@dataclass(frozen=True)
class Fail:
    reason: str
    message: str


@dataclass(frozen=True)
class Succeed:
    reason: str
    message: str


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


Action = CreatePods | DeletePods | DeleteJob | FinishPodGroup | CheckNetworkPolicy | Wait | Fail | Succeed | Event


@dataclass(frozen=True)
class Decision:
    phase: str
    status: dict
    actions: tuple[Action, ...]

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]

    @property
    def requeue_after(self) -> float | None:
        waits = self.of(Wait)
        return waits[0].seconds if waits else None


def rfc3339(t: float) -> str:
    """Kubernetes' time format; sub-second precision only when there is some."""
    moment = datetime.fromtimestamp(t, tz=UTC)
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def parse_time(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def readable_time(text: object) -> float | None:
    """A timestamp of the job's status, or None where it holds none this operator can read."""
    try:
        return parse_time(text) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


def termination_reason(message: str | None) -> str | None:
    """The reason a container states: only a line the trainer marked
    (contract.TERMINATION_MARKER) naming one of the contract's reasons; a log
    tail, whatever its first word, states none."""
    stated = stated_reason(message)
    return stated[0] if stated else None


# Room left in MESSAGE_LIMIT for "worker N (<pod name>): " and a suffix around a pod's message.
_POD_MESSAGE_BUDGET = MESSAGE_LIMIT - 128


def _clip_tail(text: str, limit: int = _POD_MESSAGE_BUDGET, source: str = "") -> str:
    """The last lines of a log that fit in `limit` characters: the exception
    and torchrun's root cause come last. With a `source`, each line after the
    first starts with it (safetext.continued), counted in the limit."""
    lines = text.strip().splitlines()
    kept: list[str] = []
    margin = len(source) + 1 if source else 0
    size = 1  # the leading "…" when lines were dropped
    for line in reversed(lines):
        if size + len(line) + 1 + margin > limit:
            break
        kept.append(line)
        size += len(line) + 1 + margin
    if len(kept) == len(lines):
        clipped = "\n".join(lines)
    elif not kept:
        clipped = "…" + lines[-1][-(limit - 1):]
    else:
        clipped = "…\n" + "\n".join(reversed(kept))
    return safetext.continued(clipped, source) if source else clipped


def _watchdog_abort(message: str | None) -> bool:
    return not stated_reason(message) and rootcause.nccl_watchdog(message) is not None


def _container_message(message: str | None) -> str | None:
    """What a terminated container said: the trainer's stated line without
    its marker, else the end of its log."""
    if not message or not message.strip():
        return None
    stated = stated_reason(message)
    if stated:
        return stated[1]
    if (abort := rootcause.nccl_watchdog(message)) is not None:
        return rootcause.describe_watchdog(abort)
    return rootcause.describe(message) or _clip_tail(message)  # under torchrun: the failing rank and its exception


def _clip(text: str) -> str:
    """A message as status and Events keep it: escaped first (safetext), then cut."""
    text = safetext.escape(text)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


clip = _clip  # the shell's own messages in status (jobstatus) are kept as decide's are


@dataclass
class _Plan:
    """The status being written and the actions gathered, for one decision."""

    status: dict
    now: float
    actions: list = field(default_factory=list)
    timers: list = field(default_factory=list)

    @property
    def generation(self) -> int:
        return self.status["generation"]

    def get_time(self, key: str) -> float | None:
        return parse_time(self.status.get(key))

    def set_time(self, key: str, t: float | None) -> None:
        self.status[key] = rfc3339(t) if t is not None else None

    def condition(self, type_: str, true: bool, reason: str, message: str = "") -> None:
        """Set a condition; lastTransitionTime moves only when its status flips."""
        value = "True" if true else "False"
        conditions = self.status["conditions"]
        old = next((c for c in conditions if c["type"] == type_), None)
        moved = old is None or old["status"] != value
        new = {
            "type": type_,
            "status": value,
            "reason": safetext.one_line(reason),
            "message": _clip(message),
            "lastTransitionTime": rfc3339(self.now) if moved else old["lastTransitionTime"],
        }
        self.status["conditions"] = [c for c in conditions if c["type"] != type_] + [new]

    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(Event(type_, safetext.one_line(reason), _clip(message)))

    def delete(self, pods: list[ObservedPod], reason: str) -> None:
        """Delete pods not already going; never twice the same request."""
        going = [p.name for p in pods if p.deletion_timestamp is None]
        if going:
            self.actions.append(DeletePods(tuple(sorted(going)), reason))

    def wake_at(self, t: float | None) -> None:
        if t is not None:
            self.timers.append(t)

    def finish(self, phase: str) -> str:
        self.status["phase"] = phase
        return phase

    def decision(self) -> Decision:
        actions = list(self.actions)
        if self.timers:
            actions.append(Wait(max(0.0, min(self.timers) - self.now)))
        return Decision(self.status["phase"], self.status, tuple(actions))

    def ready_reason(self) -> str | None:
        return next((c["reason"] for c in self.status["conditions"] if c["type"] == CONDITION_READY), None)


STATUS_TIMES = ("startTime", "completionTime", "generationStartTime", "gangRunningTime", "nextStartTime")
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastTransitionTime")


def _initial_status(status: dict) -> dict:
    """The status decide() starts from. What this operator cannot read of it (a timestamp that is no RFC 3339
    time, a progress record or a condition without what it records) is left out, as if never written, so it is
    written anew: the CRD's schema types only the status's top-level fields, and a status restored from a backup,
    or written by another version or by hand, crashed every reconcile of its job, which then said nothing."""
    out = copy.deepcopy(status or {})
    for key in STATUS_TIMES:
        if out.get(key) is not None and readable_time(out[key]) is None:
            out[key] = None
    if out.get("rank0Progress") is not None and progress_from_status(out) is None:
        out["rank0Progress"] = None
    if isinstance(out.get("conditions"), list):
        out["conditions"] = [c for c in out["conditions"] if isinstance(c, dict)
                             and all(isinstance(c.get(f), str) for f in CONDITION_FIELDS)
                             and readable_time(c["lastTransitionTime"]) is not None]
    defaults = {"phase": PENDING, "generation": 0, "restarts": 0, "startupRetries": 0, "restartHistory": [], "conditions": []}
    for key, value in defaults.items():
        if out.get(key) is None:
            out[key] = value
    out.setdefault("startTime", None)
    out.setdefault("completionTime", None)
    return out


def decide(
    spec: JobSpec | None,
    status: dict,
    pods: list[ObservedPod],
    rank0: Rank0Progress | None,
    now: float,
    *,
    refusal: Refusal | None = None,
    networkpolicy_checked: bool = True,
) -> Decision:
    """The next phase, the status to write and the actions to take.

    `spec` is None only with a refusal (a spec that does not parse); `refusal` is what
    stops the job from running as written, if anything does. `networkpolicy_checked`:
    whether this operator has compared the job's NetworkPolicy with its own since it
    started (a running job's policy may predate it)."""
    if spec is None and (refusal is None or refusal.retryable):
        raise ValueError("decide needs a spec, or a refusal that ends the job")
    plan = _Plan(_initial_status(status), now)
    phase = plan.status["phase"]
    current = [p for p in pods if p.generation == plan.generation]
    stale = [p for p in pods if p.generation != plan.generation]

    plan.delete(stale, REASON_STALE)
    _force_delete_stuck(plan, pods)
    _record_workers(plan, current)
    _record_progress(plan, rank0)

    if phase in TERMINAL:
        plan.delete([p for p in current if p.active], phase)
        plan.finish(phase)
    elif refusal is not None and not refusal.retryable:
        _end(plan, current, FAILED, refusal.reason, refusal.message)
    elif spec.run_policy.suspend:
        _suspend(plan, current, phase)
    else:
        if phase == SUSPENDED:
            phase = _resume(plan)
        _run(plan, spec, phase, current, stale, rank0, None if refusal is not None and (refusal.deleting or refusal.patching) else refusal)
    if plan.status["phase"] in TERMINAL:
        _after_the_end(plan, spec, pods)
    elif plan.status["phase"] == RUNNING and not networkpolicy_checked:
        plan.actions.append(CheckNetworkPolicy())
    if refusal is not None and refusal.deleting:
        _delete_refused(plan, spec, refusal)
    if refusal is not None and refusal.patching:
        _patch_refused(plan, spec, refusal)
    return plan.decision()


def _patch_refused(plan: _Plan, spec: JobSpec | None, refusal: Refusal) -> None:
    """The operator may not mark the finished job's Kueue pod group (RBAC): its phase stands, the mark is
    not asked again in this reconcile but after the same delay as a refused delete, with a Warning saying
    that Kueue keeps the group's quota meanwhile."""
    delay = _forbidden_retry_seconds(spec)
    plan.actions[:] = [a for a in plan.actions if not isinstance(a, FinishPodGroup)]
    plan.event("Warning", refusal.reason, f"{refusal.message} (asked again every {delay:g}s until the operator may)")
    plan.wake_at(plan.now + delay)


def _forbidden_retry_seconds(spec: JobSpec | None) -> float:
    """How often a call RBAC refused is asked again: restartBackoffSeconds, from 1 to 30 s."""
    base = spec.run_policy.restart_backoff_seconds if spec is not None else 0.0
    return min(max(MIN_QUOTA_RETRY_SECONDS, base), MAX_FORBIDDEN_RETRY_SECONDS)


def _delete_refused(plan: _Plan, spec: JobSpec | None, refusal: Refusal) -> None:
    """The operator may not delete (RBAC): what was to go stays, and no delete is asked again in this
    reconcile; it is asked again every restartBackoffSeconds (1 to 30 s). The Ready condition says why
    where each reconcile sets it anew (a job not finished), instead of "waiting for old pods to go"."""
    delay = _forbidden_retry_seconds(spec)
    plan.actions[:] = [a for a in plan.actions if not isinstance(a, (DeletePods, DeleteJob))]
    if plan.status["phase"] not in TERMINAL:
        plan.condition(CONDITION_READY, False, refusal.reason, refusal.message)
    plan.event("Warning", refusal.reason, f"{refusal.message} (asked again every {delay:g}s until the operator may)")
    plan.wake_at(plan.now + delay)


def _after_the_end(plan: _Plan, spec: JobSpec | None, pods: list[ObservedPod]) -> None:
    """A finished job releases its Kueue quota, then goes when its TTL has passed."""
    if spec is None:
        return
    if spec.queue_name:
        unmarked = tuple(sorted(p.name for p in pods if p.deletion_timestamp is None and not p.group_finished))
        if unmarked:
            plan.actions.insert(0, FinishPodGroup(unmarked))
    ttl = spec.run_policy.ttl_seconds_after_finished
    finished = plan.get_time("completionTime")
    if ttl is None or finished is None:
        return
    if plan.now >= finished + ttl:
        plan.actions.append(DeleteJob(REASON_TTL))
    else:
        plan.wake_at(finished + ttl)


def _run(
    plan: _Plan,
    spec: JobSpec,
    phase: str,
    current: list[ObservedPod],
    stale: list[ObservedPod],
    rank0: Rank0Progress | None,
    refusal: Refusal | None,
) -> str:
    """A job that should be running: check it, restart it, or start it."""
    policy = spec.run_policy
    now = plan.now
    live = {p.rank: p for p in current if p.deletion_timestamp is None}
    if rank0 is not None and rank0.generation != plan.generation:
        rank0 = None  # an older gang's counter says nothing about this one

    config_error = next((p for p in sorted(current, key=lambda p: p.rank) if _is_config_error(p)), None)
    if config_error is not None:
        return _fail(plan, current, config_error.reason or REASON_CONFIG_ERROR, _pod_says(config_error))

    success = _success(spec, live, rank0)
    if success is not None:
        return _succeed(plan, current, *success)

    start = plan.get_time("startTime")
    if policy.active_deadline_seconds is not None and start is not None:
        deadline = start + policy.active_deadline_seconds
        if now >= deadline:
            return _fail(plan, current, REASON_DEADLINE, f"the job ran longer than activeDeadlineSeconds={policy.active_deadline_seconds}")
        plan.wake_at(deadline)

    fully_started = plan.get_time("gangRunningTime") is not None
    broken = _broken(spec, current, live, fully_started, rank0)
    if broken is not None and broken.reason == REASON_PEER_LOST and (due := _cause_due(live, now)) is not None:
        # the same words at each reconcile of the wait: a status written once
        plan.condition(CONDITION_READY, False, broken.reason, f"{broken.message}; waiting until {rfc3339(due)} for the rank"
                       " that left to report why")
        plan.wake_at(due)
        return plan.finish(phase)
    if broken is not None:
        return _restart(plan, spec, current, broken.reason, broken.message, broken.counted, broken.startup)

    missing = [r for r in range(spec.workers) if r not in live]
    if missing and refusal is not None:
        return _not_admitted(plan, spec, current, phase, refusal)
    if missing:
        _create(plan, spec, stale, missing)
        return plan.finish(phase)

    if fully_started or all(p.started for p in live.values()):  # a pod gone Unknown after that is no start-up problem
        if not fully_started:
            plan.set_time("gangRunningTime", now)
            plan.event("Normal", REASON_ALL_RUNNING, f"generation {plan.generation}: all {spec.workers} workers running")
        plan.condition(CONDITION_READY, True, REASON_ALL_RUNNING, f"generation {plan.generation}: {spec.workers} workers running")
        return _watch_for_stall(plan, spec, current, live, rank0)

    blocked = _startup_problem(live)
    created = plan.get_time("generationStartTime")
    if created is None:  # unreadable, or a status that never had it: timed from now on, or it never times out
        created = now
        plan.set_time("generationStartTime", now)
    if now >= created + policy.startup_timeout_seconds:
        message = f"not all workers running after startupTimeoutSeconds={policy.startup_timeout_seconds}: {blocked[1]}"
        return _restart(plan, spec, current, blocked[0], message, counted=False, startup=True)
    plan.condition(CONDITION_READY, False, blocked[0], blocked[1])
    plan.wake_at(created + policy.startup_timeout_seconds)
    return plan.finish(phase)


def counts_toward_backoff(reason: str) -> bool:
    """Whether a started gang's failure for `reason` spends backoffLimit: a crash does; a checkpoint volume
    that failed under the job (contract.UNCOUNTED_REASONS) does not, so a long storage outage cannot fail
    it (its restarts back off as disruptions' do)."""
    return reason not in UNCOUNTED_REASONS


def _is_config_error(pod: ObservedPod) -> bool:
    return pod.reason in PERMANENT_REASONS or (pod.exit_code == EXIT_CONFIG_ERROR and pod.reason is None)


def _pod_text(pod: ObservedPod) -> str:
    """What the pod said, each line after the first marked `[worker N]`: in status, Events and
    `kuberl run`'s output a line it wrote cannot pass for one of kuberl's own."""
    return _clip_tail(pod.message or "", source=f"[worker {pod.rank}]")


def _pod_says(pod: ObservedPod) -> str:
    if not (pod.message and pod.message.strip()):
        return f"worker {pod.rank} ({pod.name}): exit code {pod.exit_code}"
    # a log tail (a script of the user's states no reason): its exit code may be all that says why
    code = "" if pod.reason in TRAINER_REASONS or pod.exit_code is None else f" exit code {pod.exit_code}"
    return f"worker {pod.rank} ({pod.name}){code}: {_pod_text(pod)}"


def _success(spec: JobSpec, live: dict[int, ObservedPod], rank0: Rank0Progress | None) -> tuple[str, str] | None:
    """Rank 0 exited 0 having reported the criterion met, every rank exited 0, or (successPolicy
    Worker0) worker 0 exited 0."""
    first = live.get(0)
    reported = first is not None and (first.reason == REASON_SUCCEEDED or (rank0 is not None and rank0.succeeded))
    if reported and first.phase == "Succeeded" and first.exit_code in (EXIT_OK, None):
        return REASON_RANK0_SUCCEEDED, _pod_text(first) if first.message and first.message.strip() else "rank 0 reported success"
    if len(live) == spec.workers and all(p.phase == "Succeeded" and p.reason != REASON_STOPPED for p in live.values()):
        return REASON_ALL_SUCCEEDED, f"all {spec.workers} workers exited 0"
    exited_zero = first is not None and first.phase == "Succeeded" and first.reason != REASON_STOPPED
    if spec.run_policy.success_policy == "Worker0" and exited_zero:
        # a PyTorchJob with a Master succeeded once its Master did (training-operator,
        # pytorchjob_controller.go UpdateJobStatus); the others' exits, failed ones included, are not waited for
        return REASON_WORKER0_SUCCEEDED, "worker 0 exited 0 (runPolicy.successPolicy: Worker0)"
    return None


@dataclass(frozen=True)
class Breakage:
    """Why a gang cannot go on: the restart's reason and message; `counted` toward backoffLimit
    (a crash or stall of a started gang), `startup` (a failure before all workers ran)."""

    reason: str
    message: str
    counted: bool
    startup: bool


def _broken(
    spec: JobSpec,
    current: list[ObservedPod],
    live: dict[int, ObservedPod],
    fully_started: bool,
    rank0: Rank0Progress | None,
) -> Breakage | None:
    """Why the current gang cannot go on, or None."""
    if rank0 is not None and rank0.succeeded:
        return None  # the others may end first; rank 0's own exit decides
    disrupted = [p for p in current if p.disruption and p.phase != "Succeeded"]
    if disrupted:
        pod = min(disrupted, key=lambda p: p.rank)
        detail = f" ({pod.disruption_detail})" if pod.disruption_detail else ""
        return Breakage(pod.disruption, f"worker {pod.rank} ({pod.name}) disrupted: {pod.disruption}{detail}", counted=False,
                        startup=False)
    deleted = [p for p in current if p.deletion_timestamp is not None and p.phase != "Succeeded"]
    if deleted:
        pod = min(deleted, key=lambda p: p.rank)
        return Breakage(REASON_POD_DELETED, f"worker {pod.rank} ({pod.name}) was deleted", counted=False, startup=False)
    stopped = [p for p in live.values() if p.phase == "Succeeded" and p.reason == REASON_STOPPED]
    if stopped:  # signalled by someone else (a node shutting down): resumable, not the workload's fault
        pod = min(stopped, key=lambda p: p.rank)
        return Breakage(REASON_STOPPED, _pod_says(pod), counted=False, startup=False)
    failed = [p for p in live.values() if p.phase == "Failed"]
    if failed:
        # PeerLost is the echo of another rank's failure; name the cause. A script of the user's states no
        # reason: the first to fail is the cause (torchrun's "first observed failure"), the lowest rank on a tie.
        pod = min(failed, key=lambda p: (p.reason == REASON_PEER_LOST, p.finished_at or math.inf, p.rank))
        reason = pod.reason or "Error"
        if fully_started or (len(live) == spec.workers and all(p.started for p in live.values())):
            return Breakage(reason, _pod_says(pod), counted=counts_toward_backoff(reason), startup=False)
        return Breakage(reason, _pod_says(pod) + " (before all workers were running)", counted=False, startup=True)
    lost = [r for r in range(spec.workers) if r not in live]
    if fully_started and lost:
        return Breakage(REASON_POD_LOST, f"worker {lost[0]} ({len(lost)} in all) disappeared", counted=False, startup=False)
    return None


def _cause_due(live: dict[int, ObservedPod], now: float) -> float | None:
    """Until when to wait for the cause of a gang whose only failures are PeerLost (the echo of another rank's end)
    while a pod of it has not failed yet, or None. Each kubelet reports its own pod when it notices: the cause (an
    OOMKilled, an uncounted CheckpointVolumeUnavailable) often reached the API server after its echo, and a restart
    then counted PeerLost and never recorded why. Waited for up to the kubelet's status sync period
    (pkg/kubelet/status/status_manager.go, syncPeriod: 10 s) from the echo's finishedAt, as its kubelet's clock says;
    a clock far ahead of the API server's is not waited on."""
    failed = [p for p in live.values() if p.phase == "Failed"]
    if not failed or any(p.reason != REASON_PEER_LOST for p in failed) or not any(p.active for p in live.values()):
        return None
    ended = min((p.finished_at for p in failed if p.finished_at is not None), default=None)
    if ended is None or ended > now + PEER_LOST_CAUSE_SECONDS:
        return None
    due = ended + PEER_LOST_CAUSE_SECONDS
    return due if now < due else None


def _startup_problem(live: dict[int, ObservedPod]) -> tuple[str, str]:
    """Why the gang is not up yet: the first informative reason by rank."""
    waiting = []
    for pod in sorted(live.values(), key=lambda p: p.rank):
        if pod.started:
            continue
        if pod.scheduling_reason:
            waiting.append((0, pod, pod.scheduling_reason, pod.scheduling_message))
        elif pod.waiting_reason and pod.waiting_reason not in (REASON_STARTING, "PodInitializing"):
            waiting.append((0, pod, pod.waiting_reason, pod.waiting_message))
        else:
            waiting.append((1, pod, pod.waiting_reason or REASON_STARTING, pod.waiting_message))
    _, pod, reason, message = min(waiting, key=lambda w: (w[0], w[1].rank))
    count = len(waiting)
    detail = f": {message}" if message else ""
    return reason, f"worker {pod.rank} ({pod.name}) {reason}{detail}; {count} worker(s) not running"


def _watch_for_stall(
    plan: _Plan, spec: JobSpec, current: list[ObservedPod], live: dict[int, ObservedPod], rank0: Rank0Progress | None
) -> str:
    """Rank 0's counter must move. The clock starts at this generation's first
    reading: before it, imports and rendezvous are bounded by the trainer's own
    rendezvous timeout, and a trainer that exports no counter is never judged."""
    timeout = spec.run_policy.stall_timeout_seconds
    up = plan.get_time("gangRunningTime")
    if live.get(0) is None or live[0].phase != "Running" or rank0 is None or rank0.generation != plan.generation:
        return plan.finish(RUNNING)
    last_moved = max(up, rank0.changed_at)
    if plan.now >= last_moved + timeout:
        at = f" at {rank0.timesteps} timesteps"
        message = f"rank 0's step counter has not moved for {plan.now - last_moved:.0f}s{at} (stallTimeoutSeconds={timeout})"
        return _restart(plan, spec, current, REASON_STALLED, message, counted=True, startup=False)
    plan.wake_at(last_moved + timeout)
    return plan.finish(RUNNING)


def _create(plan: _Plan, spec: JobSpec, stale: list[ObservedPod], missing: list[int]) -> None:
    """Create the missing ranks once the old gang is gone and the backoff is over."""
    if stale:
        plan.condition(CONDITION_READY, False, REASON_OLD_PODS, f"waiting for {len(stale)} pod(s) of an older generation to go")
        plan.wake_at(plan.now + POLL_SECONDS)
        return
    not_before = plan.get_time("nextStartTime")
    # Between retries of a refused create the condition keeps quoting the refusal: that is what the job waits for.
    quota_wait = plan.ready_reason() in RETRIED_REFUSALS
    if not_before is not None and plan.now < not_before:
        if not quota_wait:
            plan.condition(CONDITION_READY, False, REASON_BACKOFF, f"generation {plan.generation} starts in {not_before - plan.now:.0f}s")
        plan.wake_at(not_before)
        return
    plan.actions.append(CreatePods(plan.generation, tuple(missing)))
    if plan.status.get("generationStartTime") is None:
        plan.set_time("generationStartTime", plan.now)
        plan.event("Normal", REASON_CREATING, f"generation {plan.generation}: creating {len(missing)} pod(s)")
    if plan.status.get("startTime") is None:
        plan.set_time("startTime", plan.now)
    if not quota_wait:
        plan.condition(CONDITION_READY, False, REASON_CREATING, f"generation {plan.generation}: creating {len(missing)} pod(s)")
    plan.wake_at(plan.get_time("generationStartTime") + spec.run_policy.startup_timeout_seconds)


def _not_admitted(plan: _Plan, spec: JobSpec, current: list[ObservedPod], phase: str, refusal: Refusal) -> str:
    """A create refused for now (quota, a name in use): wait and retry, each wait as long as all before it,
    until startupTimeoutSeconds after the generation's first create; then the job fails."""
    if refusal.reason in (REASON_OPERATOR_FORBIDDEN, REASON_API_SERVER_ERROR):
        return _operator_forbidden(plan, spec, phase, refusal)
    if refusal.reason in (REASON_CHILD_TERMINATING, REASON_CHILD_AWAITING_COLLECTION):
        return _child_terminating(plan, phase, refusal)
    timeout = spec.run_policy.startup_timeout_seconds
    created = plan.get_time("generationStartTime") or plan.now
    deadline = created + timeout
    if plan.now >= deadline:
        return _fail(plan, current, refusal.reason, f"not created within startupTimeoutSeconds={timeout}: {refusal.message}")
    delay = min(max(MIN_QUOTA_RETRY_SECONDS, spec.run_policy.restart_backoff_seconds, plan.now - created),
                MAX_RESTART_BACKOFF_SECONDS, deadline - plan.now)
    plan.set_time("nextStartTime", plan.now + delay)
    plan.condition(CONDITION_READY, False, refusal.reason, refusal.message)
    plan.event("Warning", refusal.reason, f"{refusal.message} (retried until startupTimeoutSeconds={timeout})")
    plan.wake_at(plan.now + delay)
    return plan.finish(phase)


def _operator_forbidden(plan: _Plan, spec: JobSpec, phase: str, refusal: Refusal) -> str:
    """RBAC forbids the operator a child, or the API server fails its create (a webhook it cannot call): no
    fault of the job's, so no deadline fails it. It waits, saying why, and retries every restartBackoffSeconds
    (1 to 30 s); the generation's startup clock starts again at each refusal, so the startup timeout counts
    from the create that is let through."""
    delay = min(max(MIN_QUOTA_RETRY_SECONDS, spec.run_policy.restart_backoff_seconds), MAX_FORBIDDEN_RETRY_SECONDS)
    plan.set_time("generationStartTime", plan.now)
    plan.set_time("nextStartTime", plan.now + delay)
    plan.condition(CONDITION_READY, False, refusal.reason, refusal.message)
    until = "the operator may" if refusal.reason == REASON_OPERATOR_FORBIDDEN else "the API server creates it"
    plan.event("Warning", refusal.reason, f"{refusal.message} (retried every {delay:g}s until {until})")
    plan.wake_at(plan.now + delay)
    return plan.finish(phase)


def _child_terminating(plan: _Plan, phase: str, refusal: Refusal) -> str:
    """A child's name is held by an object going away (an older job's of this name: a finalizer holds it, or the
    garbage collector has yet to delete it): no fault of the job's, so no deadline; tried again every TERMINATING_RETRY_SECONDS (a ConfigMap's or a PVC's
    going wakes no watch of ours), and the startup clock counts from the create that is let through."""
    plan.set_time("generationStartTime", plan.now)
    plan.set_time("nextStartTime", plan.now + TERMINATING_RETRY_SECONDS)
    plan.condition(CONDITION_READY, False, refusal.reason, refusal.message)
    plan.event("Warning", refusal.reason, refusal.message)
    plan.wake_at(plan.now + TERMINATING_RETRY_SECONDS)
    return plan.finish(phase)


def restart_delay(base_seconds: float, failures: int) -> float:
    """`base_seconds` doubled per earlier failure, capped. The exponent is capped too:
    backoffLimit and maxStartupRetries allow 2,000 failures, and 2.0 ** 1024 overflows a float."""
    return min(base_seconds * 2.0 ** min(failures, MAX_BACKOFF_DOUBLINGS), MAX_RESTART_BACKOFF_SECONDS)


def _uncounted_delay(plan: _Plan, base_seconds: float) -> float:
    """The wait before a restart no budget counts (a disruption, a deleted pod, a stated `Stopped`):
    `base_seconds` for the first in a while, then doubling from at least UNCOUNTED_FLOOR_SECONDS per
    such restart in a row (less than UNCOUNTED_RESET_SECONDS after the one before; start-up retries,
    which have their own budget and backoff, neither count nor break the row). A container can state
    `Stopped` itself: without this a job could restart its gang without end, and with
    restartBackoffSeconds=0 without pause."""
    in_a_row, later = 0, plan.now
    for entry in reversed(plan.status["restartHistory"]):
        try:
            when = parse_time(entry.get("time"))
        except (AttributeError, TypeError, ValueError):
            break
        if when is None or entry.get("counted") is not False or entry.get("reason") == REASON_SUSPEND \
                or later - when >= UNCOUNTED_RESET_SECONDS:
            break
        in_a_row, later = in_a_row + (not entry.get("startup")), when
    return base_seconds if in_a_row == 0 else restart_delay(max(base_seconds, UNCOUNTED_FLOOR_SECONDS), in_a_row - 1)


def _restart(
    plan: _Plan, spec: JobSpec, current: list[ObservedPod], reason: str, message: str, counted: bool, startup: bool
) -> str:
    """Record generation N+1, then delete generation N; or fail when the budget is spent."""
    policy = spec.run_policy
    status = plan.status
    if counted and status["restarts"] >= policy.backoff_limit:
        _record_history(plan, plan.generation, reason, message, counted, startup)  # the last failure too (backoffLimit 0)
        return _fail(plan, current, REASON_BACKOFF_LIMIT, f"{status['restarts']} restart(s) spent (backoffLimit={policy.backoff_limit}); last: {reason}: {message}")
    if startup and status["startupRetries"] >= policy.max_startup_retries:
        return _fail(plan, current, reason, f"{message}; {status['startupRetries']} start-up retries spent (maxStartupRetries={policy.max_startup_retries})")
    if counted or startup:
        delay = restart_delay(policy.restart_backoff_seconds, status["restarts"] + status["startupRetries"])
    else:
        delay = _uncounted_delay(plan, policy.restart_backoff_seconds)
    old = plan.generation
    _record_history(plan, old, reason, message, counted, startup)
    status["generation"] = old + 1
    status["restarts"] += int(counted)
    status["startupRetries"] += int(startup)
    plan.set_time("nextStartTime", plan.now + delay)
    plan.set_time("generationStartTime", None)
    plan.set_time("gangRunningTime", None)
    plan.delete(current, reason)
    how = "counted" if counted else "not counted"
    plan.condition(CONDITION_READY, False, reason, message)
    plan.event("Warning", REASON_GANG_RESTART, f"generation {old} -> {old + 1} in {delay:g}s ({how}): {reason}: {message}")
    plan.wake_at(plan.now + delay)
    return plan.finish(RESTARTING)


def _fail(plan: _Plan, current: list[ObservedPod], reason: str, message: str) -> str:
    return _end(plan, current, FAILED, reason, message)


def _succeed(plan: _Plan, current: list[ObservedPod], reason: str, message: str) -> str:
    final = parse_final_numbers(message)
    if final is not None:  # rank 0's last numbers, newer than any scrape
        progress = dict(plan.status.get("progress") or {})
        progress["timesteps"], progress["evalReturn"] = final[0], final[1]
        plan.status["progress"] = progress
    return _end(plan, current, SUCCEEDED, reason, message)


def _end(plan: _Plan, current: list[ObservedPod], phase: str, reason: str, message: str) -> str:
    """A terminal phase: completion time, conditions, the gang deleted, one event."""
    failed = phase == FAILED
    plan.set_time("completionTime", plan.now)
    plan.condition(CONDITION_READY, False, reason, message)
    plan.condition(CONDITION_FAILED if failed else CONDITION_SUCCEEDED, True, reason, message)
    plan.delete([p for p in current if p.active], reason)
    plan.actions.append((Fail if failed else Succeed)(reason, _clip(message)))
    plan.event("Warning" if failed else "Normal", reason, message)
    return plan.finish(phase)


def _suspend(plan: _Plan, current: list[ObservedPod], phase: str) -> str:
    """Delete the gang and keep the job; resuming starts a new generation."""
    if phase != SUSPENDED:
        if plan.status.get("generationStartTime") is not None:
            _record_history(plan, plan.generation, REASON_SUSPEND, "runPolicy.suspend set", counted=False)
            plan.status["generation"] += 1
        plan.set_time("generationStartTime", None)
        plan.set_time("gangRunningTime", None)
        plan.set_time("nextStartTime", None)
        plan.condition(CONDITION_SUSPENDED, True, REASON_SUSPEND, "runPolicy.suspend is true")
        plan.event("Normal", REASON_SUSPEND, "job suspended: pods deleted")
    plan.condition(CONDITION_READY, False, REASON_SUSPEND, "runPolicy.suspend is true")  # anew: a refused delete may have said why not
    plan.delete(current, REASON_SUSPEND)
    return plan.finish(SUSPENDED)


def _resume(plan: _Plan) -> str:
    plan.condition(CONDITION_SUSPENDED, False, REASON_RESUMED, "runPolicy.suspend is false")
    plan.set_time("startTime", plan.now)  # as a Job's: the deadline counts from the resume
    plan.event("Normal", REASON_RESUMED, f"job resumed: generation {plan.generation}")
    return PENDING


def _record_history(plan: _Plan, generation: int, reason: str, message: str, counted: bool, startup: bool = False) -> None:
    entry = {"generation": generation, "reason": reason, "message": _clip(message), "time": rfc3339(plan.now), "counted": counted}
    if startup:
        entry["startup"] = True
    plan.status["restartHistory"] = (plan.status["restartHistory"] + [entry])[-HISTORY_LIMIT:]


def _force_delete_stuck(plan: _Plan, pods: list[ObservedPod]) -> None:
    """A pod past its grace period by this much is on a node that is gone."""
    stuck = []
    for pod in pods:
        if pod.deletion_timestamp is None:
            continue
        due = pod.deletion_timestamp + FORCE_DELETE_AFTER_SECONDS
        if plan.now < due:
            plan.wake_at(due)
        else:
            stuck.append(pod)
    if not stuck:
        return
    plan.actions.append(DeletePods(tuple(sorted(p.name for p in stuck)), REASON_FORCE_DELETED, force=True))
    records = list(plan.status.get("forceDeleted") or [])
    for pod in stuck:
        if any(r["pod"] == pod.name and r["generation"] == pod.generation for r in records):
            continue
        records.append({"pod": pod.name, "generation": pod.generation, "time": rfc3339(plan.now)})
        plan.event("Warning", REASON_FORCE_DELETED, f"{pod.name} (generation {pod.generation}) still terminating {FORCE_DELETE_AFTER_SECONDS:g}s after its grace period: force-deleted")
    plan.status["forceDeleted"] = records[-HISTORY_LIMIT:]


def _record_workers(plan: _Plan, current: list[ObservedPod]) -> None:
    going = [p for p in current if p.deletion_timestamp is None]
    plan.status["workers"] = {
        "active": sum(p.active for p in going),
        "ready": sum(p.ready and p.phase == "Running" for p in going),
        "succeeded": sum(p.phase == "Succeeded" for p in going),
        "failed": sum(p.phase == "Failed" for p in going),
    }


def _record_progress(plan: _Plan, rank0: Rank0Progress | None) -> None:
    if rank0 is None:
        return
    plan.status["rank0Progress"] = {"generation": rank0.generation, "timesteps": rank0.timesteps, "changedTime": rfc3339(rank0.changed_at)}
    plan.status["progress"] = {
        "timesteps": rank0.timesteps,
        "stepsPerSecond": rank0.steps_per_second,
        "episodeReturnMean": rank0.episode_return_mean,
        "evalReturn": rank0.eval_return,
    }


def _label_number(value: Any, default: int) -> int | None:
    """A rank or restart label as kuberl writes it (decimal digits); None for anything else. A pod
    relabelled `kuberl.dev/rank=abc` made every reconcile of its job fail (int() raised), so the
    job's status froze while the operator logged a traceback every 5 s."""
    if value is None:
        return default
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None


def _one_line(value: Any) -> str | None:
    return safetext.one_line(value) if isinstance(value, str) else None


# What the operator reads of a pod it lists (observed_pod, jobstatus.owned_by and is_current_pod, rank 0's scrape, deletes)
POD_METADATA_READ = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "ownerReferences")
POD_STATUS_READ = ("phase", "podIP", "startTime", "reason", "message")
POD_CONDITIONS_READ = ("Ready", "PodScheduled", "DisruptionTarget")
POD_ANNOTATIONS_READ = (names.KUEUE_RETRIABLE_IN_GROUP,)


def pod_as_read(pod: dict[str, Any]) -> dict[str, Any]:
    """The parts of a listed pod the operator reads, all it keeps of it: its spec, managedFields, other labels and
    annotations and the other containers' statuses left out, so a job's pods cost the same whatever its template
    (1,024 pods of a 16 KiB template listed as 70 MB of JSON, 380 MB once parsed). observed_pod reads it alike."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    kept = {key: meta[key] for key in POD_METADATA_READ if key in meta}
    kept["labels"] = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(f"{names.GROUP}/")}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in POD_ANNOTATIONS_READ}
    if annotations:
        kept["annotations"] = annotations
    read = {key: status[key] for key in POD_STATUS_READ if key in status}
    read["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") in POD_CONDITIONS_READ]
    statuses = status.get("containerStatuses") or []
    trainer = next((c for c in statuses if c.get("name") == names.TRAINER_CONTAINER), statuses[0] if statuses else None)
    if trainer is not None:
        read["containerStatuses"] = [trainer]
    return {"metadata": kept, "status": read}


def _disruption_detail(status: dict[str, Any], disruption: dict[str, Any]) -> str | None:
    """The pod's status.reason and the DisruptionTarget condition's message (else the pod's status.message), as
    one line. The kubelet gives three causes one condition reason, TerminationByKubelet: a node-pressure eviction
    (status.reason Evicted, pkg/kubelet/eviction/eviction_manager.go: which resource ran low and what the container
    used), a node shutdown (Terminated, pkg/kubelet/nodeshutdown) and a critical pod's admission (Preempting,
    pkg/kubelet/preemption); only these tell them apart."""
    reason = _one_line(status.get("reason"))
    message = _one_line(disruption.get("message")) or _one_line(status.get("message"))
    said = ": ".join(part for part in (reason, message) if part)
    return said[:MESSAGE_LIMIT // 2] or None


def observed_pod(pod: dict[str, Any]) -> ObservedPod:
    """An ObservedPod from a Kubernetes Pod object (as the API returns it)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    container = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == names.TRAINER_CONTAINER),
        (status.get("containerStatuses") or [{}])[0],
    )
    state = container.get("state") or {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    scheduled = conditions.get("PodScheduled") or {}
    disruption = conditions.get("DisruptionTarget") or {}
    # what a container wrote, escaped before anything cuts it (safetext); reasons are one word by design
    message = safetext.escape(terminated["message"]) if isinstance(terminated.get("message"), str) else None
    exit_code = terminated.get("exitCode")
    state_reason = terminated.get("reason") or (None if exit_code is None else ("Completed" if exit_code == 0 else "Error"))
    rank, generation = _label_number(labels.get(names.LABEL_RANK), -1), _label_number(labels.get(names.LABEL_RESTART), 0)
    if rank is None or generation is None:  # rewritten by hand (the pod is the tenant's to label): of no generation
        rank, generation = -1, -1
    # A pod its kubelet refused before any container ran (kubelet.go rejectPod: phase Failed, the pod's own reason
    # and "Pod was rejected: ..."; a GPU node's UnexpectedAdmissionError, OutOfnvidia.com/gpu) has no container
    # state: its reason and message are the pod's ("exit code None" said nothing).
    rejected = not terminated and status.get("phase") == "Failed" and isinstance(status.get("reason"), str)
    return ObservedPod(
        name=meta.get("name", ""),
        rank=rank,
        generation=generation,
        phase=status.get("phase") or "Pending",
        ready=(conditions.get("Ready") or {}).get("status") == "True",
        exit_code=exit_code,
        # NCCL's watchdog took the rank down, stating nothing: the echo of a peer's failure, as a stated PeerLost is
        reason=(termination_reason(message) or (REASON_PEER_LOST if _watchdog_abort(message) else None)
                or _one_line(state_reason) or (_one_line(status["reason"]) if rejected else None)),
        message=_container_message(message) or (_one_line(status.get("message")) if rejected else None),
        waiting_reason=_one_line(waiting.get("reason")),
        waiting_message=_one_line(waiting.get("message")),
        scheduling_reason=_one_line(scheduled.get("reason")) if scheduled.get("status") == "False" else None,
        scheduling_message=_one_line(scheduled.get("message")) if scheduled.get("status") == "False" else None,
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        disruption=disruption.get("reason") if disruption.get("status") == "True" else None,
        disruption_detail=_disruption_detail(status, disruption) if disruption.get("status") == "True" else None,
        start_time=parse_time(status.get("startTime")),
        finished_at=parse_time(terminated.get("finishedAt")),
        group_finished=(meta.get("annotations") or {}).get(names.KUEUE_RETRIABLE_IN_GROUP) == "false",
    )
