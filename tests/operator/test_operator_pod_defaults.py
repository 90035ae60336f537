"""A platform's pod defaults (the chart's trainer.podDefaults) through the real operator: every pod of a job gets
them under its own spec, and they are the platform's, not the tenant's: a field the platform forbids tenants
(--forbid-pod-fields tolerations) still comes from its own defaults, while a tenant setting it is refused; and a
default the platform enforces (its GPU pool's nodeSelector) refuses a job that sets it otherwise."""
import json

from kuberl.core import names

from tests.operator.operatorkit import (
    JOBS,
    TRAINER_IMAGE,
    Operator,
    condition,
    create_job,
    pods,
    start_gang,
    status,
    wait_for,
    wait_phase,
)

GPU_POOL = {'key': 'pool', 'operator': 'Equal', 'value': 'gpu', 'effect': 'NoSchedule'}
DEFAULTS = {'labels': {'cost-center': 'rl', 'team': 'platform'}, 'tolerations': [GPU_POOL], 'nodeSelector': {'pool': 'gpu'},
            'env': [{'name': 'NCCL_SOCKET_IFNAME', 'value': 'ib0'}], 'priorityClassName': 'ml-batch', 'enforced': ['nodeSelector']}


def test_every_pod_gets_the_platforms_defaults_under_the_jobs_own(standin, rest, tmp_path):
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--forbid-pod-fields', 'tolerations',
                  env={'KUBERL_TRAINER_POD_DEFAULTS': json.dumps(DEFAULTS)}).start()
    try:
        # the Priority admission plugin refuses a pod naming a PriorityClass that does not exist
        assert rest.post('/apis/scheduling.k8s.io/v1/priorityclasses', {
            'apiVersion': 'scheduling.k8s.io/v1', 'kind': 'PriorityClass', 'metadata': {'name': 'ml-batch'}, 'value': 1000}).status == 201
        create_job(rest, 'pooled', workers=2, labels={'team': 'rl'})
        gang = wait_for(lambda: len(pods(standin, 'pooled')) == 2 and pods(standin, 'pooled'), what='both pods')
        for pod in gang:
            trainer = next(c for c in pod['spec']['containers'] if c['name'] == names.TRAINER_CONTAINER)
            assert pod['metadata']['labels']['team'] == 'rl' and pod['metadata']['labels']['cost-center'] == 'rl'
            assert (pod['spec']['tolerations'], pod['spec']['nodeSelector'], pod['spec']['priorityClassName']) == (
                [GPU_POOL], {'pool': 'gpu'}, 'ml-batch')
            assert {'name': 'NCCL_SOCKET_IFNAME', 'value': 'ib0'} in trainer['env']
        create_job(rest, 'tolerant', workers=1, tolerations=[{'operator': 'Exists'}])
        wait_phase(rest, 'tolerant', 'Failed')
        assert 'tolerations' in condition(rest, 'tolerant', 'Failed')['message'] and not pods(standin, 'tolerant')
        assert status(rest, 'pooled')['trainerDefaults']['pod']['enforced'] == ['nodeSelector']  # its later generations' too
        create_job(rest, 'elsewhere', workers=1, nodeSelector={'pool': 'reserved'})
        wait_phase(rest, 'elsewhere', 'Failed')
        failed = condition(rest, 'elsewhere', 'Failed')
        assert failed['reason'] == 'PodSecurity' and not pods(standin, 'elsewhere')
        assert failed['message'].endswith("spec.nodeSelector.pool: trainer.podDefaults enforces 'gpu' (got 'reserved')"), failed
    finally:
        op.stop()


def test_an_upgrade_that_enforces_a_default_leaves_a_job_that_ran_before_any_record_running(standin, rest, tmp_path):
    """A job from an operator before trainer.podDefaults has no status.trainerDefaults.pod; every job is judged again
    when the operator restarts, and such a job with its own nodeSelector was failed (PodSecurity, its gang deleted)
    by the first operator that enforced nodeSelector: an upgrade must never restart a healthy gang."""
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE).start()
    try:
        create_job(rest, 'veteran', workers=1, nodeSelector={'pool': 'cpu'})
        start_gang(standin, 'veteran', 1)
        wait_phase(rest, 'veteran', 'Running')
    finally:
        op.stop()
    # as the older operator left it: no record of pod defaults
    assert rest.patch(f'{JOBS}/veteran/status', {'status': {'trainerDefaults': {'pod': None}}}).status == 200
    assert 'pod' not in status(rest, 'veteran')['trainerDefaults']
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE,
                  env={'KUBERL_TRAINER_POD_DEFAULTS': json.dumps({'nodeSelector': {'pool': 'gpu'}, 'enforced': ['nodeSelector']})}).start()
    try:
        wait_for(lambda: 'pod' in status(rest, 'veteran')['trainerDefaults'], what='the new operator to decide the job')
        assert status(rest, 'veteran')['phase'] == 'Running' and len(pods(standin, 'veteran')) == 1
    finally:
        op.stop()
