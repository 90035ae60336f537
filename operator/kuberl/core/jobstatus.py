"""What the operator's shell needs around `lifecycle.decide`, as pure functions.

The kopf handlers (kuberl.operator.handlers) read the job, its pods and rank 0's
metrics, and write one status patch; everything in between that is not the
gang lifecycle itself lives here, so it is tested without kopf or a cluster:
judging a job before anything is created (its spec, its pods' security level),
classifying an API server's refusal of a child, the status a reconcile writes
(observedGeneration, latestCheckpoint, finalModel), the merge patch between two
statuses, which 409s are ours, and how often one job may post an Event.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from . import contract, lifecycle, names, poddefaults, render, safetext
from .lifecycle import Refusal
from .rank0metrics import Rank0Reading
from .rules import (
    ADMITTED_RECORD_LIMIT,
    Ratchet,
    cross_field_failures,
    validate_job,
    weighings,
)
from .spec import JobSpec
from .validation import DNS_1123_SUBDOMAIN, PULL_POLICIES, InvalidJob, Problem

log = logging.getLogger(__name__)


MAX_MESSAGE_PROBLEMS = 20  # the rest are counted: the message goes into the job's status and an Event
MAX_MESSAGE_CHARACTERS = 16384  # well inside a condition message's 32768 (metav1.Condition's maxLength)


def problems_message(problems: list[Problem]) -> str:
    """The problems with their field paths, e.g. `spec.labels.bad key: expected a label key`; past
    MAX_MESSAGE_PROBLEMS, how many more (a tenant's spec can hold hundreds of thousands, and a status
    write of megabytes is one the API server refuses: the job would never show why it failed)."""
    shown = "; ".join(str(p) for p in problems[:MAX_MESSAGE_PROBLEMS])
    if len(shown) > MAX_MESSAGE_CHARACTERS:  # one problem can quote a huge key
        shown = shown[:MAX_MESSAGE_CHARACTERS] + "..."
    if len(problems) > MAX_MESSAGE_PROBLEMS:
        shown += f"; and {len(problems) - MAX_MESSAGE_PROBLEMS} more problem(s)"
    return shown


def judge(job: dict, pod_problems: Callable[[JobSpec], list[str]] | None = None) -> tuple[JobSpec | None, Refusal | None]:
    """The job's spec, or why it cannot run before anything is created: a spec only the operator can
    judge (InvalidSpec), or rendered pods over the operator's pod security level (PodSecurity)."""
    try:
        spec = validate_job(job, ratchet=ratchet(job))
    except InvalidJob as invalid:
        return None, Refusal(lifecycle.REASON_INVALID_SPEC, problems_message(invalid.problems))
    except Exception as e:  # a spec the validation itself cannot handle fails visibly, not as a silent retry loop
        log.exception("job %s: validating its spec failed", (job.get("metadata") or {}).get("name"))
        return None, Refusal(lifecycle.REASON_INVALID_SPEC, f"spec: the operator could not validate the spec ({_error_words(e)})")
    queue_label = ((job.get("metadata") or {}).get("labels") or {}).get(names.KUEUE_QUEUE_NAME)
    if queue_label is not None and spec.queue_name is None:
        # Kueue's way for its own job kinds; here the job's labels reach every child (kopf.adopt), so each
        # pod would be queued alone, without the pod group that admits the gang at once.
        return spec, Refusal(lifecycle.REASON_INVALID_SPEC, f"metadata.labels.{names.KUEUE_QUEUE_NAME}: kuberl queues a job"
                             f" by spec.queueName (its pods then form one Kueue pod group); set spec.queueName: {queue_label}"
                             " instead of this label (the label alone would queue each pod on its own)")
    try:
        sources = template_problems((job.get("metadata") or {}).get("name") or "job", spec)
        if sources:
            return spec, Refusal(lifecycle.REASON_INVALID_SPEC, problems_message(sources))
        problems = pod_problems(spec) if pod_problems is not None else []
    except Exception as e:  # a spec the checks cannot handle fails visibly, not as a silent retry loop
        log.exception("job %s: rendering or checking its pods failed", (job.get("metadata") or {}).get("name"))
        return spec, Refusal(lifecycle.REASON_INVALID_SPEC, f"spec.template: the operator could not render or check the pods ({_error_words(e)})")
    if problems:
        return spec, Refusal(lifecycle.REASON_POD_SECURITY, "; ".join(problems))
    return spec, None


