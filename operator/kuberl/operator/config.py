"""`kuberl operator`: its configuration (command line and the chart's environment).

`OperatorConfig` and `operator_config` are plain data, importable without the
operator extra; `kuberl.operator.main.cmd_operator` starts kopf with them.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import faulthandler
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable

from ..core import contract, names, poddefaults, podsecurity, render, validation


@dataclasses.dataclass(frozen=True)
class WatchBounds:
    """How long a watch may stay silent before it is dropped and made again, and before /healthz
    fails. A half-open connection (the API host died, a middlebox dropped the flow without a
    reset) keeps its socket ESTABLISHED and delivers nothing; only a client-side bound ends it.

    - `server_timeout`: the API server ends each watch after this (`timeoutSeconds`);
    - `client_timeout`: the client ends it a little later, whatever the server did;
    - `connect_timeout`: a connection that is not made in this long is given up;
    - `inactivity_timeout`: the heartbeat's read timeout: a stream that brings nothing (not even
      a bookmark, which a real API server sends about once a minute) for this long is made again.
      kopf's own (settings.watching.inactivity_timeout, 70 s) is left as it is: lowered, a line
      arriving as it expires raises "Cannot change state of expiring Timeout" in kopf's watcher,
      which ends the operator (seen with 4.2 s);
    - `silent_bound`: the most a working watch can go without a line; /healthz fails past it."""

    # An integer: the API server reads timeoutSeconds as an int64 and answers "300.0" with a 400.
    server_timeout: int = 300

    @property
    def client_timeout(self) -> float:
        return round(self.server_timeout * 1.1 + 2.0, 3)

    @property
    def connect_timeout(self) -> float:
        return float(min(10, self.server_timeout))

    @property
    def inactivity_timeout(self) -> float:
        return min(70.0, self.client_timeout)

    @property
    def silent_bound(self) -> float:
        return self.client_timeout + self.connect_timeout


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    trainer_image: str = render.DEFAULT_IMAGE
    trainer_pull_policy: str | None = None  # for jobs that set no imagePullPolicy
    trainer_pull_secrets: tuple[str, ...] = ()  # for jobs whose template sets no imagePullSecrets
    scrape_interval: float = 10.0  # how often a running job's rank 0 is scraped
    scrape_timeout: float = 2.0  # short: a stopped rank 0 freezes its metrics server too
    resync_seconds: float = 300.0  # a safety net; watch events wake the loop sooner
    debounce_seconds: float = 0.05  # a burst of pod events becomes one reconcile
    # A job's pods are listed again at most this often, however fast pod events come: a tenant
    # patching one pod in a loop made the operator list the whole gang back to back.
    relist_seconds: float = 0.5
    max_concurrent_reconciles: int = 32  # bounds the operator's load on the API server in a burst
    # The operator's own API requests (kubeapi.RateLimiter): a burst of kube_api_burst, then kube_api_qps a second
    # (0: no limit). A 100-pod gang is created in one burst; a storm of gangs queues here, not in the API server.
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    peering: str | None = None  # kopf peering object; None runs standalone
    priority: int = 0  # this replica's peering priority
    # How long a replica's peering record outlives its last keepalive: a standby takes over this
    # long after the active replica dies (kopf refreshes the record 5-10 s before it expires).
    peering_lifetime: int = 60
    pod_security: str = podsecurity.DEFAULT_LEVEL  # every rendered pod is checked against it before any is created
    allowed_service_accounts: frozenset[str] | None = None  # None: any (Pod Security Standards leave it open)
    forbidden_pod_fields: frozenset[str] = frozenset()  # of podsecurity.OPEN_FIELDS, refused like pod security violations
    # Admitted to rank 0's metrics port by each job's NetworkPolicy: the operator's scrapes and Prometheus'.
    operator_namespace: str = render.DEFAULT_OPERATOR_NAMESPACE
    monitoring_namespace: str | None = render.DEFAULT_MONITORING_NAMESPACE
    # Of the monitoring namespace, only the pods carrying these labels (Prometheus'); () admits every pod there.
    monitoring_pod_labels: tuple[tuple[str, str], ...] = tuple(render.DEFAULT_MONITORING_POD_LABELS.items())
    # Of the operator's namespace, only its own pods (the chart passes its selector labels); () admits every pod there.
    operator_pod_labels: tuple[tuple[str, str], ...] = ()
    trainer_per_process: render.PerProcess = render.PER_PROCESS  # default requests of a job that sets none
    trainer_pod_defaults: poddefaults.PodDefaults = poddefaults.NONE  # the platform's, under every job's pods
    watch: WatchBounds = WatchBounds()
    namespaces: tuple[str, ...] = ()  # watched namespaces; () for all


MIN_PEERING_LIFETIME = 12  # kopf renews a record 5-10 s before it expires; less leaves no room for the PATCH
# The API server turns timeoutSeconds into a Go time.Duration (int64 nanoseconds; handlers/get.go multiplies it by
# time.Second): a longer watch wraps negative there, and a far longer one cannot even be a float here (kopf's
# startup handler fails with OverflowError, and the operator never watches).
MAX_WATCH_TIMEOUT = (2**63 - 1) // 10**9
# The least --kube-api-qps short of 0 (no limit): one request a second. Every request the operator makes (a pod
# created, a status written, a gang listed) takes a token, so at 0.0001 one went out every 2.8 hours once the burst
# was spent: the operator saw its jobs (kopf's watches are not paced) but could not act on them. client-go's default
# is 5, kube-controller-manager's 20.
MIN_KUBE_API_QPS = 1.0


def operator_config(args: argparse.Namespace) -> OperatorConfig:
    """The operator's configuration from its command line and the chart's environment."""
    lifetime = getattr(args, "peering_lifetime", None)
    if lifetime is not None and lifetime < MIN_PEERING_LIFETIME:
        raise SystemExit(f"kuberl operator: --peering-lifetime={lifetime}: expected at least {MIN_PEERING_LIFETIME} seconds"
                         " (kopf renews a replica's record 5-10 s before it expires; chart value operator.peering.failoverSeconds)")
    watch_timeout = getattr(args, "watch_timeout", None)
    if watch_timeout is not None and not 1 <= watch_timeout <= MAX_WATCH_TIMEOUT:
        raise SystemExit(f"kuberl operator: --watch-timeout={watch_timeout}: expected whole seconds from 1 to {MAX_WATCH_TIMEOUT}"
                         " (the API server holds a watch's timeoutSeconds in nanoseconds, as an int64; chart value"
                         " operator.watchTimeoutSeconds)")
    return OperatorConfig(
        trainer_image=getattr(args, "trainer_image", None) or os.environ.get(contract.ENV_OPERATOR_TRAINER_IMAGE) or render.DEFAULT_IMAGE,
        trainer_pull_policy=pull_policy_from_env(),
        trainer_pull_secrets=pull_secrets_from_env(),
        scrape_interval=getattr(args, "scrape_interval", None) or OperatorConfig.scrape_interval,
        scrape_timeout=getattr(args, "scrape_timeout", None) or OperatorConfig.scrape_timeout,
        max_concurrent_reconciles=getattr(args, "max_concurrent_reconciles", None) or OperatorConfig.max_concurrent_reconciles,
        kube_api_qps=OperatorConfig.kube_api_qps if getattr(args, "kube_api_qps", None) is None else args.kube_api_qps,
        kube_api_burst=getattr(args, "kube_api_burst", None) or OperatorConfig.kube_api_burst,
        peering=args.peering,
        priority=getattr(args, "priority", 0) or 0,
        peering_lifetime=getattr(args, "peering_lifetime", None) or OperatorConfig.peering_lifetime,
        pod_security=getattr(args, "pod_security", None) or podsecurity.DEFAULT_LEVEL,
        allowed_service_accounts=podsecurity.parse_service_accounts(getattr(args, "allowed_service_accounts", None)),
        forbidden_pod_fields=getattr(args, "forbid_pod_fields", None) or frozenset(),
        operator_namespace=os.environ.get(contract.ENV_OPERATOR_POD_NAMESPACE) or render.DEFAULT_OPERATOR_NAMESPACE,
        monitoring_namespace=getattr(args, "monitoring_namespace", render.DEFAULT_MONITORING_NAMESPACE),
        monitoring_pod_labels=tuple(getattr(args, "monitoring_pod_labels", render.DEFAULT_MONITORING_POD_LABELS).items()),
        operator_pod_labels=tuple((getattr(args, "operator_pod_labels", None) or {}).items()),
        trainer_per_process=per_process_from_env(),
        trainer_pod_defaults=pod_defaults_from_env(),
        watch=WatchBounds(getattr(args, "watch_timeout", None) or WatchBounds.server_timeout),
        namespaces=tuple(getattr(args, "namespace", None) or ()),
    )


def per_process_from_env() -> render.PerProcess:
    """The chart's trainer.resourcesPerProcess; one that is not a plain quantity stops the operator at start, named."""
    values = {}
    for field, variable in (("cpu", contract.ENV_OPERATOR_TRAINER_CPU_PER_PROCESS), ("memory", contract.ENV_OPERATOR_TRAINER_MEMORY_PER_PROCESS)):
        value = os.environ.get(variable) or getattr(render.PER_PROCESS, field)
        if render.PLAIN_QUANTITY.match(value) is None:
            raise SystemExit(f"kuberl operator: {variable}={value!r}: expected a quantity such as 1, 500m or 2Gi"
                             f" (chart value trainer.resourcesPerProcess.{field})")
        values[field] = value
    return render.PerProcess(**values)


