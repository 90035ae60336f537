"""Clock skew: the operator counts in the API server's time (kuberl.operator.kubeapi.ServerClock, from the
Date header of its answers), so a replica whose own clock is minutes off neither force-deletes
a pod still in its grace period nor stamps status in a time the next replica does not share.
The stand-in plays an API server whose clock is five minutes behind this machine's
(tests.support.store.CLOCK_OFFSET: its timestamps and its Date header)."""
import datetime
import re
import time

import pytest

from tests.operator.operatorkit import (
    NS,
    TRAINER_IMAGE,
    Operator,
    pods,
    running_job,
    status,
    wait_for,
)
from tests.support import store
from tests.support.store import timestamp

SKEW = datetime.timedelta(minutes=-5)


@pytest.fixture
def skewed(monkeypatch):
    monkeypatch.setattr(store, 'CLOCK_OFFSET', SKEW)


def test_an_operator_ahead_of_the_api_server_waits_out_the_grace_period_in_the_servers_time(skewed, standin, rest, tmp_path):
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'local-node'},
            'status': {'conditions': [{'type': 'Ready', 'status': 'Unknown', 'reason': 'NodeStatusUnknown',
                                       'lastTransitionTime': timestamp()}]}}
    assert rest.post('/api/v1/nodes', node).status == 201  # pods deleted from here stay terminating
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE).start()
    try:
        gang = running_job(standin, rest, 'skewed', 2)
        started = datetime.datetime.fromisoformat(status(rest, 'skewed')['startTime'])
        server_now = store.now()
        assert abs((started - server_now).total_seconds()) < 10, (started, server_now)  # stamped in the server's time

        assert rest.delete(f'/api/v1/namespaces/{NS}/pods/{gang[1]["metadata"]["name"]}').status == 200
        wait_for(lambda: status(rest, 'skewed').get('generation') == 1
                 and all(p['metadata'].get('deletionTimestamp') for p in pods(standin, 'skewed', 0)),
                 what='the old gang to be deleted and terminating')
        time.sleep(5)  # an operator on its own clock force-deletes at once: the grace period ended 4.5 minutes ago for it
        assert len(pods(standin, 'skewed', 0)) == 2 and not status(rest, 'skewed').get('forceDeleted'), status(rest, 'skewed')
        said = re.search(r"the API server's clock is (-\d+)s from this operator's", op.log())
        assert said and abs(int(said.group(1)) - SKEW.total_seconds()) <= 2 and op.log().count("clock is") == 1, op.log()[-3000:]
    finally:
        op.stop()
