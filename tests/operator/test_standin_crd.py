"""Custom resources are validated and defaulted from manifests/crd.yaml, as a real API server would."""
import copy

import pytest

JOBS = '/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs'
JOB = {'apiVersion': 'kuberl.dev/v1alpha1', 'kind': 'RLTrainingJob', 'metadata': {'name': 'job'},
       'spec': {'algorithm': 'ppo', 'env': {'id': 'CartPole-v1'}, 'totalTimesteps': 1000, 'workers': 2}}


def job(**spec) -> dict:
    body = copy.deepcopy(JOB)
    body['spec'].update(spec)
    return body


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


def test_defaults_nullable_and_pruning(rest):
    body = job(ppo={'targetKl': None}, bogus=1)
    body['spec']['env']['alsoBogus'] = True
    reply = rest.post(JOBS, body)
    assert reply.status == 201
    spec = reply.body['spec']
    assert spec['ppo']['targetKl'] is None and spec['ppo']['learningRate'] == 0.0025  # nullable kept, default filled
    assert spec['env']['numEnvs'] == 8 and spec['seed'] == 1
    assert 'bogus' not in spec and 'alsoBogus' not in spec['env']
    assert 'unknown field "spec.bogus"' in reply.headers.get('Warning', '')


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
    rest.patch(f'{JOBS}/job/status', {'status': {'phase': 'Running', 'restarts': 1, 'progress': {'timesteps': 640}}})
    table = rest.get(JOBS, headers={'Accept': 'application/json;as=Table;g=meta.k8s.io;v=v1'}).body
    names = [c['name'] for c in table['columnDefinitions']]
    row = dict(zip(names, table['rows'][0]['cells'], strict=True))
    assert row['Name'] == 'job' and row['Phase'] == 'Running' and row['Workers'] == 2
    assert row['Restarts'] == 1 and row['Timesteps'] == 640 and row['Age'].endswith('s')
