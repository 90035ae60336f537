"""While the API server is down (tests.support.faultproxy resets every connection), each retry
of a job's loop is one log line with its error; the traceback is logged once."""
import yaml

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    start_gang,
    wait_for,
)
from tests.support.apiserver import kubeconfig
from tests.support.faultproxy import FaultProxy

FAILED = "Daemon 'reconcile' failed with an exception"


def test_an_outage_logs_one_line_per_retry_and_its_traceback_once(standin, rest, tmp_path):
    with FaultProxy('127.0.0.1', standin.port) as proxy:
        config = tmp_path / 'kubeconfig'
        config.write_text(yaml.safe_dump(kubeconfig(proxy.url)))
        op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, kubeconfig=config).start()
        try:
            create_job(rest, 'job', workers=1)
            start_gang(standin, 'job', 1)
            wait_for(lambda: 'Running' in str(standin.store.objects_of('kuberl.dev', 'rltrainingjobs')), what='job Running')
            proxy.down()
            wait_for(lambda: op.log().count(FAILED) >= 2, timeout=40, what='two failed retries of the job loop')
            proxy.up()
        finally:
            op.stop()
        log = op.log()
        retries = [line for line in log.splitlines() if FAILED in line]
        assert len(retries) >= 2, retries
        first, second = log.index(retries[0]), log.index(retries[1])
        assert 'Traceback' in log[first:second] and 'Traceback' not in log[second:], log[-6000:]
        assert all('traceback as logged at' in line for line in retries[1:]), retries
