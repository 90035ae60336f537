"""Custom resources are validated and defaulted from manifests/crd.yaml, as a real API server would."""
import copy

import pytest

from tests.support.jobs import make_job

JOBS = '/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs'


def job(**spec) -> dict:
    """The one builder's job (env id alone, 2 workers); `spec` fields set whole."""
    return make_job('job').env('CartPole-v1').workers(2).replace(**spec).obj()


JOB = job()


def fields(reply) -> list[str]:
    return [cause['field'] for cause in reply.body['details']['causes']]


def test_cel_rule_violation_is_422_naming_the_field(rest):
    reply = rest.post(JOBS, job(algorithm='dqn', ppo={}))
    assert reply.status == 422 and reply.body['reason'] == 'Invalid'
    assert 'spec.ppo' in fields(reply)
    assert 'RLTrainingJob.kuberl.dev "job" is invalid: spec.ppo: Invalid value: "object"' in reply.message


def test_immutable_field_change_is_422_through_old_self(rest):
    created = rest.post(JOBS, job()).body
    reply = rest.patch(f'{JOBS}/job', {'spec': {'workers': 3}})
    assert reply.status == 422 and fields(reply) == ['spec.workers'] and 'immutable' in reply.message
    allowed = rest.patch(f'{JOBS}/job', {'spec': {'runPolicy': {'suspend': True}}})
    assert allowed.status == 200
    assert allowed.body['metadata']['generation'] == created['metadata']['generation'] + 1


@pytest.mark.parametrize(('spec', 'field', 'words'), [
    ({'workers': 0}, 'spec.workers', 'greater than or equal to 1'),
    ({'workers': 'two'}, 'spec.workers', 'must be of type integer'),
    ({'algorithm': 'a2c'}, 'spec.algorithm', 'supported values: "ppo", "dqn"'),
    ({'env': {'numEnvs': 2}}, 'spec.env.id', 'Required value'),
    ({'ppo': {'hiddenSizes': list(range(1, 20))}}, 'spec.ppo.hiddenSizes', 'must have at most'),
])
def test_schema_violations_name_the_field(rest, spec, field, words):
    reply = rest.post(JOBS, job(**spec))
    assert reply.status == 422, reply.body
    assert field in fields(reply) and words in reply.message


def test_required_spec_and_metadata_name_rules(rest):
    no_spec = {k: v for k, v in JOB.items() if k != 'spec'}
    assert 'spec' in fields(rest.post(JOBS, no_spec))
    too_long = job() | {'metadata': {'name': 'x' * 60}}
    assert 'metadata.name' in fields(rest.post(JOBS, too_long))


WIDGETS = '/apis/test.kuberl.dev/v1/namespaces/default/widgets'
WIDGET_CRD = {
    'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
    'metadata': {'name': 'widgets.test.kuberl.dev'},
    'spec': {'group': 'test.kuberl.dev', 'scope': 'Namespaced',
             'names': {'plural': 'widgets', 'singular': 'widget', 'kind': 'Widget', 'listKind': 'WidgetList'},
             'versions': [{'name': 'v1', 'served': True, 'storage': True, 'schema': {'openAPIV3Schema': {
                 'type': 'object', 'properties': {'spec': {'type': 'object', 'properties': {
                     'size': {'type': 'integer', 'default': 3},
                     'note': {'type': 'string', 'nullable': True},
                     'inner': {'type': 'object', 'properties': {'depth': {'type': 'integer', 'default': 1}}},
                     'free': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
                 }}}}}}]},
}


def test_defaults_nullable_and_pruning(rest, standin):
    standin.apply_crd(WIDGET_CRD)
    body = {'apiVersion': 'test.kuberl.dev/v1', 'kind': 'Widget', 'metadata': {'name': 'w'},
            'spec': {'note': None, 'inner': {'bogus': 1}, 'free': {'anything': {'goes': True}}, 'extra': 'x'}}
    reply = rest.post(WIDGETS, body)
    assert reply.status == 201
    spec = reply.body['spec']
    assert spec['note'] is None and spec['size'] == 3 and spec['inner'] == {'depth': 1}  # nullable kept, defaults filled
    assert spec['free'] == {'anything': {'goes': True}} and 'extra' not in spec
    warning = reply.headers.get('Warning', '')
    # each a quoted-string, its own quotes escaped (NewWarningHeader, k8s.io/apimachinery/pkg/util/net/http.go)
    assert warning == '299 - "unknown field \\"spec.inner.bogus\\"", 299 - "unknown field \\"spec.extra\\""'


def test_non_nullable_null_is_dropped_then_defaulted(rest):
    reply = rest.post(JOBS, job(workers=None))
    assert reply.status == 201 and reply.body['spec']['workers'] == 1