# --- rules ratcheted across operator upgrades (rules.WEIGHING_RULES) -------------------------------------------

CONDITION_ADMITTED_UNDER_OLDER_RULES = "AdmittedUnderOlderRules"
REASON_ADMITTED_UNDER_OLDER_RULES = "AdmittedUnderOlderRules"
# Phases of a job whose spec generation the operator judged and let run (a refused one is Failed).
ADMITTED_PHASES = (lifecycle.PENDING, lifecycle.RUNNING, lifecycle.RESTARTING, lifecycle.SUSPENDED)


def ratchet(job: dict) -> Ratchet:
    """Which cross-field and weighing rules `job` runs on with whatever they find: any rule where its status says
    this very spec generation was admitted (observedGeneration, and a phase no refusal leaves), as every operator
    version has written it, a version with fewer or laxer rules included (the API server, likewise, lets an
    unchanged spec through the CRD's new rules); and a rule whose record (status.admitted.weighed, this version's)
    holds the fingerprint of what it reads now, so an edit elsewhere in the spec (a suspend, a deadline) does not
    take the job's admission away. A new job, or an edit of what a rule reads, meets it."""
    status = job.get("status") if isinstance(job.get("status"), dict) else {}
    metadata = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    generation = metadata.get("generation")
    same = (isinstance(generation, int) and status.get("observedGeneration") == generation
            and status.get("phase") in ADMITTED_PHASES)
    record = status.get("admitted") if isinstance(status.get("admitted"), dict) else {}
    weighed = record.get("weighed") if isinstance(record.get("weighed"), dict) else {}
    return lambda rule, fingerprint: same or weighed.get(rule) == fingerprint


@dataclasses.dataclass(frozen=True)
class Admission:
    """What the status of an admitted job records (`record`, status.admitted: each weighing rule's fingerprint of
    what it weighed, and each cross-field rule's it was let through), and the problems it was let through with
    (`ratcheted`), said in a condition."""

    record: dict
    ratcheted: tuple[Problem, ...]


def admission(job: dict, spec: JobSpec) -> Admission:
    """The admission of a job `judge` let run: every problem a cross-field or weighing rule has with it was ratcheted.
    The record keeps every weighing rule's fingerprint and, within status.admitted.weighed's bound, the fingerprint of
    each cross-field rule it fails (one it passes needs none: an edit that makes it fail meets it); a rule past the
    bound ratchets on this generation alone."""
    found = weighings(spec)
    crossed = cross_field_failures(job["spec"], []) if isinstance(job.get("spec"), dict) else []
    weighed = {rule: fingerprint for rule, fingerprint, _ in found}
    weighed |= dict([(rule, fingerprint) for rule, fingerprint, _ in crossed][: ADMITTED_RECORD_LIMIT - len(weighed)])
    generation = (job.get("metadata") or {}).get("generation")
    return Admission({"generation": generation if isinstance(generation, int) else 0, "weighed": weighed},
                     tuple(p for _, _, p in crossed) + tuple(p for _, _, problems in found for p in problems))


def ratcheted_message(problems: tuple[Problem, ...]) -> str:
    return ("admitted before this operator's rules weighed it so, the job runs on as admitted (its gang restarts"
            f" included); a new job like it, or an edit of these fields, is refused: {problems_message(list(problems))}")


def admitted_status(status: dict, admitted: Admission, now: float) -> dict:
    """`status` with its admission recorded, and the AdmittedUnderOlderRules condition set, or taken off."""
    out = {**status, "admitted": admitted.record}
    conditions = [c for c in out.get("conditions") or [] if c.get("type") != CONDITION_ADMITTED_UNDER_OLDER_RULES]
    if admitted.ratcheted:
        old = next((c for c in out.get("conditions") or [] if c.get("type") == CONDITION_ADMITTED_UNDER_OLDER_RULES), None)
        conditions.append({"type": CONDITION_ADMITTED_UNDER_OLDER_RULES, "status": "True",
                           "reason": REASON_ADMITTED_UNDER_OLDER_RULES,
                           "message": lifecycle.clip(ratcheted_message(admitted.ratcheted)),
                           "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == "True"
                           else lifecycle.rfc3339(now)})
    out["conditions"] = conditions
    return out


JUDGE_SHARE = 0.1  # of the operator's CPU that one job's spec edits may take, however fast they come
MAX_JUDGE_PAUSE_SECONDS = 30.0  # the longest a new generation waits for its judgement, whatever the spec costs


