"""A watch the API server ends is not fatal: the operator says so in one line, lists again and
goes on, as client-go's reflector does (it relists on an expired or too-large resourceVersion and
retries every other watch error). Two forms:

- an ERROR event in an accepted watch that is not 410 (a 504 "Too large resource version" from a
  watch cache behind the resourceVersion kopf resumes from, a 500 from storage): kopf raises on
  any such event ("Other watch errors should be fatal for the operator"), which ended the
  operator, or left it stopping with its watches gone;
- HTTP status 410 answering the watch itself (not an event in the stream: the form a LIST
  continue token, a proxy or an aggregated API gives)."""
import pytest

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)
from tests.support.store import ApiError

# As storage.NewTooLargeResourceVersionError builds it (staging/src/k8s.io/apiserver/pkg/storage/errors.go):
# apierrors.NewTimeoutError(...) with a ResourceVersionTooLarge cause, and the watch cache's 3 s wait as retryAfterSeconds.
TOO_LARGE = ApiError(504, 'Timeout', 'Too large resource version: 9999, current: 42',
                     {'causes': [{'reason': 'ResourceVersionTooLarge', 'message': 'Too large resource version'}],
                      'retryAfterSeconds': 1})
# What newErrWatcher makes of any other storage error (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go).
INTERNAL = ApiError(500, 'InternalError', 'etcdserver: request timed out')


def error_events(handler) -> dict:
    handler.watch_errors['rltrainingjobs'] = [TOO_LARGE]
    handler.watch_errors['pods'] = [INTERNAL]
    return handler.watch_errors


def gone(handler) -> dict:
    handler.watch_gone['rltrainingjobs'] = 1
    handler.watch_gone['pods'] = 1
    return handler.watch_gone


def job_lists(standin) -> int:
    return sum(n for c, n in standin.calls.items() if c.agent == 'kopf' and c.verb == 'list' and c.resource == 'rltrainingjobs')


def said_error_events(log: str) -> bool:
    said = [line for line in log.splitlines() if 'a watch was ended by the API server with an ERROR event' in line]
    return len(said) in (1, 2) and all('(504 Timeout: Too large resource version: 9999' in line
                                       or '(500 InternalError: etcdserver: request timed out)' in line for line in said)


def said_gone(log: str) -> bool:
    return log.count('a watch was answered 410 Gone (too old resource version') in (1, 2)


@pytest.mark.parametrize(('interrupt', 'said'), [(error_events, said_error_events), (gone, said_gone)],
                         ids=['error-events-504-and-500', 'answered-410-gone'])
def test_a_watch_the_api_server_ends_is_listed_again_and_the_operator_goes_on(standin, rest, tmp_path, interrupt, said):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1').start()
    try:
        create_job(rest, 'before', workers=1)
        wait_for(lambda: pods(standin, 'before'), what='pods of a job created before the watches end')
        listed = job_lists(standin)
        pending = interrupt(standin.handler)
        wait_for(lambda: not any(pending.values()), what='both watches to be ended')
        # the jobs listed again (kopf's run restarted, or the operator in place), or the operator gone: a fixed 2 s
        # passed on a loaded machine before an operator the error ends had exited
        wait_for(lambda: job_lists(standin) > listed or op.process.poll() is not None, timeout=40, what='a list after the watches ended')
        assert op.process.poll() is None, op.log()[-3000:]
        create_job(rest, 'after', workers=1)
        # 40 s: kopf returns at once from the run the error ended, or its run hangs and the operator
        # restarts in place after 10 s (operator.config.GoneWatchdog) and lists everything anew
        wait_for(lambda: pods(standin, 'after'), timeout=40, what='pods of a job created after the watches ended')
        # one line per restart of the watches (both may end the same run), naming the Status, never a traceback.
        # Said once kopf's run has returned: a daemon that run started as it stopped (the new job's, which may
        # make its pods) keeps kopf waiting up to 5 s for it, so the pods can come before the line.
        wait_for(lambda: said(op.log()), what='the line saying the watches ended', explain=lambda: op.log()[-4000:])
        log = op.log()
        assert 'Traceback' not in log and 'has failed' not in log, log[-4000:]
    finally:
        op.stop()
