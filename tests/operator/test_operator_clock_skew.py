"""Clock skew: the operator counts in the API server's time (kuberl.operator.kubeapi.ServerClock, from the
Date header of its answers), so a replica whose own clock is minutes off neither force-deletes
a pod still in its grace period nor stamps status in a time the next replica does not share.
The stand-in plays an API server whose clock is five minutes behind this machine's
(tests.support.store.CLOCK_OFFSET: its timestamps and its Date header)."""
import datetime
import re

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


def waiting_or_forced(status: dict) -> dict | None:
    """The status if it records old pods waited for (lifecycle.REASON_OLD_PODS) or any force-deleted."""
    ready = next((c for c in status.get('conditions') or [] if c['type'] == 'Ready'), {})
    return status if ready.get('reason') == 'WaitingForOldPods' or status.get('forceDeleted') else None


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
        # stamped in the server's time: the stamp and this read are apart by a reconcile and a wait (seconds when
        # loaded), the skew by 300 s
        assert abs((started - server_now).total_seconds()) < 60, (started, server_now)

        assert rest.delete(f'/api/v1/namespaces/{NS}/pods/{gang[1]["metadata"]["name"]}').status == 200
        wait_for(lambda: status(rest, 'skewed').get('generation') == 1
                 and all(p['metadata'].get('deletionTimestamp') for p in pods(standin, 'skewed', 0)),
                 what='the old gang to be deleted and terminating')
        # A status written by a reconcile that saw the old gang terminating (rank 1 at least): an operator on its own
        # clock decides there to force-delete it (the grace period ended 4.5 minutes ago for it) and records that in
        # the same write, before it deletes. A 5 s sleep passed without a look if a loaded machine had not reconciled.
        seen = wait_for(lambda: waiting_or_forced(status(rest, 'skewed')), what='a reconcile that saw the old gang terminating')
        assert not seen.get('forceDeleted') and len(pods(standin, 'skewed', 0)) == 2, seen
        said = re.search(r"the API server's clock is (-\d+)s from this operator's", op.log())
        assert said and abs(int(said.group(1)) - SKEW.total_seconds()) <= 2 and op.log().count("clock is") == 1, op.log()[-3000:]
    finally:
        op.stop()