def judge_pause(cpu_seconds: float) -> float:
    """How long after judging a generation of a job's spec (`judge`, which took `cpu_seconds` of CPU) a newer one
    waits: JUDGE_SHARE of the time, so a tenant editing a 375 KB template in a loop (0.4 s a judgement here) has
    its newest spec judged every 4 s instead of taking most of the operator's one core from every other job. A
    small spec (1 ms) is judged at once; an edit after a quiet spell, at once."""
    return min(max(cpu_seconds, 0.0) * (1 / JUDGE_SHARE - 1), MAX_JUDGE_PAUSE_SECONDS)


def _error_words(e: Exception) -> str:
    return safetext.one_line(" ".join(f"{type(e).__name__}: {e}".split()))[:300]


def template_problems(name: str, spec: JobSpec) -> list[Problem]:
    """The template's command, args, env sources and configMap volumes in a rendered pod, checked as the API
    server checks a pod (`podsource.source_problems`), at spec.template's fields: `kuberl validate`, `kuberl run`
    and the operator alike (the operator failed such a job late, as InvalidChild, at every pod create)."""
    from .podsource import pod_source_problems

    problems = pod_source_problems(render.render_pod(render.Job(name, spec), "default", render.PLACEHOLDER_UID, 0))
    return [Problem(f"spec.template.{path}", message) for path, _, message in (p.partition(": ") for p in problems)]


# How the API server refuses a create, by source (Kubernetes v1.32):
# - ResourceQuota: 403 Forbidden, `<resource> "<name>" is forbidden: exceeded quota: <quota>, requested: …`
#   (staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go) — may pass later;
# - the authorizer (RBAC): 403, `<resource> is forbidden: User "<user>" cannot create resource …`
#   (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go) — the operator's
#   own permissions, not the job's fault: kopf retries and the error is counted;
# - Pod Security Admission and LimitRanger: 403 (pod-security-admission/admission/admission.go,
#   plugin/pkg/admission/limitranger/admission.go); webhook denials: 400 unless the webhook sets
#   a code (apiserver/pkg/admission/plugin/webhook/errors/statuserror.go); ValidatingAdmissionPolicy:
#   422 Invalid by default (apiserver/pkg/admission/plugin/policy/validating/dispatcher.go); the
#   schema: 422 or 400 — all of these refuse what the job asked for, and asking again will not help.
# Both are apierrors.NewForbidden's (`<resource> "<name>" is forbidden: <err>`, the name left out when empty): matched
# from the message's start, so a webhook's 403 quoting the tenant's text (an image named `is forbidden: User "x" cannot
# create resource `) is not taken for RBAC (retried without end, the startup clock reset) or a quota (waited for).
_FORBIDDEN = r'[a-z0-9.-]+ (?:"(?:[^"\\]|\\.)*" )?is forbidden: '
QUOTA_DENIAL = re.compile(_FORBIDDEN + r'exceeded quota: ')
AUTHORIZER_DENIAL = re.compile(_FORBIDDEN + r'User "(?:[^"\\]|\\.)*" cannot [a-z]+ resource ')
REFUSAL_CODES = (400, 403, 422)
# Who denied, by the words each admission plugin writes: a webhook's denial (Kyverno and Gatekeeper are
# webhooks) `admission webhook "<name>" denied the request` (webhook/errors/statuserror.go ToStatusErr);
# a ValidatingAdmissionPolicy's `ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied
# request` (policy/validating/dispatcher.go); Pod Security Admission's `violates PodSecurity "<level>"`
# (pod-security-admission/admission/admission.go).
# The names quoted are DNS names, so no quote inside: `.*` there backtracked over each occurrence (a 300 KB message
# repeating `admission webhook "` without a denial took 3 s of the operator's event loop).
ADMISSION_POLICY_DENIAL = re.compile(r'admission webhook "[^"]*" denied the request|ValidatingAdmissionPolicy \'[^\']*\' with binding')
POD_SECURITY_ADMISSION_DENIAL = re.compile(r'violates PodSecurity "')


def status_refusal(code: int, message: str) -> str | None:
    """What the job's Event says when RBAC refuses the operator its status write; None for any other error."""
    if code != 403 or not AUTHORIZER_DENIAL.match(message):
        return None
    return (f"{message}: the operator's ServiceAccount lacks this permission (the chart's RBAC grants what"
            " kuberl.operator.kubeapi.API_CALLS lists); nothing is created or deleted for this job until its status can be written")


