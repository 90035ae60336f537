"""The stand-in's admission hook answers as a real API server does (sources in tests.support.admission)."""
import pytest

from tests.support import admission
from tests.support.admission import Refuse
from tests.support.jobs import make_job

PODS = '/api/v1/namespaces/default/pods'


def pod(name: str, **labels: str) -> dict:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'labels': labels},
            'spec': {'containers': [{'name': 'c', 'image': 'busybox'}]}}


@pytest.mark.parametrize('answer, code, reason, message', [
    (admission.quota_exceeded(), 403, 'Forbidden',
     'pods "p" is forbidden: exceeded quota: compute-resources, requested: pods=1, used: pods=4, limited: pods=4'),
    (admission.pod_security(), 403, 'Forbidden', 'pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)'),
    (admission.limit_ranger(), 403, 'Forbidden', 'pods "p" is forbidden: maximum cpu usage per Container is 1, but limit is 2'),
    (admission.webhook_denial(), 400, None, 'admission webhook "deny.policy.example.com" denied the request: GPU pods need a team label'),
    (admission.webhook_denial(code=403), 403, None, 'admission webhook "deny.policy.example.com" denied the request: GPU pods need a team label'),
    (admission.validating_admission_policy(), 422, 'Invalid',
     ("pods \"p\" is forbidden: ValidatingAdmissionPolicy 'no-host-network' with binding 'no-host-network-binding' denied request: "
     "failed expression: !object.spec.hostNetwork")),
])
def test_a_refused_create_gets_the_api_servers_code_reason_and_message_and_stores_nothing(standin, rest, answer, code, reason, message):
    standin.store.hooks.admission.append(Refuse('pods', answer, labels={'team': 'a'}))
    reply = rest.post(PODS, pod('p', team='a'))
    assert (reply.status, reply.body.get('reason'), reply.body['message']) == (code, reason, message)
    assert reply.body['status'] == 'Failure' and reply.body['code'] == code
    assert rest.get(f'{PODS}/p').status == 404
    assert rest.post(PODS, pod('q', team='b')).status == 201, 'only matching objects are refused'


def test_a_refusal_comes_after_the_objects_own_validation_and_can_be_limited_in_number(standin, rest):
    refuse = Refuse('pods', admission.quota_exceeded(), times=1)
    standin.store.hooks.admission.append(refuse)
    invalid = pod('bad')
    del invalid['spec']['containers'][0]['image']
    assert rest.post(PODS, invalid).status == 422, 'an invalid object is refused by validation first'
    assert rest.post(PODS, pod('p')).status == 403
    assert rest.post(PODS, pod('p')).status == 201
    assert refuse.refused == 1


def test_custom_resources_pass_through_the_same_hook(standin, rest):
    standin.store.hooks.admission.append(Refuse('rltrainingjobs', admission.webhook_denial(message='no jobs today')))
    reply = rest.post('/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs', make_job('j').obj())
    assert reply.status == 400 and reply.body['message'].endswith('denied the request: no jobs today')


SA = 'system:serviceaccount:kuberl-system:kuberl-operator'
JOBS = '/apis/kuberl.dev/v1alpha1'


