"""The kopf operator: its registrations and the loop that executes `lifecycle.decide`.

The whole CR -> pods path is pure and lives elsewhere: `spec` (parse, validate),
`render` (every object, as dicts), `lifecycle` (phase, conditions, actions).
One daemon per RLTrainingJob runs the loop: read (the job, its pods by the
`kuberl.dev/job` label, rank 0's metrics, bounded by `rank0metrics`), judge
(spec and pod security: `reconcile.judge`), decide, write (ONE status patch,
only when something changed; Events after it, rate-limited), then execute the
decision's actions from one table (`JobLoop.calls`). A child the API server
refuses is decided again as a refusal, never retried blindly. Pod and job watch
events only poke the job's daemon awake.

kopf's own state is configured so a job that does not change causes no write:
no create/update handlers (so no diffbase or progress annotations; daemons and
event handlers keep their state in memory; kopf's essence of an event is its
generation alone), a kuberl finalizer added once so the daemon stops before
the job goes, pods watched by label on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import aiohttp
import kopf

from ..core import (
    jobstatus,
    lifecycle,
    names,
    poddefaults,
    podsecurity,
    rank0metrics,
    render,
    safetext,
)
from ..core.spec import JobSpec
from ..core.trainerconfig import trainer_config
from . import kubeapi, scraping
from .config import OperatorConfig, restart_in_place
from .kubeapi import PODS, RLTJ, ApiError, Conflict, KubeApi, api_path
from .metrics import OperatorMetrics

FINALIZER = f"{names.GROUP}/operator"
CONFLICT_RETRY_SECONDS = 0.05  # a conflict means the job changed under us: read it again at once (controller-runtime starts at 5 ms)
CREATE_CONCURRENCY = 16
REASON_METRICS_TOO_LARGE = "MetricsTooLarge"
REASON_STATUS_TOO_LARGE = "StatusTooLarge"

logger = logging.getLogger("kuberl.operator")


# --- operator-wide state ------------------------------------------------------


@dataclasses.dataclass
class Wake:
    """A job loop's doorbell: `pods_changed` says its last pod list is stale."""

    event: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    pods_changed: bool = True


@dataclasses.dataclass
class Shell:
    """What every handler shares: configuration, metrics, the wake-up events of job loops."""

    config: OperatorConfig
    metrics: OperatorMetrics
    wakes: dict[tuple[str, str], Wake] = dataclasses.field(default_factory=dict)
    scraper: aiohttp.ClientSession | None = None
    settings: kopf.OperatorSettings | None = None  # kopf's, as the startup handler saw them
    reconcile_slots: asyncio.Semaphore | None = None
    api_limiter: kubeapi.RateLimiter = kubeapi.UNLIMITED  # every KubeApi's request budget, made from the configuration at startup
    events: jobstatus.EventLimiter = dataclasses.field(default_factory=jobstatus.EventLimiter)
    heartbeat: Any = None  # WatchHeartbeat, once started
    peering: Any = None  # PeeringCheck, when peering
    # Watched namespaces RBAC refuses now (kopf runs without them), rechecked; None when cluster-wide.
    refused: Any = None  # RefusedNamespaces
    # A job per namespace whose finalizer patch RBAC refused kopf (main.cmd_operator fills it), rechecked.
    finalizer_refused: dict[str, str] = dataclasses.field(default_factory=dict)
    finalizer_recheck: Any = None  # FinalizerRecheck, once started
    stop: asyncio.Event | None = None  # kopf's stop flag (main.cmd_operator)

    def poke(self, namespace: str, job: str, pods_changed: bool = False) -> None:
        wake = self.wakes.get((namespace, job))
        if wake is not None:
            wake.pods_changed |= pods_changed
            wake.event.set()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_persistence(settings)
    settings.posting.reporting_component = "kuberl-operator"
    settings.posting.reporting_instance = os.environ.get("HOSTNAME", "kuberl-operator")
    settings.posting.event_name_prefix = "kuberl-"
    # Pods are filtered by the API server: the operator never sees a pod that is not a job's.
    settings.watching.label_selectors[PODS] = names.LABEL_JOB
    # Resources are discovered once at start: no cluster-wide watch of CRDs or namespaces.
    settings.scanning.disabled = True
    settings.networking.error_backoffs = kubeapi.API_BACKOFFS
    settings.networking.request_timeout = 30
    # A half-open watch (its socket ESTABLISHED, nothing arriving) is dropped and made again
    # within these bounds; unset, kopf waits on it for as long as the socket lives.
    watch = shell_of(memo).config.watch
    settings.watching.server_timeout = watch.server_timeout
    settings.watching.client_timeout = watch.client_timeout
    settings.watching.connect_timeout = watch.connect_timeout
    settings.background.instant_exit_timeout = 0.5
    shell: Shell = memo.shell
    shell.settings = settings
    shell.api_limiter = kubeapi.RateLimiter(shell.config.kube_api_qps, shell.config.kube_api_burst)
    if shell.config.peering is not None:  # several replicas: never run unpeered by accident
        settings.peering.mandatory = True
        settings.peering.lifetime = shell.config.peering_lifetime
        shell.peering = PeeringCheck(shell.config, shell.metrics)
        peering_api = KubeApi(settings, logger, shell.metrics, limiter=shell.api_limiter)
        shell.peering.task = asyncio.create_task(supervised("the peering check", lambda: shell.peering.run(peering_api)))
    shell.reconcile_slots = asyncio.Semaphore(shell.config.max_concurrent_reconciles)
    # No cap on connections: scrapes wait outside the reconcile slots, and a pool of 100 (aiohttp's
    # default) would let 100 silent rank 0s starve every other job's scrape.
    shell.scraper = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=shell.config.scrape_timeout),
                                          connector=aiohttp.TCPConnector(limit=0))
    await kubeapi.CONNECTION.client()  # log in now: the first job's pods are not kept waiting for it
    if shell.refused is not None and shell.refused.namespaces:
        # its 403s are what it looks for: the refusal is counted once, by kuberl_operator_namespace_refused and its alert
        refused_api = KubeApi(settings, logger, shell.metrics, answers=(kubeapi.Forbidden,), limiter=shell.api_limiter)
        shell.refused.task = asyncio.create_task(supervised("the recheck of refused namespaces", lambda: shell.refused.run(refused_api)))
    recheck = FinalizerRecheck(shell.finalizer_refused, restart_in_place, FINALIZER_RECHECK_SECONDS)
    recheck_api = KubeApi(settings, logger, shell.metrics, answers=(kubeapi.Forbidden,), limiter=shell.api_limiter)
    recheck.task = asyncio.create_task(supervised("the finalizer recheck", lambda: recheck.run(recheck_api)))
    shell.finalizer_recheck = recheck
    heartbeat, heartbeat_api = WatchHeartbeat(shell.config.watch, restart_in_place), KubeApi(settings, logger, shell.metrics, limiter=shell.api_limiter)
    shell.heartbeat = heartbeat
    heartbeat.task = asyncio.create_task(
        supervised("the watch heartbeat", lambda: heartbeat.run(heartbeat_api, shell.config.namespaces[:1] or (None,))))


