"""The local node runs bound pods as processes and reports them the way a kubelet does."""
import os
import shutil
import subprocess
import time

import pytest

from tests.support.localnode import LocalNode
from tests.support.selectors import parse_label_selector

PODS = '/api/v1/namespaces/default/pods'
SERVICES = '/api/v1/namespaces/default/services'
CONFIGMAPS = '/api/v1/namespaces/default/configmaps'
WRITE_MESSAGE = "import os,sys; open(os.environ['KUBERL_FS_ROOT'] + '/dev/termination-log', 'w').write({}); sys.exit({})"


def pod(name: str, code: str, labels: dict | None = None, grace: int = 30, **extra) -> dict:
    container = {'name': 'trainer', 'image': 'kuberl/trainer:test', 'command': ['python', '-c', code],
                 'terminationMessagePolicy': 'FallbackToLogsOnError', **extra.pop('container', {})}
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'labels': labels or {}},
            'spec': {'containers': [container], 'restartPolicy': 'Never', 'terminationGracePeriodSeconds': grace, **extra}}


@pytest.fixture
def node(local_node):
    return local_node


def wait_status(rest, name: str, predicate, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = rest.get(f'{PODS}/{name}').body
        if isinstance(last, dict) and last.get('kind') == 'Pod' and predicate(last):
            return last
        time.sleep(0.05)
    raise AssertionError(f'pod {name} never reached the state; last seen: {last}')


def terminated(pod: dict) -> dict:
    return pod['status']['containerStatuses'][0]['state'].get('terminated') or {}


def test_pod_runs_and_reports_exit_code_and_termination_message(rest, node):
    rest.post(PODS, pod('ok', WRITE_MESSAGE.format("'all done'", 0)))
    rest.post(PODS, pod('bad', "print('config error: spec.env.id'); raise SystemExit(3)"))
    ok = wait_status(rest, 'ok', lambda p: p['status']['phase'] == 'Succeeded')
    assert terminated(ok) | {'exitCode': 0, 'message': 'all done', 'reason': 'Completed'} == terminated(ok)
    bad = wait_status(rest, 'bad', lambda p: p['status']['phase'] == 'Failed')
    assert terminated(bad)['exitCode'] == 3 and 'config error: spec.env.id' in terminated(bad)['message']
    assert bad['status']['podIP'].startswith('127.') and bad['status']['podIP'] != ok['status']['podIP']


def test_env_resolves_cluster_dns_and_configmaps_become_directories(rest, node):
    service = {'apiVersion': 'v1', 'kind': 'Service', 'metadata': {'name': 'gang'},
               'spec': {'clusterIP': 'None', 'publishNotReadyAddresses': True, 'selector': {'job': 'j'}}}
    assert rest.post(SERVICES, service).status == 201
    config = {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'cfg'}, 'data': {'trainer.yaml': 'seed: 7'}}
    assert rest.post(CONFIGMAPS, config).status == 201
    rank0 = pod('j-0', 'import time; time.sleep(30)', {'job': 'j'}, hostname='j-0', subdomain='gang')
    report = ("os.environ['MASTER_ADDR'] + ' ' + os.environ['POD_NAME'] + ' ' + os.environ['BIND'] + ' ' + "
              "open(os.environ['KUBERL_FS_ROOT'] + '/etc/kuberl/trainer.yaml').read()")
    rank1 = pod('j-1', WRITE_MESSAGE.format(report, 0), {'job': 'j'}, hostname='j-1', subdomain='gang',
                volumes=[{'name': 'config', 'configMap': {'name': 'cfg'}}],
                container={'env': [{'name': 'MASTER_ADDR', 'value': 'j-0.gang.default.svc'},
                                   {'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}},
                           {'name': 'BIND', 'value': '0.0.0.0'}],
                           'volumeMounts': [{'name': 'config', 'mountPath': '/etc/kuberl'}]})
    rest.post(PODS, rank1)
    rest.post(PODS, rank0)
    first = wait_status(rest, 'j-0', lambda p: p['status'].get('phase') == 'Running')
    done = wait_status(rest, 'j-1', lambda p: p['status'].get('phase') == 'Succeeded')
    assert terminated(done)['message'] == f'{first["status"]["podIP"]} j-1 {done["status"]["podIP"]} seed: 7'


def test_graceful_deletion_sigterm_then_sigkill_then_gone(rest, node):
    stubborn = 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print("up", flush=True); time.sleep(60)'
    rest.post(PODS, pod('stubborn', stubborn, grace=1))
    wait_status(rest, 'stubborn', lambda p: p['status'].get('phase') == 'Running')
    log = node.workdir / 'logs' / 'default_stubborn.log'
    deadline = time.monotonic() + 60
    while not (log.exists() and 'up' in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGTERM is ignored only once the handler is installed
    pids = node.pids()
    assert len(pids) == 1
    started = time.monotonic()
    rest.delete(f'{PODS}/stubborn')
    assert rest.get(f'{PODS}/stubborn').body['metadata']['deletionTimestamp']
    deadline = time.monotonic() + 60
    while rest.get(f'{PODS}/stubborn').status != 404 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rest.get(f'{PODS}/stubborn').status == 404
    took = time.monotonic() - started
    print(f'pod held {took:.2f}s for its 1 s grace period')
    assert 0.9 <= took < 30  # held for the grace period, then killed (not left to its 60 s sleep)
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_image_pull_failure_and_eviction_hooks(rest, node, standin):
    standin.store.hooks.image_pull_failure.append(parse_label_selector('pull=broken'))
    rest.post(PODS, pod('unpullable', 'print(1)', {'pull': 'broken'}))
    waiting = wait_status(rest, 'unpullable', lambda p: p['status'].get('containerStatuses', [{}])[0]
                          .get('state', {}).get('waiting', {}).get('reason') == 'ImagePullBackOff')
    assert waiting['status']['phase'] == 'Pending'
    rest.post(PODS, pod('evictee', 'import time; time.sleep(60)', grace=2))
    wait_status(rest, 'evictee', lambda p: p['status'].get('phase') == 'Running')
    standin.store.evict('default', 'evictee')
    deadline = time.monotonic() + 60
    while rest.get(f'{PODS}/evictee').status != 404 and time.monotonic() < deadline:
        time.sleep(0.05)
    final = [e.obj for e in standin.store.history[('', 'pods')] if e.obj['metadata']['name'] == 'evictee'][-1]
    assert final['status']['phase'] == 'Failed'  # reported by the node before it confirmed the deletion
    assert any(c['type'] == 'DisruptionTarget' for c in final['status']['conditions'])
    assert terminated(final)['exitCode'] == 128 + 15


def test_lost_node_leaves_pods_terminating_until_forced(rest, standin, tmp_path):
    node = LocalNode(standin.url, tmp_path / 'lost')
    node.start()
    try:
        rest.post(PODS, pod('stranded', 'import time; time.sleep(60)'))
        wait_status(rest, 'stranded', lambda p: p['status'].get('phase') == 'Running')
        node.lose()
        rest.delete(f'{PODS}/stranded', {'gracePeriodSeconds': 1})
        time.sleep(1.5)
        assert rest.get(f'{PODS}/stranded').body['status']['phase'] == 'Running'  # nobody reports it any more
        assert not node.pids()
        rest.delete(f'{PODS}/stranded', {'gracePeriodSeconds': 0})
        assert rest.get(f'{PODS}/stranded').status == 404
    finally:
        node.stop()




def test_logs_are_proxied_to_the_node_like_kubectl_logs_expects(rest, node, standin):
    rest.post(PODS, pod('chatty', "print('line one'); print('line two')"))
    wait_status(rest, 'chatty', lambda p: p['status']['phase'] == 'Succeeded')
    reply = rest.get(f'{PODS}/chatty/log?tailLines=1')
    assert reply.status == 200 and reply.body == 'line two\n'
    kubectl = shutil.which('kubectl')
    if kubectl:
        shown = subprocess.run([kubectl, '--kubeconfig', str(standin.kubeconfig), 'logs', 'chatty'],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        assert shown == 'line one\nline two\n'


def test_on_failure_restarts_the_container_and_counts_it(rest, node, tmp_path):
    marker = tmp_path / 'ran-once'
    code = (f"import os,sys; m={str(marker)!r}; "
            "sys.exit(0) if os.path.exists(m) else (open(m, 'w').close(), sys.exit(1))")
    rest.post(PODS, pod('flaky', code) | {'spec': pod('flaky', code)['spec'] | {'restartPolicy': 'OnFailure'}})
    done = wait_status(rest, 'flaky', lambda p: p['status'].get('phase') == 'Succeeded')
    status = done['status']['containerStatuses'][0]
    assert status['restartCount'] == 1 and status['lastState']['terminated']['exitCode'] == 1