def delete_refusal(code: int, message: str) -> Refusal | None:
    """A delete's refusal by RBAC, said on the job: its old gang (or a suspended or finished job's
    pods) stayed while the job said "waiting for old pods to go" and only the operator's log, one
    traceback every 5 s, said why. None for any other error (kopf retries it)."""
    if code != 403 or not AUTHORIZER_DENIAL.match(message):
        return None
    return Refusal(lifecycle.REASON_OPERATOR_FORBIDDEN, f"{message}: the operator's ServiceAccount lacks this permission"
                   " (the chart's RBAC grants what kuberl.operator.kubeapi.API_CALLS lists); what was to be deleted stays",
                   retryable=True, deleting=True)


def pod_group_refusal(code: int, message: str) -> Refusal | None:
    """RBAC's refusal of the patch that marks a finished job's Kueue pod group finished, said on the job:
    kopf logged a traceback every 5 s and the job said nothing. None for any other error (kopf retries it)."""
    if code != 403 or not AUTHORIZER_DENIAL.match(message):
        return None
    return Refusal(lifecycle.REASON_OPERATOR_FORBIDDEN, f"{message}: the operator's ServiceAccount lacks this permission"
                   " (the chart's RBAC grants what kuberl.operator.kubeapi.API_CALLS lists); the job's pod group is not"
                   f" marked finished ({names.KUEUE_RETRIABLE_IN_GROUP}=false), so Kueue keeps its quota until then",
                   retryable=True, patching=True)


def child_refusal(code: int, message: str) -> Refusal | None:
    """A create's refusal as the lifecycle sees it, named by who refused; None for an error worth
    retrying as it is. RBAC's refusal is the operator's own permissions, said on the job (which
    otherwise sat in Creating while only the operator's log said why) and retried without end."""
    if code not in REFUSAL_CODES:
        return None
    if code == 403 and AUTHORIZER_DENIAL.match(message):
        return Refusal(lifecycle.REASON_OPERATOR_FORBIDDEN, f"{message}: the operator's ServiceAccount lacks this permission"
                       " (the chart's RBAC grants what kuberl.operator.kubeapi.API_CALLS lists); the job waits for it",
                       retryable=True)
    if code == 403 and QUOTA_DENIAL.match(message):
        return Refusal(lifecycle.REASON_QUOTA, message, retryable=True)
    if ADMISSION_POLICY_DENIAL.search(message):
        return Refusal(lifecycle.REASON_ADMISSION_POLICY, message)
    if POD_SECURITY_ADMISSION_DENIAL.search(message):
        return Refusal(lifecycle.REASON_POD_SECURITY, message)
    return Refusal(lifecycle.REASON_INVALID_CHILD, message)


def server_failure(code: int, message: str) -> Refusal | None:
    """A create the API server failed (a 5xx, after the operator's own retries): a webhook with failurePolicy Fail that
    it cannot call (500 InternalError `failed calling webhook`), etcd timing out. No fault of the job's: said in its
    Ready condition and an Event, and asked again every restartBackoffSeconds without a deadline; kopf retried it
    every 5 s while the job's status said nothing. None below 500."""
    if code < 500:
        return None
    return Refusal(lifecycle.REASON_API_SERVER_ERROR, f"the API server failed to create the job's child ({code}): {message};"
                   " the job waits for it", retryable=True)


# What the API server answers for a resource it does not serve (a CRD not installed): 404 from its
# NotFound handler (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go,
# errors.NewGenericServerResponse(404, ...)). A namespace that is gone says `namespaces "x" not found`.
NOT_SERVED = "the server could not find the requested resource"


def not_served(code: int, message: str, child: dict, scheduler_name: str | None,
               scheduler_field: str = "spec.schedulerName") -> Refusal | None:
    """A child whose kind this cluster does not serve (a Volcano or coscheduling PodGroup without its
    CRD): the job cannot run as written, and asking again will not help until someone installs it.
    `scheduler_field`: where the job names its pods' scheduler (render.pod_field_path)."""
    if code != 404 or message.strip() != NOT_SERVED:
        return None
    what = f"{child.get('kind')} ({child.get('apiVersion')})"
    needed = f" {scheduler_field} {scheduler_name!r} needs it: install that scheduler, or set another schedulerName" \
        if child.get("kind") == "PodGroup" else ""
    return Refusal(lifecycle.REASON_INVALID_CHILD, f"{what} is not served by this cluster ({message}):{needed}".rstrip(":"))


