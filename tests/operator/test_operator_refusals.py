"""A refused child is a visible failure, not a silent loop (issue 14, parts 1 and 5), through the real operator.

The stand-in refuses as the real API server does (codes and messages cited in tests.support.admission):
a quota refusal keeps the job Pending and retries until startupTimeoutSeconds; any other 400/403/422
fails it at once with the server's words, named by who refused (AdmissionPolicy, PodSecurity, InvalidChild), and the part of the gang already created goes.
"""

import kmock
import pytest
from kuberl.core import names
from kuberl.operator import kubeapi

from tests.operator.operatorkit import (
    Operator,
    condition,
    create_job,
    events,
    job,
    pods,
    running_job,
    start_gang,
    status,
    terminated,
    wait_for,
    wait_loop_passed,
    wait_phase,
)
from tests.support import admission
from tests.support.admission import Refuse


def pod_creates(standin) -> int:
    return sum(n for call, n in standin.calls.items() if call.verb == 'create' and call.resource == 'pods' and call.agent == 'kopf')


def warnings(rest, name: str, reason: str) -> list[dict]:
    return [e for e in events(rest, name) if e['reason'] == reason and e['type'] == 'Warning']


REFUSALS = [  # each named by who refused: a cluster's admission policy, Pod Security Admission, or the child itself
    pytest.param(admission.webhook_denial(), 400, 'admission webhook "deny.policy.example.com" denied the request', 'AdmissionPolicy',
                 id='webhook-400'),
    pytest.param(admission.validating_admission_policy(), 422, "ValidatingAdmissionPolicy 'no-host-network'", 'AdmissionPolicy',
                 id='policy-422'),
    pytest.param(admission.pod_security(), 403, 'violates PodSecurity "baseline:latest"', 'PodSecurity', id='pod-security-admission-403'),
    pytest.param(admission.limit_ranger(), 403, 'maximum cpu usage per Container is 1, but limit is 2', 'InvalidChild', id='limitranger-403'),
]


@pytest.mark.parametrize('answer, code, said, reason', REFUSALS)
def test_a_refused_pod_fails_the_job_with_the_servers_words_and_leaves_no_half_gang(standin, rest, operator, answer, code, said, reason):
    refuse = Refuse('pods', answer, labels={names.LABEL_JOB: 'refused', names.LABEL_RANK: '1'})
    assert answer(standin.store.type_of('', 'v1', 'pods'), 'x').code == code
    standin.store.hooks.admission.append(refuse)
    create_job(rest, 'refused', workers=2)
    wait_phase(rest, 'refused', 'Failed')
    failed = condition(rest, 'refused', 'Failed')
    assert failed['reason'] == reason and said in failed['message'], failed
    wait_for(lambda: warnings(rest, 'refused', reason), what=f'a {reason} warning')
    assert said in warnings(rest, 'refused', reason)[0]['message']
    wait_for(lambda: not pods(standin, 'refused'), what='rank 0, created before rank 1 was refused, to be deleted')
    creates, refusals = pod_creates(standin), refuse.refused
    wait_loop_passed(standin, 'refused')  # the failed job reconciled again: a fixed 2 s passed before it was, loaded
    assert (pod_creates(standin), refuse.refused) == (creates, refusals), 'no retry loop after the job failed'
    assert len(warnings(rest, 'refused', reason)) == 1
    assert operator.healthy()


