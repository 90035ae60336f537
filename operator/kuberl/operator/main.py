"""`kuberl operator`: start kopf with the handlers and the configuration, apart from
both so that neither the configuration nor the handlers import the other."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from ..core import contract
from ..core.validation import API_JSON_NESTING
from .config import (
    ENV_REFUSED_NAMESPACES,
    RBAC_REFUSAL,
    STOP_REQUESTED,
    GoneWatchdog,
    KopfRestarts,
    ShutdownBound,
    WatchedNamespaces,
    carried_refusals,
    closed_under_a_watcher,
    gone_resource,
    kopf_refusal_line,
    lost_watch,
    namespace_refusal_line,
    operator_config,
    rbac_refusal_line,
    refused_finalizer_patch,
    refused_namespace,
    restart_in_place,
)


def cmd_operator(args: argparse.Namespace) -> int:
    """Run the operator until SIGTERM/SIGINT: standalone unless --peering names a peering object."""
    import kopf

    from .handlers import FINALIZER, REFUSED_RECHECK_SECONDS, RefusedNamespaces, Shell
    from .kubeapi import PEERINGS, PODS, RLTJ
    from .metrics import OperatorMetrics

    config = operator_config(args)
    # kopf reads each watch event and list with Python's json (one recursion per level) and copies a body it patches
    # with copy.deepcopy (two): a job nested as deep as the API server stores (a tenant's spec.env.kwargs) ended the
    # operator, for every tenant, at the 1,000th. Four per level leave room for the stack below; such a job is then
    # refused by its spec check (rules.parse_spec). Python 3.11 recurses in Python code without the C stack, and
    # json's C recursion of 10,000 levels fits a 2 MiB stack.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * API_JSON_NESTING))
    if not reads_api_nesting():
        logging.getLogger("kuberl.operator").warning(
            "this Python (%s) cannot read JSON nested %d levels deep, as deep as the API server stores a job: its json"
            " recursion in C has a bound of its own (Python 3.12 and later), so one tenant's job nested so would stop"
            " the operator's watch for every job. Run the operator image (Python 3.11)", sys.version.split()[0],
            API_JSON_NESTING)
    listen = getattr(args, "listen_address", None) or "0.0.0.0"
    metrics = OperatorMetrics()
    if os.environ.get(contract.ENV_OPERATOR_METRICS_ENABLED, "true").lower() != "false":
        metrics.serve(listen, args.metrics_port)
    level = os.environ.get(contract.ENV_OPERATOR_LOG_LEVEL, "info").upper()
    kopf.configure(debug=level == "DEBUG", quiet=level in ("WARNING", "ERROR"))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per liveness probe otherwise
    # A failing probe is said once by the handler that fails it; aiohttp would add a traceback per probe.
    logging.getLogger("aiohttp.server").addFilter(
        lambda record: not (record.exc_info and type(record.exc_info[1]).__name__ == "ActivityError"))
    # One line per pod event would drown the log; failures of these handlers still show.
    logging.getLogger("kopf.objects").addFilter(
        lambda record: not record.getMessage().startswith(("Handler 'pod_changed' succeeded", "Handler 'job_changed' succeeded"))
    )
    # before TracebackOnce, which would shorten the record this one replaces
    # A job whose finalizer patch RBAC refused kopf, by namespace (grants differ by namespace, not by job): rechecked
    # by handlers.FinalizerRecheck, since kopf tries again only at that job's next change.
    finalizer_refused: dict[str, str] = {}

    def kopf_line(message: str) -> str | None:
        if (job := refused_finalizer_patch(message)) is not None:
            finalizer_refused[job[0]] = job[1]
        return kopf_refusal_line(message, FINALIZER, namespaced=bool(config.namespaces))

    refusals_of_kopf = KopfRefusals(kopf_line)
    for handler in logging.getLogger().handlers:
        handler.addFilter(refusals_of_kopf)
    once = TracebackOnce()
    log = logging.getLogger("kuberl.operator")
    watched = WatchedNamespaces(config.namespaces, carried_refusals(os.environ.pop(ENV_REFUSED_NAMESPACES, None), config.namespaces))
    for namespace in watched.watched:
        metrics.namespace_refused.labels(namespace).set(int(namespace in watched.refused))

    def after_refusal_hang(refused: BaseException) -> None:
        """kopf has not returned from the run a refused watch ended (GoneWatchdog): what its return would have done."""
        message = getattr(refused, "message", None) or str(refused)
        if not watched.refuse(refused_namespace(message), message):
            log.error("%s", rbac_refusal_line(message))
            logging.shutdown()
            os._exit(1)
        log.error("%s", namespace_refusal_line(message, watched.served(), REFUSED_RECHECK_SECONDS))
        log.warning("kopf did not stop within %gs after that refusal, so the operator restarts in place without the"
                    " refused namespace(s)", watchdog.grace)
        os.environ[ENV_REFUSED_NAMESPACES] = json.dumps(watched.refused)
        restart_in_place()

    shutdown = ShutdownBound(log, args.shutdown_timeout)
    watchdog = GoneWatchdog(log, stopping=shutdown.armed)
    for handler in logging.getLogger().handlers:
        # a lost watch: our one line says it; kopf's would add two tracebacks (its watchers' loggers only: a 410 of
        # the operator's own list is no lost watch, and kopf's run goes on after it)
        handler.addFilter(lambda record: not (record.name.startswith("kopf._core.reactor") and record.exc_info
                                              and watchdog.seen(watch_lost(record.exc_info[1]))))
        # RBAC refusing kopf's own watch: our one line says it; kopf's watcher and multitasker would add two tracebacks
        handler.addFilter(lambda record: not (record.name.startswith("kopf._core.reactor") and record.exc_info
                                              and watchdog.seen_refusal(rbac_refused(record.exc_info[1]), after_refusal_hang)))
        # a watched resource gone (its CRD deleted): our one line says it; kopf would add two tracebacks
        handler.addFilter(lambda record: not (record.name.startswith("kopf._core.reactor") and record.exc_info
                                              and watchdog.seen(resource_gone(record.exc_info[1]), gone_resource)))
        # a watcher kopf left reading as that run ended, its connection closed under it: a traceback of the same end
        handler.addFilter(lambda record: not (record.name.startswith("kopf._core.reactor") and record.exc_info
                                              and watchdog.armed and closed_under_a_watcher(record.exc_info[1])))
        # last: the filters above judge a record by its error, which this one takes away from a repeat (kopf logs every
        # failure of one watcher under one message, so a refusal after that watcher was closed under a run's end is one)
        handler.addFilter(once)
    restarts = KopfRestarts(config.watch.silent_bound)
    # What kopf lists and watches in each namespace: what a refused namespace must allow again to be taken back.
    watched_resources = [RLTJ, PODS, *([PEERINGS] if args.peering is not None else [])]

    def remind(namespace: str, message: str) -> None:
        log.error("still refused: %s", namespace_refusal_line(message, watched.served(), REFUSED_RECHECK_SECONDS))

    while True:
        started = time.monotonic()
        # Set by SIGTERM/SIGINT (run_kopf), and when a refused namespace is allowed again: kopf stops, to start with
        # it. An asyncio.Event (bound to kopf's loop when first awaited): kopf waits for a threading.Event in an
        # executor thread, which its loop's shutdown then joins for ever when the run ended any other way. kopf waits
        # 5 s at its end for the task that awaits the flag, unless the cleanup handler sets it (handlers.close).
        stop = asyncio.Event()
        refusals = (RefusedNamespaces(dict(watched.refused), watched_resources, REFUSED_RECHECK_SECONDS, stop, remind)
                    if watched.refused else None)
        try:
            try:
                signalled = run_kopf(
                    standalone=args.peering is None,
                    peering_name=args.peering,
                    priority=args.priority,
                    clusterwide=not args.namespace,
                    namespaces=list(watched.served()),
                    liveness_endpoint=f"http://{listen}:{args.health_port}{args.health_path}",
                    stop_flag=stop,
                    shutdown=shutdown,
                    memo=kopf.Memo(shell=Shell(dataclasses.replace(config, namespaces=watched.served()), metrics, refused=refusals,
                                               finalizer_refused=finalizer_refused, stop=stop)),
                )
            finally:
                watchdog.disarm()  # kopf returned, however: no hang left to end (a normal return too, then kopf starts again)
            if refusals is None or not refusals.granted or signalled:
                return 0
            for namespace in sorted(refusals.granted):
                watched.grant(namespace)
                metrics.namespace_refused.labels(namespace).set(0)
                log.warning('RBAC allows the operator to list and watch in namespace "%s" again: it serves the jobs there'
                            " from now on", namespace)
            continue
        except Exception as error:
            lost = watch_lost(error)
            unanswered = None if lost is not None else api_unanswered(error)
            refused = None if lost is not None or unanswered is not None else rbac_refused(error)
            if refused is not None:
                message = getattr(refused, "message", None) or str(refused)
                namespace = refused_namespace(message)
                if watched.refuse(namespace, message):
                    metrics.namespace_refused.labels(namespace).set(1)
                    metrics.forget_namespace(namespace)  # its jobs' phases are not known any more
                    log.error("%s", namespace_refusal_line(message, watched.served(), REFUSED_RECHECK_SECONDS))
                    continue
                log.error("%s", rbac_refusal_line(message))
                return 1
            gone = None if lost is not None or unanswered is not None else resource_gone(error)
            if gone is not None:
                # Its CRD deleted: kopf starts again without it, and the heartbeat restarts the operator in place once
                # it is served again (handlers.WatchHeartbeat).
                log.error("%s; kopf stops on that, so the operator starts again without it and serves it once the CRD is"
                          " installed again", gone_resource(gone))
                time.sleep(restarts.after(True, started, time.monotonic()))
                continue
            if lost is None and unanswered is None:
                raise
            now = time.monotonic()
            delay = restarts.after(lost is not None, started, now)
            said = f"{type(unanswered).__name__}: {unanswered}"[:300]
            if delay is None:
                log.error("the API server did not answer, or failed (%s), for %.0fs, past the %gs bound (--watch-timeout %g):"
                          " the operator exits", said, restarts.unanswered_for(now), restarts.bound, config.watch.server_timeout)
                return 1  # the line says it all; kopf logged the traceback once
            if lost is not None:
                log.warning("%s; kopf stops on that, so the operator starts its watches again in %gs, listing every object "
                            "anew (as client-go's reflector relists)", lost_watch(lost), delay)
            else:
                log.warning("the API server did not answer, or failed (%s); kopf stops on that, so the operator starts again"
                            " in %gs (for up to %gs, the bound of a silent watch)", said, delay, restarts.bound)
            time.sleep(delay)


def reads_api_nesting() -> bool:
    """Whether this process reads and copies JSON as deep as the API server stores (one level more: the watch event
    wraps the object), as kopf does: Python 3.11 takes it once its recursion limit is raised; 3.12's json recursion in
    C has a bound of its own, sys.setrecursionlimit aside (1,500 or less), and 3.13's one of the stack's size."""
    depth = API_JSON_NESTING + 1
    try:
        copy.deepcopy(json.loads("[" * depth + "]" * depth))
    except RecursionError:
        return False
    return True


def run_kopf(stop_flag: asyncio.Event | None = None, shutdown: ShutdownBound | None = None, **kwargs) -> bool:
    """kopf.run, as kopf.operator spells it (spawn_tasks, then run_tasks), then the operator's own client closed
    in kopf's event loop: kopf's cleanup handler (handlers.close) closes it, but kopf lets a daemon run on
    for up to 5 s after that, which may log in again, and its client would be left open when the loop ends.

    SIGTERM and SIGINT set `stop_flag` (which the operator also sets to stop kopf itself, to take a refused namespace
    back), and the return says whether one came: with kopf's own handlers a signal that came as the flag was set was
    lost, the operator started kopf again and ran on until SIGKILL. They are caught by a Python-level handler, not
    the event loop's, so `shutdown` is armed even while a handler blocks the loop: the process ends within its bound
    whatever hangs (kopf's own bound is 600 s, and is not armed at all when a stop flag stopped it)."""
    import kopf

    from .kubeapi import CONNECTION

    stop_flag = stop_flag if stop_flag is not None else asyncio.Event()
    signalled: list[signal.Signals] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ignored = asyncio.all_tasks()

        heard = threading.Event()  # the loop ran the signal's callback: it is not blocked

        def stopping(received: signal.Signals) -> None:
            heard.set()
            logging.getLogger("kuberl.operator").info("Signal %s is received. Operator is stopping.", received.name)
            stop_flag.set()

        def still_running() -> list[str]:
            if not heard.is_set():
                return ["the event loop itself, blocked since the signal came (the main thread's stack shows by what)"]
            return running_tasks(loop, ignored)

        def on_signal(signum: int, _frame: object) -> None:  # the main thread, between two bytecodes of whatever runs
            received = signal.Signals(signum)
            signalled.append(received)
            STOP_REQUESTED.set()
            if shutdown is not None:
                shutdown.arm(received.name, still_running)
            loop.call_soon_threadsafe(stopping, received)

        previous: dict[signal.Signals, Any] = {}
        try:
            tasks = await kopf.spawn_tasks(stop_flag=stop_flag, **kwargs)
            if threading.current_thread() is threading.main_thread():  # where kopf sets its own, and signals arrive
                for received in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(received)  # kopf's: it would stop on its own flag, unseen
                    previous[received] = signal.signal(received, on_signal)
            await kopf.run_tasks(tasks, ignored=ignored)
        finally:
            for received, handler in previous.items():
                signal.signal(received, handler)
            await CONNECTION.close()

    try:
        with contextlib.suppress(asyncio.CancelledError):  # as kopf.run
            asyncio.run(run())
    except Exception as error:
        if not signalled:
            raise
        # kopf stopped on the signal and raised what failed meanwhile (a watch answered 410): the operator stops
        # all the same; taken for the run's end, the error started kopf again and the signal was lost
        logging.getLogger("kuberl.operator").warning("kopf's run ended in %s after %s; the operator stops as signalled",
                                                     f"{type(error).__name__}: {error}"[:300], signalled[0].name)
    return bool(signalled)


def running_tasks(loop: asyncio.AbstractEventLoop, ignored: set[asyncio.Task]) -> list[str]:
    """What of kopf's run has not ended: each task's name and coroutine (kopf names a daemon's task after its handler
    and object). Read from another thread (ShutdownBound's), as asyncio.all_tasks allows."""
    tasks = [t for t in asyncio.all_tasks(loop) if t not in ignored and not t.done()]
    return sorted(f"{t.get_name()} ({getattr(t.get_coro(), '__qualname__', '?')})" for t in tasks)


class TracebackOnce(logging.Filter):
    """A failure that repeats (a daemon retrying every few seconds while the API server is down)
    logs its traceback the first time; each repeat within `window` seconds (the same logger, object and
    message up to its first colon, numbers aside) is one line, the error's type added and the
    traceback left out. The object is the job kopf's per-object logger names (`k8s_ref`): its message
    ("Daemon 'reconcile' failed …") is the same for every job, whose own failures each show once."""

    def __init__(self, window: float = 600.0, clock=time.monotonic):
        super().__init__()
        self.window, self.clock = window, clock
        self.shown: dict[tuple, tuple[float, str]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or record.exc_info[1] is None:
            return True
        error = record.exc_info[1]
        # what failed, not how: the first retry's error may be a reset, the next ones refused connections
        ref = getattr(record, "k8s_ref", None) or {}
        key = (record.name, ref.get("namespace"), ref.get("name"), re.sub(r"[\d.]+", "#", str(record.msg).split(":", 1)[0]))
        now = self.clock()
        first = self.shown.get(key)
        if first is None or now - first[0] > self.window:
            # keyed by job, so pruned: jobs failing one after another for months must not grow it without end
            self.shown = {k: v for k, v in self.shown.items() if now - v[0] <= self.window}
            self.shown[key] = (now, time.strftime("%H:%M:%S"))
            return True
        record.msg, record.args = f"{record.getMessage()} [{type(error).__name__}; traceback as logged at {first[1]}]", ()
        record.exc_info, record.exc_text = None, None
        return True


class KopfRefusals(logging.Filter):
    """RBAC refusing one of kopf's own calls on a job (its finalizer's patch): kopf logged a traceback
    at each retry, and before each four "Request attempt … failed" lines. `line` turns the API server's
    refusal into the operator's one line instead, said once per `window` seconds for each refused
    call; kopf's lines about it are left out. The refusals of kopf's watches end its run, which says
    them (cmd_operator): their records are left to the filters for those."""

    def __init__(self, line: Callable[[str], str | None], window: float = 600.0, clock=time.monotonic):
        super().__init__()
        self.line, self.window, self.clock = line, window, clock
        self.said: dict[str, float] = {}
        self.pruned = clock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kopf") or record.name.startswith("kopf._core.reactor"):
            return True
        if record.exc_info and record.exc_info[1] is not None:
            refused = rbac_refused(record.exc_info[1])
            if refused is None or not type(refused).__module__.startswith("kopf."):
                return True  # the handlers' own calls say their refusals on the job
            said = self.line(getattr(refused, "message", None) or str(refused))
            if said is None:
                return True
            now = self.clock()
            if now - self.said.get(said, -self.window) < self.window:
                return False
            if now - self.pruned >= self.window:  # a line per job name: those past their window go (once a window)
                self.said = {k: t for k, t in list(self.said.items()) if now - t < self.window}
                self.pruned = now
            self.said[said] = now
            record.msg, record.args, record.exc_info, record.exc_text = said, (), None, None
            return True
        text = record.getMessage()
        return not (text.startswith("Request attempt") and "APIForbiddenError(" in text and RBAC_REFUSAL.search(text))


# kopf's exception for an ERROR event in a watch stream other than a 410 (which kopf handles itself by
# listing again); kopf has no public name for it, nor for its API errors, which carry the answer's `status`.
WATCH_ERROR_EVENT = "WatchingError"


def watch_lost(error: BaseException | None) -> BaseException | None:
    """The lost watch that `error` is, or was caused by, or holds in a group; else None. A watch is
    lost, and made whole by listing again, when it is answered HTTP 410 Gone or when the API server
    ends it with an ERROR event (a 504 "Too large resource version" from a watch cache behind, a 500
    from storage): client-go's reflector relists or retries on both; kopf stops the operator."""
    return _found(error, lambda e: getattr(e, "status", None) == 410 or type(e).__name__ == WATCH_ERROR_EVENT)


def api_unanswered(error: BaseException | None) -> BaseException | None:
    """The API server's silence or trouble that `error` is, or was caused by, or holds in a group;
    else None: a connection refused, reset or timed out, or a 5xx answer (etcd electing a leader).
    kopf's watches wait through these; its one-off discovery at start gives up after 4 tries."""
    return _found(error, lambda e: isinstance(e, (aiohttp.ClientConnectionError, TimeoutError))
                  or (isinstance(getattr(e, "status", None), int) and e.status >= 500))


def resource_gone(error: BaseException | None) -> BaseException | None:
    """The 404 Not Found that `error` is, or was caused by, or holds in a group; else None. Out of kopf.run it is
    a watch of a resource the API server stopped serving: its CRD was deleted."""
    return _found(error, lambda e: getattr(e, "status", None) == 404)


def rbac_refused(error: BaseException | None) -> BaseException | None:
    """The 403 Forbidden that `error` is, or was caused by, or holds in a group; else None. Out of
    kopf.run it is kopf's own list or watch refused (kopf retried it 3 times): the operator's
    handlers catch their own calls' refusals and say them on the job."""
    return _found(error, lambda e: getattr(e, "status", None) == 403)


def _found(error: BaseException | None, matches: Callable[[BaseException], bool]) -> BaseException | None:
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if matches(current):
            return current
        pending += [current.__cause__, current.__context__, *getattr(current, "exceptions", ())]
    return None
