"""An API server down when the operator starts (a cluster booting, a control plane being upgraded:
tests.support.faultproxy resets every connection) is waited for, in the same process, saying so in
a line per try; kopf stopped the operator after its first request's 4 attempts (3.5 s), and a
crash-looping pod waits up to 5 minutes between starts. A server that stays down past the watch
bound (the one that fails /healthz for silent watches) ends the operator, naming how long."""
import time

import yaml
from kuberl.operator.config import WatchBounds

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)
from tests.support.apiserver import kubeconfig
from tests.support.faultproxy import FaultProxy
from tests.support.store import ApiError

WAITED = 'the API server did not answer, or failed'
DOWN_SECONDS = 9.0  # past kopf's 3.5 s of retries twice over


def observer_failures(log: str) -> list[str]:
    return [line for line in log.splitlines() if 'Resource observer has failed' in line]


def through(proxy: FaultProxy, tmp_path) -> str:
    config = tmp_path / 'kubeconfig'
    config.write_text(yaml.safe_dump(kubeconfig(proxy.url)))
    return config


def test_an_api_server_down_at_startup_is_waited_for_and_jobs_get_their_pods_once_it_answers(standin, rest, tmp_path):
    with FaultProxy('127.0.0.1', standin.port) as proxy:
        proxy.down()
        op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, kubeconfig=through(proxy, tmp_path))
        op.start(watching=False)
        try:
            create_job(rest, 'waiting', workers=1)
            time.sleep(DOWN_SECONDS)
            # two of kopf's runs failed, each after its own retries: counted, not timed (a loaded machine ran one in 9 s)
            wait_for(lambda: len(observer_failures(op.log())) >= 2, timeout=120, what="two of kopf's runs failed in one process",
                     explain=lambda: op.log()[-3000:])
            assert op.process.poll() is None, op.log()[-3000:]
            proxy.up()
            wait_for(lambda: pods(standin, 'waiting'), timeout=40, what='pods of a job created while the API server was down')
            log = op.log()
            waited = [line for line in log.splitlines() if WAITED in line]
            # the error met (the first try may meet a reset, later ones a refused connect), and when the next try is
            assert waited and all('failed (Client' in line and 'starts again in' in line for line in waited), log[-4000:]
            failed = observer_failures(log)
            assert len(failed) >= 2 and all('traceback as logged at' in line for line in failed[1:]), failed  # once (TracebackOnce)
        finally:
            op.stop()


def test_an_api_server_down_past_the_watch_bound_ends_the_operator_naming_how_long(standin, tmp_path):
    bound = WatchBounds(1).silent_bound
    with FaultProxy('127.0.0.1', standin.port) as proxy:
        proxy.down()
        op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1', kubeconfig=through(proxy, tmp_path))
        op.start(watching=False)
        try:
            op.process.wait(timeout=bound + 40)
        finally:
            op.stop()
        log = op.log()
        assert op.process.returncode != 0, log[-3000:]
        assert f'past the {bound:g}s bound' in log and 'the operator exits' in log, log[-4000:]


def test_a_list_the_api_server_fails_past_kopfs_retries_is_made_again_and_the_operator_goes_on(standin, rest, tmp_path):
    """kopf lists again after a lost watch (here a 410): five 500s in a row outlast its 4 tries, and it stopped."""
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1').start()
    try:
        internal = ApiError(500, '', 'etcdserver: leader changed')  # as tests.support.apiserver's list_errors cites
        standin.handler.list_errors['pods'] = [internal] * 5
        standin.handler.watch_gone['pods'] = 1
        wait_for(lambda: not standin.handler.list_errors['pods'], timeout=40, what='the five failed lists')
        create_job(rest, 'after', workers=1)
        wait_for(lambda: pods(standin, 'after'), timeout=40, what='pods of a job created after the failed lists')
        assert op.process.poll() is None
        said = [line for line in op.log().splitlines() if WAITED in line]
        assert said and all('(APIServerError: (' in line and 'etcdserver: leader changed' in line for line in said), said
    finally:
        op.stop()



def test_lists_and_watches_the_api_server_sheds_are_waited_out_and_the_operator_goes_on(standin, rest, tmp_path):
    """API Priority and Fairness sheds load with 429s (Retry-After: 1): six in a row outlast one request's 4 tries,
    which kopf's watcher waits out (settings.watching.reconnect_backoff) where a 5xx or a 403 would end its run."""
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '1').start()
    try:
        standin.handler.throttled['pods'] = 6
        create_job(rest, 'during', workers=1)
        wait_for(lambda: not standin.handler.throttled['pods'], timeout=40, what='the six shed requests')
        wait_for(lambda: pods(standin, 'during'), timeout=40, what='pods of a job created while lists were shed')
        assert op.process.poll() is None and op.starts == 1, op.log()[-3000:]
        assert 'Traceback' not in op.log(), op.log()[-3000:]
    finally:
        op.stop()