def test_strict_field_validation_refuses_unknown_fields(rest):
    reply = rest.post(f'{JOBS}?fieldValidation=Strict', job(workerz=2))
    assert reply.status == 400 and 'unknown field "spec.workerz"' in reply.message
    assert rest.get(f'{JOBS}/job').status == 404
    rest.post(JOBS, job())
    patched = rest.patch(f'{JOBS}/job?fieldValidation=Strict', {'spec': {'runPolicy': {'suspendd': True}}})
    assert patched.status == 400 and 'spec.runPolicy.suspendd' in patched.message


def test_status_is_ignored_on_create_and_kept_apart(rest):
    created = rest.post(JOBS, job() | {'status': {'phase': 'Succeeded'}}).body
    assert 'status' not in created
    status = rest.patch(f'{JOBS}/job/status', {'status': {'phase': 'Running', 'observedGeneration': 1},
                                               'spec': {'workers': 9}}).body
    assert status['status']['phase'] == 'Running' and status['spec']['workers'] == 2
    assert status['metadata']['generation'] == created['metadata']['generation']
    main = rest.patch(f'{JOBS}/job', {'status': {'phase': 'Failed'}, 'metadata': {'labels': {'a': 'b'}}}).body
    assert main['status']['phase'] == 'Running' and main['metadata']['generation'] == created['metadata']['generation']


def test_printer_columns_render_as_a_table(rest):
    rest.post(JOBS, job())
    rest.patch(f'{JOBS}/job/status', {'status': {'phase': 'Running', 'restarts': 1, 'progress': {'timesteps': 640},
                                                 'display': {'workers': '2/2'}}})
    table = rest.get(JOBS, headers={'Accept': 'application/json;as=Table;g=meta.k8s.io;v=v1'}).body
    names = [c['name'] for c in table['columnDefinitions']]
    row = dict(zip(names, table['rows'][0]['cells'], strict=True))
    assert row['Name'] == 'job' and row['Phase'] == 'Running' and row['Workers'] == '2/2'
    assert row['Restarts'] == 1 and row['Timesteps'] == 640 and row['Age'].endswith('s')


def test_a_crd_a_real_api_server_would_refuse_is_refused(rest):
    broken = copy.deepcopy(WIDGET_CRD)
    spec_schema = broken['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']
    spec_schema['x-kubernetes-validations'] = [{'rule': 'self.size >', 'message': 'x'},
                                               {'rule': 'self.size > 0', 'fieldPath': '.sise', 'message': 'y'}]
    spec_schema['properties']['size']['default'] = 'three'
    reply = rest.post('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', broken)
    assert reply.status == 422
    problems = ' '.join(fields(reply))
    assert 'x-kubernetes-validations[0].rule' in problems and 'x-kubernetes-validations[1].fieldPath' in problems
    assert 'properties[size].default' in problems
    assert rest.post('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', WIDGET_CRD).status == 201


# CRD validation ratcheting (KEP-4008; CRDValidationRatcheting, on by default since Kubernetes 1.30, GA in 1.33): on
# update an error raised at a value equal to its old one is let through, as apiextensions-apiserver does it:
# pkg/apiserver/validation/ratcheting.go (ratchetingValueValidator.Validate ratchets "if DeepEqual(old, new)"),
# pkg/apiserver/schema/cel/validation.go (validateExpressions: a rule that does not use oldSelf, and then as a
# warning), apiserver pkg/cel/common/equality.go (an atomic list's items never correlate: the list itself is judged).
GADGETS = '/apis/test.kuberl.dev/v1/namespaces/default/gadgets'
CRDS = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'


