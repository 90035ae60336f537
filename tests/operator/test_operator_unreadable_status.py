"""A job whose status the operator cannot read (written by hand, restored from a backup, or by another version)
is reconciled on, its unreadable fields written anew: decide() raised on it at every reconcile, for ever, and the
job said nothing. The API server admits such a status: the CRD types only the status's top-level fields (a
timestamp is any string there; apiextensions checks `format` only where the schema sets one)."""
from tests.operator.operatorkit import (
    JOBS,
    pods,
    running_job,
    terminated,
    wait_phase,
)


def test_a_job_whose_status_holds_unreadable_times_is_reconciled_and_its_status_mended(standin, rest, operator):
    gang = running_job(standin, rest, 'mended', 2)
    patched = rest.patch(f'{JOBS}/mended/status', {'status': {'gangRunningTime': 'garbage', 'startTime': 'last week',
                                                             'rank0Progress': {'changedTime': 'x'}}})
    assert patched.status == 200, patched.body
    for pod in gang:
        terminated(standin, pod, 0, 'Succeeded: budget spent')
    done = wait_phase(rest, 'mended', 'Succeeded', timeout=30)
    assert 'garbage' not in str(done) and 'last week' not in str(done), done
    assert len(pods(standin, 'mended')) == 2, 'no gang was started again'
    assert "Daemon 'reconcile' failed" not in operator.log(), operator.log()[-3000:]
