"""Run policies and spec edits through the real operator: suspend, deadline, TTL, stall, progress, immutability."""
from tests.operator.operatorkit import (
    JOBS,
    NS,
    FakeMetrics,
    condition,
    create_job,
    events,
    job,
    pods,
    running,
    running_job,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_phase,
)


def _uids(standin, name: str) -> set[str]:
    return {p['metadata']['uid'] for p in pods(standin, name)}


def test_suspend_deletes_the_pods_keeps_the_service_and_resume_starts_a_new_generation(standin, rest, operator):
    running_job(standin, rest, 'napper', 2)

    assert rest.patch(f'{JOBS}/napper', {'spec': {'runPolicy': {'suspend': True}}}).status == 200
    suspended = wait_phase(rest, 'napper', 'Suspended')
    wait_for(lambda: not pods(standin, 'napper'), what='the pods to go')
    assert standin.store.find('', 'services', NS, 'napper') is not None
    assert condition(rest, 'napper', 'Suspended')['status'] == 'True'
    assert suspended['restarts'] == 0

    assert rest.patch(f'{JOBS}/napper', {'spec': {'runPolicy': {'suspend': False}}}).status == 200
    start_gang(standin, 'napper', 2, generation=suspended['generation'])
    resumed = wait_phase(rest, 'napper', 'Running')
    assert resumed['restarts'] == 0
    assert resumed['observedGeneration'] == 3
    # conflicts the operator resolved on the way (a stale write, a name still taken) are not API errors
    page = operator.metrics()
    assert not [line for line in page.splitlines() if line.startswith('kuberl_operator_api_errors_total{') and 'code="409"' in line], page


def test_allowed_edits_do_not_restart_a_healthy_gang_and_immutable_ones_are_refused(standin, rest, operator):
    running_job(standin, rest, 'steady', 2)
    before = _uids(standin, 'steady')

    edit = {'spec': {'runPolicy': {'activeDeadlineSeconds': 3600, 'ttlSecondsAfterFinished': 600}}}
    assert rest.patch(f'{JOBS}/steady', edit).status == 200
    wait_for(lambda: status(rest, 'steady').get('observedGeneration') == 2, what='the edit to be observed')
    refused = rest.patch(f'{JOBS}/steady', {'spec': {'workers': 3}})
    assert refused.status == 422 and 'spec.workers' in refused.message
    assert _uids(standin, 'steady') == before
    assert status(rest, 'steady')['generation'] == 0
    assert status(rest, 'steady')['phase'] == 'Running'


def test_active_deadline_fails_the_job_and_deletes_its_pods(standin, rest, operator):
    create_job(rest, 'hasty', workers=2, runPolicy={'activeDeadlineSeconds': 2})
    start_gang(standin, 'hasty', 2)
    wait_phase(rest, 'hasty', 'Failed')
    assert condition(rest, 'hasty', 'Failed')['reason'] == 'DeadlineExceeded'
    wait_for(lambda: not pods(standin, 'hasty'), what='the pods to be deleted')


def test_ttl_deletes_a_finished_job_and_its_owned_pvc_but_a_retained_pvc_stays(standin, rest, operator):
    for name, retain in (('brief', False), ('keeper', True)):
        create_job(rest, name, workers=1, checkpoint={'retain': retain}, runPolicy={'ttlSecondsAfterFinished': 1})
    for name in ('brief', 'keeper'):
        [pod] = start_gang(standin, name, 1)
        terminated(standin, pod, 0, 'Succeeded: done')
    for name in ('brief', 'keeper'):
        wait_for(lambda name=name: job(rest, name) is None, what=f'{name} to be deleted by its TTL')
    wait_for(lambda: standin.store.find('', 'persistentvolumeclaims', NS, 'brief-checkpoints') is None, what='the owned PVC to be collected')
    wait_for(lambda: standin.store.find('', 'configmaps', NS, 'keeper-config') is None, what='the children to be collected')
    assert standin.store.find('', 'persistentvolumeclaims', NS, 'keeper-checkpoints') is not None


