"""The operator as a long-running service: restarts, deletion, quiet steady state, input it must judge."""
import threading
import time

from kuberl.core import names

from tests.operator.operatorkit import (
    JOBS,
    NS,
    TRAINER_IMAGE,
    FakeMetrics,
    Operator,
    condition,
    create_job,
    events,
    job,
    manifest,
    pods,
    running_job,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
    wait_reconciles,
)
from tests.support import admission
from tests.support.admission import Refuse


def test_operator_killed_and_restarted_mid_job_keeps_the_gang_and_the_status(standin, rest, tmp_path):
    op = Operator(standin, tmp_path).start()
    try:
        create_job(rest, 'durable', workers=3)
        gang = start_gang(standin, 'durable', 3)
        terminated(standin, gang[2], 1, 'Crashed: boom')
        gang = start_gang(standin, 'durable', 3, generation=1)
        before = wait_phase(rest, 'durable', 'Running')
        uids = {p['metadata']['uid'] for p in pods(standin, 'durable')}
        frozen = standin.store.find('', 'configmaps', NS, 'durable-config')
        op.kill()
        op.extra = ('--trainer-image', 'registry.test/kuberl/trainer:upgraded')  # an upgrade with a new default
        op.start()
        wait_reconciles(op, 3, 'of the new process')
        assert {p['metadata']['uid'] for p in pods(standin, 'durable')} == uids, 'no pod recreated, none duplicated'
        after = status(rest, 'durable')
        for key in ('phase', 'generation', 'restarts', 'restartHistory', 'startTime', 'gangRunningTime'):
            assert after[key] == before[key], key
        assert standin.store.find('', 'configmaps', NS, 'durable-config') == frozen, 'the frozen configuration is untouched'
        for pod in gang:
            terminated(standin, pod, 0, 'Succeeded: done')
        assert wait_phase(rest, 'durable', 'Succeeded')['restarts'] == 1
    finally:
        op.stop()


def test_operator_killed_with_half_a_gang_created_completes_it_once_no_pod_twice(standin, rest, tmp_path):
    """Rank 0 created, rank 1's create failing (an unreachable webhook: 500, retried), the operator SIGKILLed: the
    next process creates rank 1 only, in the same generation; nothing counted, nothing duplicated."""
    half = Refuse('pods', admission.webhook_unreachable(), labels={names.LABEL_JOB: 'halfway', names.LABEL_RANK: '1'})
    standin.store.hooks.admission.append(half)
    op = Operator(standin, tmp_path).start()
    try:
        create_job(rest, 'halfway', workers=2)
        wait_for(lambda: half.refused >= 2 and pods(standin, 'halfway'), what="rank 0 created and rank 1's create failing")
        [rank0] = pods(standin, 'halfway')
        op.kill()
        standin.store.hooks.admission.remove(half)
        op.start()
        gang = wait_for(lambda: len(pods(standin, 'halfway')) == 2 and pods(standin, 'halfway'), what='rank 1 created')
        # a reconcile of the new process that saw both (a sleep of 1.5 s here before: the job, Pending, is reconciled
        # only when something changes, and a loaded machine could look before it was)
        wait_for(lambda: (status(rest, 'halfway').get('workers') or {}).get('active') == 2, what='both pods seen')
        gang = pods(standin, 'halfway')
        assert [p['metadata']['labels'][names.LABEL_RANK] for p in gang] == ['0', '1'], 'one pod per rank'
        assert gang[0]['metadata']['uid'] == rank0['metadata']['uid'], 'rank 0 kept, not made again'
        assert {p['metadata']['labels'][names.LABEL_RESTART] for p in gang} == {'0'}
        assert status(rest, 'halfway').get('restarts', 0) == 0 and status(rest, 'halfway').get('generation', 0) == 0
        start_gang(standin, 'halfway', 2)
        wait_phase(rest, 'halfway', 'Running')
    finally:
        op.stop()