SUPERVISED_MAX_DELAY_SECONDS = 30.0


async def supervised(name: str, run: Callable[[], Awaitable[None]], clock: Callable[[], float] = time.monotonic) -> None:
    """One of the operator's background checks, started again after any failure it did not expect (the credential
    plugin failing as the client logs in again raises kubernetes_asyncio's ConfigException): it ended for good,
    unseen, and what it watched went unwatched (a refused namespace never taken back, the heartbeat silent so
    /healthz failed a healthy operator). Each failure is said; 1, 2, 4 … 30 s between quick ones."""
    failures = 0
    while True:
        started = clock()
        try:
            await run()
            return
        except Exception as error:  # said, and the check goes on
            failures = failures + 1 if clock() - started < 2 * SUPERVISED_MAX_DELAY_SECONDS else 1
            delay = min(SUPERVISED_MAX_DELAY_SECONDS, 2.0 ** (failures - 1))
            logger.error("%s failed: it starts again in %gs: %s", name, delay,
                         safetext.one_line(f"{type(error).__name__}: {error}")[:300], exc_info=error)
            await asyncio.sleep(delay)


class GenerationEssence(kopf.AnnotationsDiffBaseStorage):
    """kopf builds an essence of every event of a job (two deep copies of the whole body, on the event
    loop) to diff for create/update handlers; kuberl has none, so its essence is the generation alone.
    The copies took 25-40 ms per event of the largest spec that passes, our own status writes included."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {"metadata": {"generation": body.metadata.get("generation")}})


def configure_persistence(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    # No handler here keeps progress or a diff base (daemons and event handlers work in
    # memory); both storages are named anyway so nothing kopf writes is a surprise.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
    settings.persistence.diffbase_storage = GenerationEssence(prefix=names.GROUP, key="last-handled-configuration")


def shell_of(memo: kopf.Memo) -> Shell:
    return memo.shell


# The heartbeat needs bookmarks, not jobs: a name no job can have (job names are DNS-1035 labels)
# keeps every job event off its stream, so it costs the API server next to nothing per edit.
NOTHING = ("fieldSelector", "metadata.name=kuberl.operator.heartbeat")


class WatchHeartbeat:
    """One watch of RLTrainingJobs with bookmarks (and no job: NOTHING), on the operator's own
    client and kopf's bounds, whose every line (bookmark, a fresh list) is a sign of life. kopf's watches
    share its network path and bounds but tell nothing of their silence, so this one speaks for
    them: silent past `WatchBounds.silent_bound`, /healthz fails and the kubelet restarts the
    operator, whatever kept it blind. A 410 (Expired, Gone) lists again and goes on."""

    def __init__(self, bounds: Any, restart: Callable[[], None] | None = None):
        self.bounds = bounds
        self.last_heard = time.monotonic()
        self.task: asyncio.Task | None = None
        self.silent_reported = False
        # The CRD not served when the heartbeat listed (a 404: the API server answers, so not a silence). kopf
        # resolves its resources once, at its start, and never serves a CRD installed later: once it is served,
        # `restart` starts the operator again in place (config.restart_in_place).
        self.crd_missing = False
        self.restart = restart

    def heard(self) -> None:
        self.last_heard = time.monotonic()
        if self.silent_reported:
            logger.warning("watches heard from again after a silence longer than %gs", self.bounds.silent_bound)
        self.silent_reported = False

    def silence(self) -> float:
        return time.monotonic() - self.last_heard

    async def run(self, api: KubeApi, namespaces: tuple[str | None]) -> None:
        bounds, path = self.bounds, kubeapi.resource_path(*RLTJ, namespaces[0])
        timeout = aiohttp.ClientTimeout(total=bounds.client_timeout, sock_connect=bounds.connect_timeout,
                                        sock_read=bounds.inactivity_timeout)
        version: str | None = None
        while True:
            try:
                if version is None:
                    try:
                        listed = await api.call("get", "list", names.PLURAL, path, query=[NOTHING, ("limit", "1")])
                    except kubeapi.NotFound:
                        self.heard()  # an answer: the API server is there, the CRD is not
                        if not self.crd_missing:
                            self.crd_missing = True
                            logger.error(CRD_MISSING)
                        await asyncio.sleep(CRD_RECHECK_SECONDS)
                        continue
                    version = listed["metadata"]["resourceVersion"]
                    self.heard()
                    if self.crd_missing and self.restart is not None:
                        logger.warning("the API server serves %s.%s/%s now: kopf resolves its resources only at its start, so"
                                       " the operator restarts in place to watch its jobs", names.PLURAL, names.GROUP, names.VERSION)
                        self.restart()
                query = [("watch", "true"), NOTHING, ("allowWatchBookmarks", "true"), ("resourceVersion", version),
                         ("timeoutSeconds", str(bounds.server_timeout))]
                async for line in api.watch_lines(names.PLURAL, path, query, timeout, resolves=(kubeapi.NotFound, kubeapi.Expired)):
                    self.heard()  # the answer itself, then each bookmark: a real API server sends one about a minute
                    if not line:
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # 410 Expired: list again
                        version = None
                        break
                    version = (event.get("object") or {}).get("metadata", {}).get("resourceVersion") or version
            except ApiError as error:
                if error.status in (404, 410):  # 410: list again; 404: the CRD went, which the list says
                    version = None
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError, AttributeError):
                pass  # the silence is what counts: /healthz reports it (a line it cannot read must not end the heartbeat)
            await asyncio.sleep(1.0)


CRD_MISSING = (f"the API server does not serve {names.PLURAL}.{names.GROUP}/{names.VERSION}: the RLTrainingJob CRD is not"
               " installed (or not that version), so no job can be seen. Install it (the chart does; else `kuberl crd |"
               " kubectl apply -f -`): the operator restarts in place once it is served")
CRD_RECHECK_SECONDS = 5.0


@kopf.on.probe(id="watching")
def watching(memo: kopf.Memo, **_: Any) -> float:
    """Seconds since the watches were last heard from; fails /healthz past the bound."""
    heartbeat = shell_of(memo).heartbeat
    if heartbeat is None:
        return 0.0
    silence = heartbeat.silence()
    if silence > heartbeat.bounds.silent_bound:
        if not heartbeat.silent_reported:
            logger.error("watches silent for %.0fs, past the %gs bound (--watch-timeout %g): /healthz fails so the"
                         " kubelet restarts the operator", silence, heartbeat.bounds.silent_bound, heartbeat.bounds.server_timeout)
            heartbeat.silent_reported = True
        raise kopf.PermanentError(f"watches silent for {silence:.0f}s (bound {heartbeat.bounds.silent_bound:g}s)")
    return round(silence, 1)


class PeeringCheck:
    """Reads the peering object every few seconds: other live replicas with this one's priority
    make kopf pause every one of them ("Pausing all operators, including self"), so no job
    progresses and, from kopf, nothing says why. This says it: an error line when it starts, a
    gauge (kuberl_operator_peers_same_priority), and a failing /healthz, so the kubelet restarts
    the replica and its restarts show."""

    def __init__(self, config: OperatorConfig, metrics: OperatorMetrics):
        self.config, self.metrics = config, metrics
        self.same: list[str] = []  # identities of other live replicas with our priority
        self.task: asyncio.Task | None = None

    def path(self) -> str:
        if self.config.namespaces:  # kopf peers per namespace when not cluster-wide
            return kubeapi.resource_path("kopf.dev", "v1", "kopfpeerings", self.config.namespaces[0], self.config.peering)
        return kubeapi.resource_path("kopf.dev", "v1", "clusterkopfpeerings", None, self.config.peering)

    def judge(self, peering: dict | None, now: float) -> list[str]:
        """Identities of live peers with our priority, ourselves excluded (we are one of those
        holding it: a second one is a conflict)."""
        peers = (peering or {}).get("status") or {}
        same = []
        for identity, record in peers.items():
            if not isinstance(record, dict) or record.get("priority") != self.config.priority:
                continue
            try:  # kopf writes datetime.isoformat(), with its offset
                seen = datetime.datetime.fromisoformat(str(record.get("lastseen"))).timestamp()
            except ValueError:
                continue
            if now - seen <= float(record.get("lifetime") or 60):
                same.append(identity)
        return sorted(same)[1:] if len(same) > 1 else []

    async def run(self, api: KubeApi) -> None:
        while True:
            with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError, ValueError, TypeError):
                same = self.judge(await api.call("get", "get", "clusterkopfpeerings" if not self.config.namespaces else
                                                 "kopfpeerings", self.path()), time.time())
                if same and not self.same:
                    logger.error("peering %s: %d other live replica(s) have priority %d, as this one does: kopf pauses every one"
                                 " of them and no job progresses. Give each replica a distinct --priority (the chart's"
                                 " StatefulSet uses its ordinal); /healthz fails until then", self.config.peering, len(same),
                                 self.config.priority)
                elif self.same and not same:
                    logger.warning("peering %s: no other live replica has priority %d any more", self.config.peering,
                                   self.config.priority)
                self.same = same
                self.metrics.peers_same_priority.set(len(same))
            await asyncio.sleep(PEERING_CHECK_SECONDS)


PEERING_CHECK_SECONDS = 5.0


class RefusedNamespaces:
    """Watched namespaces where RBAC refused kopf its list or watch, so kopf runs without them: every
    `recheck_seconds` each one's lists and watches are tried as kopf makes them (the plain request, answered
    403 or 200 before any object is sent); once all pass, `granted` gets the namespace and `stop` is set, so
    kopf stops and the operator starts it again with the namespace back. Said again every REMIND_SECONDS."""

    def __init__(self, namespaces: dict[str, str], resources: list[tuple[str, str, str]], recheck_seconds: float,
                 stop: Any, remind: Callable[[str, str], None]):
        self.namespaces, self.resources, self.recheck_seconds = namespaces, resources, recheck_seconds
        self.stop, self.remind = stop, remind
        self.granted: set[str] = set()
        self.task: asyncio.Task | None = None

    async def allowed(self, api: KubeApi, namespace: str) -> bool:
        timeout = aiohttp.ClientTimeout(total=10)
        try:
            for resource in self.resources:
                path = kubeapi.resource_path(*resource, namespace)
                await api.call("get", "list", resource[2], path, query=[("limit", "1")])
                lines = api.watch_lines(resource[2], path, [("watch", "true"), ("timeoutSeconds", "1")], timeout)
                async with contextlib.aclosing(lines):
                    await anext(lines)  # its first item comes with the 200: the watch is allowed
        except kubeapi.Forbidden:
            return False
        return True

    async def run(self, api: KubeApi) -> None:
        reminded = time.monotonic()
        while not self.granted:
            await asyncio.sleep(self.recheck_seconds)
            for namespace in self.namespaces:
                with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
                    if await self.allowed(api, namespace):
                        self.granted.add(namespace)
            if self.granted:
                self.stop.set()
            elif time.monotonic() - reminded >= REMIND_SECONDS:
                reminded = time.monotonic()
                for namespace, message in self.namespaces.items():
                    self.remind(namespace, message)


class FinalizerRecheck:
    """kopf adds its finalizer to a job, and takes it off a deleted one, as it handles one of the job's watch events;
    when RBAC refused that patch, kopf tried again only at the job's next change: a deleted job stayed Terminating
    however long after the grant, until something edited it or the operator restarted. Every `recheck_seconds`
    while a refusal is on record (`refused`: a job per namespace), a dry run of a patch of that job asks whether
    it is allowed now; once it is, `restart` starts the operator again in place, and kopf, listing every job anew,
    patches each one it was refused."""

    def __init__(self, refused: dict[str, str], restart: Callable[[], None], recheck_seconds: float):
        self.refused, self.restart, self.recheck_seconds = refused, restart, recheck_seconds
        self.task: asyncio.Task | None = None

    async def allowed(self, api: KubeApi, namespace: str, name: str) -> bool:
        try:
            await api.dry_run_patch(*RLTJ, namespace or None, name)
        except kubeapi.NotFound:
            self.refused.pop(namespace, None)  # that job is gone, and its refusal with it
            return False
        except kubeapi.Forbidden:
            return False
        return True

    async def run(self, api: KubeApi) -> None:
        while True:
            await asyncio.sleep(self.recheck_seconds)
            for namespace, name in list(self.refused.items()):
                with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
                    if await self.allowed(api, namespace, name):
                        logger.warning("RBAC allows the operator to patch %s in namespace \"%s\" again: it restarts in place,"
                                       " so kopf adds its finalizer to the jobs it was refused, or takes it off a deleted one",
                                       names.PLURAL, namespace)
                        self.restart()
                        return


FINALIZER_RECHECK_SECONDS = 10.0
REFUSED_RECHECK_SECONDS = 10.0
REMIND_SECONDS = 600.0


@kopf.on.probe(id="refused_namespaces")
def refused_namespaces(memo: kopf.Memo, **_: Any) -> list[str]:
    """Watched namespaces RBAC refuses now (their jobs are not reconciled); /healthz stays up for the others."""
    refused = shell_of(memo).refused
    return sorted(refused.namespaces) if refused is not None else []


@kopf.on.probe(id="peering")
def peering(memo: kopf.Memo, **_: Any) -> int:
    """Other live replicas sharing this one's peering priority; fails /healthz when there are any."""
    check = shell_of(memo).peering
    if check is None or not check.same:
        return 0
    raise kopf.PermanentError(f"peering {check.config.peering}: {len(check.same)} other live replica(s) share priority"
                              f" {check.config.priority}; every replica is paused")


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    if memo.shell.stop is not None:
        memo.shell.stop.set()  # kopf's own wait for its stop flag ends now, not after its 5 s for hung tasks
    for task in (memo.shell.heartbeat and memo.shell.heartbeat.task, memo.shell.peering and memo.shell.peering.task,
                 memo.shell.refused and memo.shell.refused.task, memo.shell.finalizer_recheck and memo.shell.finalizer_recheck.task):
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if memo.shell.scraper is not None:
        await memo.shell.scraper.close()
    await kubeapi.CONNECTION.close()


