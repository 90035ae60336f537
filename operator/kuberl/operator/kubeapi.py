"""The operator's own calls to the Kubernetes API: one small client, its errors, its RBAC.

Every request the operator makes itself goes through `KubeApi`, on the public
`kubernetes_asyncio` client; kopf keeps its own client for watches, finalizers,
events and peering. `API_CALLS` is the single source of the operator's RBAC (the
chart's Role is derived from it, and the integration tests fail when the operator
calls anything it does not list).

Callers see kuberl's own exception names (`NotFound`, `Conflict`, `Unprocessable`, …),
never the transport library's, so the client underneath can change alone.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.metadata
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from ..core import lifecycle, names, safetext
from .metrics import OperatorMetrics

RLTJ = (names.GROUP, names.VERSION, names.PLURAL)
LIST_PAGE = 100  # pods per list request (limit, continue): what one page of a large gang costs the operator
PODS = ("", "v1", "pods")
PEERINGS = ("kopf.dev", "v1", "kopfpeerings")  # kopf's, per namespace when not cluster-wide
API_BACKOFFS = (0.5, 1.0, 2.0)  # retries of 5xx/429 inside one call; then kopf's daemon backoff
RETIRED_CLIENT_GRACE_SECONDS = 60.0  # a client replaced after a 401 closes once its requests are done

# The first product is kopf's, as on kopf's own requests: the API server's audit log (and the
# tests' call log) sees one operator process; the second product tells the two clients apart.
USER_AGENT = (f"kopf/{importlib.metadata.version('kopf')} kuberl-operator/{importlib.metadata.version('kuberl')} "
              f"kubernetes_asyncio/{importlib.metadata.version('kubernetes_asyncio')}")


# --- what callers catch: the server's answer by meaning -------------------------


class ApiError(Exception):
    """A non-2xx answer: `status` the HTTP code; `reason` and `message` from the server's Status."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.reason, self.message, self.retry_after = status, reason, message, retry_after

    def __str__(self) -> str:
        # What kopf logs, and posts as an Event, for an error that reaches it: the server's message can quote a
        # tenant's values (an admission webhook's words, a field's value), so escaped and on one line; `message` stays raw.
        return safetext.one_line(self.message)


class BadRequest(ApiError):
    """400"""


class Unauthorized(ApiError):
    """401: the credentials expired or were revoked; the client logs in again once."""


class Forbidden(ApiError):
    """403: RBAC, or an admission plugin such as Pod Security Admission refused."""


class NotFound(ApiError):
    """404"""


class Conflict(ApiError):
    """409: AlreadyExists on create, a stale resourceVersion or uid precondition on writes."""


class Expired(ApiError):
    """410: a list's continue token outlived its revision (etcd compacted it); the list starts again."""


class Unprocessable(ApiError):
    """422: the object is invalid (schema, CEL, or an admission webhook's verdict)."""


class TooManyRequests(ApiError):
    """429: retried after the server's Retry-After."""


class ServerError(ApiError):
    """5xx: retried."""


ERRORS_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
                    410: Expired, 422: Unprocessable, 429: TooManyRequests}