def pull_policy_from_env() -> str | None:
    """The chart's trainer.image.pullPolicy; unset or empty: none (the kubelet's default). Another word stops the
    operator at start, named: every job's pods would be refused (core/v1 validation's supported values)."""
    policy = os.environ.get(contract.ENV_OPERATOR_TRAINER_IMAGE_PULL_POLICY) or None
    if policy is not None and policy not in validation.PULL_POLICIES:
        raise SystemExit(f"kuberl operator: {contract.ENV_OPERATOR_TRAINER_IMAGE_PULL_POLICY}={policy!r}: expected one of"
                         f" {', '.join(validation.PULL_POLICIES)} (chart value trainer.image.pullPolicy)")
    return policy


def pull_secrets_from_env() -> tuple[str, ...]:
    """The chart's trainer.imagePullSecrets, comma-separated. A name that is no Secret's (a DNS-1123 subdomain), or
    more than each job can record (status.trainerDefaults.imagePullSecrets), stops the operator at start, named."""
    variable = contract.ENV_OPERATOR_TRAINER_IMAGE_PULL_SECRETS
    secrets = tuple(s.strip() for s in os.environ.get(variable, "").split(",") if s.strip())
    for name in secrets:
        if len(name) > 253 or not re.fullmatch(validation.DNS_1123_SUBDOMAIN, name):
            raise SystemExit(f"kuberl operator: {variable}: {name[:80]!r}: expected a Secret's name,"
                             f" {validation.PATTERN_MEANINGS[validation.DNS_1123_SUBDOMAIN]}, at most 253 characters"
                             " (chart value trainer.imagePullSecrets)")
    if len(secrets) > contract.MAX_TRAINER_PULL_SECRETS:
        raise SystemExit(f"kuberl operator: {variable}: {len(secrets)} Secrets: expected at most"
                         f" {contract.MAX_TRAINER_PULL_SECRETS} (each job records them in status.trainerDefaults;"
                         " chart value trainer.imagePullSecrets)")
    return secrets