LOGIN_RETRY_SECONDS = 5.0  # kopf's default, 60 s, left kopf blind that long after a credential plugin failed once


@kopf.on.login(backoff=LOGIN_RETRY_SECONDS)
async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The pod's service account in a cluster, else $KUBECONFIG read by kubernetes_asyncio (exec
    plugins, OIDC, client certificates), as `kubeapi` loads it; kopf calls this again after a 401."""
    return await kopf.login_via_async_client(**kwargs)


# --- watch events only wake the job's loop ------------------------------------


@kopf.on.event(*PODS, labels={names.LABEL_JOB: kopf.PRESENT})
async def pod_changed(labels: dict, namespace: str, memo: kopf.Memo, **_: Any) -> None:
    memo.shell.poke(namespace, labels[names.LABEL_JOB], pods_changed=True)


@kopf.on.event(*RLTJ)
async def job_changed(body: kopf.Body, namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A spec edit (suspend, deadline, TTL) acts at once; our own status writes do not re-wake, nor
    does a metadata edit of a job whose status this spec cannot hold (StatusTooLarge)."""
    generation = body.metadata.get("generation")
    if generation != body.status.get("observedGeneration") and memo.get("status_refused") != (body.metadata.uid, generation):
        memo.shell.poke(namespace, name)


