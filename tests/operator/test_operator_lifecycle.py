"""The real operator over HTTP: a job goes Pending -> Running -> Succeeded with its children."""
from kuberl.core import names

from tests.operator.operatorkit import (
    NS,
    TRAINER_IMAGE,
    FakeMetrics,
    create_job,
    events,
    pods,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
    wait_reconciles,
)


def test_create_runs_and_succeeds_with_children_conditions_and_events(standin, rest, operator):
    created = create_job(rest, 'happy', workers=2)
    uid = created['metadata']['uid']

    gang = start_gang(standin, 'happy', 2)
    for kind, plural, name in (('ConfigMap', 'configmaps', 'happy-config'), ('Service', 'services', 'happy'),
                               ('NetworkPolicy', 'networkpolicies', 'happy-gang'),
                               ('PersistentVolumeClaim', 'persistentvolumeclaims', 'happy-checkpoints')):
        group = 'networking.k8s.io' if kind == 'NetworkPolicy' else ''
        child = standin.store.find(group, plural, NS, name)
        assert child is not None, kind
        assert child['metadata']['labels'][names.LABEL_JOB] == 'happy'
    assert standin.store.find('', 'configmaps', NS, 'happy-config')['immutable'] is True
    # checkpoint.retain defaults to true: the PVC must outlive the job, so it is not owned
    assert not standin.store.find('', 'persistentvolumeclaims', NS, 'happy-checkpoints')['metadata'].get('ownerReferences')
    for pod in gang:
        assert pod['spec']['containers'][0]['image'] == TRAINER_IMAGE, 'the default image comes from the operator'
        assert pod['spec']['containers'][0]['imagePullPolicy'] == 'Always'
        assert pod['spec']['imagePullSecrets'] == [{'name': 'regcred'}, {'name': 'mirror'}]
        assert pod['metadata']['ownerReferences'][0]['uid'] == uid
        assert pod['metadata']['labels'][names.LABEL_RESTART] == '0'

    running = wait_phase(rest, 'happy', 'Running')
    assert running['observedGeneration'] == 1
    assert running['workers']['active'] == 2
    assert running['startTime']

    for pod in gang:
        terminated(standin, pod, 0, 'Succeeded: budget of 1000 timesteps spent')
    done = wait_phase(rest, 'happy', 'Succeeded')
    assert done['completionTime']
    assert done['finalModel'].endswith('final-model.pt')
    assert done['display']['workers'].endswith('/2')  # kubectl get rltj's WORKERS column: ready/desired
    assert any(c['type'] == 'Succeeded' and c['status'] == 'True' for c in done['conditions'])
    reasons = wait_for(lambda: {e['reason'] for e in events(rest, 'happy')} >= {'Creating', 'AllWorkersRunning'}
                       and {e['reason'] for e in events(rest, 'happy')})
    assert 'RankZeroSucceeded' in reasons or 'AllWorkersSucceeded' in reasons
    assert status(rest, 'happy')['restarts'] == 0
    assert len(pods(standin, 'happy')) == 2
    page = operator.metrics()
    assert 'kuberl_operator_pods_created_total{namespace="default",rltj="happy"} 2.0' in page
    assert 'kuberl_operator_jobs{phase="Succeeded"} 1.0' in page
    assert 'kuberl_operator_reconcile_duration_seconds_count' in page


def test_quantities_read_back_in_canonical_form_are_not_written_again(standin, rest, operator):
    """The API server stores a pod's or claim's quantities canonical (Quantity.MarshalJSON: 1000m is read back as 1,
    2048Mi as 2Gi; tests/support/test_standin_api.py): an operator comparing what it rendered with what it reads
    would patch forever. kuberl's reads back (a restart's 409s on the children, the pods it lists, rank 0 scraped
    each 0.5 s) write nothing to a pod or a claim but creates and the old gang's deletes."""
    with FakeMetrics('sized') as page:
        create_job(rest, 'sized', workers=2, metrics={'port': page.port}, checkpoint={'size': '1024Mi'},
                   resources={'requests': {'cpu': '1000m', 'memory': '2048Mi'}, 'limits': {'cpu': '1000m'}})
        gang = start_gang(standin, 'sized', 2, ip='127.0.0.1')
        trainer = next(c for c in gang[0]['spec']['containers'] if c['name'] == names.TRAINER_CONTAINER)
        assert trainer['resources']['requests'] == {'cpu': '1', 'memory': '2Gi'}, trainer['resources']
        claim = standin.store.find('', 'persistentvolumeclaims', NS, 'sized-checkpoints')
        assert claim['spec']['resources']['requests'] == {'storage': '1Gi'}
        wait_phase(rest, 'sized', 'Running')
        terminated(standin, gang[1], 1, 'Crashed: RuntimeError: NaN in the policy loss')
        start_gang(standin, 'sized', 2, generation=1, ip='127.0.0.1')
        wait_for(lambda: status(rest, 'sized').get('phase') == 'Running' and status(rest, 'sized').get('generation') == 1,
                 what='the second gang running')
        wait_reconciles(operator, 3, 'rank 0 scraped, its pods and children read back')
    written = {(c.verb, c.resource) for c in standin.calls if c.agent == 'kopf' and c.resource in ('pods', 'persistentvolumeclaims')
               and c.verb not in ('get', 'list', 'watch')}
    assert written == {('create', 'pods'), ('delete', 'pods'), ('create', 'persistentvolumeclaims')}, written
