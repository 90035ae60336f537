"""SIGTERM to a real operator whose shutdown hangs ends the process within its bound, inside the pod's grace period,
saying what hung. kopf's own backstop SIGKILLs 600 s after a signal (past the kubelet's 30 s), without a word, from
an event loop a blocking handler never lets run, and not at all when a stop flag stopped kopf, as the operator's
refused-namespace path does. Each case adds one handler that hangs (`Operator(preload=...)`) to the real operator."""
import signal
import subprocess
import time

import pytest
from kuberl.core import names
from kuberl.operator.config import SHUTDOWN_TIMEOUT_SECONDS

from tests.operator.operatorkit import (
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)

JOBS = f"'{names.GROUP}', '{names.VERSION}', '{names.PLURAL}'"

# A job's daemon that swallows every cancellation: kopf orphans it, then waits for it for ever.
IGNORES_CANCELLATION = f"""
import asyncio, kopf
@kopf.daemon({JOBS}, id='stubborn')
async def stubborn(**_):
    print('stubborn daemon running', flush=True)
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass
"""

# A synchronous cleanup handler, run by kopf in a thread, that never returns.
THREAD_NEVER_RETURNS = """
import time, kopf
@kopf.on.cleanup()
def stuck_cleanup(**_):
    time.sleep(3600)
"""

# A job's daemon that blocks the event loop itself (a synchronous call in async code): no loop callback runs again.
BLOCKS_THE_LOOP = f"""
import time, kopf
@kopf.daemon({JOBS}, id='blocker')
async def blocker(**_):
    print('blocking the event loop', flush=True)
    time.sleep(3600)
"""


@pytest.mark.parametrize('preload, timeout, job, named', [
    (IGNORES_CANCELLATION, None, True, 'stubborn'),
    (THREAD_NEVER_RETURNS, 3, False, 'stuck_cleanup'),
    (BLOCKS_THE_LOOP, 3, True, 'the event loop itself, blocked since the signal came'),
], ids=['daemon-ignores-cancellation', 'cleanup-thread-never-returns', 'event-loop-blocked'])
def test_sigterm_ends_an_operator_whose_shutdown_hangs_within_its_bound(standin, rest, tmp_path, preload, timeout, job, named):
    extra = ('--shutdown-timeout', str(timeout)) if timeout else ()
    operator = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, *extra, preload=preload).start()
    bound = timeout or SHUTDOWN_TIMEOUT_SECONDS
    try:
        if job:
            create_job(rest, 'hangs', workers=1)
            wait_for(lambda: 'stubborn daemon running' in operator.log() or 'blocking the event loop' in operator.log(),
                     timeout=30, what='the hanging handler to run', explain=lambda: operator.log()[-3000:])
        signalled = time.monotonic()
        operator.process.send_signal(signal.SIGTERM)
        try:
            code = operator.process.wait(bound + 8)
        except subprocess.TimeoutExpired:
            pytest.fail(f'still running {bound + 8:g}s after SIGTERM (bound {bound:g}s): {operator.log()[-3000:]}')
        took = time.monotonic() - signalled
    finally:
        operator.kill()
    log = operator.log()
    assert code == 1, log[-3000:]
    assert bound - 0.5 <= took <= bound + 5, (took, log[-3000:])
    said = [line for line in log.splitlines() if f'did not stop within {bound:g}s of SIGTERM' in line]
    assert len(said) == 1, log[-3000:]
    assert named in log[log.index(said[0]):], log[-3000:]  # in the line (a task) or in the stacks that follow (a thread)
    if preload is BLOCKS_THE_LOOP:  # the main thread's stack names the handler that blocks it
        assert 'in blocker' in log[log.index(said[0]):], log[-3000:]


def test_sigterm_ends_an_operator_with_a_running_job_at_once_and_cleanly(standin, rest, tmp_path):
    """The bound is a backstop only: a shutdown that does not hang ends in about a second, exit 0, nothing said of it."""
    operator = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE).start()
    try:
        create_job(rest, 'runs', workers=2)
        wait_for(lambda: len(pods(standin, 'runs')) == 2, timeout=30, what='the gang')
        signalled = time.monotonic()
        operator.process.send_signal(signal.SIGTERM)
        code = operator.process.wait(SHUTDOWN_TIMEOUT_SECONDS + 8)
        took = time.monotonic() - signalled
    finally:
        operator.kill()
    # under half the 20 s backstop (SHUTDOWN_TIMEOUT_SECONDS): a hang would meet it; a loaded CI machine stretches ~1 s
    assert code == 0 and took < 10, (code, took, operator.log()[-3000:])
    assert 'did not stop within' not in operator.log()