# --- the reconcile loop -------------------------------------------------------


RECONCILE_BACKOFF_SECONDS = 5.0  # kopf starts a failed job loop again after this
REASON_RECONCILE_FAILED = "ReconcileFailed"


@kopf.daemon(*RLTJ, id="reconcile", backoff=RECONCILE_BACKOFF_SECONDS, cancellation_timeout=10.0)
async def run_job(name: str, namespace: str, body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, logger: Any,
                  **_: Any) -> None:
    shell: Shell = memo.shell
    # Its own doorbell, taking the name's over: a same-named predecessor's loop may still be ending (its finalizer
    # taken off by hand, it was stopped inside a reconcile), and its end must not unregister this one's.
    wake = shell.wakes[(namespace, name)] = Wake()  # a (re)started loop lists the pods first
    job = JobLoop(shell, KubeApi(shell.settings, logger, shell.metrics, limiter=shell.api_limiter), namespace, name, memo, wake)
    try:
        while not stopped:
            wake.event.clear()
            try:
                async with shell.reconcile_slots:
                    with shell.metrics.reconcile_duration.time():
                        seconds = await job.reconcile()
            except (kubeapi.ServerError, kubeapi.TooManyRequests, kubeapi.Forbidden) as error:
                # Answered, after KubeApi's retries (each logged, the failure counted), or at once for a 403 on a read
                # (the namespace's RoleBinding deleted: kopf's watch there meets it too and the operator says the
                # namespace once, RefusedNamespaces): the server's words are the line kopf logs, where a traceback
                # would add nothing (etcd timing out a status write, a 503, the job's pods no longer listable)
                said = f"the API server answered {error.status} {error.reason}".rstrip()
                retried = "" if isinstance(error, kubeapi.Forbidden) else f" (after {len(kubeapi.API_BACKOFFS)} retries)"
                message = f"{said}: {error}{retried}; the job is reconciled again in {RECONCILE_BACKOFF_SECONDS:g} s"
                _failure_said(shell, body, message)
                raise kopf.TemporaryError(message, delay=RECONCILE_BACKOFF_SECONDS) from None
            except Exception as error:  # kopf logs each (never as an Event: posting.loggers is off since kopf 1.44) and retries
                _failure_said(shell, body, str(error) if isinstance(error, kopf.TemporaryError) else f"{type(error).__name__}: {error}")
                raise
            await _sleep(wake.event, stopped, seconds)
            if wake.event.is_set():
                await asyncio.sleep(job.settle_seconds())
    finally:
        if stopped and shell.wakes.get((namespace, name)) is wake:  # no newer job of this name took the name's state
            del shell.wakes[(namespace, name)]
            shell.events.forget((namespace, name))
            shell.metrics.job_phase(namespace, name, None)


def _failure_said(shell: Shell, body: kopf.Body, message: str) -> None:
    """A failed reconcile, in one Warning Event per distinct failure (EventLimiter drops the repeats)."""
    if shell.events.allow((body.metadata.namespace, body.metadata.name), "Warning", REASON_RECONCILE_FAILED, message,
                          time.monotonic()):
        kopf.event(body, type="Warning", reason=REASON_RECONCILE_FAILED, message=safetext.event_message(message, lifecycle.MESSAGE_LIMIT))


async def _sleep(wake: asyncio.Event, stopped: kopf.DaemonStopped, seconds: float | None) -> None:
    """Until poked, stopped, or `seconds` pass (None: until poked or stopped)."""

    async def until_stopped() -> None:
        await stopped.wait()

    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


@contextlib.asynccontextmanager
async def _slot_lent(slots: asyncio.Semaphore | None) -> AsyncIterator[None]:
    """Inside a reconcile (which holds one of `slots`): lend the slot to other jobs while waiting on
    rank 0, which the tenant controls; a scrape is no load on the API server the slots protect."""
    if slots is None:
        yield
        return
    slots.release()
    try:
        yield
    finally:
        # Shielded: if the daemon is cancelled meanwhile, the slot is still taken back, for
        # run_job's `async with` to release it (the count stays right).
        await asyncio.shield(slots.acquire())


def _judged_timed(job: dict, pod_problems: Callable[[JobSpec], list[str]]) -> tuple[tuple[JobSpec | None, lifecycle.Refusal | None], float]:
    """`jobstatus.judge` and the CPU seconds it took (this thread's own: not the time it waited for the GIL)."""
    start = time.thread_time()
    return jobstatus.judge(job, pod_problems), time.thread_time() - start