def gadget_crd(strict: bool) -> dict:
    """A CRD whose stricter version adds a maximum, an item's maximum, two rules at spec (one without oldSelf) and a
    defaulted field."""
    spec = {'type': 'object', 'properties': {
        'size': {'type': 'integer'}, 'mode': {'type': 'string'}, 'suspend': {'type': 'boolean'},
        **({'replicas': {'type': 'integer', 'default': 1}} if strict else {}),
        'ports': {'type': 'array', 'maxItems': 8, 'items': {'type': 'integer', **({'maximum': 100} if strict else {})}},
        'inner': {'type': 'object', 'properties': {'depth': {'type': 'integer', **({'maximum': 3} if strict else {})}}},
    }}
    if strict:
        spec['x-kubernetes-validations'] = [
            {'rule': "self.mode == 'small' ? self.size <= 5 : true", 'message': 'small means at most 5', 'fieldPath': '.size'},
            {'rule': 'oldSelf.size <= 50', 'message': 'was over 50'},  # a transition rule: never ratcheted
        ]
    return {'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
            'metadata': {'name': 'gadgets.test.kuberl.dev'},
            'spec': {'group': 'test.kuberl.dev', 'scope': 'Namespaced',
                     'names': {'plural': 'gadgets', 'singular': 'gadget', 'kind': 'Gadget', 'listKind': 'GadgetList'},
                     'versions': [{'name': 'v1', 'served': True, 'storage': True, 'subresources': {'status': {}},
                                   'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
                                       'spec': spec, 'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}}}]}}


def gadget(rest, standin, **spec) -> None:
    """A gadget created under the lax CRD, which then turns strict."""
    standin.apply_crd(gadget_crd(strict=False))
    body = {'apiVersion': 'test.kuberl.dev/v1', 'kind': 'Gadget', 'metadata': {'name': 'g'},
            'spec': {'size': 9, 'mode': 'small', 'ports': [80, 443], 'inner': {'depth': 7}} | spec}
    assert rest.post(GADGETS, body).status == 201
    current = rest.get(f'{CRDS}/gadgets.test.kuberl.dev').body
    strict = gadget_crd(strict=True)
    strict['metadata']['resourceVersion'] = current['metadata']['resourceVersion']
    assert rest.put(f'{CRDS}/gadgets.test.kuberl.dev', strict).status == 200


def test_an_unchanged_value_that_a_stricter_crd_refuses_is_let_through_on_update(rest, standin):
    gadget(rest, standin)
    relabelled = rest.patch(f'{GADGETS}/g', {'metadata': {'labels': {'team': 'a'}}})
    assert relabelled.status == 200, relabelled.body
    # the rule without oldSelf, ratcheted, is said as a warning; the schema's maxima are let through silently
    assert relabelled.headers.get('Warning') == '299 - "spec.size: Invalid value: \\"object\\": small means at most 5"'
    status = rest.patch(f'{GADGETS}/g/status', {'status': {'phase': 'Running'}})
    assert status.status == 200, status.body  # a controller's status write is an update of the same object
    assert rest.post(GADGETS, {'apiVersion': 'test.kuberl.dev/v1', 'kind': 'Gadget', 'metadata': {'name': 'h'},
                               'spec': {'size': 9, 'mode': 'small', 'ports': [80, 443], 'inner': {'depth': 7}}}).status == 422


def test_an_edit_beside_a_ratcheted_value_meets_the_rules_whose_value_it_changes(rest, standin):
    gadget(rest, standin)
    # spec changed (suspend), so the rule at spec is judged again; inner.depth and the ports did not change
    suspended = rest.patch(f'{GADGETS}/g', {'spec': {'suspend': True}})
    assert suspended.status == 422 and fields(suspended) == ['spec.size'], suspended.body
    # inner changed: its depth's maximum is judged again
    deeper = rest.patch(f'{GADGETS}/g', {'spec': {'mode': 'large', 'inner': {'depth': 7, 'width': 1}}})
    assert deeper.status == 200, deeper.body  # width is pruned: inner is as it was
    assert fields(rest.patch(f'{GADGETS}/g', {'spec': {'inner': {'depth': 8}}})) == ['spec.inner.depth']
    # an item of an atomic list has no old value of its own: a new port makes the old 443 meet the maximum
    assert fields(rest.patch(f'{GADGETS}/g', {'spec': {'ports': [80, 443, 90]}})) == ['spec.ports[1]']


def test_a_transition_rule_is_never_ratcheted(rest, standin):
    gadget(rest, standin, size=60, mode='large')
    relabelled = rest.patch(f'{GADGETS}/g', {'metadata': {'labels': {'team': 'a'}}})
    assert relabelled.status == 422 and 'was over 50' in relabelled.message


def test_a_default_a_crd_adds_is_read_on_objects_stored_before_and_moves_no_generation(rest, standin):
    """Defaults apply when an object is decoded, read back from etcd included, and are not written back (KEP-575,
    Defaulting for Custom Resources): a generation moves on a change of the spec as read (Semantic.DeepEqual of the
    old and new specs in the strategy's PrepareForUpdate), so a label's edit is no new generation."""
    gadget(rest, standin)
    read = rest.get(f'{GADGETS}/g').body
    assert read['spec']['replicas'] == 1 and 'replicas' not in standin.store.find('test.kuberl.dev', 'gadgets', 'default', 'g')['spec']
    relabelled = rest.patch(f'{GADGETS}/g', {'metadata': {'labels': {'team': 'a'}}}).body
    assert relabelled['metadata']['generation'] == read['metadata']['generation'] and relabelled['spec']['replicas'] == 1
