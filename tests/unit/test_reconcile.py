"""The operator shell's pure helpers, and the status it writes staying bounded."""
import json

import pytest
from kuberl.core import jobstatus, lifecycle, names, render
from kuberl.core.rank0metrics import Rank0Reading
from kuberl.core.validation import Problem

from tests.support.cputime import cpu_seconds
from tests.support.jobs import make_job


def document(**spec) -> dict:
    return make_job().with_spec(**spec).obj()

@pytest.mark.parametrize('old, new, patch', [
    ({'a': 1}, {'a': 1, 'b': None}, None),
    ({'a': 1}, {'a': 2}, {'a': 2}),
    ({'a': 1, 'b': 2}, {'a': 1}, {'b': None}),
    ({'p': {'x': 1, 'y': 2}}, {'p': {'x': 1}}, {'p': {'y': None}}),
    ({'l': [1, 2]}, {'l': [1]}, {'l': [1]}),
    ({}, {'c': [{'t': 'Ready', 'm': None}]}, {'c': [{'t': 'Ready'}]}),
])
def test_merge_patch_is_minimal_and_none_when_nothing_changed(old, new, patch):
    assert render.merge_patch(old, new) == patch


def test_a_pod_under_our_name_is_ours_only_when_current_and_not_terminating():
    pod = {'metadata': {'ownerReferences': [{'uid': 'u1'}], 'labels': {names.LABEL_RESTART: '2'}}}
    assert jobstatus.is_current_pod(pod, 'u1', 2)
    assert not jobstatus.is_current_pod(pod, 'u2', 2)
    assert not jobstatus.is_current_pod(pod, 'u1', 3)
    assert not jobstatus.is_current_pod({**pod, 'metadata': {**pod['metadata'], 'deletionTimestamp': '2026-01-01T00:00:00Z'}}, 'u1', 2)


def test_a_spec_only_the_operator_can_judge_is_refused_with_every_field_named():
    job = document(labels={'a b': 'x'}, seed='one')
    spec, refusal = jobstatus.judge(job)
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC and not refusal.retryable
    assert refusal.message.count('; ') == 1 and 'spec.labels.a b' in refusal.message and 'spec.seed' in refusal.message
    message = jobstatus.problems_message([Problem('spec.labels.a b', 'expected a label key'), Problem('spec.seed', 'expected an integer')])
    assert message == 'spec.labels.a b: expected a label key; spec.seed: expected an integer'


def test_a_spec_with_400000_problems_is_refused_in_a_message_the_status_can_hold():
    """A tenant's template with 400,000 tolerations of the wrong type: each
    field's wrong items are cut to podschema.MAX_ITEM_PROBLEMS and a count,
    and the refusal's message to MAX_MESSAGE_PROBLEMS and a count (it was
    400,000 problems, 27 MB of message, 2.5 s of the operator's CPU)."""
    job = document(template={"spec": {"tolerations": ["x"] * 400_000, "containers": [{"name": "trainer"}]}})
    spec, refusal = jobstatus.judge(job)
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC
    assert refusal.message.count("spec.template.spec.tolerations[") == 3
    assert "spec.template.spec.tolerations: 399997 more items of the wrong type" in refusal.message
    many = [Problem(f"spec.labels.k{i}", "x" * 5000) for i in range(100)]
    message = jobstatus.problems_message(many)
    assert len(message) < jobstatus.MAX_MESSAGE_CHARACTERS + 100 and message.endswith("; and 80 more problem(s)")


def test_pods_over_the_security_level_are_a_refusal_naming_each_field():
    job = document()
    spec, refusal = jobstatus.judge(job, lambda spec: ['spec.hostNetwork: Host Namespaces', 'spec.volumes[root].hostPath: HostPath'])
    assert spec is not None and refusal == lifecycle.Refusal(
        lifecycle.REASON_POD_SECURITY, 'spec.hostNetwork: Host Namespaces; spec.volumes[root].hostPath: HostPath')
    assert jobstatus.judge(job, lambda spec: []) == (spec, None)


