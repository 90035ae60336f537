"""A namespaced install (`--namespace a --namespace b`, the chart's operator.watchNamespaces) whose RBAC is
missing in ONE namespace (its RoleBinding not created yet, or deleted): kopf ends its whole run when one
watch is refused, and the operator exited, so the jobs of every other namespace went unreconciled too. It
now serves the namespaces it may, says the refused one in one line (and a gauge), and takes it back once
RBAC allows it, without a restart. With every watched namespace refused it exits as before."""
import re
import time

from tests.operator.operatorkit import TRAINER_IMAGE, Operator, manifest, wait_for

RLTJ_PATH = '/apis/kuberl.dev/v1alpha1/namespaces/{}/rltrainingjobs'
# Without a RoleBinding in the namespace, everything kopf lists and watches there is refused.
MISSING_ROLEBINDING = {(verb, plural) for verb in ('list', 'watch') for plural in ('rltrainingjobs', 'pods')}


def refuse(standin, namespace):
    standin.handler.denied.update((verb, plural, namespace) for verb, plural in MISSING_ROLEBINDING)


def create_in(rest, namespace, name):
    assert rest.post(RLTJ_PATH.format(namespace), manifest(name, workers=1)).status == 201


def pods_in(standin, namespace, job):
    return [p for p in standin.store.objects_of('', 'pods')
            if p['metadata']['namespace'] == namespace and p['metadata']['labels'].get('kuberl.dev/job') == job]


def refused_gauge(op, namespace):
    try:
        page = op.metrics()
    except OSError:  # restarting in place (config.GoneWatchdog: kopf hung on the refusal)
        return None
    found = re.search(rf'^kuberl_operator_namespace_refused{{namespace="{namespace}"}} (\S+)$', page, re.MULTILINE)
    return float(found[1]) if found else None


def counted(op, counter, code):
    return re.search(rf'^kuberl_operator_api_{counter}_total{{[^}}]*code="{code}"[^}}]*}} [1-9]', op.metrics(), re.MULTILINE)


def test_one_namespace_refused_leaves_the_others_served_and_is_taken_back_once_granted(standin, rest, tmp_path):
    for namespace in ('team-a', 'team-b'):
        assert rest.post('/api/v1/namespaces', {'metadata': {'name': namespace}}).status == 201
    refuse(standin, 'team-b')
    # a short watch timeout: kopf asks for its watches again within seconds, and meets a revoked grant there
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--namespace', 'team-a', '--namespace', 'team-b',
                  '--watch-timeout', '3').start()
    try:
        wait_for(lambda: refused_gauge(op, 'team-b') == 1, timeout=30, what='the refused namespace to be reported')
        create_in(rest, 'team-a', 'served')
        wait_for(lambda: pods_in(standin, 'team-a', 'served'), timeout=30, what="pods of team-a's job, team-b refused")
        said = [line for line in op.log().splitlines() if 'RBAC forbids the operator to' in line]
        assert len(said) == 1, op.log()[-4000:]
        assert 'in namespace "team-b"' in said[0] and 'goes on serving team-a' in said[0], said
        assert 'in the Role in namespace "team-b"' in said[0], said
        assert refused_gauge(op, 'team-b') == 1 and refused_gauge(op, 'team-a') == 0
        # its 10 s recheck, answered 403, is what the gauge says: not a second count (and alert) for one cause
        wait_for(lambda: counted(op, 'resolved', '403'), timeout=30, what="the refused namespace's recheck")
        assert not counted(op, 'errors', '403'), op.metrics()

        create_in(rest, 'team-b', 'waiting')
        standin.handler.denied.clear()  # the RoleBinding created
        wait_for(lambda: pods_in(standin, 'team-b', 'waiting'), timeout=40, what="pods of team-b's job once RBAC allows it")
        assert op.process.poll() is None and op.starts == 1
        assert 'serves the jobs there from now on' in op.log()
        assert refused_gauge(op, 'team-b') == 0

        assert 'rltj="served"' in op.metrics()
        refuse(standin, 'team-a')  # a RoleBinding deleted while the operator runs
        # a pod event before kopf's watch there meets the 403: the job's loop lists its pods and is refused (a
        # traceback in the log once, when a loaded machine's loop relisted in that window; now at every run)
        assert rest.patch('/api/v1/namespaces/team-a/pods/served-0', {'metadata': {'annotations': {'poked': '1'}}}).status == 200
        wait_for(lambda: refused_gauge(op, 'team-a') == 1, timeout=40, what='the revoked namespace to be reported')
        assert 'rltj="served"' not in op.metrics()  # its phase is not known any more
        create_in(rest, 'team-b', 'after')
        wait_for(lambda: pods_in(standin, 'team-b', 'after'), timeout=30, what="pods of team-b's job, team-a revoked")
        wait_for(op.healthy, what="/healthz")
        assert 'Traceback' not in op.log(), op.log()[-4000:]
        started = time.monotonic()
        op.stop()  # a namespace refused: SIGTERM reaches kopf through the operator's stop flag (main.run_kopf)
        assert op.process.returncode == 0 and time.monotonic() - started < 10, op.log()[-3000:]
        assert 'Signal SIGTERM is received' in op.log(), op.log()[-3000:]
    finally:
        op.stop()


def test_every_watched_namespace_refused_exits_with_the_line(standin, rest, tmp_path):
    assert rest.post('/api/v1/namespaces', {'metadata': {'name': 'team-b'}}).status == 201
    refuse(standin, 'team-b')
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--namespace', 'team-b')
    op.start(watching=False)
    try:
        assert op.process.wait(timeout=40) == 1
        said = [line for line in op.log().splitlines() if 'RBAC forbids the operator to' in line]
        assert len(said) == 1 and 'in namespace "team-b"' in said[0] and 'The operator exits' in said[0], op.log()[-4000:]
    finally:
        op.stop()