def pod_defaults_from_env() -> poddefaults.PodDefaults:
    """The chart's trainer.podDefaults; defaults Kubernetes would refuse stop the operator at start, each problem named
    (every job's pods would be refused one by one otherwise)."""
    try:
        return poddefaults.from_text(os.environ.get(contract.ENV_OPERATOR_TRAINER_POD_DEFAULTS))
    except ValueError as error:
        raise SystemExit(f"kuberl operator: {contract.ENV_OPERATOR_TRAINER_POD_DEFAULTS}: {error}") from None


class GoneWatchdog:
    """kopf.run does not always return from a run a lost watch (a 410, an ERROR event) ended: a second watcher, retrying at that
    moment, waits for a re-login the stopping operator no longer serves (1 run in about 10 with
    both watches answered 410, tests/operator/test_operator_watch_gone.py). A watch answered 404 (its CRD deleted)
    ends the run the same way, and can hang it the same way. If kopf has not
    returned `grace` seconds after a lost watch was logged, the operator restarts in place: the same
    process (exec: same PID, same arguments), every watch listed anew."""

    def __init__(self, log: logging.Logger, grace: float = 10.0, stopping: Callable[[], bool] = lambda: False):
        """`stopping`: whether a signal asked the operator to stop: a lost watch then restarts nothing (an operator
        started again in place would run on, its signal spent, until the kubelet's SIGKILL)."""
        self.log, self.grace, self.stopping = log, grace, stopping
        self.timer: threading.Timer | None = None

    def seen(self, expired: BaseException | None, said: Callable[[BaseException], str] | None = None) -> bool:
        """Arm on a lost watch, or one answered 404 (`said`: gone_resource), the record filter's answer: whether one
        was seen."""
        if expired is not None and self.timer is None and not self.stopping():
            self.timer = threading.Timer(self.grace, self.restart, args=(expired, said or lost_watch))
            self.timer.daemon = True
            self.timer.start()
        return expired is not None

    @property
    def armed(self) -> bool:
        """A watch ended kopf's run and kopf has not returned yet: it is stopping."""
        return self.timer is not None

    def seen_refusal(self, refused: BaseException | None, after_hang: Callable[[BaseException], None]) -> bool:
        """Arm on RBAC refusing one of kopf's watches, which ends kopf's run as a lost watch does and can hang it
        the same way: `after_hang(refused)` does, `grace` seconds on, what the operator does when kopf returns
        with the refusal (the record filter's answer: whether one was seen)."""
        if refused is not None and self.timer is None and not self.stopping():
            self.timer = threading.Timer(self.grace, lambda: None if self.stopping() else after_hang(refused))
            self.timer.daemon = True
            self.timer.start()
        return refused is not None

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def restart(self, expired: BaseException, said: Callable[[BaseException], str] | None = None) -> None:
        if self.stopping():  # signalled since it armed: ShutdownBound ends the process instead
            return
        self.log.warning("%s; kopf did not stop within %gs, so the operator restarts in place, listing every object anew",
                         (said or lost_watch)(expired), self.grace)
        restart_in_place()


