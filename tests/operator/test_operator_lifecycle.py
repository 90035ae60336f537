"""The real operator over HTTP: a job goes Pending -> Running -> Succeeded with its children."""
from kuberl.core import names

from tests.operator.operatorkit import (
    NS,
    TRAINER_IMAGE,
    create_job,
    events,
    pods,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
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