def api_error(status: int, body: str | bytes | None, headers: Any = None) -> ApiError:
    """The error for an answer: the server's Status when it sent one, else the HTTP line and body."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("kind") == "Status":
        reason, message = str(document.get("reason") or ""), str(document.get("message") or "")
    else:  # a proxy or load balancer in between answered, not the API server
        reason, message = "", f"HTTP {status}: {text[:200]}"
    retry_after = None
    if headers is not None and headers.get("Retry-After"):
        try:
            retry_after = float(headers["Retry-After"])
        except ValueError:
            retry_after = None
    error_class = ERRORS_BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return error_class(status, reason, message, retry_after)


# Every (verb, group, resource, subresource) the operator calls: the chart's RBAC is derived
# from this list, and the integration tests fail when the operator calls anything else.
# RBAC also needs `update` on rltrainingjobs/finalizers, which no request uses: owner
# references with blockOwnerDeletion require it on clusters that enforce them.
API_CALLS = frozenset({
    ("get", names.GROUP, names.PLURAL, ""),
    ("list", names.GROUP, names.PLURAL, ""),
    ("watch", names.GROUP, names.PLURAL, ""),
    ("patch", names.GROUP, names.PLURAL, ""),  # kopf's finalizer
    ("patch", names.GROUP, names.PLURAL, "status"),
    ("delete", names.GROUP, names.PLURAL, ""),  # ttlSecondsAfterFinished
    ("get", "", "pods", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("create", "", "pods", ""),
    ("patch", "", "pods", ""),  # Kueue's retriable-in-group at the end
    ("delete", "", "pods", ""),
    ("create", "", "events", ""),
    *((verb, group, plural, "") for verb in ("create", "get") for group, plural in (
        ("", "configmaps"), ("", "persistentvolumeclaims"), ("", "services"), ("networking.k8s.io", "networkpolicies"),
        ("scheduling.volcano.sh", "podgroups"), ("scheduling.x-k8s.io", "podgroups"),
    )),
    ("patch", "networking.k8s.io", "networkpolicies", ""),  # admit the scrapes of an operator installed elsewhere
})
# With --peering, kopf's own peering objects (namespaced, or cluster-wide when all namespaces are watched).
PEERING_API_CALLS = frozenset(
    (verb, "kopf.dev", plural, "") for verb in ("get", "list", "watch", "patch") for plural in ("kopfpeerings", "clusterkopfpeerings")
)


def resource_path(group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None,
                  sub: str | None = None) -> str:
    """The API server's path of a resource (`namespace` None: cluster-wide), one object of it, or its subresource."""
    parts = ["/api", version] if not group else ["/apis", group, version]
    if namespace:
        parts += ["namespaces", namespace]
    parts.append(plural)
    if name:
        parts.append(name)
    if sub:
        parts.append(sub)
    return "/".join(parts)


def api_path(obj: dict) -> tuple[str, str, str]:
    """(group, version, plural) of a rendered child."""
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"ConfigMap": "configmaps", "PersistentVolumeClaim": "persistentvolumeclaims", "Service": "services",
              "NetworkPolicy": "networkpolicies", "PodGroup": "podgroups", "Pod": "pods"}[obj["kind"]]
    return group, version, plural

# --- one authenticated client per operator process --------------------------------


