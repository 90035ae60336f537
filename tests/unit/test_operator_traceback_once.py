"""main.TracebackOnce: a failure that repeats shows its traceback once per window, per job."""
import logging
import sys

from kuberl.operator.main import TracebackOnce


def failure(job: str | None, error: Exception) -> logging.LogRecord:
    """A record as kopf's per-object logger makes it: the job in `k8s_ref` (kopf._core.actions.loggers.ObjectLogger)."""
    try:
        raise error
    except type(error):
        exc_info = sys.exc_info()
    record = logging.LogRecord('kopf.objects', logging.ERROR, __file__, 1,
                               "Daemon 'reconcile' failed with an exception. Will retry.", (), exc_info)
    if job is not None:
        record.k8s_ref = {'apiVersion': 'kuberl.dev/v1alpha1', 'kind': 'RLTrainingJob', 'name': job, 'namespace': 'team-a'}
    return record


def shown_in_full(once: TracebackOnce, record: logging.LogRecord) -> bool:
    assert once.filter(record)
    return record.exc_info is not None


def test_each_jobs_own_failure_shows_its_traceback_and_its_repeats_are_one_line():
    now = [0.0]
    once = TracebackOnce(window=600, clock=lambda: now[0])
    assert shown_in_full(once, failure('a', KeyError('spec')))
    assert shown_in_full(once, failure('b', ValueError('another job, another failure'))), 'not a repeat of job a'
    repeat = failure('a', KeyError('spec'))
    assert not shown_in_full(once, repeat) and '[KeyError; traceback as logged at' in repeat.getMessage()
    now[0] = 601.0
    assert shown_in_full(once, failure('a', KeyError('spec'))), 'a new window shows it again'


def test_a_record_of_no_object_is_keyed_by_its_logger_and_message():
    once = TracebackOnce(window=600, clock=lambda: 0.0)
    assert shown_in_full(once, failure(None, ConnectionResetError()))
    assert not shown_in_full(once, failure(None, ConnectionRefusedError())), 'what failed, not how'


def test_failures_older_than_the_window_are_forgotten():
    """A key per job: jobs that failed long ago leave no entry behind once another failure is shown."""
    now = [0.0]
    once = TracebackOnce(window=600, clock=lambda: now[0])
    for job in range(50):
        assert shown_in_full(once, failure(f'job-{job}', KeyError('spec')))
    now[0] = 700.0
    assert shown_in_full(once, failure('job-new', KeyError('spec')))
    assert len(once.shown) == 1