def test_progress_comes_from_rank_0_and_a_stalled_counter_restarts_the_gang(standin, rest, operator):
    with FakeMetrics('stuckling') as metrics:
        create_job(rest, 'stuckling', workers=2, metrics={'port': metrics.port},
                   runPolicy={'stallTimeoutSeconds': 3, 'backoffLimit': 2})
        start_gang(standin, 'stuckling', 2, ip='127.0.0.1')
        wait_phase(rest, 'stuckling', 'Running')
        for steps in (100, 200, 300):
            metrics.timesteps = steps
            wait_for(lambda steps=steps: (status(rest, 'stuckling').get('progress') or {}).get('timesteps') == steps,
                     what=f'progress {steps} in status')
        progress = status(rest, 'stuckling')['progress']
        assert (progress['episodeReturnMean'], progress['stepsPerSecond']) == (21.5, 640.0)
        metrics.last_checkpoint = 1.7e9
        checkpoint = wait_for(lambda: status(rest, 'stuckling').get('latestCheckpoint'), what='the latest checkpoint in status')
        assert checkpoint['timesteps'] == 300 and '/checkpoints/stuckling-' in checkpoint['path']

        stalled = wait_for(lambda: status(rest, 'stuckling').get('restarts') == 1 and status(rest, 'stuckling'),
                           what='a stall restart')
        assert stalled['restartHistory'][-1]['reason'] == 'Stalled'
        assert 'at 300 timesteps' in stalled['restartHistory'][-1]['message']


def test_rank_0_reporting_success_ends_the_job(standin, rest, operator):
    with FakeMetrics('winner') as metrics:
        create_job(rest, 'winner', workers=2, metrics={'port': metrics.port})
        gang = start_gang(standin, 'winner', 2, ip='127.0.0.1')
        metrics.timesteps, metrics.success, metrics.eval_return = 5000, 1, 480.0
        wait_for(lambda: (status(rest, 'winner').get('progress') or {}).get('evalReturn') == 480.0, what='the eval return')
        terminated(standin, gang[0], 0, 'Succeeded: eval return 480.0 >= 475 at timesteps 5000')
        running(standin, gang[1])
        done = wait_phase(rest, 'winner', 'Succeeded')
        assert condition(rest, 'winner', 'Succeeded')['reason'] == 'RankZeroSucceeded'
        assert done['finalModel'].endswith('/final-model.pt')
        wait_for(lambda: all(p['metadata'].get('deletionTimestamp') or p['status']['phase'] != 'Running' for p in pods(standin, 'winner'))
                 or not pods(standin, 'winner'), what='the remaining rank to be deleted')


def test_checkpoints_slower_to_write_than_the_grace_period_are_warned_of_once_per_generation_before_any_stop(standin, rest, operator):
    """Rank 0 warned in its own log only; a stop's checkpoint killed mid-write was the first the user heard of it.
    Now its save time (kuberl_trainer_checkpoint_save_seconds) against the pod's grace period is a Warning Event."""
    with FakeMetrics('slowsave') as metrics:
        create_job(rest, 'slowsave', workers=2, metrics={'port': metrics.port}, runPolicy={'terminationGracePeriodSeconds': 30})
        start_gang(standin, 'slowsave', 2, ip='127.0.0.1')
        metrics.timesteps, metrics.checkpoint_save_seconds = 100, 12.0
        wait_for(lambda: (status(rest, 'slowsave').get('progress') or {}).get('timesteps') == 100, what='progress in status')
        assert not [e for e in events(rest, 'slowsave') if e['reason'] == 'CheckpointOutlastsGrace'], 'a save that fits'
        metrics.timesteps, metrics.checkpoint_save_seconds = 200, 41.5
        said = wait_for(lambda: [e for e in events(rest, 'slowsave') if e['reason'] == 'CheckpointOutlastsGrace'],
                        what='a CheckpointOutlastsGrace event')
        assert said[0]['type'] == 'Warning' and said[0]['message'].startswith(
            "generation 0: rank 0's last checkpoint took 41.5s to write, longer than spec.runPolicy.terminationGracePeriodSeconds"
            " (30s)"), said
        for steps in (300, 400):  # more scrapes and status writes of the same generation
            metrics.timesteps = steps
            wait_for(lambda steps=steps: (status(rest, 'slowsave').get('progress') or {}).get('timesteps') == steps)
        assert len([e for e in events(rest, 'slowsave') if e['reason'] == 'CheckpointOutlastsGrace']) == 1