async def load_configuration() -> k8s_client.Configuration:
    """The credentials kopf logs in with: the pod's service account in a cluster, else $KUBECONFIG
    with everything kubernetes_asyncio reads (exec plugins, OIDC, client certificates)."""
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # re-reads the rotated token file itself
    except k8s_config.ConfigException:
        # $KUBECONFIG read now, not when kubernetes_asyncio was imported (it may hold several paths).
        await k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration,
                                          persist_config=False)
    return configuration


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def without_environment_lookups(client: k8s_client.ApiClient) -> bool:
    """kubernetes_asyncio's session has aiohttp's trust_env on, which looks ~/.netrc up in a
    thread on every request: 0.56 instead of 0.24 ms per call here, and a thread-pool hop for
    each call of a burst. Where no proxy variable is set (in a cluster, on most laptops) the
    environment has nothing else for the API server's requests, so the session is rebuilt on
    the same connector without it. Returns whether it was."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return False
    rest = client.rest_client
    connector = rest.pool_manager.connector
    rest.pool_manager.detach()  # aiohttp's public hand-over: the old session lets go of the connector unclosed
    rest.pool_manager = aiohttp.ClientSession(connector=connector, connector_owner=True, trust_env=False,
                                              read_bufsize=2**21)  # as kubernetes_asyncio sizes it for large objects
    return True


class Connection:
    """The operator's kubernetes_asyncio client, loaded on first use and loaded again after a 401
    (an exec plugin then runs again), once per burst of 401s however many calls saw one.

    One client per event loop: the operator restarts kopf in the same process (main.cmd_operator), each
    run in a new loop, and a client made in an ended one fails every call ("Event loop is closed"). A
    task kopf leaves running past its cleanup handler (a daemon ending) can log in again after `close`,
    so a new loop never takes over what an old one left."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: k8s_client.ApiClient | None = None
        self._logins = 0
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task] = set()

    def _this_loops(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # what an ended loop left cannot serve this one, nor be closed from it
            self._loop, self._client, self._lock, self._closing = loop, None, asyncio.Lock(), set()

    async def client(self) -> tuple[k8s_client.ApiClient, int]:
        """The client and which login made it (pass that to `login` after a 401)."""
        self._this_loops()
        if self._client is None:
            await self.login(self._logins)
        return self._client, self._logins

    async def login(self, stale: int) -> None:
        """Load the credentials again, unless another call did since login number `stale`."""
        self._this_loops()
        async with self._lock:
            if self._logins != stale and self._client is not None:
                return
            fresh = k8s_client.ApiClient(await load_configuration())
            fresh.user_agent = USER_AGENT
            without_environment_lookups(fresh)
            retired, self._client = self._client, fresh
            self._logins += 1
        if retired is not None:  # requests still in flight on it finish first
            task = asyncio.create_task(self._close_later(retired))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_later(client: k8s_client.ApiClient) -> None:
        try:
            await asyncio.sleep(RETIRED_CLIENT_GRACE_SECONDS)
        finally:  # at once when the operator stops
            await client.close()

    async def close(self) -> None:
        self._this_loops()
        closing = list(self._closing)
        for task in closing:
            task.cancel()
        await asyncio.gather(*closing, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None


CONNECTION = Connection()  # one per operator process, as kopf keeps one for its own calls


class ServerClock:
    """The API server's time, from the `Date` header of its answers: every replica of the operator
    reads and writes the timestamps of status (deadlines, TTLs, backoffs) and compares pods'
    deletionTimestamps, which the API server sets, so all of them count in the API server's time
    and a replica whose own clock is off by minutes neither fails a job early nor force-deletes a
    pod still in its grace period. `Date` has one-second resolution and is stamped before the
    answer travels, so each sample is at most about a second low: the highest of the recent ones is
    taken, and an offset under SKEW_THRESHOLD_SECONDS counts as none."""

    SAMPLES = 20
    SKEW_THRESHOLD_SECONDS = 2.0

    def __init__(self, clock: Any = time.time):
        self.clock = clock
        self.samples: list[float] = []
        self.reported: float | None = None

    def observe(self, date: str | None, received: float | None = None) -> None:
        if not date:
            return
        try:
            server = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        self.samples = [*self.samples[-(self.SAMPLES - 1):], server - (self.clock() if received is None else received)]
        offset = self.offset()
        if offset and (self.reported is None or abs(offset - self.reported) >= self.SKEW_THRESHOLD_SECONDS):
            self.reported = offset
            logging.getLogger("kuberl.operator").warning(
                "the API server's clock is %+.0fs from this operator's: deadlines, TTLs, backoffs and force deletions"
                " count in the API server's time", offset)

    def offset(self) -> float:
        best = max(self.samples, default=0.0)
        return best if abs(best) >= self.SKEW_THRESHOLD_SECONDS else 0.0

    def now(self) -> float:
        return self.clock() + self.offset()


SERVER_CLOCK = ServerClock()  # one per operator process, fed by every answer KubeApi reads


class RateLimiter:
    """The operator's budget of API requests: `burst` at once, then `qps` a second (client-go's token bucket,
    flowcontrol.NewTokenBucketRateLimiter; `qps` 0: no limit). Every attempt takes a token, a retry's included, as
    client-go's Request.tryThrottle does. A creation storm (many gangs at once, a 1,000-pod gang) then queues in
    the operator instead of crowding the API server every tenant shares. Synchronous, so one event loop's tasks
    share it without a lock; the clock is injected."""

    def __init__(self, qps: float, burst: int, clock: Any = time.monotonic):
        self.qps, self.burst, self.clock = qps, max(1, burst), clock
        self.tokens = float(self.burst)
        self.counted: float | None = None

    def reserve(self) -> float:
        """Take a token: the seconds to wait before using it (0 when one was there). A debt is a later caller's wait."""
        if self.qps <= 0:
            return 0.0
        now = self.clock()
        if self.counted is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.counted) * self.qps)
        self.counted = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps


UNLIMITED = RateLimiter(0, 1)


