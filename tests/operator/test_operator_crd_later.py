"""The RLTrainingJob CRD installed after the operator started (`kubectl apply -f manifests/install.yaml` creates
the CRD and the operator's Deployment at once; a chart installed with --skip-crds): kopf resolves its resources
once, at its start, warned "Unresolved resources cannot be served" and ran blind, /healthz up, until the watch
bound (about 6 minutes) failed its liveness probe. It now says what is missing, and restarts in place (same
process) once the API server serves the CRD, then runs the jobs created meanwhile."""
import time

from kuberl.core import names

from tests.operator.operatorkit import (
    CRD,
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)
from tests.support.apiserver import StandinServer
from tests.support.rest import Rest

CRD_NAME = 'rltrainingjobs.kuberl.dev'


def test_a_crd_installed_after_the_operator_started_is_said_then_served_without_a_restart_by_the_kubelet(tmp_path):
    with StandinServer(workdir=tmp_path) as standin:
        op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '2')
        op.start(watching=False)
        try:
            wait_for(lambda: 'the RLTrainingJob CRD is not installed' in op.log(), timeout=30, what='the missing CRD said')
            time.sleep(8)  # past the silent-watch bound of --watch-timeout 2 (6.2 s): a 404 is an answer, not a silence
            assert op.healthy()
            pid = op.process.pid
            standin.apply_crd(CRD)
            create_job(Rest(standin.url), 'early', workers=1)
            wait_for(lambda: pods(standin, 'early'), timeout=40, what='pods of a job created once the CRD was installed')
            assert op.process.poll() is None and op.process.pid == pid and op.starts == 1
            log = op.log()
            assert log.count('the RLTrainingJob CRD is not installed') == 1, log[-3000:]
            assert 'the operator restarts in place to watch its jobs' in log and 'Traceback' not in log, log[-3000:]
        finally:
            op.stop()


def test_a_crd_deleted_while_the_operator_runs_is_one_line_and_served_again_once_reinstalled(standin, rest, tmp_path):
    """Deleting the CRD (an uninstall that took it, by hand) ended kopf's watch with a 404 and the operator exited 1
    with two tracebacks; restarted, it ran blind until its liveness probe failed. As the real API server deletes a CRD
    (tests/support/test_standin_crd_deletion.py), each job is Terminating first, and the CRD waits for the operator to
    let it go as for any deletion: its gang is collected through owner references, then the CRD goes."""
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '2').start()
    try:
        create_job(rest, 'before', workers=1)
        wait_for(lambda: pods(standin, 'before'), what='pods of a job before the CRD goes')
        pid = op.process.pid
        seen = []  # (resource, event type, object) in the store's order
        for plural in (('apiextensions.k8s.io', 'v1', 'customresourcedefinitions'), (names.GROUP, names.VERSION, names.PLURAL)):
            standin.store.subscribe(standin.store.type_of(*plural), str(standin.store.revision),
                                    lambda event, plural=plural: seen.append((plural[2], event.type, event.obj)), lambda *_: None)
        assert rest.delete(f'/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}').status == 200
        # kopf ends its run on the 404, then starts again: seconds here, but a loaded CI machine once took past 40 s
        # (the log comes with a failure, to tell where). Both lines, in either order: the heartbeat's list may say
        # the CRD missing before kopf's run has ended.
        wait_for(lambda: 'the RLTrainingJob CRD is not installed' in op.log() and 'a watch was answered 404' in op.log(),
                 timeout=90, what='the missing CRD said', explain=lambda: op.log()[-4000:])

        def first(plural: str, matches) -> int | None:
            return next((i for i, (p, kind, obj) in enumerate(seen) if p == plural and matches(kind, obj)), None)

        terminating = first(names.PLURAL, lambda kind, obj: obj['metadata'].get('deletionTimestamp'))
        job_gone = first(names.PLURAL, lambda kind, obj: kind == 'DELETED')
        crd_gone = first('customresourcedefinitions', lambda kind, obj: kind == 'DELETED')
        assert None not in (terminating, job_gone, crd_gone) and terminating < job_gone < crd_gone, seen
        assert not seen[job_gone][2]['metadata'].get('finalizers')  # the operator let it go
        wait_for(lambda: not pods(standin, 'before'), what='its gang collected with it')  # by the collector, soon after
        said = [line for line in op.log().splitlines() if 'a watch was answered 404' in line]
        assert len(said) == 1 and 'its CRD deleted' in said[0], op.log()[-4000:]
        standin.apply_crd(CRD)
        create_job(rest, 'after', workers=1)
        wait_for(lambda: pods(standin, 'after'), timeout=90, what='pods of a job created once the CRD is back',
                 explain=lambda: op.log()[-4000:])
        assert op.process.poll() is None and op.process.pid == pid and op.starts == 1
        assert 'Traceback' not in op.log(), op.log()[-4000:]
    finally:
        op.stop()
