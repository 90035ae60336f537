"""The RLTrainingJob CRD installed after the operator started (`kubectl apply -f manifests/install.yaml` creates
the CRD and the operator's Deployment at once; a chart installed with --skip-crds): kopf resolves its resources
once, at its start, warned "Unresolved resources cannot be served" and ran blind, /healthz up, until the watch
bound (about 6 minutes) failed its liveness probe. It now says what is missing, and restarts in place (same
process) once the API server serves the CRD, then runs the jobs created meanwhile."""
import time

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