class JobLoop:
    """One job's reconcile: read, decide, write once, then execute the decision's actions."""

    def __init__(self, shell: Shell, api: KubeApi, namespace: str, name: str, memo: kopf.Memo, wake: Wake):
        self.shell, self.api, self.namespace, self.name, self.memo, self.wake = shell, api, namespace, name, memo, wake
        self.pods: list[dict] = []
        self.pods_listed_at = 0.0
        self.scrape_failure: str | None = None  # how the last scrape of rank 0 failed (None: it was read, or not tried)
        self.scraped_url = ""
        # Every action of lifecycle.decide and the call that carries it out. Event, Wait, Fail and
        # Succeed are read, not called: events go out after the status write, waits set the next wake.
        self.calls: dict[type, Callable[[dict, JobSpec | None, Any], Awaitable[None]]] = {
            lifecycle.FinishPodGroup: self._finish_pod_group,
            lifecycle.CreatePods: self._create_gang,
            lifecycle.DeletePods: self._delete_pods,
            lifecycle.DeleteJob: self._delete_job,
            lifecycle.CheckNetworkPolicy: self._check_networkpolicy,
        }

    def settle_seconds(self) -> float:
        """How long a woken loop waits before it reconciles: a burst of events becomes one reconcile,
        and a stale pod list is listed again no sooner than `relist_seconds` after the last list
        (outside the reconcile slots: a throttled job holds none)."""
        config = self.shell.config
        if not self.wake.pods_changed:
            return config.debounce_seconds
        return max(config.debounce_seconds, self.pods_listed_at + config.relist_seconds - time.monotonic())

    async def reconcile(self) -> float | None:
        """Returns how long until the next reconcile is due (None: only when something changes)."""
        job = await self.api.get(*RLTJ, self.namespace, self.name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None  # kopf stops this daemon; owner references do the deleting
        if (pause := self._judge_paused(job)) is not None:
            return pause  # its newer spec waits its turn (jobstatus.judge_pause); nothing is done on the older one
        spec, refusal = await self._judge(job)
        try:
            decision = await self._decide(job, spec, refusal)
            try:
                await self._act(job, spec, decision)
            except ChildRefused as refused:
                # Decided again with the refusal: the job fails (or waits for quota), and any part of
                # the gang already created is deleted by the same decision.
                self.wake.pods_changed = True
                decision = await self._decide(job, spec, refused.refusal)
                await self._act(job, spec, decision)
                if refused.refusal.patching:
                    # A finished job's status does not change here, so _decide posted nothing: said now, in an
                    # Event (EventLimiter drops the repeats) and one log line every REMIND_SECONDS.
                    for event in decision.of(lifecycle.Event):
                        self._post(job, event.type, event.reason, event.message)
                    said = self.memo.get("pod_group_refusal_said")
                    if said is None or time.monotonic() - said >= REMIND_SECONDS:
                        self.memo["pod_group_refusal_said"] = time.monotonic()
                        logger.warning("job %s/%s: %s", self.namespace, self.name, refused.refusal.message)
        except StatusConflict:
            # The job changed since it was read (a tenant may edit it many times a second): read it again
            # soon, quietly; kopf would log each as an ERROR ("failed temporarily") and restart the daemon.
            return CONFLICT_RETRY_SECONDS
        except StatusTooLarge as too_large:
            self.memo["status_refused"] = (job["metadata"]["uid"], job["metadata"].get("generation"))
            # Nothing is done that status cannot record first; an Event is a separate object, so it
            # still tells the user why. Tried again when the job is edited (or at the resync).
            self._post(job, "Warning", REASON_STATUS_TOO_LARGE,
                       f"the job's status cannot be written ({too_large}): the job with its status is over the API server's"
                       " object size limit; make its spec smaller. Nothing is created or deleted until the status can be written")
            return self.shell.config.resync_seconds
        except StatusForbidden as forbidden:
            # Status-first: with the status unwritable nothing is done. An Event still reaches the job's describe
            # (the only place its owner looks), where the log held a traceback every 5 s.
            message = jobstatus.status_refusal(403, str(forbidden))
            logger.warning("job %s/%s: %s", self.namespace, self.name, message)
            self._post(job, "Warning", lifecycle.REASON_OPERATOR_FORBIDDEN, message)
            return lifecycle.MAX_FORBIDDEN_RETRY_SECONDS
        return self._next_wake(decision)

    def _judge_paused(self, job: dict) -> float | None:
        """Seconds until this job's new spec generation may be judged; None: now (or it is judged already). A
        thread of its own does not free the event loop from a judgement's CPU: they share the GIL."""
        judged = self.memo.get("judged")
        uid, generation = job["metadata"]["uid"], job["metadata"].get("generation")
        if judged is None or judged[0] == (uid, generation) or judged[0][0] != uid:
            return None
        left = self.memo.get("judge_due", 0.0) - time.monotonic()
        return left if left > 0 else None

    async def _judge(self, job: dict) -> tuple[JobSpec | None, lifecycle.Refusal | None]:
        """The spec and its pods' security, judged once per spec generation, off the event loop:
        a large spec must not keep every other job (and /healthz) waiting."""
        key = (job["metadata"]["uid"], job["metadata"].get("generation"))
        judged = self.memo.get("judged")
        if judged is None or judged[0] != key:
            status = job.get("status") or {}
            verdict, cpu_seconds = await asyncio.to_thread(_judged_timed, job, lambda spec: self._pod_problems(spec, status))
            spec, refusal = verdict
            # what status records of the admission: the weighing rules' fingerprints, and the problems they let through
            self.memo["admitted"] = (key, jobstatus.admission(job, spec) if spec is not None and refusal is None else None)
            judged = self.memo["judged"] = (key, verdict)
            self.memo["judge_due"] = time.monotonic() + jobstatus.judge_pause(cpu_seconds)
            self.shell.metrics.spec_judgement.observe(cpu_seconds)
        return judged[1]

    def _pod_problems(self, spec: JobSpec, status: dict) -> list[str]:
        """Every field of the job's rendered pods over the operator's pod security level, or against a pod default the
        platform enforces (those the job recorded in `status`, else the operator's), named by path."""
        config = self.shell.config
        # the tenant's pods: the platform's own defaults (trainer.podDefaults) are not the tenant's to answer for
        pods = self._render_pods(spec, "", render.representative_ranks(spec.workers), 0, platform=False)
        defaults = poddefaults.judged_by(status, config.trainer_pod_defaults)
        return [*(str(v) for v in podsecurity.check_pods(pods, config.pod_security, config.allowed_service_accounts,
                                                         config.forbidden_pod_fields)),
                *dict.fromkeys(c for pod in pods for c in poddefaults.conflicts(pod, defaults))]

    def _trainer_defaults(self, status: dict) -> tuple[str, render.PerProcess]:
        config = self.shell.config
        return jobstatus.trainer_defaults(status, config.trainer_image, config.trainer_per_process)

    def _image_pull(self, status: dict) -> tuple[str | None, tuple[str, ...]]:
        config = self.shell.config
        return jobstatus.image_pull_defaults(status, config.trainer_pull_policy, config.trainer_pull_secrets)

    def _render_pods(self, spec: JobSpec, uid: str, ranks: list[int], generation: int, status: dict | None = None,
                     platform: bool = True) -> list[dict]:
        """`status`: the job's, whose recorded trainer defaults its pods take; None: the operator's own. `platform`:
        with the platform's pod defaults (trainer.podDefaults) laid under the job's."""
        config = self.shell.config
        image, per_process = self._trainer_defaults(status or {})
        pods = render.render_pods(render.Job(self.name, spec), self.namespace, uid, ranks, generation, default_image=image,
                                  per_process=per_process)
        pull_policy, pull_secrets = self._image_pull(status or {})
        pods = [jobstatus.with_operator_defaults(pod, pull_policy, pull_secrets) for pod in pods]
        if not platform:
            return pods
        defaults = poddefaults.recorded(status or {}, config.trainer_pod_defaults)
        return [poddefaults.apply(pod, defaults) for pod in pods]

    async def _decide(self, job: dict, spec: JobSpec | None, refusal: lifecycle.Refusal | None) -> lifecycle.Decision:
        """Read the pods and rank 0, decide, write the status once; events only after the write."""
        status = job.get("status") or {}
        pods = await self._pods(job["metadata"]["uid"])
        now = kubeapi.SERVER_CLOCK.now()  # the API server's time, which every replica shares (kubeapi.ServerClock)
        generation = status.get("generation") or 0
        observed = [lifecycle.observed_pod(p) for p in pods]
        reading = None
        if spec is not None and refusal is None and status.get("phase") not in lifecycle.TERMINAL:
            reading = await self._scrape(job, spec, pods, generation)
        # After an operator restart the memo is empty: status keeps the stall clock.
        previous = self.memo.get("rank0") or lifecycle.progress_from_status(status)
        rank0 = rank0metrics.progress_of(previous, generation, reading, now)
        self.memo["rank0"] = rank0
        unread = None if spec is None else jobstatus.metrics_unread(spec, status, generation, rank0 is not None,
                                                                     self.scrape_failure, self.scraped_url, now)
        decision = lifecycle.decide(spec, status, observed, rank0, now, refusal=refusal,
                                    networkpolicy_checked=self.memo.get("networkpolicy_checked") == job["metadata"]["uid"])
        paths = trainer_config(self.name, self.namespace, job["metadata"]["uid"], spec)["paths"] if spec is not None else None
        key, admitted = self.memo.get("admitted") or (None, None)
        if key != (job["metadata"]["uid"], job["metadata"].get("generation")) or decision.phase == lifecycle.FAILED:
            admitted = None  # not this generation's judgement, or a job that ends here: its record stays as it was
        new_status = jobstatus.job_status(decision.status, observed_generation=job["metadata"].get("generation", 1),
                                          reading=reading, paths=paths, desired_workers=spec.workers if spec is not None else None,
                                          defaults=self._trainer_defaults(status),
                                          pod_defaults=poddefaults.recorded(status, self.shell.config.trainer_pod_defaults),
                                          image_pull=self._image_pull(status), admitted=admitted, now=now)
        written = await self._write(job, status, new_status)
        restarts = new_status.get("restarts")
        self.shell.metrics.job_phase(self.namespace, self.name, decision.phase, restarts if isinstance(restarts, int) else 0)
        said = (job["metadata"]["uid"], generation)
        if reading is not None and reading.checkpoints_skipped and self.memo.get("skipped_said") != said:
            self.memo["skipped_said"] = said  # once per generation: the gauge holds its value while rank 0 runs
            self._post(job, "Warning", jobstatus.REASON_CHECKPOINTS_SKIPPED,
                       jobstatus.checkpoints_skipped(generation, reading.checkpoints_skipped))
        slow = None if spec is None else jobstatus.checkpoint_outlasts_grace(
            generation, reading, spec.run_policy.termination_grace_period_seconds)
        if slow is not None and self.memo.get("slow_said") != said:
            self.memo["slow_said"] = said  # once per generation: before any stop, while it can still be raised
            self._post(job, "Warning", jobstatus.REASON_CHECKPOINT_OUTLASTS_GRACE, slow)
        if unread is not None and self.memo.get("unread_said") != said:
            self.memo["unread_said"] = said  # once per generation, in its describe and the operator's log
            logger.warning("job %s/%s: %s", self.namespace, self.name, unread)
            self._post(job, "Warning", jobstatus.REASON_METRICS_UNREAD, unread)
        if admitted is not None and admitted.ratcheted and self.memo.get("ratchet_said") != key:
            self.memo["ratchet_said"] = key  # once per spec generation; its condition stays in status
            message = jobstatus.ratcheted_message(admitted.ratcheted)
            logger.warning("job %s/%s: %s", self.namespace, self.name, safetext.one_line(message)[:lifecycle.MESSAGE_LIMIT])
            self._post(job, "Warning", jobstatus.REASON_ADMITTED_UNDER_OLDER_RULES, message)
        missing = jobstatus.checkpoints_missing(status, reading, generation)
        if missing is not None and self.memo.get("missing_said") != said:
            self.memo["missing_said"] = said  # once per generation: the run stays behind the record for a while
            self._post(job, "Warning", jobstatus.REASON_CHECKPOINTS_MISSING, missing)
        if written:
            for event in decision.of(lifecycle.Event):
                self._post(job, event.type, event.reason, event.message)
            entry = jobstatus.restarted(status, new_status)
            if entry is not None:
                self.shell.metrics.gang_restarted(self.namespace, self.name, entry["reason"])
        return decision

    async def _pods(self, uid: str) -> list[dict]:
        """The job's pods: listed again only after a pod event (or the resync period), so a
        timer wake-up of a quiet job costs one GET of the job and no list."""
        if self.wake.pods_changed or time.monotonic() - self.pods_listed_at > self.shell.config.resync_seconds:
            self.wake.pods_changed = False  # before the list: an event during it marks it stale again
            self.pods_listed_at = time.monotonic()
            try:
                listed = await self.api.list_job_pods(self.namespace, self.name)
            except BaseException:
                self.wake.pods_changed = True
                raise
            # A pod under our label but not owned by this uid is a same-named predecessor's, still going.
            self.pods = [p for p in listed if jobstatus.owned_by(p, uid)]
        return self.pods

    async def _scrape(self, job: dict, spec: JobSpec, pods: list[dict], generation: int) -> rank0metrics.Rank0Reading | None:
        """Rank 0's metrics, if it runs and has an address; any failure reads as 'no news'.
        At most MAX_PAGE_BYTES are read, and the page is parsed off the event loop."""
        rank0 = next(
            (p for p in pods
             if (p["metadata"].get("labels") or {}).get(names.LABEL_RANK) == "0"
             and (p["metadata"].get("labels") or {}).get(names.LABEL_RESTART) == str(generation)
             and (p.get("status") or {}).get("phase") == "Running"
             and (p.get("status") or {}).get("podIP")),
            None,
        )
        self.scrape_failure = None
        if rank0 is None or self.shell.scraper is None:
            return None
        ip = rank0["status"]["podIP"]
        host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod address in a URL takes brackets
        url = self.scraped_url = f"http://{host}:{spec.metrics.port}/metrics"
        try:
            async with _slot_lent(self.shell.reconcile_slots):
                # Never follow a redirect: rank 0 is the tenant's, and would steer the operator's requests elsewhere.
                async with self.shell.scraper.get(url, allow_redirects=False) as response:
                    if response.status != 200:
                        self.scrape_failure = f"HTTP {response.status}"
                        return None
                    page = await scraping.read_at_most(response, rank0metrics.MAX_PAGE_BYTES)
                return await asyncio.to_thread(rank0metrics.parse, page, self.name)
        except rank0metrics.PageTooLarge as too_large:
            self.shell.metrics.metrics_pages_refused.labels("too_large").inc()
            self._post(job, "Warning", REASON_METRICS_TOO_LARGE, str(too_large))
            return None
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            # said once the gang has run a stallTimeoutSeconds unread (jobstatus.metrics_unread)
            self.scrape_failure = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            return None

    async def _write(self, job: dict, old: dict, new: dict) -> bool:
        patch = render.merge_patch(old, new)
        if patch is None:
            return False
        try:
            written = await self.api.patch_status(self.namespace, self.name, patch, job["metadata"]["resourceVersion"])
        except Conflict:
            raise StatusConflict from None
        except ApiError as error:
            if error.status == 413:  # etcd's object size limit: retrying the same write cannot help
                raise StatusTooLarge(error.message) from None
            if jobstatus.status_refusal(error.status, error.message) is not None:
                raise StatusForbidden(error.message) from None
            raise
        job["metadata"]["resourceVersion"] = written["metadata"]["resourceVersion"]
        job["status"] = written.get("status") or {}
        return True

    def _post(self, job: dict, type_: str, reason: str, message: str) -> None:
        """An Event on the job, unless this job has posted too many (EventLimiter)."""
        if self.shell.events.allow((self.namespace, self.name), type_, reason, message, time.monotonic()):
            kopf.event(job, type=type_, reason=reason, message=safetext.event_message(message, lifecycle.MESSAGE_LIMIT))

    # --- actions, after the status is on record ---

    async def _act(self, job: dict, spec: JobSpec | None, decision: lifecycle.Decision) -> None:
        if decision.of(lifecycle.CreatePods) or decision.of(lifecycle.DeletePods):
            self.wake.pods_changed = True  # what we do to the pods is read back, never assumed
        for action in decision.actions:
            call = self.calls.get(type(action))
            if call is not None:
                await call(job, spec, action)

    async def _create_gang(self, job: dict, spec: JobSpec, action: lifecycle.CreatePods) -> None:
        """The generation's children and pods; a create the API server refuses becomes ChildRefused."""
        try:
            await self._ensure_children(job, spec, action.generation)
            await self._create_pods(job, spec, action)
        except ApiError as error:
            refusal = jobstatus.child_refusal(error.status, error.message) or jobstatus.server_failure(error.status, error.message)
            if refusal is None:
                raise
            raise ChildRefused(refusal) from error

    async def _ensure_children(self, job: dict, spec: JobSpec, generation: int) -> None:
        """ConfigMap (frozen), PVC, NetworkPolicy, Service, PodGroup: before each generation's
        first pods, so a child deleted by hand comes back with the next gang (an existing one is kept)."""
        uid = job["metadata"]["uid"]
        if self.memo.get("children_of") == (uid, generation):
            return
        j = render.Job(self.name, spec)
        children = [
            render.render_configmap(j, self.namespace, uid),
            render.render_pvc(j, self.namespace),
            self._networkpolicy(spec),
            render.render_service(j, self.namespace),
            render.render_podgroup(j, self.namespace, poddefaults.recorded(
                job.get("status") or {}, self.shell.config.trainer_pod_defaults).priority_class_name),
        ]
        for child in children:
            if child is None:
                continue
            retained = child["kind"] == "PersistentVolumeClaim" and spec.checkpoint.retain
            if not retained:  # a retained PVC must outlive the job: no owner reference
                kopf.adopt(child, owner=job)
            try:
                await self._create_child(child, uid, adopted=not retained)
            except ApiError as error:
                refusal = jobstatus.not_served(error.status, error.message, child, render.scheduler_name(spec),
                                               render.pod_field_path(spec, "schedulerName"))
                if refusal is None:
                    raise
                raise ChildRefused(refusal) from error
        self.memo["children_of"] = (uid, generation)

    def _networkpolicy(self, spec: JobSpec) -> dict:
        config = self.shell.config
        return render.render_networkpolicy(render.Job(self.name, spec), self.namespace, operator_namespace=config.operator_namespace,
                                           monitoring_namespace=config.monitoring_namespace,
                                           monitoring_pod_labels=dict(config.monitoring_pod_labels),
                                           operator_pod_labels=dict(config.operator_pod_labels))

    async def _create_child(self, child: dict, uid: str, adopted: bool) -> None:
        try:
            await self.api.create(child)
        except Conflict:
            existing = await self.api.get(*api_path(child), self.namespace, child["metadata"]["name"])
            going = jobstatus.terminating(child["kind"], child["metadata"]["name"], existing)
            if going is not None:  # an older job's (or a retained claim being deleted): never taken, waited for
                raise ChildRefused(going) from None
            ours = existing is not None and (
                jobstatus.owned_by(existing, uid)
                or (not adopted and (existing["metadata"].get("labels") or {}).get(names.LABEL_JOB) == self.name)
            )
            if not ours:
                kind, name = child["kind"], child["metadata"]["name"]
                refusal = jobstatus.name_in_use(kind, name, existing, self.name) or jobstatus.awaiting_collection(
                    kind, name, existing, self.name)
                if refusal is not None:
                    raise ChildRefused(refusal) from None
                raise kopf.TemporaryError(f"{kind} {name} was gone when read after the 409: created again", delay=1.0) from None
            if child["kind"] == "NetworkPolicy":
                await self._correct_networkpolicy(existing, child)

    async def _check_networkpolicy(self, job: dict, spec: JobSpec, action: lifecycle.CheckNetworkPolicy) -> None:
        uid = job["metadata"]["uid"]
        desired = self._networkpolicy(spec)
        existing = await self.api.get(*api_path(desired), self.namespace, desired["metadata"]["name"])
        if existing is not None and jobstatus.owned_by(existing, uid):
            await self._correct_networkpolicy(existing, desired)
        self.memo["networkpolicy_checked"] = uid

    async def _correct_networkpolicy(self, existing: dict, desired: dict) -> None:
        patch = render.networkpolicy_patch(existing, desired)
        if patch is not None:
            logger.info(f"NetworkPolicy {desired['metadata']['name']}: admitting {self.shell.config.operator_namespace!r} "
                        f"and {self.shell.config.monitoring_namespace!r} (pods labelled"
                        f" {dict(self.shell.config.monitoring_pod_labels) or 'anyhow'}) to the metrics ports")
            await self.api.merge_patch(*api_path(desired), self.namespace, desired["metadata"]["name"], patch)

    async def _create_pods(self, job: dict, spec: JobSpec, action: lifecycle.CreatePods) -> None:
        """The gang's pods, rendered and created CREATE_CONCURRENCY at a time: rendered whole, 1,024 pods of a
        16 KiB template (what MAX_GANG_TEMPLATE_BYTES lets through) took 350 MiB of the operator's memory."""
        uid = job["metadata"]["uid"]
        ranks = list(action.ranks)

        async def create(pod: dict) -> None:
            kopf.adopt(pod, owner=job)
            try:
                await self.api.create(pod)
                self.shell.metrics.pod_created(self.namespace, self.name)
            except Conflict:
                name = pod["metadata"]["name"]
                existing = await self.api.get(*PODS, self.namespace, name)
                going = None if existing is None or jobstatus.owned_by(existing, uid) else jobstatus.terminating("Pod", name, existing)
                if going is not None:  # an older job's of this name: its own older pods are decide's (stale)
                    raise ChildRefused(going) from None
                taken = jobstatus.taken_pod(existing, uid, action.generation, self.name)
                if isinstance(taken, lifecycle.Refusal):
                    raise ChildRefused(taken) from None
                if taken == jobstatus.TakenPod.UNSEEN:  # ours, of an older gang, and never listed: it must not run beside this one
                    await self.api.delete(*PODS, self.namespace, name,
                                          {"propagationPolicy": "Background", "preconditions": {"uid": existing["metadata"]["uid"]}})
                if taken != jobstatus.TakenPod.CURRENT:
                    raise kopf.TemporaryError(f"pod {name} of an older generation is still terminating", delay=1.0) from None

        errors: list[BaseException] = []
        for start in range(0, len(ranks), CREATE_CONCURRENCY):
            rendered = await asyncio.to_thread(self._render_pods, spec, uid, ranks[start:start + CREATE_CONCURRENCY],
                                               action.generation, job.get("status") or {})
            results = await asyncio.gather(*(create(pod) for pod in rendered), return_exceptions=True)
            errors += [r for r in results if isinstance(r, BaseException)]
            del rendered, results
        if errors:
            # A refusal decides the job's fate; any other error is retried as it is.
            refusals = [e for e in errors if isinstance(e, ApiError) and jobstatus.child_refusal(e.status, e.message)]
            raise (refusals or [e for e in errors if isinstance(e, ChildRefused)] or errors)[0]

    async def _delete_pods(self, job: dict, spec: JobSpec | None, action: lifecycle.DeletePods) -> None:
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.pods}
        for pod in action.names:
            options: dict[str, Any] = {"propagationPolicy": "Background"}
            if pod in uids:  # never delete a newer pod that took the name since the read
                options["preconditions"] = {"uid": uids[pod]}
            if action.force:
                options["gracePeriodSeconds"] = 0
            await self._refusable_delete(PODS, pod, options)

    async def _finish_pod_group(self, job: dict, spec: JobSpec | None, action: lifecycle.FinishPodGroup) -> None:
        """Kueue finishes a pod group (and releases its quota) once a pod says it will not be retried."""
        for pod in action.pods:
            self.wake.pods_changed = True
            try:
                await self.api.patch_pod_annotations(self.namespace, pod, {names.KUEUE_RETRIABLE_IN_GROUP: "false"})
            except ApiError as error:
                refusal = jobstatus.pod_group_refusal(error.status, error.message)
                if refusal is None:
                    raise
                raise ChildRefused(refusal) from error

    async def _delete_job(self, job: dict, spec: JobSpec | None, action: lifecycle.DeleteJob) -> None:
        await self._refusable_delete(RLTJ, self.name, {"propagationPolicy": "Background"})

    async def _refusable_delete(self, resource: tuple[str, str, str], name: str, options: dict[str, Any]) -> None:
        """A delete; one RBAC refuses becomes ChildRefused, decided again and said on the job."""
        try:
            await self.api.delete(*resource, self.namespace, name, options)
        except ApiError as error:
            refusal = jobstatus.delete_refusal(error.status, error.message)
            if refusal is None:
                raise
            raise ChildRefused(refusal) from error

    def _next_wake(self, decision: lifecycle.Decision) -> float | None:
        """The lifecycle's own deadline (a finished job's TTL included), or the next scrape of a running gang."""
        if decision.of(lifecycle.DeleteJob):
            return None
        if decision.phase in lifecycle.TERMINAL:
            return decision.requeue_after
        waits = [self.shell.config.resync_seconds]
        if decision.requeue_after is not None:
            waits.append(decision.requeue_after)
        if decision.phase == lifecycle.RUNNING:
            waits.append(self.shell.config.scrape_interval)
        return min(waits)


class StatusConflict(Exception):
    """The status write's resourceVersion is no longer the job's: it changed while it was reconciled."""


class StatusTooLarge(Exception):
    """The API server refused the job's status write as too large (413): the job is too big to hold it."""


class StatusForbidden(Exception):
    """RBAC refused the job's status write (403): nothing the job does can be recorded, so nothing is done."""


class ChildRefused(Exception):
    """The API server refused to create a child, or RBAC a delete: an input for the next decision, not a retry."""

    def __init__(self, refusal: lifecycle.Refusal):
        # The API server's words, which can quote the tenant's: escaped, for kopf should this ever reach it
        # (it logs and posts str() of the exception); the refusal keeps them raw for the lifecycle, which escapes them.
        super().__init__(safetext.one_line(refusal.message))
        self.refusal = refusal