# How long `kuberl operator` takes at most to stop after SIGTERM or SIGINT: kopf's own waits fit inside (a job's daemon
# 10 s to end once cancelled, then 5 s for the rest), and the whole inside the 30 s terminationGracePeriodSeconds the
# chart gives the operator's pod, so the process says what hung before the kubelet's SIGKILL says nothing.
SHUTDOWN_TIMEOUT_SECONDS = 20.0


class ShutdownBound:
    """The end of a shutdown that hangs: a handler that ignores its cancellation, a thread that never returns, an event
    loop blocked. kopf's own backstop (settings.process.ultimate_exiting_timeout) SIGKILLs the process 600 s after a
    signal, far past a pod's grace period, without a word, from the event loop (which a blocked loop never runs), and
    not at all when a stop flag stopped it, as the operator stops kopf. Armed by the signal, this one ends the process
    `seconds` later from a thread of its own, with a line naming what was still running and every thread's stack."""

    def __init__(self, log: logging.Logger, seconds: float, exit: Callable[[int], None] = os._exit):
        self.log, self.seconds, self.exit = log, seconds, exit
        self.timer: threading.Timer | None = None

    def armed(self) -> bool:
        return self.timer is not None

    def arm(self, received: str, pending: Callable[[], list[str]]) -> None:
        """Start counting at the first signal (`pending`: what is still running, asked when time is up)."""
        if self.timer is None:
            self.timer = threading.Timer(self.seconds, self.expire, args=(received, pending))
            self.timer.daemon = True
            self.timer.start()

    def expire(self, received: str, pending: Callable[[], list[str]]) -> None:
        try:
            running = pending()
        except Exception as error:  # noqa: BLE001 — the exit must happen whatever the listing met
            running = [f"(not listed: {type(error).__name__})"]
        shown = ", ".join(running[:8]) + (f" and {len(running) - 8} more" if len(running) > 8 else "")
        self.log.error("the operator did not stop within %gs of %s, so it exits now, before the kubelet's SIGKILL (still"
                       " running: %s); every thread's stack follows", self.seconds, received, shown or "no task: a thread")
        for handler in logging.getLogger().handlers:
            handler.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self.exit(1)


# Set by SIGTERM/SIGINT (main.run_kopf): from then on nothing restarts the operator in place. A fresh image would
# run on, its signal spent, until the kubelet's SIGKILL (a lost watch, a CRD served again, a finalizer recheck).
STOP_REQUESTED = threading.Event()


