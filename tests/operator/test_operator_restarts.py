"""Gang restarts through the real operator: reasons from termination messages, what counts, old pods never adopted."""
import datetime
import json

from kuberl.core import names

from tests.operator.operatorkit import (
    JOBS,
    NS,
    Operator,
    condition,
    create_job,
    events,
    pods,
    running_job,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
)
from tests.support.selectors import parse_label_selector
from tests.support.store import timestamp


def test_a_crash_restarts_the_whole_gang_with_the_reason_from_the_termination_message(standin, rest, operator):
    gang = running_job(standin, rest, 'crashy', 3)

    assert rest.delete(f'/api/v1/namespaces/{NS}/services/crashy').status == 200  # removed by hand
    terminated(standin, gang[1], 1, 'Crashed: RuntimeError: NaN in the policy loss at update 7')

    restarted = wait_for(lambda: status(rest, 'crashy').get('restarts') == 1 and status(rest, 'crashy'), what='one counted restart')
    entry = restarted['restartHistory'][-1]
    assert (entry['generation'], entry['reason'], entry['counted']) == (0, 'Crashed', True)
    assert 'NaN in the policy loss' in entry['message']
    new_gang = start_gang(standin, 'crashy', 3, generation=1)
    assert not pods(standin, 'crashy', 0), 'the old generation is deleted'
    assert all(p['metadata']['labels'][names.LABEL_RESTART] == '1' for p in new_gang)
    wait_phase(rest, 'crashy', 'Running')
    assert standin.store.find('', 'services', NS, 'crashy') is not None, 'the next gang brings its Service back'
    restart_events = wait_for(lambda: [e for e in events(rest, 'crashy') if e['reason'] == 'GangRestart'], what='the GangRestart Event')
    assert 'NaN in the policy loss' in restart_events[0]['message']
    assert 'kuberl_operator_gang_restarts_total{namespace="default",reason="Crashed",rltj="crashy"} 1.0' in operator.metrics()



def test_a_crash_said_in_a_script_of_many_bytes_a_character_still_reaches_the_restart_event(standin, rest, operator):
    """The API server holds an Event's message to 1024 bytes (legacyValidateEvent, NoteLengthLimit: Go's len), and
    kopf cuts it to 1024 characters: a trainer's reason in Chinese, three bytes a character, is refused whole."""
    gang = running_job(standin, rest, 'wide', 2)
    reason = 'Crashed: RuntimeError: ' + '策略损失出现非数值' * 60  # 540 characters, 1,483 bytes
    terminated(standin, gang[1], 1, reason)
    start_gang(standin, 'wide', 2, generation=1)
    restart = wait_for(lambda: [e for e in events(rest, 'wide') if e['reason'] == 'GangRestart'], what='the GangRestart Event',
                       explain=lambda: operator.log()[-3000:])
    assert '策略损失出现非数值' in restart[0]['message'] and len(restart[0]['message'].encode()) <= 1024

def test_a_configuration_error_fails_at_once_and_a_spent_budget_fails_with_the_last_reason(standin, rest, operator):
    create_job(rest, 'misconfigured', workers=2)
    gang = start_gang(standin, 'misconfigured', 2)
    terminated(standin, gang[0], 1, 'ConfigError: spec.env.id: no gymnasium env named "CartPol-v1"')
    failed = wait_phase(rest, 'misconfigured', 'Failed')
    assert failed['restarts'] == 0
    failed_condition = condition(rest, 'misconfigured', 'Failed')
    assert 'spec.env.id' in failed_condition['message']
    # kubectl get rltj's REASON column
    assert wait_for(lambda: status(rest, 'misconfigured').get('display', {}).get('reason')) == failed_condition['reason']
    wait_for(lambda: not pods(standin, 'misconfigured', 0) or all(p['status']['phase'] != 'Running' for p in pods(standin, 'misconfigured', 0)))

    create_job(rest, 'fragile', workers=1, runPolicy={'backoffLimit': 1, 'restartBackoffSeconds': 0.1})
    for generation in (0, 1):
        [pod] = start_gang(standin, 'fragile', 1, generation=generation)
        wait_phase(rest, 'fragile', 'Running')
        terminated(standin, pod, 137, 'Crashed: killed')
    failed = wait_phase(rest, 'fragile', 'Failed')
    assert failed['restarts'] == 1
    assert condition(rest, 'fragile', 'Failed')['reason'] == 'BackoffLimitExceeded'


