"""Several replicas with `--peering`: the higher priority works, the other waits and takes over."""
from kuberl.kubeapi import API_CALLS, PEERING_API_CALLS

from tests.operator.operatorkit import (
    Operator,
    create_job,
    pods,
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
        create_job(rest, 'shared', workers=2)
        gang = start_gang(standin, 'shared', 2)
        wait_phase(rest, 'shared', 'Running')
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