def restart_in_place() -> None:
    """The operator starts again as the same process (exec: same PID, same arguments), its logs flushed first;
    not once a signal asked it to stop (STOP_REQUESTED)."""
    if STOP_REQUESTED.is_set():
        logging.getLogger("kuberl.operator").warning("not restarting in place: the operator was asked to stop")
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.execv(sys.executable, sys.orig_argv)


def lost_watch(error: BaseException) -> str:
    """What ended a watch, for the operator's one line: a 410 answer, or the Status of the ERROR event
    kopf raised on (its message holds the event's object as a Python literal)."""
    if getattr(error, "status", None) == 410:
        return f"a watch was answered 410 Gone ({getattr(error, 'message', None) or error})"
    text = str(error)
    try:
        status = ast.literal_eval(text.partition(": ")[2])  # literals only: nothing in it runs
        said = f"{status['code']} {status.get('reason') or ''}: {status.get('message') or ''}".replace(" :", ":")
    except (ValueError, SyntaxError, TypeError, KeyError, MemoryError, RecursionError):
        said = text
    return f"a watch was ended by the API server with an ERROR event ({said[:300]})"


def gone_resource(error: BaseException) -> str:
    """A watch answered 404, for the operator's one line: the API server stopped serving the jobs' resource."""
    return (f"a watch was answered 404 ({getattr(error, 'message', None) or error}): the API server no longer serves"
            f" {names.PLURAL}.{names.GROUP}/{names.VERSION}, its CRD deleted (which deletes every RLTrainingJob too)")


def closed_under_a_watcher(error: BaseException | None) -> bool:
    """A watcher's error because kopf closed what it was reading with: kopf closes its connections at the end of a
    run a watch ended while watchers it did not stop still read (its orchestrator stops them only when cancelled),
    one of which then fails with a traceback that tells nothing the operator's line does not. Two ways it fails:
    aiohttp's "Connection closed." (a read begun on a connection its own client closed), and kopf's credentials
    vault's TypeError (a watcher re-authenticating waits for the vault's lock inside `Vault.extended` while
    `Vault.close` holds it, which sets the item's caches to None; kopf 1.45's `purpose not in item.caches` then
    reads None)."""
    if isinstance(error, RuntimeError):
        return str(error) == "Connection closed."
    return isinstance(error, TypeError) and _raised_in(error, KOPF_VAULT_MODULE, "Vault.extended")


KOPF_VAULT_MODULE = "kopf._cogs.structs.credentials"


def _raised_in(error: BaseException, module: str, qualname: str) -> bool:
    """Whether `error` was raised by the function `qualname` of `module` itself (its traceback's innermost frame)."""
    traceback = error.__traceback__
    if traceback is None:
        return False
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    frame = traceback.tb_frame
    return frame.f_globals.get("__name__") == module and frame.f_code.co_qualname == qualname


# The RBAC authorizer's refusal, as responsewriters.Forbidden words it (staging/src/k8s.io/apiserver/pkg/endpoints/
# handlers/responsewriters/errors.go, forbiddenMessage, inside apierrors.NewForbidden's `<resource> is forbidden: `).
RBAC_REFUSAL = re.compile(
    r'[a-z0-9.-]+ (?:"(?P<name>(?:[^"\\]|\\.)*)" )?is forbidden: User "(?P<user>(?:[^"\\]|\\.)*)" cannot (?P<verb>[a-z]+) '
    r'resource "(?P<resource>[^"]*)" in API group "(?P<group>[^"]*)" (?:in the namespace "(?P<namespace>[^"]*)"|at the cluster scope)')
SERVICE_ACCOUNT_USER = re.compile(r"system:serviceaccount:(?P<namespace>[^:]+):(?P<name>[^:]+)")


def rbac_refusal_line(message: str) -> str:
    """The operator's one line when RBAC refuses kopf's own list or watch (of RLTrainingJobs, of pods,
    of its peering objects): what to grant, to whom, in which kind of role. kopf cannot run with one
    of its watches refused, so the operator exits: a pod in CrashLoopBackOff is what a platform's
    alerts already watch for, this line is its last log line (and its termination message), and
    the kubelet's restarts heal it once the permission is granted. Running on, it would look alive
    and see nothing. Pure."""
    refusal = RBAC_REFUSAL.match(message)
    if refusal is None:
        return (f"the API server refused the operator's own list or watch (403: {message[:300]}); kopf cannot run without"
                " it, so the operator exits and its pod's restarts try again")
    return (f"RBAC forbids the operator to {_refused_call(refusal)}, without which kopf cannot run: {_grant(refusal)} The"
            " operator exits; its pod's restarts (CrashLoopBackOff) try again until the permission is granted")