def test_eviction_restarts_without_spending_the_budget(standin, rest, operator):
    create_job(rest, 'evicted', workers=2, runPolicy={'backoffLimit': 0})
    gang = start_gang(standin, 'evicted', 2)
    wait_phase(rest, 'evicted', 'Running')
    standin.store.kubelet_delay = 2.0  # the evicted container takes its time to stop, as on a node
    standin.store.evict(NS, gang[1]['metadata']['name'])
    after = wait_for(lambda: status(rest, 'evicted').get('generation') == 1 and status(rest, 'evicted'))
    assert after['restarts'] == 0
    assert after['restartHistory'][-1]['reason'] == 'EvictionByEvictionAPI'
    start_gang(standin, 'evicted', 2, generation=1)
    assert wait_phase(rest, 'evicted', 'Running')['restarts'] == 0


def test_a_gang_that_never_starts_is_retried_with_its_reason_without_spending_the_budget(standin, rest, operator):
    standin.store.hooks.unschedulable.append(parse_label_selector(f'{names.LABEL_JOB}=stuck'))
    create_job(rest, 'stuck', workers=2, runPolicy={'backoffLimit': 0, 'startupTimeoutSeconds': 2, 'maxStartupRetries': 3})
    blocked = wait_for(lambda: condition(rest, 'stuck', 'Ready').get('reason') == 'Unschedulable' and condition(rest, 'stuck', 'Ready'))
    assert 'node(s)' in blocked['message']
    retried = wait_for(lambda: status(rest, 'stuck').get('startupRetries') == 1 and status(rest, 'stuck'), what='a startup retry')
    assert retried['restarts'] == 0
    assert retried['restartHistory'][-1]['reason'] == 'Unschedulable'

    standin.store.hooks.unschedulable.clear()
    standin.store.reschedule()
    generation = status(rest, 'stuck')['generation']
    start_gang(standin, 'stuck', 2, generation=generation)
    running = wait_phase(rest, 'stuck', 'Running')
    assert running['restarts'] == 0


def test_image_pull_backoff_is_named_in_a_condition(standin, rest, operator):
    standin.store.hooks.image_pull_failure.append(parse_label_selector(f'{names.LABEL_JOB}=pully'))
    create_job(rest, 'pully', workers=1, image='registry.example.com/missing:1')
    ready = wait_for(lambda: condition(rest, 'pully', 'Ready').get('reason') == 'ImagePullBackOff' and condition(rest, 'pully', 'Ready'))
    assert 'registry.example.com/missing:1' in ready['message']


def _hold(standin, pod: dict) -> None:
    """A finalizer keeps a deleted pod terminating, as a kubelet that never confirms would."""
    standin.store.report_pod  # noqa: B018 — the store is the kubelet's stand-in
    with standin.store.lock:
        pods_type = standin.store.type_of('', 'v1', 'pods')
        stored = standin.store._existing(pods_type, NS, pod['metadata']['name'])
        new = {**stored, 'metadata': {**stored['metadata'], 'finalizers': ['test.kuberl.dev/hold']}}
        standin.store._replace_stored(pods_type.key, stored, new)


def _release(standin, name: str) -> None:
    with standin.store.lock:
        pods_type = standin.store.type_of('', 'v1', 'pods')
        stored = standin.store._existing(pods_type, NS, name)
        new = {**stored, 'metadata': {k: v for k, v in stored['metadata'].items() if k != 'finalizers'}}
        standin.store._remove(pods_type.key, new) if new['metadata'].get('deletionTimestamp') else standin.store._replace_stored(pods_type.key, stored, new)