def test_pods_the_checks_cannot_handle_fail_the_job_naming_the_template_not_a_retry_loop():
    """An exception while rendering or checking the pods (a value of a type no check expected) used
    to escape the reconcile, and kopf retried it every few seconds with no status and no event."""
    def broken(spec):
        raise TypeError("unhashable type: 'list'")

    spec, refusal = jobstatus.judge(document(), broken)
    assert spec is not None and refusal.reason == lifecycle.REASON_INVALID_SPEC and not refusal.retryable
    assert refusal.message.startswith('spec.template: ') and "TypeError: unhashable type: 'list'" in refusal.message


def test_a_spec_the_validation_cannot_handle_fails_the_job_naming_the_spec_not_a_retry_loop(monkeypatch):
    """An exception out of the spec's validation itself (int() of a torchrun count of 5000 digits raised ValueError)
    escaped the reconcile: kopf retried the job every 5 s, a traceback each time, with no status and no event."""
    def broken(job, **_):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(jobstatus, "validate_job", broken)
    spec, refusal = jobstatus.judge(document())
    assert spec is None and refusal.reason == lifecycle.REASON_INVALID_SPEC and not refusal.retryable
    assert refusal.message.startswith('spec: ') and 'ValueError: Exceeds the limit' in refusal.message


@pytest.mark.parametrize(("cpu_seconds", "pause"), [(0.001, 0.009), (0.33, 2.97), (0.0, 0.0), (-1.0, 0.0),
                                                  (100.0, jobstatus.MAX_JUDGE_PAUSE_SECONDS)])
def test_a_newer_spec_waits_nine_times_its_last_judgement_and_never_more_than_the_cap(cpu_seconds, pause):
    # a small spec is judged at once; a 0.33 s one (330 KB of env vars) at most every 3.3 s, a tenth of the time
    assert jobstatus.judge_pause(cpu_seconds) == pytest.approx(pause)


def test_status_stays_bounded_for_64_workers_of_4_processes_over_200_restarts():
    spec = make_job().workers(64).with_spec(totalTimesteps=10**9, procsPerWorker=4).run_policy(backoffLimit=1000, restartBackoffSeconds=0).spec()
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
        reading = Rank0Reading(cycle * 1000, 100.0, 1.0, 2.0, False, now)
        decided = lifecycle.decide(spec, status, crashed, None, now + 2).status
        status = jobstatus.job_status(decided, observed_generation=1, reading=reading,
                                     paths={'checkpointDir': '/c', 'finalModel': '/c/m'})
        sizes.append(len(json.dumps(status)))
        now += 10
    assert status['restarts'] == 200
    assert len(status['restartHistory']) <= lifecycle.HISTORY_LIMIT
    assert max(sizes) < 16 * 1024, max(sizes)
    assert sizes[-1] <= sizes[50] + 64, 'no growth once the history is full (beyond longer numbers)'


def test_operator_pull_defaults_apply_only_where_the_job_sets_none():
    pod = {'spec': {'containers': [{'name': names.TRAINER_CONTAINER}, {'name': 'sidecar'}]}}
    out = jobstatus.with_operator_defaults(pod, 'Always', ('regcred',))
    assert out['spec']['imagePullSecrets'] == [{'name': 'regcred'}]
    assert out['spec']['containers'][0]['imagePullPolicy'] == 'Always' and 'imagePullPolicy' not in out['spec']['containers'][1]
    own = {'spec': {'imagePullSecrets': [{'name': 'mine'}], 'containers': [{'name': names.TRAINER_CONTAINER, 'imagePullPolicy': 'Never'}]}}
    assert jobstatus.with_operator_defaults(own, 'Always', ('regcred',)) == own
    assert 'imagePullPolicy' not in pod['spec']['containers'][0], 'the input is not mutated'


# How a real API server refuses a create (sources in reconcile.child_refusal and tests.support.admission).
QUOTA = 'pods "job-1" is forbidden: exceeded quota: compute-resources, requested: pods=1, used: pods=4, limited: pods=4'
RBAC = 'pods is forbidden: User "system:serviceaccount:kuberl-system:kuberl" cannot create resource "pods" in API group "" in the namespace "team-a"'