def _refused_call(refusal: re.Match) -> str:
    resource, group, namespace = refusal["resource"], refusal["group"], refusal["namespace"]
    qualified = f"{resource}.{group}" if group else resource
    return f'{refusal["verb"]} {qualified} ' + (f'in namespace "{namespace}"' if namespace else "at the cluster scope")


def _grant(refusal: re.Match, namespaced: bool = True) -> str:
    """What to grant, to whom, in which kind of role, for an RBAC refusal (`namespaced`: a namespaced
    install, whose grants in a namespace are Roles there; a cluster-wide one has a ClusterRole)."""
    verb, resource, group, namespace = refusal["verb"], refusal["resource"], refusal["group"], refusal["namespace"]
    account = SERVICE_ACCOUNT_USER.fullmatch(refusal["user"])
    subject = f"ServiceAccount {account['namespace']}/{account['name']}" if account else f'user "{refusal["user"]}"'
    role = f'the Role in namespace "{namespace}"' if namespace and namespaced else "the ClusterRole"
    api_group = f'API group "{group}"' if group else 'the core API group ("")'
    return (f'grant verb "{verb}" on resource "{resource}" in {api_group} to {subject} in {role} bound to it (the chart\'s'
            " RBAC grants every call in kuberl.operator.kubeapi.API_CALLS; `helm upgrade` restores it).")


def refused_namespace(message: str) -> str | None:
    """The namespace an RBAC refusal names ("... in the namespace \"team\""), or None (the cluster scope, or not RBAC's words)."""
    refusal = RBAC_REFUSAL.match(message)
    return refusal["namespace"] if refusal is not None else None


@dataclasses.dataclass
class WatchedNamespaces:
    """The namespaces a namespaced install watches, and those RBAC refuses it now. One refused
    namespace (its RoleBinding not created yet, or deleted) must not blind the operator to the
    others, as kopf would (one refused watch ends its run): kopf runs on the served ones, the
    refused ones are rechecked and taken back once RBAC allows them. Pure."""

    watched: tuple[str, ...]
    refused: dict[str, str] = dataclasses.field(default_factory=dict)  # namespace -> the API server's refusal

    def served(self) -> tuple[str, ...]:
        return tuple(n for n in self.watched if n not in self.refused)

    def refuse(self, namespace: str | None, message: str) -> bool:
        """Record a refusal; False when the operator cannot go on without that namespace: a cluster-wide
        install, a refusal at the cluster scope or of no watched namespace, or no namespace left to serve. One
        refused already is recorded again (kopf's return and the hang watchdog may both say it)."""
        if namespace in self.refused:
            return True
        if namespace is None or namespace not in self.served() or len(self.served()) == 1:
            return False
        self.refused[namespace] = message
        return True

    def grant(self, namespace: str) -> None:
        self.refused.pop(namespace, None)


# Watched namespaces RBAC refused (JSON: namespace -> the API server's message), handed to the operator's next
# image when it restarts in place after kopf hung on a refusal (main.cmd_operator); read once at start.
ENV_REFUSED_NAMESPACES = "KUBERL_OPERATOR_REFUSED_NAMESPACES"


def carried_refusals(text: str | None, watched: tuple[str, ...]) -> dict[str, str]:
    """The refusals an earlier image of this process handed over (ENV_REFUSED_NAMESPACES), for namespaces still
    watched; none when they would leave nothing served (the start meets them again and says so). Pure."""
    try:
        carried = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(carried, dict):
        return {}
    refused = {n: str(m) for n, m in carried.items() if n in watched}
    return refused if len(refused) < len(watched) else {}


def namespace_refusal_line(message: str, served: tuple[str, ...], recheck_seconds: float) -> str:
    """The operator's one line when RBAC refuses its list or watch in one of its watched namespaces (`message`
    names it, else refused_namespace would not have given it one): what to grant, and that the other
    namespaces are served meanwhile. Pure."""
    refusal = RBAC_REFUSAL.match(message)
    namespace = refusal["namespace"]
    return (f"RBAC forbids the operator to {_refused_call(refusal)}: its jobs there are not reconciled until then; {_grant(refusal)}"
            f' The operator goes on serving {", ".join(served)}, checks namespace "{namespace}" again every'
            f" {recheck_seconds:g}s and takes it back without a restart")