def test_a_409_from_an_old_terminating_pod_waits_and_never_adopts_it(standin, rest, operator):
    old_uid = create_job(rest, 'reborn', workers=1)['metadata']['uid']
    [old_pod] = start_gang(standin, 'reborn', 1)
    _hold(standin, old_pod)
    assert rest.delete(f'/apis/kuberl.dev/v1alpha1/namespaces/{NS}/rltrainingjobs/reborn').status == 200
    wait_for(lambda: rest.get(f'/apis/kuberl.dev/v1alpha1/namespaces/{NS}/rltrainingjobs/reborn').status == 404, what='the old job to go')
    wait_for(lambda: standin.store.find('', 'pods', NS, 'reborn-0')['metadata'].get('deletionTimestamp'), what='the old pod to terminate')

    new_uid = create_job(rest, 'reborn', workers=1)['metadata']['uid']
    wait_for(lambda: status(rest, 'reborn').get('generationStartTime'), what='the new job to try its pods')
    # the 409 is read as the old pod's going: said in Ready (ChildTerminating, 9bcca0a), not only in the log
    wait_for(lambda: any(c.get('reason') == 'ChildTerminating' and 'Pod reborn-0 is terminating' in c.get('message', '')
                         for c in status(rest, 'reborn').get('conditions', [])), what='the 409, said in Ready')
    held = standin.store.find('', 'pods', NS, 'reborn-0')
    assert held['metadata']['ownerReferences'][0]['uid'] == old_uid, 'the old pod is never taken for the new job'
    assert status(rest, 'reborn').get('phase') != 'Running'

    _release(standin, 'reborn-0')
    new_pod = wait_for(lambda: (p := standin.store.find('', 'pods', NS, 'reborn-0')) and p['metadata']['ownerReferences'][0]['uid'] == new_uid and p,
                       what='the new pod')
    assert new_pod['metadata']['labels'][names.LABEL_RESTART] == '0'


def test_pods_stuck_terminating_on_a_lost_node_are_force_deleted_and_recorded(standin, rest, operator):
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'local-node'},
            'status': {'conditions': [{'type': 'Ready', 'status': 'Unknown', 'reason': 'NodeStatusUnknown', 'lastTransitionTime': timestamp()}]}}
    assert rest.post('/api/v1/nodes', node).status == 201
    gang = running_job(standin, rest, 'stranded', 2)
    assert rest.delete(f'/api/v1/namespaces/{NS}/pods/{gang[1]["metadata"]["name"]}').status == 200
    wait_for(lambda: status(rest, 'stranded').get('generation') == 1 and all(p['metadata'].get('deletionTimestamp') for p in pods(standin, 'stranded', 0)),
             what='the old gang to be deleted and stuck')
    assert status(rest, 'stranded')['restarts'] == 0

    long_ago = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)).strftime('%Y-%m-%dT%H:%M:%SZ')
    with standin.store.lock:  # the node has been gone for minutes
        pods_type = standin.store.type_of('', 'v1', 'pods')
        for pod in pods(standin, 'stranded', 0):
            stored = standin.store._existing(pods_type, NS, pod['metadata']['name'])
            standin.store._replace_stored(pods_type.key, stored, {**stored, 'metadata': {**stored['metadata'], 'deletionTimestamp': long_ago}})

    wait_for(lambda: not pods(standin, 'stranded', 0), what='the force deletion')
    records = wait_for(lambda: status(rest, 'stranded').get('forceDeleted'))
    assert {r['pod'] for r in records} == {'stranded-0', 'stranded-1'}
    # the Event is posted after the status write that records the force deletion: waited for, not read with it
    wait_for(lambda: any(e['reason'] == 'ForceDeleted' for e in events(rest, 'stranded')), what='the ForceDeleted Event')
    wait_for(lambda: len(pods(standin, 'stranded', 1)) == 2, what='generation 1')