def test_a_quota_refusal_keeps_the_job_pending_quoting_the_server_then_it_runs_when_admitted(standin, rest, operator):
    refuse = Refuse('pods', admission.quota_exceeded(), labels={names.LABEL_JOB: 'squeezed', names.LABEL_RANK: '1'})
    standin.store.hooks.admission.append(refuse)
    create_job(rest, 'squeezed', workers=2)
    ready = wait_for(lambda: condition(rest, 'squeezed', 'Ready').get('reason') == 'QuotaExceeded' and condition(rest, 'squeezed', 'Ready'),
                     what='the quota condition')
    assert ready['status'] == 'False' and 'is forbidden: exceeded quota: compute-resources' in ready['message']
    assert status(rest, 'squeezed')['phase'] == 'Pending'
    wait_for(lambda: refuse.refused >= 3, what='retries with backoff')
    [warning] = wait_for(lambda: warnings(rest, 'squeezed', 'QuotaExceeded'), what='the QuotaExceeded Event')  # posted after status
    assert 'exceeded quota: compute-resources, requested: pods=1, used: pods=4, limited: pods=4' in warning['message']
    assert status(rest, 'squeezed')['phase'] == 'Pending', 'never failed while startupTimeoutSeconds lasts'

    standin.store.hooks.admission.remove(refuse)
    start_gang(standin, 'squeezed', 2)
    wait_phase(rest, 'squeezed', 'Running')
    assert len(warnings(rest, 'squeezed', 'QuotaExceeded')) == 1, 'the same refusal is posted once, not at every retry'


def test_rbac_refusing_the_operator_a_child_is_said_on_the_job_which_waits_past_its_startup_timeout(standin, rest, operator):
    """The operator's ServiceAccount may not create NetworkPolicies (a chart's RBAC cut short): the job said
    `Creating` while only the operator's log held the API server's words, retried every 5 s as a traceback."""
    refuse = Refuse('networkpolicies', admission.rbac_denial(), labels={names.LABEL_JOB: 'unpermitted'})
    standin.store.hooks.admission.append(refuse)
    create_job(rest, 'unpermitted', workers=2, runPolicy={'startupTimeoutSeconds': 2})
    ready = wait_for(lambda: condition(rest, 'unpermitted', 'Ready').get('reason') == 'OperatorForbidden'
                     and condition(rest, 'unpermitted', 'Ready'), what='the OperatorForbidden condition')
    assert ready['message'].startswith('networkpolicies.networking.k8s.io is forbidden: User "system:serviceaccount:kuberl-system:'
                                       'kuberl-operator" cannot create resource "networkpolicies"'), ready
    assert "the operator's ServiceAccount lacks this permission" in ready['message']
    wait_for(lambda: warnings(rest, 'unpermitted', 'OperatorForbidden'), what='an OperatorForbidden warning')
    wait_for(lambda: refuse.refused >= 4, what='retries past startupTimeoutSeconds')
    assert status(rest, 'unpermitted')['phase'] == 'Pending' and not pods(standin, 'unpermitted')

    standin.store.hooks.admission.remove(refuse)  # the RBAC is mended
    start_gang(standin, 'unpermitted', 2)
    wait_phase(rest, 'unpermitted', 'Running')
    assert status(rest, 'unpermitted').get('restarts', 0) == 0


def test_a_quota_refusal_is_bounded_by_the_startup_timeout(standin, rest, operator):
    standin.store.hooks.admission.append(Refuse('pods', admission.quota_exceeded(), labels={names.LABEL_JOB: 'starved'}))
    create_job(rest, 'starved', workers=2, runPolicy={'startupTimeoutSeconds': 3})
    wait_phase(rest, 'starved', 'Failed')
    failed = condition(rest, 'starved', 'Failed')
    assert failed['reason'] == 'QuotaExceeded' and 'startupTimeoutSeconds=3' in failed['message'] and 'exceeded quota' in failed['message']
    assert not pods(standin, 'starved')


