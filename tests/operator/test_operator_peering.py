"""Several replicas with `--peering`: the higher priority works, the other waits and takes over."""
import copy
import datetime

from kuberl.operator.kubeapi import API_CALLS, PEERING_API_CALLS

from tests.operator.operatorkit import (
    Operator,
    create_job,
    pods,
    running_job,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
)

PEERING_CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'clusterkopfpeerings.kopf.dev'},
    'spec': {'group': 'kopf.dev', 'scope': 'Cluster',
             'names': {'kind': 'ClusterKopfPeering', 'plural': 'clusterkopfpeerings', 'singular': 'clusterkopfpeering'},
             'versions': [{'name': 'v1', 'served': True, 'storage': True,
                           'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}]},
}


def _priorities(rest) -> list[int]:
    peers = rest.get('/apis/kopf.dev/v1/clusterkopfpeerings/kuberl').body.get('status') or {}
    return sorted(peer['priority'] for peer in peers.values())


def test_a_lower_priority_replica_pauses_then_takes_over(standin, rest, tmp_path):
    standin.apply_crd(PEERING_CRD)
    assert rest.post('/apis/kopf.dev/v1/clusterkopfpeerings', {'apiVersion': 'kopf.dev/v1', 'kind': 'ClusterKopfPeering',
                                                               'metadata': {'name': 'kuberl'}}).status == 201
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    leader = Operator(standin, tmp_path / 'a', '--peering', 'kuberl', '--priority', '10').start()
    standby = Operator(standin, tmp_path / 'b', '--peering', 'kuberl', '--priority', '5').start(watching=False)  # paused
    try:
        wait_for(lambda: _priorities(rest) == [5, 10], what='both replicas in the peering object')
        assert 'Resuming operations' not in standby.log(), 'the lower priority starts paused and stays so'
        gang = running_job(standin, rest, 'shared', 2)
        assert len(pods(standin, 'shared')) == 2

        leader.stop()
        wait_for(lambda: 'Resuming operations after the pause' in standby.log(), timeout=30, what='the standby to take over')
        terminated(standin, gang[0], 1, 'Crashed: after the failover')
        wait_for(lambda: status(rest, 'shared').get('restarts') == 1, what='the standby to restart the gang')
        start_gang(standin, 'shared', 2, generation=1)
        wait_phase(rest, 'shared', 'Running')
    finally:
        standby.stop()
        leader.stop()
    made = {(c.verb, c.group, c.resource, c.subresource) for c in standin.calls if c.agent == 'kopf'}
    assert made <= API_CALLS | PEERING_API_CALLS, sorted(made - API_CALLS - PEERING_API_CALLS)


def _make_peering(standin, rest) -> None:
    standin.apply_crd(PEERING_CRD)
    assert rest.post('/apis/kopf.dev/v1/clusterkopfpeerings', {'apiVersion': 'kopf.dev/v1', 'kind': 'ClusterKopfPeering',
                                                               'metadata': {'name': 'kuberl'}}).status == 201


def _gauge(op: Operator, name: str) -> float | None:
    line = next((line for line in op.metrics().splitlines() if line.startswith(name + ' ')), None)
    return None if line is None else float(line.split()[1])


def test_equal_priorities_are_reported_loudly_log_healthz_and_metric(standin, rest, tmp_path):
    """kopf pauses every replica that sees another with its priority, and says so only as a
    warning: no job progresses. Each replica says why, fails /healthz and sets the gauge; once
    one of them goes, the other resumes and is healthy again."""
    from kuberl.core import metricnames
    _make_peering(standin, rest)
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    first = Operator(standin, tmp_path / 'a', '--peering', 'kuberl', '--priority', '7').start()
    second = Operator(standin, tmp_path / 'b', '--peering', 'kuberl', '--priority', '7').start(watching=False)
    gauge = metricnames.OPERATOR_PEERS_SAME_PRIORITY
    try:
        for op in (first, second):
            wait_for(lambda op=op: op.health_status() == 500, timeout=30, what='/healthz to fail on equal priorities')
            assert _gauge(op, gauge) == 1
            assert op.log().count('other live replica(s) have priority 7, as this one does') == 1, op.log()[-3000:]
        second.stop()  # a graceful stop removes its record
        wait_for(lambda: first.health_status() == 200 and _gauge(first, gauge) == 0, timeout=30,
                 what='the remaining replica to be healthy again')
    finally:
        second.stop()
        first.stop()


def _peering_states(standin) -> list[dict]:
    """The peering object's status, each version the API server stored, in its order (the stand-in's watch history)."""
    with standin.store.lock:
        return [copy.deepcopy(event.obj.get('status') or {})
                for event in standin.store.history[('kopf.dev', 'clusterkopfpeerings')] if event.type != 'DELETED']


def test_the_standby_takes_over_when_the_killed_leaders_record_expires(standin, rest, tmp_path):
    """A killed leader leaves its record behind: the standby takes over once it expires, --peering-lifetime seconds
    after the leader's last keepalive (kopf's default 60), and removes it. Judged by the records kopf writes (each
    peer's lastseen, by its own clock), not by a stopwatch: the standby's own record, when it removed the leader's,
    is past the leader's deadline (it did not take over a live leader), and nobody else removed it."""
    _make_peering(standin, rest)
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    lifetime = 12
    leader = Operator(standin, tmp_path / 'a', '--peering', 'kuberl', '--priority', '10', '--peering-lifetime', str(lifetime)).start()
    standby = Operator(standin, tmp_path / 'b', '--peering', 'kuberl', '--priority', '5',
                       '--peering-lifetime', str(lifetime)).start(watching=False)
    try:
        wait_for(lambda: _priorities(rest) == [5, 10], what='both replicas in the peering object')
        leader.kill()
        wait_for(lambda: 'Resuming operations after the pause' in standby.log(), timeout=3 * lifetime,
                 what='the standby to take over')
        create_job(rest, 'after-failover', workers=1)
        wait_for(lambda: pods(standin, 'after-failover'), what='the standby to create pods')
    finally:
        standby.stop()
        leader.stop()
    states = _peering_states(standin)
    leader_id = next(peer for state in states for peer, record in state.items() if record and record['priority'] == 10)
    removed = next(i for i, state in enumerate(states) if i and leader_id in states[i - 1] and leader_id not in state)
    last = states[removed - 1][leader_id]
    deadline = datetime.datetime.fromisoformat(last['lastseen']) + datetime.timedelta(seconds=last['lifetime'])
    standby_id = next(peer for peer, record in states[removed].items() if record['priority'] == 5)
    acted = datetime.datetime.fromisoformat(states[removed][standby_id]['lastseen'])
    # kopf sleeps until the deadline, then touches its own record: asyncio may wake it a clock tick early
    assert acted >= deadline - datetime.timedelta(seconds=1), (acted, deadline)
    assert all(leader_id not in state for state in states[removed:]), 'the dead leader stays removed'
    print(f'the standby removed the killed leader\'s record {(acted - deadline).total_seconds():+.1f}s after its deadline')
