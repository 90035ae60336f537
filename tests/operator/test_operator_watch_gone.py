"""A watch answered with HTTP status 410 (not an ERROR event in the stream: the form a LIST
continue token, a proxy or an aggregated API gives) is not fatal: the operator says so in one
line, lists again and goes on, as client-go's reflector does for an expired resourceVersion."""
import time

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)


def test_a_watch_answered_410_gone_is_listed_again_and_the_operator_goes_on(standin, rest, tmp_path):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1').start()
    try:
        create_job(rest, 'before', workers=1)
        wait_for(lambda: pods(standin, 'before'), what='pods of a job created before the 410')
        standin.handler.watch_gone['rltrainingjobs'] = 1
        standin.handler.watch_gone['pods'] = 1
        wait_for(lambda: not any(standin.handler.watch_gone.values()), timeout=15, what='both watches to meet their 410')
        time.sleep(2)
        assert op.process.poll() is None, op.log()[-3000:]
        create_job(rest, 'after', workers=1)
        # 40 s: kopf returns at once from the run the 410 ended, or its run hangs and the operator restarts in
        # place after 10 s (operator.config.GoneWatchdog) and lists everything anew
        wait_for(lambda: pods(standin, 'after'), timeout=40, what='pods of a job created after the 410')
        log = op.log()
        # one line per restart of the watches (both 410s may end the same run), never a traceback
        assert log.count('a watch was answered 410 Gone (too old resource version') in (1, 2), log[-4000:]
        assert 'Traceback' not in log and 'has failed' not in log, log[-4000:]
    finally:
        op.stop()