def _retry_delay(error: Exception, backoff: float | None) -> float | None:
    """Seconds before the next attempt, or None when the call fails now."""
    if backoff is None or not isinstance(error, ServerError | TooManyRequests | aiohttp.ClientConnectionError | TimeoutError):
        return None
    if isinstance(error, TooManyRequests) and error.retry_after is not None:
        return max(backoff, error.retry_after)
    return backoff


class KubeApi:
    """The calls the operator makes; every failure is counted, then raised for kopf to see. A 404 or 409
    (gone, taken, stale) and the `answers` its caller looks for (a refused namespace's recheck: 403) are
    answers it acts on, counted apart from the failures the operator's alert fires on."""

    def __init__(self, settings: kopf.OperatorSettings, log: Any, metrics: OperatorMetrics, connection: Connection = CONNECTION,
                 clock: ServerClock = SERVER_CLOCK, answers: tuple[type[ApiError], ...] = (), limiter: RateLimiter = UNLIMITED):
        """`limiter`: the process's request budget (one shared by every KubeApi of the operator)."""
        self.log, self.metrics, self.connection, self.clock = log, metrics, connection, clock
        self.answers, self.limiter = answers, limiter
        self.timeout = aiohttp.ClientTimeout(total=settings.networking.request_timeout, sock_connect=settings.networking.connect_timeout)

    async def call(self, method: str, verb: str, plural: str, path: str, payload: Any = None, content_type: str | None = None,
                   query: list[tuple[str, str]] | None = None, resolves: tuple[type[ApiError], ...] = ()) -> Any:
        """One request: logged in again once on 401, retried on 5xx, 429 and lost connections. `resolves`: the
        answers this caller acts on beside a 404 or 409 (a paged list's first 410: it lists again)."""
        headers = {"Accept": "application/json", "Content-Type": content_type or "application/json"}
        backoffs = iter(API_BACKOFFS)
        logged_in_again = False
        while True:
            await self._throttle()
            client, login = await self.connection.client()
            try:
                data, _status, answer_headers = await client.call_api(
                    path, method.upper(), query_params=query, header_params=dict(headers), body=payload,
                    response_types_map={200: "object", 201: "object", 202: "object"}, auth_settings=["BearerToken"],
                    _return_http_data_only=False, _request_timeout=self.timeout,
                )
                self.clock.observe(answer_headers.get("Date"))
                return data
            except k8s_client.ApiException as raw:
                self.clock.observe((raw.headers or {}).get("Date"))
                error: Exception = api_error(raw.status, raw.body, raw.headers)
            except (aiohttp.ClientError, TimeoutError) as raw:
                error = raw
            if isinstance(error, Unauthorized) and not logged_in_again:
                logged_in_again = True
                await self.connection.login(login)
                continue
            delay = _retry_delay(error, next(backoffs, None))
            if delay is None:
                code = str(error.status) if isinstance(error, ApiError) else "connection"
                # a 404 or 409 is an answer its caller acts on (gone, taken, stale), as is what it `resolves`: no failure to alert on
                counter = self.metrics.api_resolved if isinstance(error, (NotFound, Conflict, *self.answers, *resolves)) else self.metrics.api_errors
                counter.labels(verb, plural, code).inc()
                raise error
            self.log.warning(f"{method.upper()} {path} failed, retrying in {delay:g} s: {error!r}")
            await asyncio.sleep(delay)

    async def watch_lines(self, plural: str, path: str, query: list[tuple[str, str]],
                          timeout: aiohttp.ClientTimeout, resolves: tuple[type[ApiError], ...] = ()) -> AsyncIterator[bytes]:
        """The lines of one watch request (events and bookmarks) until the server ends it or
        `timeout` does, after an empty first item when the server answered 200; an answer other
        than 200 raises its ApiError (a 410 included). A 401 logs in again once first, as `call` does:
        the heartbeat, which only watches between lists, was refused for ever once its token expired. `resolves` as
        for `call`: the answers its caller acts on (the heartbeat lists again on a 410 or 404)."""
        logged_in_again = False
        while True:
            await self._throttle()
            client, login = await self.connection.client()
            response = await client.call_api(path, "GET", query_params=query, header_params={"Accept": "application/json"},
                                             auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout)
            async with response:
                if response.status == 401 and not logged_in_again:
                    logged_in_again = True
                else:
                    if response.status != 200:
                        error = api_error(response.status, await response.read(), response.headers)
                        counter = self.metrics.api_resolved if isinstance(error, (*self.answers, *resolves)) else self.metrics.api_errors
                        counter.labels("watch", plural, str(response.status)).inc()
                        raise error
                    yield b""
                    async for line in response.content:
                        if line.strip():
                            yield line
                    return
            await self.connection.login(login)

    async def _throttle(self) -> None:
        delay = self.limiter.reserve()
        if delay > 0:
            self.metrics.api_throttled.inc(delay)
            await asyncio.sleep(delay)

    async def get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
        try:
            return await self.call("get", "get", plural, resource_path(group, version, plural, namespace, name))
        except NotFound:
            return None

    async def list_job_pods(self, namespace: str, job: str) -> list[dict]:
        """The job's pods as the operator reads them (lifecycle.pod_as_read), listed LIST_PAGE pods at a time: a gang's
        whole list (1,024 pods of a 16 KiB template: 70 MB of JSON, 380 MB parsed) is never held at once."""
        pods: list[dict] = []
        token, listed_again = None, False
        while True:
            query = [("labelSelector", f"{names.LABEL_JOB}={job}"), ("limit", str(LIST_PAGE))] + ([("continue", token)] if token else [])
            # Every page is read at the first page's revision, until etcd compacts it (every 5 minutes by default):
            # then 410 Expired. client-go's pager lists again from the start (tools/pager/pager.go, FullListIfExpired),
            # as here, once: the token's own remainder would mix two moments of the gang. That first 410 is acted on,
            # so counted resolved; any other is raised, an error.
            lists_again = token is not None and not listed_again
            try:
                listed = await self.call("get", "list", "pods", resource_path(*PODS, namespace), query=query,
                                         resolves=(Expired,) if lists_again else ())
            except Expired:
                if not lists_again:
                    raise
                pods, token, listed_again = [], None, True
                continue
            pods += [lifecycle.pod_as_read(pod) for pod in listed.get("items") or []]
            token = (listed.get("metadata") or {}).get("continue")
            if not token:
                return pods

    async def create(self, obj: dict) -> dict:
        group, version, plural = api_path(obj)
        return await self.call("post", "create", plural, resource_path(group, version, plural, obj["metadata"]["namespace"]), obj)

    async def patch_status(self, namespace: str, name: str, status_patch: dict, resource_version: str) -> dict:
        # The resourceVersion makes the write conditional: a stale read never overwrites a newer status.
        body = {"metadata": {"resourceVersion": resource_version}, "status": status_patch}
        return await self.call("patch", "patch", f"{names.PLURAL}/status", resource_path(*RLTJ, namespace, name, "status"), body, "application/merge-patch+json")

    async def patch_pod_annotations(self, namespace: str, name: str, annotations: dict) -> None:
        try:
            await self.call("patch", "patch", "pods", resource_path(*PODS, namespace, name), {"metadata": {"annotations": annotations}}, "application/merge-patch+json")
        except NotFound:
            pass  # already gone: nothing left to mark

    async def merge_patch(self, group: str, version: str, plural: str, namespace: str, name: str, patch: dict) -> dict:
        return await self.call("patch", "patch", plural, resource_path(group, version, plural, namespace, name), patch, "application/merge-patch+json")

    async def dry_run_patch(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> None:
        """An empty merge patch the API server authorizes and admits but does not store (dryRun=All): whether the
        operator may patch that object now."""
        await self.call("patch", "patch", plural, resource_path(group, version, plural, namespace, name), {},
                        "application/merge-patch+json", query=[("dryRun", "All")])

    async def delete(self, group: str, version: str, plural: str, namespace: str, name: str, options: dict) -> None:
        try:
            await self.call("delete", "delete", plural, resource_path(group, version, plural, namespace, name), options)
        except (NotFound, Conflict):
            pass  # gone already, or the name now belongs to a newer object (uid precondition)