DISPLAY_REASON_PHASES = (lifecycle.FAILED, lifecycle.SUSPENDED)
# Phases whose workers are not all running: the Ready condition's reason says why (Unschedulable, ImagePullBackOff, ...).
DISPLAY_NOT_READY_PHASES = (lifecycle.PENDING, lifecycle.RESTARTING)


def _rounded(value: object) -> str | None:
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def display(status: dict, desired_workers: int | None) -> dict:
    """What `kubectl get rltj` shows, as strings a printer column (one JSONPath, no formatting) can print:
    ready/desired workers, returns rounded to 0.1 (the last known ones once the pods are gone, so a finished
    job still shows what it reached), a Failed or Suspended job's reason, and why a Pending or Restarting
    job's workers are not all running (its Ready condition's reason)."""
    previous = status.get("display") or {}
    progress = status.get("progress") or {}
    workers = status.get("workers") or {}
    out = {
        "return": _rounded(progress.get("episodeReturnMean")) or previous.get("return"),
        "eval": _rounded(progress.get("evalReturn")) or previous.get("eval"),
        "reason": None,
    }
    if desired_workers is not None:
        out["workers"] = f"{workers.get('ready', 0)}/{desired_workers}"
    conditions = status.get("conditions") or []
    if status.get("phase") in DISPLAY_REASON_PHASES:
        condition = next((c for c in conditions if c.get("type") == status["phase"] and c.get("status") == "True"), {})
        out["reason"] = str(condition.get("reason") or status["phase"])[:64]
    elif status.get("phase") in DISPLAY_NOT_READY_PHASES:
        condition = next((c for c in conditions if c.get("type") == lifecycle.CONDITION_READY and c.get("status") == "False"), {})
        if condition.get("reason"):
            out["reason"] = str(condition["reason"])[:64]
    return {k: v for k, v in out.items() if v is not None}


def trainer_defaults(status: dict, image: str, per_process: render.PerProcess) -> tuple[str, render.PerProcess]:
    """The operator's defaults for what a job's spec leaves unset (the trainer image, the requests per
    process), as the job first met them (status.trainerDefaults): a gang restarted after an operator
    upgrade that changed them (chart values trainer.image, trainer.resourcesPerProcess) runs what the
    job started with. A job with none recorded, or a record that does not parse, takes the operator's own."""
    kept = status.get("trainerDefaults")
    if not isinstance(kept, dict):
        return image, per_process
    kept_image, cpu, memory = kept.get("image"), kept.get("cpuPerProcess"), kept.get("memoryPerProcess")
    if not (isinstance(kept_image, str) and kept_image and len(kept_image) <= 512
            and all(isinstance(q, str) and render.PLAIN_QUANTITY.match(q) for q in (cpu, memory))):
        return image, per_process
    return kept_image, render.PerProcess(cpu=cpu, memory=memory)


def image_pull_defaults(status: dict, policy: str | None, secrets: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The operator's trainer pull policy and pull secrets (chart values trainer.image.pullPolicy,
    trainer.imagePullSecrets), as the job first met them (status.trainerDefaults.imagePullPolicy, "" for none,
    and imagePullSecrets), as trainer_defaults keeps the image: a gang restarted after an upgrade that changed
    them pulls as its first gang did. Each that a record lacks (a job an older operator created) or that does not
    parse (a hand edit) is the operator's own, `policy` or `secrets`."""
    kept = status.get("trainerDefaults")
    kept = kept if isinstance(kept, dict) else {}
    kept_policy = kept.get("imagePullPolicy")
    if kept_policy == "" or kept_policy in PULL_POLICIES:
        policy = kept_policy or None
    kept_secrets = kept.get("imagePullSecrets")
    if (isinstance(kept_secrets, list) and len(kept_secrets) <= contract.MAX_TRAINER_PULL_SECRETS
            and all(isinstance(name, str) and len(name) <= 253 and re.fullmatch(DNS_1123_SUBDOMAIN, name) for name in kept_secrets)):
        secrets = tuple(kept_secrets)
    return policy, secrets


