"""The operator's last resort after a 410 Gone: when kopf does not return from the run the 410
ended (a second watcher waiting for a re-login nobody serves), it restarts in place after a
grace period: the same process, the same arguments, every watch listed anew."""

import os
import subprocess
import sys
import textwrap

from kuberl.core import contract
from kuberl.operator import config

from tests.support.kopfvault import vault_closed_under_a_reader

SCRIPT = textwrap.dedent("""
    import logging, os, sys, time
    from kuberl.operator.config import GoneWatchdog

    class Gone(Exception):
        status = 410

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    print("start", os.getpid(), os.environ.get("RUN", "first"), flush=True)
    if os.environ.get("RUN") == "second":
        sys.exit(0)
    os.environ["RUN"] = "second"
    watchdog = GoneWatchdog(logging.getLogger("kuberl.operator"), grace=0.3)
    assert watchdog.seen(Gone("too old resource version")) and watchdog.seen(None) is False
    time.sleep(30)  # kopf.run that never returns
""")


def test_a_run_that_never_returns_after_a_410_restarts_in_place():
    done = subprocess.run([sys.executable, "-c", SCRIPT], check=False, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = (line.split() for line in lines if line.startswith("start"))
    assert first[1] == second[1] and (first[2], second[2]) == ("first", "second")  # same PID, run again
    assert any("kopf did not stop within 0.3s, so the operator restarts in place" in line for line in lines)


def test_a_run_that_returns_disarms_the_restart():
    script = SCRIPT.replace("time.sleep(30)", "watchdog.disarm(); time.sleep(0.6); print('still here', flush=True)")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "still here" in done.stdout and done.stdout.count("start") == 1, done.stdout


def test_kopf_restarts_back_off_and_start_the_count_again_after_a_long_run():
    from kuberl.operator.config import GONE_RESET_SECONDS, KopfRestarts

    restarts, now, delays = KopfRestarts(bound=342.0), 0.0, []
    for _ in range(7):  # lost watches, each run short
        delays.append(restarts.after(True, now, now + 1))
        now += 2
    assert delays == [0, 1, 3, 7, 15, 30, 30]
    assert restarts.after(True, now, now + GONE_RESET_SECONDS) == 0, 'a run that lasted starts the count again'


def test_an_api_server_that_fails_every_run_is_given_up_on_past_the_bound_after_two_runs_at_least():
    from kuberl.operator.config import KopfRestarts

    restarts = KopfRestarts(bound=4.1)
    assert restarts.after(False, 0.0, 5.0) == 0, 'one run alone outlasting the bound is not given up on'
    assert restarts.after(False, 5.0, 9.0) is None and restarts.unanswered_for(9.0) == 9.0
    patient = KopfRestarts(bound=342.0)
    started = 0.0
    for _ in range(20):
        delay = patient.after(False, started, started + 3.5)
        if delay is None:
            break
        started += 3.5 + delay
    assert delay is None and patient.unanswered_for(started + 3.5) > 342.0
    between = KopfRestarts(bound=4.1)
    between.after(False, 0.0, 3.5)
    between.after(True, 3.5, 4.0)  # a lost watch: the API server answered meanwhile
    assert between.after(False, 4.0, 9.0) == 3, 'its failures count from the first after an answer'


def test_a_run_that_never_returns_after_a_refused_watch_does_what_its_return_would():
    script = SCRIPT.replace(
        'assert watchdog.seen(Gone("too old resource version")) and watchdog.seen(None) is False',
        'assert watchdog.seen_refusal(Gone("refused"), lambda e: print("after the hang:", e, flush=True))'
        ' and not watchdog.seen_refusal(None, print)').replace("time.sleep(30)", "time.sleep(1); print('done', flush=True)")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "after the hang: refused\ndone" in done.stdout, done.stdout + done.stderr


def test_refusals_carried_across_a_restart_in_place_keep_a_namespace_served():
    from kuberl.operator.config import carried_refusals

    watched = ("team-a", "team-b")
    assert carried_refusals('{"team-b": "refused", "gone": "x"}', watched) == {"team-b": "refused"}
    assert carried_refusals('{"team-a": "r", "team-b": "r"}', watched) == {}, "all refused: the start says it again"
    assert carried_refusals(None, watched) == {} and carried_refusals("[", watched) == {} and carried_refusals("[1]", watched) == {}


# cmd_operator itself, with kopf's run played by a test's `run_kopf` (each run's namespaces recorded in `runs`), the
# watchdog's grace 0.3 s, and a restart in place printed with the refusals it carries instead of made.
PLAYED = """
import functools, logging, os, time
from kuberl.cli import build_parser
from kuberl.operator import config, kubeapi, main
from tests.support.kopfvault import vault_closed_under_a_reader

runs = []
{played}

def recorded(memo=None, **kwargs):
    runs.append(memo.shell.config.namespaces)
    return run_kopf(memo=memo, **kwargs)

main.run_kopf = recorded
main.GoneWatchdog = functools.partial(config.GoneWatchdog, grace=0.3)
config.restart_in_place = main.restart_in_place = lambda: print(
    "restarted in place without", os.environ.get(config.ENV_REFUSED_NAMESPACES, "{{}}"), flush=True)
print("runs", runs, "exit", main.cmd_operator(build_parser().parse_args({arguments!r})), flush=True)
"""


def play(run_kopf: str, *arguments: str) -> tuple[str, str]:
    """`kuberl operator *arguments` with kopf's runs played by `run_kopf` (source): its stdout, and all it said."""
    script = PLAYED.format(played=textwrap.dedent(run_kopf), arguments=["operator", *arguments])
    env = {**os.environ, contract.ENV_OPERATOR_METRICS_ENABLED: "false"}
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60, env=env)
    return done.stdout, done.stdout + done.stderr