@pytest.mark.parametrize('code, message, reason, retryable', [
    (403, QUOTA, lifecycle.REASON_QUOTA, True),
    (403, 'pods "job-1" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)',
     lifecycle.REASON_POD_SECURITY, False),
    (403, 'pods "job-1" is forbidden: maximum cpu usage per Container is 1, but limit is 2', lifecycle.REASON_INVALID_CHILD, False),
    # a cluster's admission policies, named as such (they were InvalidChild): a webhook (Kyverno, Gatekeeper) or a VAP
    (400, 'admission webhook "deny.example.com" denied the request: no GPUs for team-a', lifecycle.REASON_ADMISSION_POLICY, False),
    (400, 'admission webhook "validation.gatekeeper.sh" denied the request: [k8s-require-team] you must provide labels: {"team"}',
     lifecycle.REASON_ADMISSION_POLICY, False),
    (400, ('admission webhook "validate.kyverno.svc-fail" denied the request: \n\nresource Pod/team-a/job-1 was blocked due to'
           ' the following policies\n\ndisallow-latest-tag:\n  validate-image-tag: ...'), lifecycle.REASON_ADMISSION_POLICY, False),
    (422, "pods \"job-1\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no", lifecycle.REASON_ADMISSION_POLICY, False),
    (422, 'Pod "job-1" is invalid: spec.containers[1].image: Required value', lifecycle.REASON_INVALID_CHILD, False),
])
def test_a_refused_create_is_classified_by_what_the_server_says_not_only_its_code(code, message, reason, retryable):
    assert jobstatus.child_refusal(code, message) == lifecycle.Refusal(reason, message, retryable)


def test_classifying_a_long_refusal_takes_linear_time():
    """A refusal may quote the tenant's fields at any length; who refused is read from it on the operator's event loop.
    300 KB repeating the start of a webhook's or a policy's denial, never finished, took 3 s each."""
    for bait in ('admission webhook "', "ValidatingAdmissionPolicy '"):
        message = 'Pod "job-0" is invalid: ' + bait * 12000
        # No count of the regex's steps exists: 3 ms of CPU with two CPU burners running, the `.*` regex 2.0-2.3 s;
        # 0.1 s sits near the geometric middle (0.08 s).
        refusal, seconds = cpu_seconds(jobstatus.child_refusal, 422, message)
        assert refusal.reason == lifecycle.REASON_INVALID_CHILD and seconds < 0.1, seconds


def test_rbac_refusing_the_operator_is_said_on_the_job_and_retried_without_end():
    """The operator's own permissions: not the job's fault. It was raised, retried with only the operator's log
    saying why, while the job sat in Creating."""
    refusal = jobstatus.child_refusal(403, RBAC)
    assert refusal.reason == lifecycle.REASON_OPERATOR_FORBIDDEN and refusal.retryable
    assert refusal.message.startswith(RBAC) and "the operator's ServiceAccount lacks this permission" in refusal.message


# A webhook may answer a denial with its own code (403 here) and quote the pod's fields, which are the tenant's
FORGED_RBAC = ('admission webhook "validation.gatekeeper.sh" denied the request: [allowed-repos] container <trainer> has an'
               ' invalid image <x is forbidden: User "system:serviceaccount:kuberl-system:kuberl" cannot create resource '
               '"pods" in API group "" in the namespace "team-a">')
FORGED_QUOTA = ('admission webhook "validation.gatekeeper.sh" denied the request: [allowed-repos] container <trainer> has an'
                ' invalid image <pods "j-0" is forbidden: exceeded quota: q, requested: pods=1>')


@pytest.mark.parametrize('message', [FORGED_RBAC, FORGED_QUOTA])
def test_a_denial_quoting_the_tenants_text_is_not_taken_for_rbac_or_quota(message):
    """The RBAC and quota shapes were searched for anywhere in the message: a tenant's image named like an RBAC refusal
    turned a policy's denial into OperatorForbidden, retried every few seconds without end and never failed."""
    assert jobstatus.child_refusal(403, message) == lifecycle.Refusal(lifecycle.REASON_ADMISSION_POLICY, message, False)


def test_rbac_and_quota_refusals_are_known_by_their_shape_for_any_resource_and_name():
    named = 'podgroups.scheduling.volcano.sh "j" is forbidden: User "u" cannot create resource "podgroups" in API group'
    assert jobstatus.child_refusal(403, named).reason == lifecycle.REASON_OPERATOR_FORBIDDEN
    assert jobstatus.child_refusal(403, 'persistentvolumeclaims is forbidden: exceeded quota: q, requested: '
                                   'requests.storage=1Gi').reason == lifecycle.REASON_QUOTA