def test_operator_killed_between_recording_a_restart_and_deleting_the_old_gang_finishes_it_once(standin, rest, tmp_path):
    """A crash restarts the gang: generation 1 is recorded in status, then the old gang is deleted. The deletes refused
    (RBAC), the operator is SIGKILLed in between: the next process deletes the old gang and creates generation 1 once,
    counting the restart once, with no pod of either generation left over or made twice."""
    standin.handler.denied.add(('delete', 'pods'))
    op = Operator(standin, tmp_path).start()
    try:
        create_job(rest, 'midway', workers=3)
        gang = start_gang(standin, 'midway', 3)
        terminated(standin, gang[1], 1, 'Crashed: boom')
        wait_for(lambda: status(rest, 'midway').get('generation') == 1, what='generation 1 recorded')
        wait_for(lambda: pod_deletes(standin) >= 2, what='its deletes refused, more than once')
        assert sorted(p['metadata']['uid'] for p in pods(standin, 'midway')) == sorted(p['metadata']['uid'] for p in gang)
        recorded = status(rest, 'midway')
        assert recorded['restarts'] == 1 and len(recorded['restartHistory']) == 1, recorded
        op.kill()
        standin.handler.denied.discard(('delete', 'pods'))
        op.start()
        wait_for(lambda: {p['metadata']['labels'][names.LABEL_RESTART] for p in pods(standin, 'midway')} == {'1'}
                 and len(pods(standin, 'midway')) == 3, timeout=30, what='the old gang gone and generation 1 created',
                 explain=lambda: [(p['metadata']['name'], p['metadata']['labels'][names.LABEL_RESTART]) for p in pods(standin, 'midway')])
        # a reconcile of the new process that saw all three (the job is reconciled only when something changes now)
        wait_for(lambda: (status(rest, 'midway').get('workers') or {}).get('active') == 3, what='generation 1 seen')
        new_gang = pods(standin, 'midway')
        assert sorted(p['metadata']['labels'][names.LABEL_RANK] for p in new_gang) == ['0', '1', '2'], 'one pod per rank'
        assert not {p['metadata']['uid'] for p in new_gang} & {p['metadata']['uid'] for p in gang}
        after = status(rest, 'midway')
        assert (after['generation'], after['restarts'], len(after['restartHistory'])) == (1, 1, 1), after
        for pod in start_gang(standin, 'midway', 3, generation=1):
            terminated(standin, pod, 0, 'Succeeded: done')
        assert wait_phase(rest, 'midway', 'Succeeded')['restarts'] == 1
    finally:
        op.stop()


def pod_deletes(standin) -> int:
    return sum(n for c, n in standin.calls.items() if (c.verb, c.resource, c.agent) == ('delete', 'pods', 'kopf'))


def test_deleting_a_job_removes_every_child_through_owner_references(standin, rest, operator):
    create_job(rest, 'goner', workers=2, checkpoint={'retain': False})
    start_gang(standin, 'goner', 2)
    wait_phase(rest, 'goner', 'Running')
    assert 'kuberl_operator_pods_created_total{namespace="default",rltj="goner"} 2.0' in operator.metrics()
    assert rest.delete(f'{JOBS}/goner').status == 200
    wait_for(lambda: job(rest, 'goner') is None, what='the job to go (the operator lets go of its finalizer)')
    wait_for(lambda: 'rltj="goner"' not in operator.metrics(), what="the job's own series to be dropped")
    children = (('', 'pods'), ('', 'services'), ('', 'configmaps'), ('', 'persistentvolumeclaims'), ('networking.k8s.io', 'networkpolicies'))
    wait_for(lambda: not [o for g, p in children for o in standin.store.objects_of(g, p)
                          if (o['metadata'].get('labels') or {}).get('kuberl.dev/job') == 'goner'],
             what='every child to be collected')


def test_a_job_that_does_not_change_causes_zero_writes(standin, rest, operator):
    with FakeMetrics('flat') as metrics:
        metrics.timesteps = 1234  # a running rank 0 whose numbers do not move
        create_job(rest, 'flat', workers=2, metrics={'port': metrics.port}, runPolicy={'stallTimeoutSeconds': 3600})
        start_gang(standin, 'flat', 2, ip='127.0.0.1')
        create_job(rest, 'idle', workers=2)
        start_gang(standin, 'idle', 2)
        create_job(rest, 'finished', workers=1)
        [pod] = start_gang(standin, 'finished', 1)
        terminated(standin, pod, 0, 'Succeeded: done')
        rest.post(JOBS, manifest('broken', labels={'not a key': 'x'}))
        for name, phase in (('flat', 'Running'), ('idle', 'Running'), ('finished', 'Succeeded'), ('broken', 'Failed')):
            wait_phase(rest, name, phase)
        wait_for(lambda: (status(rest, 'flat').get('progress') or {}).get('timesteps') == 1234)

        def settled() -> bool:
            before = standin.writes('kopf')
            time.sleep(1.5)
            return standin.writes('kopf') == before
        wait_for(settled, what='the writes to settle')
        writes, reads = standin.writes('kopf'), _job_reads(standin)
        wait_for(lambda: _job_reads(standin) >= reads + 10, what='the reconcile loops to keep running')  # 10 at least
        assert standin.writes('kopf') == writes, 'a job that does not change must cause no write'
        # nor later: only a failed loop is started again (after kopf's 5 s backoff), and kopf says each failure at once
        assert "Daemon 'reconcile' failed" not in operator.log(), operator.log()[-3000:]