@pytest.mark.parametrize('denied, method, path, message', [
    (('watch', 'rltrainingjobs'), 'GET', f'{JOBS}/rltrainingjobs?watch=true',
     (f'rltrainingjobs.kuberl.dev is forbidden: User "{SA}" cannot watch resource "rltrainingjobs" in API group "kuberl.dev" at the '
     'cluster scope')),
    (('list', 'pods'), 'GET', PODS,
     f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in the namespace "default"'),
    (('delete', 'pods'), 'DELETE', f'{PODS}/p',
     f'pods "p" is forbidden: User "{SA}" cannot delete resource "pods" in API group "" in the namespace "default"'),
    (('patch', 'rltrainingjobs/status'), 'PATCH', f'{JOBS}/namespaces/default/rltrainingjobs/j/status',
     (f'rltrainingjobs.kuberl.dev "j" is forbidden: User "{SA}" cannot patch resource "rltrainingjobs/status" in API group '
     '"kuberl.dev" in the namespace "default"')),
])
def test_rbac_without_a_verb_answers_403_before_serving_as_the_authorizer_does(standin, rest, denied, method, path, message):
    """The `denied` hook: a list and a watch alike are a plain 403 (no ERROR event), named as forbiddenMessage names them."""
    standin.handler.denied.add(denied)
    reply = rest.call(method, path, {} if method == 'PATCH' else None,
                      **({'content_type': 'application/merge-patch+json'} if method == 'PATCH' else {}))
    assert (reply.status, reply.body['reason'], reply.body['message']) == (403, 'Forbidden', message)


def test_rbac_names_a_subresource_apart_from_its_resource(standin, rest):
    rest.post(f'{JOBS}/namespaces/default/rltrainingjobs', make_job('j').obj())
    standin.handler.denied.add(('patch', 'rltrainingjobs/status'))
    assert rest.patch(f'{JOBS}/namespaces/default/rltrainingjobs/j', {'metadata': {'labels': {'a': 'b'}}}).status == 200
    assert rest.get(f'{JOBS}/namespaces/default/rltrainingjobs').status == 200


def test_rbac_refused_in_one_namespace_serves_the_others_as_a_missing_rolebinding_does(standin, rest):
    standin.handler.denied.add(('list', 'pods', 'team-b'))
    refused = rest.get('/api/v1/namespaces/team-b/pods')
    assert (refused.status, refused.body['message']) == (
        403, f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in the namespace "team-b"')
    assert rest.get('/api/v1/namespaces/team-a/pods').status == 200


def priority_class(name: str, value: int, **extra) -> dict:
    return {'apiVersion': 'scheduling.k8s.io/v1', 'kind': 'PriorityClass', 'metadata': {'name': name}, 'value': value, **extra}


def test_the_priority_plugin_sets_a_pods_priority_from_its_class_and_refuses_one_set_by_hand(rest):
    # plugin/pkg/admission/priority/admission.go, admitPod: priority comes from the PriorityClass (0 with no class and
    # no global default); one in the pod that differs, or a class that does not exist, is admission.NewForbidden.
    plain = pod('plain')
    plain['spec']['priority'] = 0
    created = rest.post(PODS, plain).body['spec']
    assert (created['priority'], created['preemptionPolicy']) == (0, 'PreemptLowerPriority')
    by_hand = pod('by-hand')
    by_hand['spec']['priority'] = 1000
    reply = rest.post(PODS, by_hand)
    assert (reply.status, reply.body['reason'], reply.body['message']) == (403, 'Forbidden', (
        'pods "by-hand" is forbidden: the integer value of priority (1000) must not be provided in pod spec;'
        ' priority admission controller computed 0 from the given PriorityClass name'))
    missing = pod('missing')
    missing['spec']['priorityClassName'] = 'high'
    reply = rest.post(PODS, missing)
    assert (reply.status, reply.body['message']) == (403, 'pods "missing" is forbidden: no PriorityClass with name high was found')
    assert rest.post('/apis/scheduling.k8s.io/v1/priorityclasses', priority_class('high', 1000, preemptionPolicy='Never')).status == 201
    assert rest.post('/apis/scheduling.k8s.io/v1/priorityclasses', priority_class('floor', -5, globalDefault=True)).status == 201
    missing['spec']['priority'] = 1000
    assert rest.post(PODS, missing).body['spec']['preemptionPolicy'] == 'Never'
    defaulted = rest.post(PODS, pod('defaulted')).body['spec']
    assert (defaulted['priorityClassName'], defaulted['priority']) == ('floor', -5)
    critical = pod('critical')
    critical['spec']['priorityClassName'] = 'system-cluster-critical'
    assert rest.post(PODS, critical).body['spec']['priority'] == 2000000000