def test_a_template_over_the_pod_security_level_fails_at_once_naming_every_field_and_creates_no_pod(standin, rest, operator):
    template = {'spec': {'hostNetwork': True, 'containers': [{'name': names.TRAINER_CONTAINER, 'securityContext': {'privileged': True}}]}}
    create_job(rest, 'escalator', workers=2, template=template)
    wait_phase(rest, 'escalator', 'Failed')
    failed = condition(rest, 'escalator', 'Failed')
    assert failed['reason'] == 'PodSecurity'
    assert 'spec.hostNetwork' in failed['message'] and 'securityContext.privileged' in failed['message'], failed['message']
    wait_for(lambda: warnings(rest, 'escalator', 'PodSecurity'), what='a PodSecurity warning')
    assert not [c for c in standin.calls if c.verb == 'create' and c.resource == 'pods' and c.agent == 'kopf'], 'no pod created'
    running_job(standin, rest, 'modest', 1)


def test_the_operators_level_and_service_account_allowlist_come_from_its_command_line(standin, rest, tmp_path):
    op = Operator(standin, tmp_path, '--pod-security', 'privileged', '--allowed-service-accounts', 'trainer').start()
    try:
        create_job(rest, 'host', workers=1, template={'spec': {'hostNetwork': True, 'serviceAccountName': 'trainer'}})
        [pod] = wait_for(lambda: pods(standin, 'host'), what='the privileged level to let a host-network pod through')
        assert pod['spec']['hostNetwork'] is True
        create_job(rest, 'anyone', workers=1)
        wait_phase(rest, 'anyone', 'Failed')
        failed = condition(rest, 'anyone', 'Failed')
        assert failed['reason'] == 'PodSecurity' and 'spec.serviceAccountName' in failed['message'], failed
        assert not pods(standin, 'anyone')
    finally:
        op.stop()


def test_fields_pod_security_leaves_open_are_refused_when_the_operator_is_told_to(standin, rest, tmp_path):
    """nodeName (skips the scheduler and its taints), a keyless `operator: Exists` toleration (tolerates every
    taint), CSI volumes...: copied from the template at every level. Refused, each named, only when chosen."""
    op = Operator(standin, tmp_path, '--forbid-pod-fields', 'nodeName,tolerations,csi').start()
    try:
        create_job(rest, 'pinned', workers=1, template={'spec': {'nodeName': 'gpu-node-7', 'tolerations': [{'operator': 'Exists'}],
                                                                 'volumes': [{'name': 'v', 'csi': {'driver': 'x.example.com'}}]}})
        create_job(rest, 'keyed', workers=1, tolerations=[{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}])
        wait_phase(rest, 'pinned', 'Failed')
        failed = condition(rest, 'pinned', 'Failed')
        assert failed['reason'] == 'PodSecurity', failed
        for field in ('spec.nodeName: Node Name', 'spec.tolerations[0]: Tolerations', 'spec.volumes[v].csi: CSI Volumes'):
            assert field in failed['message'], (field, failed['message'])
        assert not pods(standin, 'pinned')
        wait_for(lambda: pods(standin, 'keyed'), what='a keyed toleration (as the GPU examples use) to pass')
    finally:
        op.stop()


def test_rbac_refusing_the_operator_the_delete_of_an_old_gang_is_said_on_the_job_which_restarts_once_granted(standin, rest, operator):
    """The ClusterRole lost `delete` on pods: a gang restart left the old pods, the job said "waiting for 3 pod(s)
    of an older generation to go", and only the operator's log said why, a traceback every 5 s."""
    create_job(rest, 'undeletable', workers=3, runPolicy={'restartBackoffSeconds': 0.1})
    gang = start_gang(standin, 'undeletable', 3)
    wait_phase(rest, 'undeletable', 'Running')
    standin.handler.denied.add(('delete', 'pods'))
    terminated(standin, gang[1], 1, 'Crashed: boom')
    ready = wait_for(lambda: condition(rest, 'undeletable', 'Ready').get('reason') == 'OperatorForbidden'
                     and condition(rest, 'undeletable', 'Ready'), what='the OperatorForbidden condition')
    assert ready['message'].startswith('pods "undeletable-0" is forbidden: User "system:serviceaccount:kuberl-system:'
                                       'kuberl-operator" cannot delete resource "pods"'), ready
    assert 'what was to be deleted stays' in ready['message']
    [warning] = wait_for(lambda: warnings(rest, 'undeletable', 'OperatorForbidden'), what='an OperatorForbidden warning')
    assert 'asked again every 1s until the operator may' in warning['message']
    assert status(rest, 'undeletable')['restarts'] == 1 and len(pods(standin, 'undeletable', 0)) == 3

    standin.handler.denied.clear()  # the RBAC is mended
    start_gang(standin, 'undeletable', 3, generation=1)
    wait_phase(rest, 'undeletable', 'Running')
    assert status(rest, 'undeletable')['restarts'] == 1 and not pods(standin, 'undeletable', 0)
    assert 'Traceback' not in operator.log(), operator.log()[-3000:]


