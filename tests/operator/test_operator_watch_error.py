"""A watch the API server accepts and then ends with an ERROR event that is not 410 (a 504 "Too
large resource version" from a watch cache behind the resourceVersion kopf resumes from, a 500 from
storage) is not fatal: the operator says so in one line, lists again and goes on, as client-go's
reflector does (it relists on a too-large resourceVersion and retries every other watch error).
kopf raises on any such event ("Other watch errors should be fatal for the operator"), which ended
the operator, or left it stopping with its watches gone."""
import time

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


def test_a_watch_ended_by_an_error_event_is_listed_again_and_the_operator_goes_on(standin, rest, tmp_path):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1').start()
    try:
        create_job(rest, 'before', workers=1)
        wait_for(lambda: pods(standin, 'before'), what='pods of a job created before the error events')
        standin.handler.watch_errors['rltrainingjobs'] = [TOO_LARGE]
        standin.handler.watch_errors['pods'] = [INTERNAL]
        wait_for(lambda: not any(standin.handler.watch_errors.values()), timeout=15, what='both watches to meet their ERROR event')
        time.sleep(2)
        assert op.process.poll() is None, op.log()[-3000:]
        create_job(rest, 'after', workers=1)
        wait_for(lambda: pods(standin, 'after'), timeout=40, what='pods of a job created after the error events')
        log = op.log()
        # one line per restart of the watches (both events may end the same run), naming the Status, never a traceback
        said = [line for line in log.splitlines() if 'a watch was ended by the API server with an ERROR event' in line]
        assert len(said) in (1, 2), log[-4000:]
        assert all('(504 Timeout: Too large resource version: 9999' in line or '(500 InternalError: etcdserver: request timed out)'
                   in line for line in said), said
        assert 'Traceback' not in log and 'has failed' not in log, log[-4000:]
    finally:
        op.stop()