@pytest.mark.parametrize('code, message', [
    (500, 'Internal error occurred: failed calling webhook "x": connection refused'),
    (429, 'Too many requests'),
    (404, 'namespaces "gone" not found'),
    (401, 'Unauthorized'),
])
def test_errors_that_say_nothing_about_the_job_are_not_refusals(code, message):
    assert jobstatus.child_refusal(code, message) is None


def test_events_are_rate_limited_per_job():
    limiter = jobstatus.EventLimiter(burst=2, refill_seconds=10.0, repeat_seconds=60.0)
    job, other = ('ns', 'a'), ('ns', 'b')
    assert limiter.allow(job, 'Warning', 'QuotaExceeded', 'm', now=0.0)
    assert not limiter.allow(job, 'Warning', 'QuotaExceeded', 'm', now=1.0), 'the same event within repeat_seconds'
    assert limiter.allow(job, 'Warning', 'QuotaExceeded', 'm', now=61.0)
    assert limiter.allow(job, 'Normal', 'Creating', 'x', now=61.0)
    assert not limiter.allow(job, 'Normal', 'Creating', 'y', now=61.0), 'the burst is spent'
    assert limiter.allow(other, 'Normal', 'Creating', 'y', now=61.0), 'another job has its own budget'
    assert limiter.allow(job, 'Normal', 'Creating', 'y', now=71.0), 'a token comes back after refill_seconds'
    limiter.forget(job)
    assert limiter.allow(job, 'Warning', 'QuotaExceeded', 'm', now=72.0)


def test_the_operator_carries_its_pod_security_level_and_service_account_allowlist():
    import argparse

    from kuberl.operator.config import operator_config

    config = operator_config(argparse.Namespace(peering=None, pod_security='restricted', allowed_service_accounts='trainer, ci'))
    assert (config.pod_security, config.allowed_service_accounts) == ('restricted', frozenset({'trainer', 'ci'}))
    default = operator_config(argparse.Namespace(peering=None))
    assert (default.pod_security, default.allowed_service_accounts) == ('baseline', None)


@pytest.mark.parametrize('flag', ['--scrape-interval', '--scrape-timeout', '--max-concurrent-reconciles'])
@pytest.mark.parametrize('bad', ['0', '-1', 'nan', 'inf', 'two'])
def test_the_operators_timing_flags_take_positive_numbers_only(flag, bad, capsys):
    from kuberl.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(['operator', flag, bad])
    assert f'argument {flag}: expected a positive' in capsys.readouterr().err


def test_the_operators_timing_flags_reach_its_configuration():
    from kuberl.cli import build_parser
    from kuberl.operator.config import OperatorConfig, operator_config

    config = operator_config(build_parser().parse_args(['operator', '--scrape-timeout', '0.5', '--max-concurrent-reconciles', '4']))
    assert (config.scrape_timeout, config.max_concurrent_reconciles) == (0.5, 4)
    default = operator_config(build_parser().parse_args(['operator']))
    assert (default.scrape_timeout, default.max_concurrent_reconciles) == (OperatorConfig.scrape_timeout, OperatorConfig.max_concurrent_reconciles)


def test_a_name_held_by_an_object_this_job_did_not_create_is_a_retried_refusal_unless_a_predecessor_holds_it():
    predecessor = {'metadata': {'ownerReferences': [{'apiVersion': names.API_VERSION, 'kind': names.KIND, 'name': 'j', 'uid': 'old'}]}}
    assert jobstatus.name_in_use('ConfigMap', 'j-config', predecessor, 'j') is None, 'collected soon: wait'
    assert jobstatus.name_in_use('ConfigMap', 'j-config', None, 'j') is None, 'gone since the 409: create again'
    for existing in ({'metadata': {}},
                     {'metadata': {'ownerReferences': [{'apiVersion': names.API_VERSION, 'kind': names.KIND, 'name': 'other', 'uid': 'x'}]}},
                     {'metadata': {'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': names.KIND, 'name': 'j', 'uid': 'x'}]}}):
        refusal = jobstatus.name_in_use('ConfigMap', 'j-config', existing, 'j')
        assert refusal.reason == lifecycle.REASON_NAME_IN_USE and refusal.retryable
        assert refusal.message.startswith('ConfigMap j-config exists and was not created by this job')