def test_a_gang_restarted_after_an_operator_upgrade_runs_the_trainer_defaults_its_job_started_with(standin, rest, tmp_path):
    """`helm upgrade` changing trainer.image, trainer.resourcesPerProcess, trainer.image.pullPolicy or
    trainer.imagePullSecrets restarts the operator with new defaults; a running job's next gang still gets the image,
    requests and pull settings its first one had (status.trainerDefaults), and only a job created after the upgrade
    takes the new ones; a job whose record an older operator wrote without pull settings takes the new operator's."""
    def operator(release: str, image: str, cpu: str, pull_policy: str, pull_secrets: str) -> Operator:
        (tmp_path / release).mkdir()
        pod_defaults = {'labels': {'platform-release': release.replace('.', '-')}, 'env': [{'name': 'NCCL_IB_HCA', 'value': f'mlx-{release}'}]}
        return Operator(standin, tmp_path / release, '--trainer-image', image,
                        env={'KUBERL_TRAINER_CPU_PER_PROCESS': cpu, 'KUBERL_TRAINER_MEMORY_PER_PROCESS': '2Gi',
                             'KUBERL_TRAINER_POD_DEFAULTS': json.dumps(pod_defaults),
                             'KUBERL_TRAINER_IMAGE_PULL_POLICY': pull_policy, 'KUBERL_TRAINER_IMAGE_PULL_SECRETS': pull_secrets}).start()

    def images_and_cpu(gang: list[dict]) -> set[tuple[str, str]]:
        trainer = [next(c for c in p['spec']['containers'] if c['name'] == names.TRAINER_CONTAINER) for p in gang]
        # the platform's pod defaults (trainer.podDefaults) are kept per job as the image is
        assert {p['metadata']['labels']['platform-release'] for p in gang} == {
            next(e['value'] for e in c['env'] if e['name'] == 'NCCL_IB_HCA').removeprefix('mlx-').replace('.', '-') for c in trainer}
        return {(c['image'], c['resources']['requests']['cpu'], gang[0]['metadata']['labels']['platform-release']) for c in trainer}

    def pulls(gang: list[dict]) -> set[tuple]:
        return {(next(c for c in p['spec']['containers'] if c['name'] == names.TRAINER_CONTAINER).get('imagePullPolicy'),
                 tuple(s['name'] for s in p['spec'].get('imagePullSecrets', []))) for p in gang}

    old = operator('0.1.0', 'registry.test/kuberl/trainer:0.1.0', '1', 'Always', 'regcred')
    try:
        gang = running_job(standin, rest, 'long-run', 2)
        assert images_and_cpu(gang) == {('registry.test/kuberl/trainer:0.1.0', '1', '0-1-0')}
        assert pulls(gang) == {('Always', ('regcred',))}
        older = running_job(standin, rest, 'older-record', 1)
    finally:
        old.stop()
    # as an operator from before the pull settings were recorded left it (a merge patch's null removes a key)
    patched = rest.patch(f'{JOBS}/older-record/status', {'status': {'trainerDefaults': {'imagePullPolicy': None, 'imagePullSecrets': None}}})
    assert patched.status == 200 and 'imagePullSecrets' not in status(rest, 'older-record')['trainerDefaults'], patched.body
    new = operator('0.2.0', 'registry.test/kuberl/trainer:0.2.0', '2', 'IfNotPresent', 'mirror, regcred-2')
    try:
        terminated(standin, gang[1], 1, 'Crashed: RuntimeError: NaN in the policy loss')
        restarted = start_gang(standin, 'long-run', 2, generation=1)
        assert images_and_cpu(restarted) == {('registry.test/kuberl/trainer:0.1.0', '1', '0-1-0')}
        assert pulls(restarted) == {('Always', ('regcred',))}
        assert status(rest, 'long-run')['trainerDefaults'] == {
            'image': 'registry.test/kuberl/trainer:0.1.0', 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi',
            'pod': {'labels': {'platform-release': '0-1-0'}, 'env': [{'name': 'NCCL_IB_HCA', 'value': 'mlx-0.1.0'}]},
            'imagePullPolicy': 'Always', 'imagePullSecrets': ['regcred']}
        terminated(standin, older[0], 1, 'Crashed: RuntimeError: NaN in the policy loss')
        older_restarted = start_gang(standin, 'older-record', 1, generation=1)
        assert images_and_cpu(older_restarted) == {('registry.test/kuberl/trainer:0.1.0', '1', '0-1-0')}
        assert pulls(older_restarted) == {('IfNotPresent', ('mirror', 'regcred-2'))}, 'no record: the operator\'s own'
        kept = status(rest, 'older-record')['trainerDefaults']
        assert (kept['imagePullPolicy'], kept['imagePullSecrets']) == ('IfNotPresent', ['mirror', 'regcred-2'])
        create_job(rest, 'after-upgrade', workers=1)
        after = start_gang(standin, 'after-upgrade', 1)
        assert images_and_cpu(after) == {('registry.test/kuberl/trainer:0.2.0', '2', '0-2-0')}
        assert pulls(after) == {('IfNotPresent', ('mirror', 'regcred-2'))}
    finally:
        new.stop()