def _job_reads(standin) -> int:
    return sum(n for c, n in standin.calls.items() if c.verb == 'get' and c.resource == 'rltrainingjobs' and c.agent == 'kopf')


MUTATIONS = [  # each passes the CRD; only the operator can judge it
    ({'labels': {'not a key': 'x'}}, 'spec.labels.not a key'),
    ({'nodeSelector': {'-leading-dash': 'x'}}, 'spec.nodeSelector.-leading-dash'),
    ({'template': {'spec': {'containers': [{'image': 'busybox'}]}}}, 'spec.template.spec.containers[0].name'),
    ({'template': {'spec': {'volumes': [{'emptyDir': {}}]}}}, 'spec.template.spec.volumes[0].name'),
    ({'template': {'metadata': {'name': 'mine'}}}, 'spec.template.metadata.name'),
    ({'template': {'metadata': {'labels': {'team': 7}}}}, 'spec.template.metadata.labels'),
    # a pod rule of the API server's (ValidateVolumeMounts), and one checked in the rendered pod (ValidateEnvFrom):
    # both failed late, as InvalidChild, at every pod create
    ({'template': {'spec': {'containers': [{'name': 'shipper', 'image': 'busybox', 'volumeMounts': [{'name': 'data', 'mountPath': '/d'}]}]}}},
     'spec.template.spec.containers[0].volumeMounts[0].name'),
    ({'template': {'spec': {'containers': [{'name': 'shipper', 'image': 'busybox', 'envFrom': [{}]}]}}},
     'spec.template.spec.containers[shipper].envFrom[0]'),
]


def test_input_only_the_operator_can_judge_fails_naming_the_field_while_other_jobs_run(standin, rest, operator):
    for i, (mutation, _) in enumerate(MUTATIONS):
        reply = rest.post(JOBS, manifest(f'bad-{i}', **mutation))
        assert reply.status == 201, f'the CRD already refuses {mutation}: {reply.body}'
    running_job(standin, rest, 'fine', 2)
    for i, (_, path) in enumerate(MUTATIONS):
        failed = wait_phase(rest, f'bad-{i}', 'Failed')
        reason = condition(rest, f'bad-{i}', 'Failed')
        assert reason['reason'] == 'InvalidSpec'
        assert path in reason['message'], (path, reason['message'])
        assert failed['observedGeneration'] == 1
        assert not pods(standin, f'bad-{i}')
        wait_for(lambda i=i: any(e['reason'] == 'InvalidSpec' for e in events(rest, f'bad-{i}')))
    assert operator.healthy()
    assert f'kuberl_operator_jobs{{phase="Failed"}} {len(MUTATIONS)}.0' in operator.metrics()
    assert standin.store.find('', 'pods', NS, 'fine-0') is not None


def test_an_edit_that_breaks_a_running_job_fails_it_and_stops_its_gang(standin, rest, operator):
    running_job(standin, rest, 'edited', 2)
    assert rest.patch(f'{JOBS}/edited', {'spec': {'labels': {'bad key': 'x'}}}).status == 200
    wait_phase(rest, 'edited', 'Failed')
    assert 'spec.labels.bad key' in condition(rest, 'edited', 'Failed')['message']
    wait_for(lambda: not pods(standin, 'edited'), what='the gang to be deleted')