def test_rbac_refusing_the_operator_the_jobs_status_is_said_in_an_event_and_nothing_is_done(standin, rest, operator):
    """The ClusterRole lost `patch` on rltrainingjobs/status: the job showed nothing at all (no status, no Event),
    and the operator's log a traceback every 5 s."""
    standin.handler.denied.add(('patch', 'rltrainingjobs/status'))
    create_job(rest, 'mute', workers=2)
    [warning] = wait_for(lambda: warnings(rest, 'mute', 'OperatorForbidden'), what='an OperatorForbidden warning')
    assert warning['message'].startswith('rltrainingjobs.kuberl.dev "mute" is forbidden: User "system:serviceaccount:kuberl-system:'
                                         'kuberl-operator" cannot patch resource "rltrainingjobs/status"'), warning
    assert 'nothing is created or deleted for this job until its status can be written' in warning['message']
    assert not pods(standin, 'mute') and not status(rest, 'mute')
    assert 'Traceback' not in operator.log(), operator.log()[-3000:]

    standin.handler.denied.clear()  # the RBAC is mended: picked up within lifecycle.MAX_FORBIDDEN_RETRY_SECONDS
    wait_for(lambda: pods(standin, 'mute'), timeout=40, what='the gang, once the status can be written')


FINALIZER = 'kuberl.dev/operator'


def finalizers(rest, name):
    return (job(rest, name) or {}).get('metadata', {}).get('finalizers') or []


def test_rbac_refusing_kopfs_finalizer_patch_is_one_line_not_a_traceback_and_the_job_runs(standin, rest, operator):
    """The ClusterRole lost `patch` on rltrainingjobs, which kopf needs for its finalizer: kopf logged a traceback
    at each retry (with four "Request attempt" lines before it). One line now names the grant and what the
    finalizer's absence costs; the job is reconciled all the same, and gets its finalizer once RBAC allows it."""
    standin.handler.denied.add(('patch', 'rltrainingjobs'))
    create_job(rest, 'unfinalized', workers=1)
    wait_for(lambda: pods(standin, 'unfinalized') and status(rest, 'unfinalized').get('phase'), what='the job reconciled')
    wait_for(lambda: sum(n for call, n in standin.calls.items()
                         if (call.verb, call.resource, call.subresource) == ('patch', 'rltrainingjobs', '')) >= 8,
             what="two rounds of kopf's four attempts")
    log = operator.log()
    said = [line for line in log.splitlines() if 'RBAC forbids the operator to patch' in line]
    assert len(said) == 1, log[-4000:]
    assert 'rltrainingjobs.kuberl.dev "unfinalized" in namespace "default"' in said[0], said
    assert 'grant verb "patch" on resource "rltrainingjobs" in API group "kuberl.dev"' in said[0], said
    assert 'in the ClusterRole bound to it' in said[0] and 'kuberl.dev/operator' in said[0], said
    assert 'Traceback' not in log and 'APIForbiddenError' not in log, log[-4000:]

    assert 'asks again every 10 s' in said[0], said

    # A deleted job keeps the finalizer it got before the grant was revoked: kopf cannot take it off.
    create_job(rest, 'terminating', workers=1)
    standin.handler.denied.clear()
    wait_for(lambda: FINALIZER in finalizers(rest, 'terminating'), what='the finalizer of a job created while allowed')
    standin.handler.denied.add(('patch', 'rltrainingjobs'))
    assert rest.delete('/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs/terminating').status == 200
    # The operator may have seen patch allowed between the two grants (its 10 s recheck) and restarted in place: the
    # refusal then comes from the new process, after its imports and kopf's start (over 20 s in a loaded CI run).
    wait_for(lambda: log.count('RBAC forbids the operator to patch') < operator.log().count('RBAC forbids the operator to patch'),
             timeout=90, what='the refused removal of the deleted job\'s finalizer')
    assert job(rest, 'terminating')['metadata'].get('deletionTimestamp')

    # The RBAC is mended and neither job changes: kopf alone would try again only at each job's next change.
    standin.handler.denied.clear()
    wait_for(lambda: FINALIZER in finalizers(rest, 'unfinalized'), timeout=90, what='the finalizer added once RBAC allows it')
    wait_for(lambda: job(rest, 'terminating') is None, timeout=60, what='the deleted job gone once RBAC allows it')
    assert 'RBAC allows the operator to patch rltrainingjobs in namespace "default" again' in operator.log(), operator.log()[-3000:]


