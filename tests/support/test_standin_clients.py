"""Real clients over real HTTP: the kubernetes python client and a tiny kopf operator."""
import textwrap
import time

import kopf
import kubernetes
from kopf.testing import KopfRunner

from tests.support.jobs import make_job

JOBS = '/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs'
JOB = make_job('smoke').without('workers').obj()  # the CRD defaults workers


def test_python_client_create_returns_the_created_object(kube_api):
    core = kubernetes.client.CoreV1Api(kube_api)
    pod = kubernetes.client.V1Pod(metadata=kubernetes.client.V1ObjectMeta(name='p'), spec=kubernetes.client.V1PodSpec(
        containers=[kubernetes.client.V1Container(name='main', image='busybox:1')]))
    created = core.create_namespaced_pod('default', pod)
    assert created is not None and created.metadata.uid and created.metadata.namespace == 'default'
    listed = core.list_namespaced_pod('default', label_selector='')
    assert [p.metadata.name for p in listed.items] == ['p'] and listed.metadata.resource_version
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    job = custom.create_namespaced_custom_object('kuberl.dev', 'v1alpha1', 'default', 'rltrainingjobs', JOB)
    assert job['metadata']['generation'] == 1 and job['spec']['workers'] == 1
    try:
        custom.create_namespaced_custom_object('kuberl.dev', 'v1alpha1', 'default', 'rltrainingjobs', JOB)
        raise AssertionError('a second create of the same name must fail')
    except kubernetes.client.ApiException as error:
        assert error.status == 409


OPERATOR = textwrap.dedent('''
    import os
    import kopf

    @kopf.on.login()
    def login(**_):
        return kopf.ConnectionInfo(server=os.environ['STANDIN_URL'], token='standin', insecure=True)

    @kopf.on.startup()
    def configure(settings, **_):
        settings.posting.enabled = True
        settings.watching.server_timeout = 10

    @kopf.on.create('kuberl.dev', 'v1alpha1', 'rltrainingjobs')
    def created(name, patch, **_):
        patch.status['phase'] = 'Running'
        kopf.info({'metadata': {'name': name, 'namespace': 'default'}, 'kind': 'RLTrainingJob', 'apiVersion': 'kuberl.dev/v1alpha1'},
                  reason='Running', message=f'saw {name}')
''')


def test_kopf_operator_sees_a_create_over_real_http(standin, rest, tmp_path, monkeypatch):
    module = tmp_path / 'smoke_operator.py'
    module.write_text(OPERATOR)
    monkeypatch.setenv('STANDIN_URL', standin.url)
    # A fresh registry: other tests import kuberl.operator.handlers, which registers into kopf's global one.
    registry = kopf.OperatorRegistry()
    with KopfRunner(['run', '--standalone', '--namespace=default', str(module)], timeout=60, registry=registry) as runner:
        time.sleep(1.0)
        assert rest.post(JOBS, JOB).status == 201
        deadline = time.monotonic() + 60  # the job Running ends the wait; the assertions below say if it never came
        while time.monotonic() < deadline and rest.get(f'{JOBS}/smoke').body.get('status', {}).get('phase') != 'Running':
            time.sleep(0.1)
    assert runner.exit_code == 0, runner.output
    job = rest.get(f'{JOBS}/smoke').body
    assert job['status']['phase'] == 'Running'
    assert any(call.agent == 'kopf' and call.subresource == 'status' and call.verb == 'patch' for call in standin.calls)
