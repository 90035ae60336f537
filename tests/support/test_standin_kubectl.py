"""Real kubectl (the machine's v1.32 and v1.33 from `make tools`) against the stand-in, as users type it."""
import pathlib
import shutil
import subprocess
import threading
import time

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / 'manifests' / 'examples' / 'cartpole-ppo.yaml'
KUBECTL_133 = ROOT / '.tools' / 'bin' / 'kubectl-1.33'
JOBS = '/apis/kuberl.dev/v1alpha1/namespaces/default/rltrainingjobs'


def kubectls() -> list:
    found = []
    machine = shutil.which('kubectl')
    found.append(pytest.param(machine, id='kubectl-machine', marks=pytest.mark.skipif(
        machine is None, reason='no kubectl on PATH (the machine image ships v1.32)')))
    found.append(pytest.param(str(KUBECTL_133), id='kubectl-1.33', marks=pytest.mark.skipif(
        not KUBECTL_133.exists(), reason='kubectl v1.33 missing: run `make tools`')))
    return found


@pytest.fixture(params=kubectls())
def kubectl(request, standin):
    def run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        result = subprocess.run([request.param, '--kubeconfig', str(standin.kubeconfig), *args],
                                check=False, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f'kubectl {" ".join(args)} failed: {result.stderr}')
        return result
    return run


def example_name() -> str:
    return yaml.safe_load(EXAMPLE.read_text())['metadata']['name']


def test_apply_get_describe_delete(kubectl, rest):
    name = example_name()
    assert 'created' in kubectl('apply', '-f', str(EXAMPLE)).stdout
    assert 'unchanged' in kubectl('apply', '-f', str(EXAMPLE)).stdout
    rest.patch(f'{JOBS}/{name}/status', {'status': {'phase': 'Running', 'restarts': 2,
                                                    'progress': {'timesteps': 4096, 'episodeReturnMean': 123.456},
                                                    'display': {'workers': '1/2', 'return': '123.5'}}})
    header, row = kubectl('get', 'rltj').stdout.splitlines()
    assert header.split() == ['NAME', 'PHASE', 'WORKERS', 'RESTARTS', 'TIMESTEPS', 'RETURN', 'EVAL', 'REASON', 'AGE']
    assert row.split()[:6] == [name, 'Running', '1/2', '2', '4096', '123.5'] and len(row.split()) == 7  # no eval, no reason yet
    described = kubectl('describe', 'rltj', name).stdout
    assert f'Name:         {name}' in described and 'Total Timesteps:' in described
    assert 'deleted' in kubectl('delete', '-f', str(EXAMPLE)).stdout
    assert rest.get(f'{JOBS}/{name}').status == 404


def test_edit_through_apply_and_wait(kubectl, rest, tmp_path):
    name = example_name()
    kubectl('apply', '-f', str(EXAMPLE))
    edited = yaml.safe_load(EXAMPLE.read_text())
    edited['spec'].setdefault('runPolicy', {})['suspend'] = True
    path = tmp_path / 'edited.yaml'
    path.write_text(yaml.safe_dump(edited))
    assert 'configured' in kubectl('apply', '-f', str(path)).stdout
    assert rest.get(f'{JOBS}/{name}').body['spec']['runPolicy']['suspend'] is True

    def finish() -> None:
        time.sleep(0.5)
        rest.patch(f'{JOBS}/{name}/status', {'status': {'phase': 'Succeeded'}})
    threading.Thread(target=finish, daemon=True).start()
    kubectl('wait', f'rltj/{name}', '--for=jsonpath={.status.phase}=Succeeded', '--timeout=60s')
    deleter = threading.Thread(target=lambda: (time.sleep(0.5), rest.delete(f'{JOBS}/{name}')), daemon=True)
    deleter.start()
    kubectl('wait', f'rltj/{name}', '--for=delete', '--timeout=60s')


def test_unknown_field_is_refused_not_dropped(kubectl, rest, tmp_path):
    typo = yaml.safe_load(EXAMPLE.read_text())
    typo['spec']['workerz'] = 3
    path = tmp_path / 'typo.yaml'
    path.write_text(yaml.safe_dump(typo))
    result = kubectl('apply', '-f', str(path), check=False)
    assert result.returncode != 0 and 'unknown field "spec.workerz"' in result.stderr
    assert rest.get(f'{JOBS}/{typo["metadata"]["name"]}').status == 404


def test_rule_violation_is_shown_with_its_field(kubectl, tmp_path):
    wrong = yaml.safe_load(EXAMPLE.read_text())
    wrong['spec']['algorithm'] = 'dqn'
    path = tmp_path / 'wrong.yaml'
    path.write_text(yaml.safe_dump(wrong))
    result = kubectl('apply', '-f', str(path), check=False)
    assert result.returncode != 0 and 'spec.ppo' in result.stderr and 'is invalid' in result.stderr


def test_get_pods_and_core_discovery(kubectl, rest):
    pod = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'p0'},
           'spec': {'containers': [{'name': 'main', 'image': 'busybox:1'}]}}
    assert rest.post('/api/v1/namespaces/default/pods', pod).status == 201
    header, row = kubectl('get', 'pods').stdout.splitlines()
    assert header.split() == ['NAME', 'READY', 'STATUS', 'RESTARTS', 'AGE'] and row.split()[:3] == ['p0', '0/1', 'Pending']
    assert 'default' in kubectl('get', 'namespaces').stdout


def test_explain_reads_the_crd_schema(kubectl):
    crd = yaml.safe_load((ROOT / 'manifests' / 'crd.yaml').read_text())
    workers = crd['spec']['versions'][0]['schema']['openAPIV3Schema']['properties']['spec']['properties']['workers']
    explained = kubectl('explain', 'rltj.spec.workers').stdout
    assert 'FIELD: workers <integer>' in explained and workers['description'] in explained


def test_server_side_apply_creates_then_updates(kubectl, rest, tmp_path):
    name = example_name()
    assert 'serverside-applied' in kubectl('apply', '--server-side', '-f', str(EXAMPLE)).stdout
    edited = yaml.safe_load(EXAMPLE.read_text())
    edited['spec'].setdefault('runPolicy', {})['suspend'] = True
    path = tmp_path / 'edited.yaml'
    path.write_text(yaml.safe_dump(edited))
    kubectl('apply', '--server-side', '-f', str(path))
    assert rest.get(f'{JOBS}/{name}').body['spec']['runPolicy']['suspend'] is True
    edited['spec']['workerz'] = 1
    path.write_text(yaml.safe_dump(edited))
    refused = kubectl('apply', '--server-side', '-f', str(path), check=False)
    assert refused.returncode != 0 and 'workerz' in refused.stderr