def test_a_rank_0_that_skipped_newer_checkpoints_is_said_in_one_warning_event_per_generation(standin, rest, operator):
    """Progress going back after a restart is otherwise unexplained outside rank 0's log (and that log goes
    with the pod at the next gang restart)."""
    with FakeMetrics('fellback') as metrics:
        create_job(rest, 'fellback', workers=2, metrics={'port': metrics.port})
        start_gang(standin, 'fellback', 2, ip='127.0.0.1')
        metrics.timesteps = 100
        wait_for(lambda: (status(rest, 'fellback').get('progress') or {}).get('timesteps') == 100, what='progress in status')
        assert not [e for e in events(rest, 'fellback') if e['reason'] == 'CheckpointsSkipped']
        metrics.checkpoints_skipped, metrics.timesteps = 2, 200
        said = wait_for(lambda: [e for e in events(rest, 'fellback') if e['reason'] == 'CheckpointsSkipped'],
                        what='a CheckpointsSkipped event')
        assert said[0]['type'] == 'Warning'
        assert said[0]['message'].startswith('generation 0: rank 0 could not use the 2 newest checkpoint(s)'), said
        for steps in (300, 400):  # more scrapes and status writes of the same generation
            metrics.timesteps = steps
            wait_for(lambda steps=steps: (status(rest, 'fellback').get('progress') or {}).get('timesteps') == steps)
        assert len([e for e in events(rest, 'fellback') if e['reason'] == 'CheckpointsSkipped']) == 1


def test_a_rank_0_that_started_from_zero_behind_the_recorded_checkpoint_is_said_in_a_warning_event(standin, rest, operator):
    """The job's checkpoint claim deleted by hand comes back empty with the next gang, as every child
    does, and the job trained again from zero: only rank 0's log (gone at the next restart) knew."""
    with FakeMetrics('wiped') as metrics:
        create_job(rest, 'wiped', workers=1, metrics={'port': metrics.port}, runPolicy={'restartBackoffSeconds': 0.1})
        [pod] = start_gang(standin, 'wiped', 1, ip='127.0.0.1')
        metrics.timesteps, metrics.last_checkpoint, metrics.resumed_timesteps = 5000, 1.7e9, 0
        wait_for(lambda: (status(rest, 'wiped').get('latestCheckpoint') or {}).get('timesteps') == 5000, what='a checkpoint on record')
        assert not [e for e in events(rest, 'wiped') if e['reason'] == 'CheckpointsMissing'], 'a first start from zero is no loss'

        metrics.timesteps, metrics.last_checkpoint, metrics.resumed_timesteps = 0, 0.0, None  # the next rank 0, still starting
        terminated(standin, pod, 1, 'Crashed: OSError: [Errno 5] Input/output error')
        start_gang(standin, 'wiped', 1, generation=1, ip='127.0.0.1')
        metrics.timesteps, metrics.resumed_timesteps = 512, 0
        said = wait_for(lambda: [e for e in events(rest, 'wiped') if e['reason'] == 'CheckpointsMissing'],
                        what='a CheckpointsMissing event')
        assert said[0]['type'] == 'Warning'
        assert said[0]['message'].startswith('generation 1: rank 0 found no checkpoint in /checkpoints/wiped-'), said
        assert '(timesteps 5000)' in said[0]['message'], said
        for steps in (1024, 2048):  # more scrapes of the same generation, still behind the record
            metrics.timesteps = steps
            wait_for(lambda steps=steps: (status(rest, 'wiped').get('progress') or {}).get('timesteps') == steps)
        assert len([e for e in events(rest, 'wiped') if e['reason'] == 'CheckpointsMissing']) == 1