def assert_waited_for_without_deadline(refusal: lifecycle.Refusal) -> None:
    """The job stays Pending, its Ready condition and a Warning Event quoting the refusal, tried again every
    TERMINATING_RETRY_SECONDS, and hours later still so: no startupTimeoutSeconds fails it."""
    status = {'phase': lifecycle.PENDING, 'generation': 0}
    for now in (1000.0, 1000.0 + 7200):
        decision = lifecycle.decide(make_job().spec(), status, [], None, now, refusal=refusal)
        status = decision.status
        ready = next(c for c in status['conditions'] if c['type'] == 'Ready')
        assert (status['phase'], ready['reason'], ready['message']) == (lifecycle.PENDING, refusal.reason, refusal.message)
        assert decision.requeue_after == lifecycle.TERMINATING_RETRY_SECONDS
        assert [e.message for e in decision.of(lifecycle.Event) if e.reason == refusal.reason] == [refusal.message]


def test_a_name_held_by_an_object_being_deleted_is_waited_for_without_deadline_naming_it_since_when_and_who_holds_it():
    going = {'metadata': {'deletionTimestamp': '2026-01-01T00:00:00Z', 'finalizers': ['example.com/hold', 'kubernetes.io/pvc-protection']}}
    refusal = jobstatus.terminating('PersistentVolumeClaim', 'j-checkpoints', going)
    assert refusal.reason == lifecycle.REASON_CHILD_TERMINATING and refusal.retryable
    assert refusal.message.startswith('PersistentVolumeClaim j-checkpoints is terminating (deletionTimestamp 2026-01-01T00:00:00Z),'
                                      ' held by finalizer(s) example.com/hold, kubernetes.io/pvc-protection: waiting for it to go')
    assert 'in its grace period' in jobstatus.terminating('Pod', 'j-0', {'metadata': {'deletionTimestamp': 'T'}}).message
    assert jobstatus.terminating('ConfigMap', 'j-config', {'metadata': {}}) is None
    assert jobstatus.terminating('ConfigMap', 'j-config', None) is None
    assert_waited_for_without_deadline(refusal)


def test_a_name_held_by_a_deleted_predecessors_child_the_garbage_collector_has_not_deleted_is_waited_for_naming_it():
    """A background deletion removes the job at once and leaves its children to the garbage collector: the job created
    again meanwhile waited in the operator's log alone. Now it says which object it waits for, and whose."""
    old = {'metadata': {'ownerReferences': [{'apiVersion': names.API_VERSION, 'kind': names.KIND, 'name': 'j', 'uid': 'u0'}]}}
    refusal = jobstatus.awaiting_collection('ConfigMap', 'j-config', old, 'j')
    assert refusal.reason == lifecycle.REASON_CHILD_AWAITING_COLLECTION and refusal.retryable
    assert refusal.message.startswith("ConfigMap j-config is the deleted job j's (uid u0), not yet deleted by the garbage collector")
    assert jobstatus.awaiting_collection('ConfigMap', 'j-config', {'metadata': {**old['metadata'], 'deletionTimestamp': 'T'}}, 'j') is None
    assert jobstatus.awaiting_collection('ConfigMap', 'j-config', {'metadata': {}}, 'j') is None, "a user's: NameInUse"
    assert jobstatus.awaiting_collection('ConfigMap', 'j-config', None, 'j') is None
    assert_waited_for_without_deadline(refusal)


def test_a_child_kind_the_cluster_does_not_serve_is_a_refusal_naming_the_scheduler():
    podgroup = {'apiVersion': 'scheduling.volcano.sh/v1beta1', 'kind': 'PodGroup'}
    refusal = jobstatus.not_served(404, jobstatus.NOT_SERVED, podgroup, 'volcano')
    assert refusal.reason == lifecycle.REASON_INVALID_CHILD and not refusal.retryable
    assert refusal.message.startswith('PodGroup (scheduling.volcano.sh/v1beta1) is not served by this cluster')
    assert "spec.schedulerName 'volcano' needs it" in refusal.message
    assert jobstatus.not_served(404, 'namespaces "team-a" not found', podgroup, 'volcano') is None, 'a namespace going away'
    assert jobstatus.not_served(500, jobstatus.NOT_SERVED, podgroup, 'volcano') is None