def test_a_pod_the_api_server_refuses_fails_the_job_with_its_field(standin, rest, operator):
    """A rule kuberl leaves to the API server because only the cluster knows it: a regular container's restartPolicy
    (validateContainers, pkg/apis/core/validation/validation.go) is refused unless the server has the
    ContainerRestartRules gate (alpha since v1.34). The stand-in refuses it, as a server without the gate does."""
    sidecar = {'name': 'shipper', 'image': 'fluent/fluent-bit:3.0', 'restartPolicy': 'Always'}
    create_job(rest, 'restarting', workers=1, template={'spec': {'containers': [sidecar]}})
    wait_phase(rest, 'restarting', 'Failed')
    refused = condition(rest, 'restarting', 'Failed')
    assert refused['reason'] == 'InvalidChild'
    assert 'spec.containers[1].restartPolicy: Forbidden: may not be set for non-init containers' in refused['message']
    assert operator.healthy()


def test_only_the_listed_namespaces_are_watched(standin, rest, tmp_path):
    assert rest.post('/api/v1/namespaces', {'metadata': {'name': 'team-a'}}).status == 201
    op = Operator(standin, tmp_path, '--namespace', 'team-a').start()
    try:
        theirs = manifest('theirs')
        assert rest.post('/apis/kuberl.dev/v1alpha1/namespaces/team-a/rltrainingjobs', theirs).status == 201
        create_job(rest, 'ignored', workers=1)
        wait_for(lambda: rest.get('/apis/kuberl.dev/v1alpha1/namespaces/team-a/rltrainingjobs/theirs').body.get('status', {}).get('phase'),
                 what='the job in the watched namespace to be reconciled')
        time.sleep(1.0)
        assert not status(rest, 'ignored'), 'a job outside the watched namespaces is left alone'
        watched = {(c.resource, c.namespace) for c in standin.calls if c.agent == 'kopf' and c.verb in ('list', 'watch')}
        assert watched == {('rltrainingjobs', 'team-a'), ('pods', 'team-a')}, watched
    finally:
        op.stop()


class HeldMetrics(FakeMetrics):
    """Rank 0's exporter whose answers wait while `held` is set: the job's loop stays inside a scrape."""

    def __init__(self, job: str):
        super().__init__(job)
        self.held, self.entered, self.released, page = threading.Event(), threading.Event(), threading.Event(), self.page

        def held_page() -> str:
            if self.held.is_set():
                self.entered.set()
                self.released.wait(30)
            return page()

        self.page = held_page


def test_a_job_recreated_while_its_predecessor_s_loop_ends_still_hears_its_pods(standin, rest, tmp_path):
    """The predecessor's finalizer taken off by hand (`kubectl patch --type=merge -p '{"metadata":{"finalizers":null}}'`,
    as after an operator uninstall) and the job applied again at once: the old loop, inside a scrape when kopf stopped
    it, ended after the new one had started and unregistered the new loop's doorbell (one per job name). Pod events
    reached no loop, and the new job stayed Pending, its pod list stale until the 300 s resync."""
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--scrape-timeout', '20').start()
    try:
        with HeldMetrics('twice') as metrics:
            create_job(rest, 'twice', workers=1, metrics={'port': metrics.port})
            start_gang(standin, 'twice', 1, ip='127.0.0.1')
            wait_phase(rest, 'twice', 'Running')
            metrics.held.set()
            wait_for(metrics.entered.is_set, what='a scrape to be held')  # the loop is inside a reconcile now
            assert rest.delete(f'{JOBS}/twice').status == 200
            assert rest.patch(f'{JOBS}/twice', {'metadata': {'finalizers': None}}).status == 200
            wait_for(lambda: job(rest, 'twice') is None, what='the first job to go')
            standin.store.delete(standin.store.type_of('', 'v1', 'pods'), NS, 'twice-0', {'gracePeriodSeconds': 0})
            new_uid = create_job(rest, 'twice', workers=1, metrics={'port': metrics.port})['metadata']['uid']
            wait_for(lambda: [p for p in pods(standin, 'twice') if p['metadata']['ownerReferences'][0]['uid'] == new_uid],
                     what="the new job's pod")
            metrics.held.clear()
            metrics.released.set()  # the old loop's scrape answers; the old loop ends
            time.sleep(1.0)
            start_gang(standin, 'twice', 1, ip='127.0.0.1')
            wait_phase(rest, 'twice', 'Running')
    finally:
        op.stop()