def test_the_api_server_failing_a_status_write_is_one_line_per_retry_not_a_traceback(standin, rest, operator):
    """etcd timing out a job's status writes (a 500 after the operator's own retries): kopf logged a traceback. One
    line now, with the server's words; the job goes on once the writes succeed."""
    # What ErrorToAPIStatus answers for an etcd error (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
    # responsewriters/status.go): 500, no reason, the error's own text as the message.
    etcd_timeout = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                    'message': 'etcdserver: request timed out', 'code': 500}
    failing = standin.handler['patch', kmock.resource(names.GROUP, names.VERSION, names.PLURAL), kmock.subresource('status')]
    failing[:2 * (len(kubeapi.API_BACKOFFS) + 1)] << 500 << etcd_timeout  # two reconciles' worth, each retried
    create_job(rest, 'unwritten', workers=1)
    wait_for(lambda: pods(standin, 'unwritten'), timeout=40, what='the gang, once the status can be written')
    log = operator.log()
    said = [line for line in log.splitlines() if "Daemon 'reconcile' failed" in line]
    assert len(said) == 2, log[-4000:]
    assert all('failed temporarily: the API server answered 500: etcdserver: request timed out (after 3 retries)' in line
               for line in said), said
    assert 'Traceback' not in log, log[-4000:]
    # The failure was in the operator's log alone (kopf posts no Event from its log since 1.44: settings.posting.loggers):
    # now one Warning Event says it, however often it is retried, and no retry becomes an Event of its own.
    failures = wait_for(lambda: [e for e in events(rest, 'unwritten') if 'etcdserver: request timed out' in e['message']],
                        what='the Event that says the reconcile failed', explain=lambda: [(e['type'], e['reason'], e['message'][:150]) for e in events(rest, 'unwritten')])
    # kopf posts in the background, in the order posted (one queue): once the Event of the reconcile that went through
    # is in, any repeat of the failure's is too (a fixed 1 s passed on a loaded machine before either was)
    wait_for(lambda: [e for e in events(rest, 'unwritten') if e['reason'] == 'Creating'], what='the Creating Event')
    failures = [e for e in events(rest, 'unwritten') if 'etcdserver: request timed out' in e['message']]
    assert len(failures) == 1 and failures[0]['type'] == 'Warning', failures
    assert failures[0]['reason'] == 'ReconcileFailed' and 'after 3 retries' in failures[0]['message'], failures
    assert not [e for e in events(rest, 'unwritten') if e['type'] == 'Error' or 'retrying in' in e['message']]