@pytest.mark.parametrize('labels', [{names.LABEL_RANK: 'abc', names.LABEL_RESTART: '0'}, {names.LABEL_RANK: '1', names.LABEL_RESTART: 'x'},
                                    {names.LABEL_RANK: '-1', names.LABEL_RESTART: '0'}, {names.LABEL_RANK: '1', names.LABEL_RESTART: '٣'}])
def test_a_pod_whose_kuberl_labels_were_rewritten_is_of_no_generation_and_goes_as_stale(labels):
    """A tenant may relabel its own pods: `kuberl.dev/rank=abc` made observed_pod raise, every reconcile
    of the job failed and its status froze. Now such a pod is nobody's worker, deleted as stale."""
    pod = lifecycle.observed_pod({'metadata': {'name': 'job-1', 'labels': labels}, 'status': {'phase': 'Running'}})
    assert (pod.rank, pod.generation) == (-1, -1)
    spec = make_job().spec()
    decision = lifecycle.decide(spec, {'phase': lifecycle.PENDING, 'generation': 0}, [pod], None, 1000.0)
    assert lifecycle.DeletePods(('job-1',), lifecycle.REASON_STALE) in decision.actions
    assert lifecycle.observed_pod({'metadata': {'name': 'job-0', 'labels': {}}}).generation == 0, 'unlabelled: as before'


def test_a_409_on_a_gang_pod_is_read_by_who_owns_it_its_generation_and_whether_it_is_going():
    def pod(owner='u1', restart='3', deleting=False, name='job-1'):
        meta = {'name': name, 'uid': 'p', 'labels': {names.LABEL_RESTART: restart}}
        if owner:
            meta['ownerReferences'] = [{'apiVersion': names.API_VERSION, 'kind': names.KIND, 'name': 'job', 'uid': owner}]
        if deleting:
            meta['deletionTimestamp'] = '2026-01-01T00:00:00Z'
        return {'metadata': meta}

    assert jobstatus.taken_pod(pod(), 'u1', 3, 'job') == jobstatus.TakenPod.CURRENT
    assert jobstatus.taken_pod(pod(restart='2', deleting=True), 'u1', 3, 'job') == jobstatus.TakenPod.LEAVING
    assert jobstatus.taken_pod(pod(restart='2'), 'u1', 3, 'job') == jobstatus.TakenPod.UNSEEN, 'ours, old, not going: never listed'
    assert jobstatus.taken_pod(pod(owner='u0', deleting=True), 'u1', 3, 'job') == jobstatus.TakenPod.LEAVING, "a same-named predecessor's"
    awaiting = jobstatus.taken_pod(pod(owner='u0'), 'u1', 3, 'job')  # the predecessor's, not yet collected: said, not only logged
    assert awaiting.reason == lifecycle.REASON_CHILD_AWAITING_COLLECTION and 'Pod job-1' in awaiting.message and 'u0' in awaiting.message
    assert jobstatus.taken_pod(None, 'u1', 3, 'job') == jobstatus.TakenPod.LEAVING
    refusal = jobstatus.taken_pod(pod(owner=None), 'u1', 3, 'job')
    assert refusal.reason == lifecycle.REASON_NAME_IN_USE and 'Pod job-1 exists' in refusal.message


def test_kueues_queue_label_on_the_job_without_spec_queue_name_is_refused_naming_both():
    """kopf.adopt gives every child the job's own labels: with Kueue's label on the job (its way for
    batch Jobs, JobSet, PyTorchJob) each pod became a Kueue workload of its own, the gang admitted piecemeal."""
    job = document()
    job['metadata']['labels'] = {names.KUEUE_QUEUE_NAME: 'team-a'}
    _, refusal = jobstatus.judge(job)
    assert refusal.reason == lifecycle.REASON_INVALID_SPEC and not refusal.retryable
    assert refusal.message.startswith(f'metadata.labels.{names.KUEUE_QUEUE_NAME}:') and 'set spec.queueName: team-a' in refusal.message
    job['spec']['queueName'] = 'team-a'
    assert jobstatus.judge(job)[1] is None, 'with spec.queueName the pods are one group; the label is harmless'


RECORDED = {'latestCheckpoint': {'path': '/checkpoints/j-uid', 'time': '2026-11-27T10:00:00Z', 'timesteps': 50_000}}