def kopf_refusal_line(message: str, finalizer: str, namespaced: bool) -> str | None:
    """The operator's one line when RBAC refuses one of kopf's own calls on a job (`message` is the API
    server's): a patch of its finalizer, added to each job and taken off a deleted one. kopf logged a
    traceback and retried with a growing delay. None when `message` is not an RBAC refusal. Pure."""
    refusal = RBAC_REFUSAL.match(message)
    if refusal is None:
        return None
    call = _refused_call(refusal)
    if refusal["name"]:
        call = call.replace(" in namespace", f' "{refusal["name"]}" in namespace', 1)
    cost = (f" kopf cannot add its finalizer {finalizer} to a new job (which runs all the same; its deletion does not wait"
            f" for the operator) nor take it off a deleted one (which stays Terminating until then); the operator asks again"
            " every 10 s and, once it is allowed, restarts in place so that kopf does both" if (refusal["verb"], refusal["resource"]) == ("patch", names.PLURAL) else
            " Said again every 10 minutes while it is refused")
    return f"RBAC forbids the operator to {call} (a call of kopf's own): {_grant(refusal, namespaced)}{cost}"


def refused_finalizer_patch(message: str) -> tuple[str, str] | None:
    """The (namespace, name) of the job whose patch by kopf (its finalizer's) RBAC refused in `message`; else None. Pure."""
    refusal = RBAC_REFUSAL.match(message)
    if refusal is None or (refusal["verb"], refusal["resource"]) != ("patch", names.PLURAL) or not refusal["name"]:
        return None
    return refusal["namespace"] or "", refusal["name"]


GONE_RESET_SECONDS = 60.0  # a run this long resets the backoff of restarts after lost watches
GONE_MAX_DELAY_SECONDS = 30.0


@dataclasses.dataclass
class KopfRestarts:
    """Whether and when kopf starts again in the same process after its run ended on a lost watch
    (a 410, an ERROR event) or on an API server that did not answer or failed: 0, 1, 3, 7, 15, 30,
    30 … s between quick runs (one that lasted GONE_RESET_SECONDS starts the count again). An API
    server failing every run is given up on once it has failed for longer than `bound` (the
    silent-watch bound), after two runs at least: one run of kopf's alone retries for 3.5 s.
    Pure: the caller passes the clock."""

    bound: float
    quick_runs: int = 0
    unanswered_since: float | None = None

    def after(self, lost_watch: bool, started: float, now: float) -> float | None:
        """Seconds to wait before kopf starts again; None: give up."""
        quick = now - started < GONE_RESET_SECONDS
        self.quick_runs = self.quick_runs + 1 if quick else 1
        delay = min(GONE_MAX_DELAY_SECONDS, 2.0 ** (self.quick_runs - 1) - 1)
        if lost_watch:
            self.unanswered_since = None
            return delay
        again = quick and self.unanswered_since is not None
        self.unanswered_since = self.unanswered_since if again else started
        return None if again and now - self.unanswered_since > self.bound else delay

    def unanswered_for(self, now: float) -> float:
        return 0.0 if self.unanswered_since is None else now - self.unanswered_since


def no_cluster_problem(env: dict[str, str], exists: Callable[[str], bool]) -> str | None:
    """Why `kuberl operator` has no cluster to log in to, as `kubeapi.load_configuration` looks for one (in a pod:
    KUBERNETES_SERVICE_HOST/PORT; else $KUBECONFIG's files, or ~/.kube/config), or None when it may have one.
    Without it kopf retried its login every 60 s, each time with two tracebacks, forever."""
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        return None
    configured = env.get("KUBECONFIG")
    files = [f for f in (configured or "").split(os.pathsep) if f] or [os.path.join(env.get("HOME") or "~", ".kube", "config")]
    if any(exists(f) for f in files):
        return None
    where = f"KUBECONFIG={configured}" if configured else files[0]
    return (f"no Kubernetes cluster to run against: not in a pod, and no kubeconfig at {where}."
            " The chart runs the operator in your cluster (docs/cluster.md); `kuberl run JOB.yaml` runs a job here without one")
