"""RBAC that refuses the operator its own list or watch (a ClusterRole that lost `watch` on
rltrainingjobs, or `list` on pods): kopf cannot run with a watch refused, and the operator ended
with three Python tracebacks and no word of what to grant. It now exits 1 with one line naming the
verb, the resource, the ServiceAccount and the kind of role to fix; started again once the
permission is granted (the kubelet's restart), it runs the jobs it missed."""
import pytest

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)

USER = 'ServiceAccount kuberl-system/kuberl-operator'  # tests.support.admission.OPERATOR_USER


@pytest.mark.parametrize(('verb', 'plural', 'grant'), [
    ('watch', 'rltrainingjobs', 'grant verb "watch" on resource "rltrainingjobs" in API group "kuberl.dev"'),
    ('list', 'pods', 'grant verb "list" on resource "pods" in the core API group ("")'),
])
def test_rbac_refusing_the_operators_own_watch_exits_with_one_line_naming_the_grant_then_heals(standin, rest, tmp_path,
                                                                                              verb, plural, grant):
    standin.handler.denied.add((verb, plural))
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE)
    op.start(watching=False)
    try:
        assert op.process.wait(timeout=40) == 1
        log = op.log()
        said = [line for line in log.splitlines() if 'RBAC forbids the operator to' in line]
        assert len(said) == 1, log[-4000:]
        assert f'to {verb} {plural}' in said[0] and grant in said[0] and f'to {USER} in the ClusterRole bound to it' in said[0], said
        assert 'Traceback' not in log, log[-4000:]
        create_job(rest, 'missed', workers=1)
        standin.handler.denied.clear()  # the ClusterRole mended; the kubelet starts the operator again
        op.start()
        wait_for(lambda: pods(standin, 'missed'), timeout=30, what='pods of the job created while the operator was refused')
    finally:
        op.stop()