@pytest.mark.parametrize(('status', 'reading', 'said'), [
    pytest.param(RECORDED, Rank0Reading(1_024, resumed_timesteps=0), True, id='started-from-zero-behind-the-record'),
    pytest.param(RECORDED, Rank0Reading(50_200, resumed_timesteps=49_920), False, id='resumed'),
    pytest.param(RECORDED, Rank0Reading(1_024, resumed_timesteps=None), False, id='not-said-yet-or-an-older-trainer'),
    pytest.param(RECORDED, Rank0Reading(1_024, checkpoints_skipped=3, resumed_timesteps=0), False, id='skipped-said-by-its-own-event'),
    pytest.param({}, Rank0Reading(1_024, resumed_timesteps=0), False, id='a-first-start'),
    pytest.param({'latestCheckpoint': {'timesteps': 900}}, Rank0Reading(1_024, resumed_timesteps=0), False,
                 id='its-own-checkpoint-after-an-operator-restart'),
    pytest.param(RECORDED, None, False, id='no-reading'),
])
def test_a_rank_0_that_started_from_zero_behind_the_recorded_checkpoint_is_said(status, reading, said):
    """A checkpoint claim deleted by hand came back empty with the next gang (as every child does), and the job
    trained again from zero with nothing said outside rank 0's log."""
    message = jobstatus.checkpoints_missing(status, reading, 3)
    assert (message is not None) == said, message
    if said:
        assert message.startswith('generation 3: rank 0 found no checkpoint in /checkpoints/j-uid and started from zero')
        assert 'at 2026-11-27T10:00:00Z (timesteps 50000)' in message and 'emptied or replaced' in message


@pytest.mark.parametrize(('code', 'message', 'refused'), [
    (403, ('pods "j-0" is forbidden: User "system:serviceaccount:k:op" cannot delete resource "pods" in API group "" in the '
          'namespace "t"'), True),
    (403, 'admission webhook "guard.example.com" denied the request: pods "j-0" is forbidden: User "x" cannot delete resource ',
     False),
    (404, 'pods "j-0" not found', False),
    (409, 'Precondition failed: UID in precondition: 1, UID in object meta: 2', False),
])
def test_only_rbac_refusing_a_delete_is_said_on_the_job(code, message, refused):
    refusal = jobstatus.delete_refusal(code, message)
    assert (refusal is not None) == refused
    if refused:
        assert refusal.reason == lifecycle.REASON_OPERATOR_FORBIDDEN and refusal.deleting and refusal.retryable
        assert refusal.message.startswith(message) and 'what was to be deleted stays' in refusal.message


OPERATOR_DEFAULTS = ('registry.test/trainer:0.2.0', render.PerProcess(cpu='2', memory='4Gi'))