# The first run logs a lost watch (the watchdog arms) and returns, as it does when the operator stops it to take back
# a namespace RBAC allows again; the second runs past the grace.
RUNS = """
    class Gone(Exception):
        status = 410

    def run_kopf(stop_flag=None, memo=None, **_):
        if len(runs) == 1:
            logging.getLogger("kopf._core.reactor.queueing").error("watch lost", exc_info=Gone("too old resource version"))
            memo.shell.refused.granted.add("team-b")  # handlers.RefusedNamespaces: RBAC allows it again
            return False
        time.sleep(1.0)  # the second run: more than the grace
        return True

    os.environ[config.ENV_REFUSED_NAMESPACES] = '{"team-b": "refused"}'
"""


def test_a_run_that_returns_without_an_error_disarms_the_restart():
    stdout, out = play(RUNS, "--namespace", "team-a", "--namespace", "team-b")
    assert "runs [('team-a',), ('team-a', 'team-b')] exit 0" in stdout, out
    assert "restarted in place" not in stdout, out


def test_an_operator_signalled_to_stop_is_not_restarted_in_place():
    """A lost watch during a shutdown that hangs restarted the operator in place: the new image, its signal spent,
    ran on until the kubelet's SIGKILL. The shutdown's own bound (ShutdownBound) ends the process instead."""
    script = SCRIPT.replace(
        'watchdog = GoneWatchdog(logging.getLogger("kuberl.operator"), grace=0.3)',
        'stopping = []\nwatchdog = GoneWatchdog(logging.getLogger("kuberl.operator"), grace=0.3, stopping=lambda: bool(stopping))'
    ).replace(
        'assert watchdog.seen(Gone("too old resource version")) and watchdog.seen(None) is False',
        'assert watchdog.seen(Gone("too old resource version"))\nstopping.append("SIGTERM")'
    ).replace("time.sleep(30)", "time.sleep(0.8); watchdog.disarm()\n"
              "assert watchdog.seen_refusal(Gone('refused'), lambda e: print('after the hang', flush=True))\n"
              "time.sleep(0.8); print('still here', flush=True)")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "still here" in done.stdout and done.stdout.count("start") == 1, done.stdout + done.stderr
    assert "after the hang" not in done.stdout and "restarts in place" not in done.stdout, done.stdout


# A run a watch answered 404 ended (its CRD deleted) that never returns: kopf's orchestrator stops its other watchers
# only when cancelled, so one still reading as kopf closes its connections fails too; then kopf hangs past the grace.
GONE_RUN = """
    class NotFound(Exception):
        status = 404
        message = "the server could not find the requested resource"

    def run_kopf(**_):
        reactor = logging.getLogger("kopf._core.reactor.queueing")
        reactor.error("Watcher for rltrainingjobs.v1alpha1.kuberl.dev@none has failed", exc_info=NotFound())
        reactor.error("Watcher for pods.v1@none has failed: Connection closed.", exc_info=RuntimeError("Connection closed."))
        vault = vault_closed_under_a_reader()
        reactor.error("Watcher for pods.v1@team-b has failed: %s", vault, exc_info=vault)
        time.sleep(1.0)  # more than the grace
        return True
"""