def job_status(
    decided: dict,
    *,
    observed_generation: int,
    reading: Rank0Reading | None,
    paths: dict | None,
    desired_workers: int | None = None,
    defaults: tuple[str, render.PerProcess] | None = None,
    pod_defaults: poddefaults.PodDefaults | None = None,
    image_pull: tuple[str | None, tuple[str, ...]] | None = None,
    admitted: Admission | None = None,
    now: float = 0.0,
) -> dict:
    """The status one reconcile writes: the lifecycle's, plus what only the shell knows.
    `paths`: the trainer configuration's (checkpointDir, finalModel); None for a spec that does not parse.
    `defaults`: the job's trainer defaults (trainer_defaults), recorded for its later generations, and with them
    `pod_defaults`, the platform's pod defaults it met first (poddefaults.recorded), and `image_pull`, the pull policy
    and secrets it met first (image_pull_defaults). `admitted`: the admission of a spec `judge` let run
    (`admission`), recorded with its condition at `now`."""
    status = copy.deepcopy(decided)
    if admitted is not None:
        status = admitted_status(status, admitted, now)
    if status.get("phase") in lifecycle.TERMINAL:  # a job that ended no longer runs on as admitted
        status["conditions"] = [c for c in status.get("conditions") or []
                                if c.get("type") != CONDITION_ADMITTED_UNDER_OLDER_RULES]
    status["observedGeneration"] = observed_generation
    status["display"] = display(status, desired_workers)
    if defaults is not None:
        image, per_process = defaults
        status["trainerDefaults"] = {"image": image, "cpuPerProcess": per_process.cpu, "memoryPerProcess": per_process.memory}
        if pod_defaults is not None:  # recorded even when empty: defaults set later are for later jobs
            status["trainerDefaults"]["pod"] = pod_defaults.document()
        if image_pull is not None:  # recorded even when none: set later, they are for later jobs
            policy, secrets = image_pull
            status["trainerDefaults"].update(imagePullPolicy=policy or "", imagePullSecrets=list(secrets))
    if paths is None:
        return status
    if reading is not None and reading.last_checkpoint_time is not None:
        time = lifecycle.rfc3339(reading.last_checkpoint_time)
        previous = status.get("latestCheckpoint") or {}
        if previous.get("time") != time:
            status["latestCheckpoint"] = {"path": paths["checkpointDir"], "time": time, "timesteps": reading.timesteps}
    if status.get("phase") == lifecycle.SUCCEEDED and not status.get("finalModel"):
        status["finalModel"] = paths["finalModel"]
    return status


class EventLimiter:
    """Events a job may post: the same event once per `repeat_seconds`, and a token bucket per job
    (client-go's EventSourceObjectSpamFilter: a burst of 25, then one per 5 minutes), so a job
    that is refused in a loop cannot flood the API server with Events."""

    def __init__(self, burst: int = 25, refill_seconds: float = 300.0, repeat_seconds: float = 600.0):
        self.burst, self.refill_seconds, self.repeat_seconds = burst, refill_seconds, repeat_seconds
        self.tokens: dict[Any, tuple[float, float]] = {}  # job -> (tokens, when counted)
        self.seen: dict[Any, dict[tuple[str, str, str], float]] = {}  # job -> event -> last posted

    def allow(self, job: Any, type_: str, reason: str, message: str, now: float) -> bool:
        seen = self.seen.setdefault(job, {})
        key = (type_, reason, message)
        if key in seen and now - seen[key] < self.repeat_seconds:
            return False
        tokens, then = self.tokens.get(job, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) / self.refill_seconds)
        if tokens < 1.0:
            self.tokens[job] = (tokens, now)
            return False
        self.tokens[job] = (tokens - 1.0, now)
        seen[key] = now
        if len(seen) > 4 * self.burst:  # bounded memory: forget the oldest
            del seen[min(seen, key=seen.__getitem__)]
        return True

    def forget(self, job: Any) -> None:
        self.tokens.pop(job, None)
        self.seen.pop(job, None)


REASON_CHECKPOINTS_SKIPPED = "CheckpointsSkipped"


def checkpoints_skipped(generation: int, skipped: int) -> str:
    """The Event that says, once per generation, that rank 0 passed over newer checkpoints when it started:
    their training is lost and done again, which progress going back alone does not explain."""
    return (f"generation {generation}: rank 0 could not use the {skipped} newest checkpoint(s) (cut off mid-write,"
            " truncated, corrupt or refused) and resumed from an older one, or from zero: the training they held is done"
            " again. Its log names each file, why, and where it went (unreadable/ beside the checkpoints, where it can be"
            " moved; a save cut off mid-write, as when a stop's save outlasts the grace period, is removed)")


REASON_CHECKPOINT_OUTLASTS_GRACE = "CheckpointOutlastsGrace"