def test_a_job_keeps_the_trainer_defaults_it_first_met_and_status_records_them():
    first = jobstatus.job_status({'phase': 'Pending'}, observed_generation=1, reading=None, paths=None,
                                 defaults=jobstatus.trainer_defaults({}, *OPERATOR_DEFAULTS))
    assert first['trainerDefaults'] == {'image': 'registry.test/trainer:0.2.0', 'cpuPerProcess': '2', 'memoryPerProcess': '4Gi'}
    recorded = {'trainerDefaults': {'image': 'registry.test/trainer:0.1.0', 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi'}}
    assert jobstatus.trainer_defaults(recorded, *OPERATOR_DEFAULTS) == ('registry.test/trainer:0.1.0', render.PerProcess('1', '2Gi'))


def test_a_job_keeps_the_pull_policy_and_secrets_it_first_met_and_an_older_record_takes_the_operators():
    """status.trainerDefaults keeps the trainer's pull policy and secrets (trainer.image.pullPolicy,
    trainer.imagePullSecrets) as it keeps the image: a gang restarted after an upgrade pulls as its first did."""
    first = jobstatus.job_status({'phase': 'Pending'}, observed_generation=1, reading=None, paths=None,
                                 defaults=jobstatus.trainer_defaults({}, *OPERATOR_DEFAULTS),
                                 image_pull=jobstatus.image_pull_defaults({}, 'Always', ('regcred',)))
    assert (first['trainerDefaults']['imagePullPolicy'], first['trainerDefaults']['imagePullSecrets']) == ('Always', ['regcred'])
    assert jobstatus.image_pull_defaults(first, 'IfNotPresent', ('mirror',)) == ('Always', ('regcred',))
    none = jobstatus.job_status({}, observed_generation=1, reading=None, paths=None,
                                defaults=OPERATOR_DEFAULTS, image_pull=(None, ()))
    assert jobstatus.image_pull_defaults(none, 'IfNotPresent', ('mirror',)) == (None, ()), 'met none: keeps none'
    older = {'trainerDefaults': {'image': 'registry.test/trainer:0.1.0', 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi'}}
    assert jobstatus.image_pull_defaults(older, 'IfNotPresent', ('mirror',)) == ('IfNotPresent', ('mirror',))
    assert jobstatus.image_pull_defaults({}, 'IfNotPresent', ('mirror',)) == ('IfNotPresent', ('mirror',))


@pytest.mark.parametrize('record', [
    {'imagePullPolicy': 'always', 'imagePullSecrets': 'regcred'}, {'imagePullPolicy': None, 'imagePullSecrets': [None]},
    {'imagePullPolicy': ['Never'], 'imagePullSecrets': ['Not_A_Secret']}, {'imagePullSecrets': ['s'] * 65},
], ids=['wrong-words', 'nulls', 'wrong-types', 'too-many'])
def test_a_pull_record_that_does_not_parse_gives_the_operators_own(record):
    assert jobstatus.image_pull_defaults({'trainerDefaults': record}, 'IfNotPresent', ('mirror',)) == ('IfNotPresent', ('mirror',))


@pytest.mark.parametrize('record', [
    None, 'image', {}, {'image': '', 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi'},
    {'image': 'x', 'cpuPerProcess': 'lots', 'memoryPerProcess': '2Gi'}, {'image': 'x', 'cpuPerProcess': '1'},
    {'image': ['x'], 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi'}, {'image': 'x' * 513, 'cpuPerProcess': '1', 'memoryPerProcess': '2Gi'},
])
def test_a_trainer_defaults_record_that_does_not_parse_gives_the_operators_own(record):
    assert jobstatus.trainer_defaults({'trainerDefaults': record}, *OPERATOR_DEFAULTS) == OPERATOR_DEFAULTS


RUNNING_SINCE = {'phase': 'Running', 'gangRunningTime': '2026-11-27T10:00:00Z'}
T_RUNNING = lifecycle.parse_time('2026-11-27T10:00:00Z')


@pytest.mark.parametrize(('trainer', 'status', 'ever_read', 'failure', 'after', 'said'), [
    pytest.param('kuberl', RUNNING_SINCE, False, 'ClientConnectorError: refused', 600, True, id='never-read-a-stall-timeout'),
    pytest.param('kuberl', RUNNING_SINCE, False, 'ClientConnectorError: refused', 599, False, id='before-the-stall-timeout'),
    pytest.param('kuberl', RUNNING_SINCE, True, 'TimeoutError', 900, False, id='read-before-the-stall-clock-judges-it'),
    pytest.param('kuberl', RUNNING_SINCE, False, None, 900, False, id='no-scrape-tried'),
    pytest.param('kuberl', {'phase': 'Pending'}, False, 'HTTP 503', 900, False, id='not-all-running'),
    pytest.param('custom', RUNNING_SINCE, False, 'HTTP 404', 900, False, id='a-custom-trainer-need-not-serve-metrics'),
])
def test_a_rank_0_never_read_in_a_stall_timeout_is_said(trainer, status, ever_read, failure, after, said):
    """The stall clock starts at rank 0's first reading: one never read (frozen before it, or out of the operator's
    reach) ran on unjudged, with no progress in status and no word."""
    job = make_job('j').run_policy(stallTimeoutSeconds=600)
    spec = (job.custom_trainer({'spec': {'containers': [{'name': 'trainer', 'command': ['python', 'train.py']}]}})
            if trainer == 'custom' else job).spec()
    message = jobstatus.metrics_unread(spec, status, 2, ever_read, failure, 'http://10.0.0.7:9090/metrics', T_RUNNING + after)
    assert (message is not None) == said, message
    if said:
        assert message.startswith("generation 2: rank 0's metrics (http://10.0.0.7:9090/metrics) have not been read once in 600s")
        assert 'the last scrape: ClientConnectorError: refused' in message and 'stallTimeoutSeconds=600' in message