def test_a_run_that_never_returns_after_a_404_restarts_in_place_with_one_line():
    stdout, out = play(GONE_RUN)
    assert "restarted in place" in stdout and "exit 0" in stdout, out
    said = [line for line in out.splitlines() if "a watch was answered 404" in line]
    assert len(said) == 1 and "its CRD deleted" in said[0] and "kopf did not stop within 0.3s" in said[0], out
    assert "Traceback" not in out and "Connection closed" not in out and "NoneType" not in out, out


def test_a_watcher_failing_in_kopfs_vault_closed_under_it_is_told_apart_from_any_other_type_error():
    """kopf's vault closed under a reader at a run's end (a real kopf Vault, tests/support/kopfvault.py) is an artefact
    of the same end as aiohttp's "Connection closed."; the same TypeError raised anywhere else is a bug to show."""
    vault = vault_closed_under_a_reader()
    assert str(vault) == "argument of type 'NoneType' is not iterable" and config.closed_under_a_watcher(vault)
    caches = None  # as kopf's closed vault item holds
    try:
        "contexts" in caches  # noqa: B015 - the same error, raised here
    except TypeError as elsewhere:
        assert str(elsewhere) == str(vault) and not config.closed_under_a_watcher(elsewhere)
    assert not config.closed_under_a_watcher(TypeError(str(vault)))  # never raised: no traceback
    assert config.closed_under_a_watcher(RuntimeError("Connection closed.")) and not config.closed_under_a_watcher(None)


# Every watcher's failure is logged under one message per watcher ("Watcher for <resource>@<namespace> has failed"),
# which TracebackOnce shortens for 600 s after the first. A run's end first closes team-a's watcher under it (the
# first record of that watcher, hidden); a later refusal of team-a, in a run kopf never returns from, must still arm
# the watchdog: the filters that judge a record read it before TracebackOnce takes its traceback away.
REFUSED_AFTER_A_CLOSED_WATCHER = """
    class Forbidden(Exception):
        status = 403

        def __init__(self, namespace):
            self.message = ('rltrainingjobs.kuberl.dev is forbidden: User "system:serviceaccount:kuberl-system:kuberl-operator"'
                            f' cannot watch resource "rltrainingjobs" in API group "kuberl.dev" in the namespace "{namespace}"')
            super().__init__(self.message)

    def watcher_failed(namespace, error):
        logging.getLogger("kopf._core.reactor.queueing").error(
            f"Watcher for rltrainingjobs.v1alpha1.kuberl.dev@{namespace} has failed: {error}", exc_info=error)

    def run_kopf(**_):
        if len(runs) == 1:  # team-b refused; the run's end closes team-a's watcher under it
            refused = Forbidden("team-b")
            watcher_failed("team-b", refused)
            watcher_failed("team-a", RuntimeError("Connection closed."))
            raise refused
        watcher_failed("team-a", Forbidden("team-a"))  # revoked since: kopf never returns from this run
        time.sleep(1.5)  # more than the grace
        return True
"""


def test_a_refusal_after_its_watchers_earlier_failure_still_arms_the_watchdog():
    stdout, out = play(REFUSED_AFTER_A_CLOSED_WATCHER, "--namespace", "team-a", "--namespace", "team-b", "--namespace", "team-c")
    assert "runs [('team-a', 'team-b', 'team-c'), ('team-a', 'team-c')] exit 0" in stdout, out
    restarted = [line for line in stdout.splitlines() if line.startswith("restarted in place without")]
    assert len(restarted) == 1 and '"team-a"' in restarted[0] and '"team-b"' in restarted[0], out
    assert "kopf did not stop within 0.3s after that refusal" in out, out
    assert "Traceback" not in out and "Connection closed" not in out, out


# A 410 of the operator's own call (a paged list compacted twice under it, kubeapi.Expired) fails a job's reconcile,
# which kopf logs and retries; its run goes on, so it is no lost watch: no restart in place, the failure shown.
OWN_410 = """
    def run_kopf(**_):
        expired = kubeapi.Expired(410, "Expired", "The provided continue parameter is too old to display a consistent list")
        logging.getLogger("kopf.objects").error("Daemon 'reconcile' failed with an exception. Will retry.", exc_info=expired)
        time.sleep(1.0)  # more than the grace
        return True
"""


def test_a_410_of_the_operators_own_call_is_no_lost_watch():
    stdout, out = play(OWN_410)
    assert "exit 0" in stdout and "restarted in place" not in out and "a watch was answered 410" not in out, out
    assert "Daemon 'reconcile' failed" in out and "Expired: The provided continue parameter is too old" in out, out