def checkpoint_outlasts_grace(generation: int, reading: Rank0Reading | None, grace: int) -> str | None:
    """The Event that says, once per generation and before any stop comes, that rank 0's checkpoints take longer to
    write than the pod's grace period: a stop (suspend, a gang restart, an eviction, a node drain) SIGKILLs rank 0
    while it writes the stop's checkpoint, and the training since the one before is lost. None when they fit."""
    took = None if reading is None else reading.checkpoint_save_seconds
    if took is None or took <= grace:
        return None
    return (f"generation {generation}: rank 0's last checkpoint took {took:.1f}s to write, longer than"
            f" spec.runPolicy.terminationGracePeriodSeconds ({grace}s): a stop (suspend, a gang restart, an eviction, a"
            " node drain) kills rank 0 while it writes the stop's checkpoint, and the training since the one before is"
            f" lost. Raise terminationGracePeriodSeconds to {math.ceil(took * 2)} or more")


REASON_CHECKPOINTS_MISSING = "CheckpointsMissing"


def checkpoints_missing(status: dict, reading: Rank0Reading | None, generation: int) -> str | None:
    """The Event that says rank 0 found no checkpoint and started from zero while the status records
    one the job saved: its volume was emptied or replaced under it (a claim deleted by hand comes
    back empty with the next gang). None otherwise. `status` is the one read before this reading is
    written; once the run passes the recorded timesteps (or records its own) there is nothing to say."""
    if reading is None or reading.resumed_timesteps != 0 or reading.checkpoints_skipped:
        return None  # it resumed, has not said yet, or CheckpointsSkipped says why it went back
    on_record = status.get("latestCheckpoint") or {}
    recorded = on_record.get("timesteps")
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded <= reading.timesteps:
        return None
    where = str(on_record.get("path") or "the checkpoint directory")[:200]  # _post escapes what it posts
    saved = str(on_record.get("time") or "an earlier generation")[:40]
    return (f"generation {generation}: rank 0 found no checkpoint in {where} and started from zero, but the job saved one"
            f" there at {saved} (timesteps {recorded}): the checkpoint volume was emptied or replaced under the job (its"
            " claim deleted and created again, the directory removed). The training up to that checkpoint is done again")


REASON_METRICS_UNREAD = "MetricsUnread"


def metrics_unread(spec: JobSpec, status: dict, generation: int, ever_read: bool, failure: str | None, url: str,
                   now: float) -> str | None:
    """The Event that says the operator has never read this generation's rank 0 (kuberl's trainer, which always
    serves its counter) in stallTimeoutSeconds since all its workers ran, or None. Until a first reading the stall
    clock does not start (lifecycle._watch_for_stall): a rank 0 frozen before its first scrape, or one the
    operator cannot reach (a NetworkPolicy, a service mesh's mutual TLS), ran on unjudged with no progress in status,
    and nothing said so. `failure`: how the last scrape failed, which may quote the tenant's page (prometheus_client's
    `Invalid labels: ...`): escaped on one line (safetext), as the message goes to the operator's log as well."""
    if spec.trainer != "kuberl" or ever_read or failure is None or status.get("phase") != "Running":
        return None
    running_since = lifecycle.parse_time(status.get("gangRunningTime"))
    timeout = spec.run_policy.stall_timeout_seconds
    if running_since is None or now < running_since + timeout:
        return None
    return (f"generation {generation}: rank 0's metrics ({url}) have not been read once in {now - running_since:.0f}s since"
            f" all {spec.workers} worker(s) were running (stallTimeoutSeconds={timeout}); the last scrape: {safetext.one_line(failure[:200])}. The"
            " status shows no progress and a stalled gang is not restarted: rank 0 may be frozen, or something stands"
            " between the operator and it (a NetworkPolicy, a service mesh's mutual TLS on the metrics port)")


