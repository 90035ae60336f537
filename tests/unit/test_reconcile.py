"""The operator shell's pure helpers, and the status it writes staying bounded."""
import json

import pytest
from kuberl import lifecycle, names, reconcile
from kuberl.spec import Problem, parse_spec

METRICS = """# TYPE kuberl_trainer_env_steps_total counter
kuberl_trainer_env_steps_total{rltj="job",rank="0"} 4096.0
kuberl_trainer_env_steps_total{rltj="job",rank="1"} 9.0
# TYPE kuberl_trainer_steps_per_second gauge
kuberl_trainer_steps_per_second{rltj="job",rank="0"} 812.5
# TYPE kuberl_trainer_episode_return gauge
kuberl_trainer_episode_return{rltj="job",rank="0"} 120.0
# TYPE kuberl_trainer_eval_return gauge
kuberl_trainer_eval_return{rltj="job",rank="0"} 480.0
# TYPE kuberl_trainer_success gauge
kuberl_trainer_success{rltj="job",rank="0"} 1.0
# TYPE kuberl_trainer_last_checkpoint_timestamp_seconds gauge
kuberl_trainer_last_checkpoint_timestamp_seconds{rltj="job",rank="0"} 1.7e9
"""


def test_rank_0_metrics_are_read_by_name_and_rank():
    reading = reconcile.parse_rank0_metrics(METRICS, 'job')
    assert reading == reconcile.Rank0Reading(4096, 812.5, 120.0, 480.0, True, 1.7e9)
    assert reconcile.parse_rank0_metrics(METRICS, 'other') is None
    assert reconcile.parse_rank0_metrics('# nothing here\n', 'job') is None


def test_an_unreadable_endpoint_keeps_the_stall_clock_running():
    first = reconcile.progress_of(None, 0, reconcile.Rank0Reading(10), now=100.0)
    assert reconcile.progress_of(first, 0, None, now=200.0) is first
    assert reconcile.progress_of(first, 1, None, now=200.0) is None
    assert reconcile.progress_of(first, 0, reconcile.Rank0Reading(10), now=300.0).changed_at == 100.0
    assert reconcile.progress_of(first, 0, reconcile.Rank0Reading(11), now=300.0).changed_at == 300.0


@pytest.mark.parametrize('old, new, patch', [
    ({'a': 1}, {'a': 1, 'b': None}, None),
    ({'a': 1}, {'a': 2}, {'a': 2}),
    ({'a': 1, 'b': 2}, {'a': 1}, {'b': None}),
    ({'p': {'x': 1, 'y': 2}}, {'p': {'x': 1}}, {'p': {'y': None}}),
    ({'l': [1, 2]}, {'l': [1]}, {'l': [1]}),
    ({}, {'c': [{'t': 'Ready', 'm': None}]}, {'c': [{'t': 'Ready'}]}),
])
def test_merge_patch_is_minimal_and_none_when_nothing_changed(old, new, patch):
    assert reconcile.merge_patch(old, new) == patch


def test_a_pod_under_our_name_is_ours_only_when_current_and_not_terminating():
    pod = {'metadata': {'ownerReferences': [{'uid': 'u1'}], 'labels': {names.LABEL_RESTART: '2'}}}
    assert reconcile.is_current_pod(pod, 'u1', 2)
    assert not reconcile.is_current_pod(pod, 'u2', 2)
    assert not reconcile.is_current_pod(pod, 'u1', 3)
    assert not reconcile.is_current_pod({**pod, 'metadata': {**pod['metadata'], 'deletionTimestamp': '2026-01-01T00:00:00Z'}}, 'u1', 2)


def test_an_invalid_spec_fails_once_with_every_field_named():
    message = reconcile.problems_message([Problem('spec.labels.a b', 'expected a label key'), Problem('spec.seed', 'expected an integer')])
    failed = reconcile.failed_status({}, reconcile.REASON_INVALID_SPEC, message, 3, now=1000.0)
    assert failed['phase'] == 'Failed' and failed['observedGeneration'] == 3
    [cond] = [c for c in failed['conditions'] if c['type'] == 'Failed']
    assert 'spec.labels.a b' in cond['message'] and 'spec.seed' in cond['message']
    again = reconcile.failed_status(failed, reconcile.REASON_INVALID_SPEC, message, 3, now=2000.0)
    assert reconcile.merge_patch(failed, again) is None, 'a second reconcile writes nothing'


def test_ttl_counts_from_completion():
    assert reconcile.ttl_due({'phase': 'Succeeded', 'completionTime': lifecycle.rfc3339(100.0)}, 30) == 130.0
    assert reconcile.ttl_due({'phase': 'Running'}, 30) is None
    assert reconcile.ttl_due({'phase': 'Failed', 'completionTime': lifecycle.rfc3339(100.0)}, None) is None


def test_status_stays_bounded_for_64_workers_of_4_processes_over_200_restarts():
    spec = parse_spec({'algorithm': 'ppo', 'env': {'id': 'CartPole-v1'}, 'totalTimesteps': 10**9, 'workers': 64,
                       'procsPerWorker': 4, 'runPolicy': {'backoffLimit': 1000, 'restartBackoffSeconds': 0}})
    status, now, sizes = {}, 1_000_000.0, []
    for cycle in range(200):
        generation = status.get('generation', 0)
        decision = lifecycle.decide(spec, status, [], None, now)
        assert decision.of(lifecycle.CreatePods), decision
        status = decision.status
        gang = [lifecycle.ObservedPod(f'job-{r}', r, generation, phase='Running', ready=True) for r in range(64)]
        status = lifecycle.decide(spec, status, gang, None, now + 1).status
        crashed = [*gang[:-1], lifecycle.ObservedPod('job-63', 63, generation, phase='Failed', exit_code=1,
                                                     reason='Crashed', message='Crashed: ' + 'x' * 5000)]
        reading = reconcile.Rank0Reading(cycle * 1000, 100.0, 1.0, 2.0, False, now)
        decided = lifecycle.decide(spec, status, crashed, None, now + 2).status
        status = reconcile.job_status(decided, observed_generation=1, reading=reading, checkpoint_dir='/c', final_model='/c/m')
        sizes.append(len(json.dumps(status)))
        now += 10
    assert status['restarts'] == 200
    assert len(status['restartHistory']) <= lifecycle.HISTORY_LIMIT
    assert max(sizes) < 16 * 1024, max(sizes)
    assert sizes[-1] <= sizes[50] + 64, 'no growth once the history is full (beyond longer numbers)'


def test_operator_pull_defaults_apply_only_where_the_job_sets_none():
    pod = {'spec': {'containers': [{'name': names.TRAINER_CONTAINER}, {'name': 'sidecar'}]}}
    out = reconcile.with_operator_defaults(pod, 'Always', ('regcred',))
    assert out['spec']['imagePullSecrets'] == [{'name': 'regcred'}]
    assert out['spec']['containers'][0]['imagePullPolicy'] == 'Always' and 'imagePullPolicy' not in out['spec']['containers'][1]
    own = {'spec': {'imagePullSecrets': [{'name': 'mine'}], 'containers': [{'name': names.TRAINER_CONTAINER, 'imagePullPolicy': 'Never'}]}}
    assert reconcile.with_operator_defaults(own, 'Always', ('regcred',)) == own
    assert 'imagePullPolicy' not in pod['spec']['containers'][0], 'the input is not mutated'
