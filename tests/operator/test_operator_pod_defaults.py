"""A platform's pod defaults (the chart's trainer.podDefaults) through the real operator: every pod of a job gets
them under its own spec, and they are the platform's, not the tenant's: a field the platform forbids tenants
(--forbid-pod-fields tolerations) still comes from its own defaults, while a tenant setting it is refused; and a
default the platform enforces (its GPU pool's nodeSelector) refuses a job that sets it otherwise."""
import json

from kuberl.core import names

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    condition,
    create_job,
    pods,
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