def owned_by(obj: dict, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def predecessor_of(obj: dict, job: str) -> bool:
    """Owned by an RLTrainingJob of this name (a deleted predecessor, its children still being
    collected): the name comes free once the garbage collector is done."""
    return any(
        ref.get("kind") == names.KIND and str(ref.get("apiVersion", "")).split("/")[0] == names.GROUP and ref.get("name") == job
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


def name_in_use(kind: str, name: str, existing: dict | None, job: str) -> Refusal | None:
    """A child's create answered 409 by `existing`, which is not this job's: None when the name
    will come free by itself (gone since, or a same-named predecessor's); else a refusal that keeps
    the job Pending and says why. kuberl never takes over, overwrites or deletes an object it did
    not create: a user's ConfigMap `<job>-config` would become the trainer's configuration, a pod
    `<job>-0` someone else's rank 0."""
    if existing is None or predecessor_of(existing, job):
        return None
    return Refusal(lifecycle.REASON_NAME_IN_USE,
                   f"{kind} {name} exists and was not created by this job (it has no owner reference to it):"
                   " kuberl never takes over or deletes it; delete or rename it, or rename the job", retryable=True)


def terminating(kind: str, name: str, existing: dict | None) -> Refusal | None:
    """A child's create answered 409 by an object being deleted (deletionTimestamp set; the API server keeps it
    until its finalizers are removed): a refusal the job waits on, naming the object, since when and who holds it.
    It is never taken over, even when it is this job's own: it is going."""
    meta = (existing or {}).get("metadata") or {}
    if not meta.get("deletionTimestamp"):
        return None
    finalizers = meta.get("finalizers") or []
    held = f"held by finalizer(s) {', '.join(finalizers)}" if finalizers else "in its grace period"
    return Refusal(lifecycle.REASON_CHILD_TERMINATING,
                   f"{kind} {name} is terminating (deletionTimestamp {meta['deletionTimestamp']}), {held}: waiting for it to"
                   " go; the job starts once it is gone", retryable=True)


def awaiting_collection(kind: str, name: str, existing: dict | None, job: str) -> Refusal | None:
    """A child's create answered 409 by a child of a deleted RLTrainingJob of this name that nothing deletes yet: a
    background deletion (the default) removes the owner at once, and the garbage collector deletes its dependents
    once it has seen the owner go, in seconds or as long as it is behind. A refusal the job waits on, naming the
    object and the old job's uid; never taken over. None for anything else (an object being deleted: terminating)."""
    meta = (existing or {}).get("metadata") or {}
    if existing is None or meta.get("deletionTimestamp") or not predecessor_of(existing, job):
        return None
    old = ", ".join(sorted({str(ref.get("uid")) for ref in meta.get("ownerReferences") or []
                            if ref.get("kind") == names.KIND and ref.get("name") == job}))
    return Refusal(lifecycle.REASON_CHILD_AWAITING_COLLECTION,
                   f"{kind} {name} is the deleted job {job}'s (uid {old}), not yet deleted by the garbage collector:"
                   " waiting for it to go; the job starts once it is gone (kube-controller-manager's garbage collector"
                   " deletes it: if this lasts, its log says why)", retryable=True)


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


class TakenPod(enum.Enum):
    """Whose pod holds a name the gang's pod could not take (a 409 on create)."""

    CURRENT = "current"  # this job's, this generation's: created already
    LEAVING = "leaving"  # an older pod of this job (or a same-named predecessor's) going away: wait
    UNSEEN = "unseen"  # this job's, older and not going away: delete it, then wait


def taken_pod(existing: dict | None, uid: str, generation: int, job: str) -> TakenPod | Refusal:
    """What a 409 on creating a gang's pod means. TakenPod.UNSEEN is a pod of ours whose kuberl.dev/job
    label its tenant removed: the pods are listed by that label, so decide never saw it, never
    deleted it with its old gang, and its name blocked the new gang forever while it kept running."""
    if existing is None:
        return TakenPod.LEAVING
    if not owned_by(existing, uid):
        name = existing["metadata"]["name"]
        return name_in_use("Pod", name, existing, job) or awaiting_collection("Pod", name, existing, job) or TakenPod.LEAVING
    if is_current_pod(existing, uid, generation):
        return TakenPod.CURRENT
    if existing["metadata"].get("deletionTimestamp"):
        return TakenPod.LEAVING
    return TakenPod.UNSEEN


def restarted(before: dict | None, after: dict) -> dict | None:
    """The restart-history entry a decision just added (for metrics), or None."""
    old = (before or {}).get("generation") or 0
    if (after.get("generation") or 0) <= old:
        return None
    history = after.get("restartHistory") or []
    return history[-1] if history else None


def with_operator_defaults(pod: dict, pull_policy: str | None, pull_secrets: tuple[str, ...]) -> dict:
    """The operator's trainer pull policy and pull secrets (as the job recorded them: image_pull_defaults), where
    the job sets none."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    if pull_secrets and not spec.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    if pull_policy:
        for container in spec["containers"]:
            if container["name"] == names.TRAINER_CONTAINER:
                container.setdefault("imagePullPolicy", pull_policy)
    return out