def test_a_full_checkpoint_volume_restarts_the_gang_under_its_own_reason(standin, rest, operator):
    """A platform team tells a volume to expand from a crash: the restart history, the Event and the metric say so."""
    gang = running_job(standin, rest, 'full', 2)
    terminated(standin, gang[0], 1, 'CheckpointVolumeFull: [Errno 28] the checkpoint volume (claim full-checkpoints of'
                                    ' spec.checkpoint.size 1Gi at /checkpoints) is full: one checkpoint needs 1200 bytes')
    restarted = wait_for(lambda: status(rest, 'full').get('restarts') == 1 and status(rest, 'full'), what='one counted restart')
    assert (restarted['restartHistory'][-1]['reason'], restarted['restartHistory'][-1]['counted']) == ('CheckpointVolumeFull', True)
    assert 'reason="CheckpointVolumeFull",rltj="full"} 1.0' in operator.metrics()


def test_a_peer_s_echo_reported_before_its_cause_does_not_spend_the_budget_for_it(standin, rest, operator):
    """Rank 1's PeerLost reached the API server before rank 0's own reason (two kubelets, each reporting when it
    notices): the operator restarted at once, counted, blaming PeerLost, and with backoffLimit 0 failed the job
    for a storage outage the design does not count; rank 0's reason was never recorded. It waits for the cause."""
    create_job(rest, 'echo', workers=2, runPolicy={'backoffLimit': 0, 'restartBackoffSeconds': 0.1})
    gang = start_gang(standin, 'echo', 2)
    wait_phase(rest, 'echo', 'Running')
    terminated(standin, gang[1], 1, 'PeerLost: rank 0 left the collective')
    waiting = wait_for(lambda: condition(rest, 'echo', 'Ready').get('reason') == 'PeerLost' and condition(rest, 'echo', 'Ready'),
                       what='the echo to be said while the cause is awaited')
    assert 'waiting until' in waiting['message'] and status(rest, 'echo').get('generation', 0) == 0, waiting
    terminated(standin, gang[0], 1, 'CheckpointVolumeUnavailable: saving /checkpoints/echo-uid/ckpt-0000000040.pt failed '
                                    'with EIO (Input/output error): the volume failed under the job; last good checkpoint: '
                                    'ckpt-0000000020.pt (same directory). Restarted, not counted toward backoffLimit')
    restarted = wait_for(lambda: status(rest, 'echo').get('generation') == 1 and status(rest, 'echo'), what='a restart')
    entry = restarted['restartHistory'][-1]
    assert (restarted['phase'], restarted['restarts'], entry['reason'], entry['counted']) == (
        'Restarting', 0, 'CheckpointVolumeUnavailable', False), restarted


def test_a_checkpoint_volume_that_fails_under_the_job_restarts_it_without_spending_the_budget(standin, rest, operator):
    """With backoffLimit 0 an I/O error at a save failed the job (a counted Crashed). Now the gang restarts uncounted,
    and the Event, the restart history and the Ready condition say which file failed, how, and what it resumes from."""
    create_job(rest, 'outage', workers=2, runPolicy={'backoffLimit': 0, 'restartBackoffSeconds': 0.1})
    gang = start_gang(standin, 'outage', 2)
    wait_phase(rest, 'outage', 'Running')
    terminated(standin, gang[0], 1, 'CheckpointVolumeUnavailable: saving /checkpoints/outage-uid/ckpt-0000000040.pt failed '
                                    'with EIO (Input/output error): the volume failed under the job; last good checkpoint: '
                                    'ckpt-0000000020.pt (same directory). Restarted, not counted toward backoffLimit')
    terminated(standin, gang[1], 1, 'PeerLost: rank 0 left the collective')
    restarted = wait_for(lambda: status(rest, 'outage').get('generation') == 1 and status(rest, 'outage'), what='a restart')
    entry = restarted['restartHistory'][-1]
    assert (restarted['restarts'], entry['reason'], entry['counted']) == (0, 'CheckpointVolumeUnavailable', False), entry
    assert 'ckpt-0000000040.pt failed with EIO' in entry['message'] and 'ckpt-0000000020.pt' in entry['message'], entry
    # the Event is posted after the status write that records the restart: waited for, not read with it
    said = wait_for(lambda: [e['message'] for e in events(rest, 'outage') if e['reason'] == 'GangRestart'], what='the GangRestart Event')
    assert len(said) == 1 and '(not counted): CheckpointVolumeUnavailable: worker 0' in said[0], said
    assert 'failed with EIO' in said[0] and 'last good checkpoint: ckpt-0000000020.pt' in said[0], said
    start_gang(standin, 'outage', 2, generation=1)
    assert wait_phase(rest, 'outage', 'Running')['restarts'] == 0
