"""The API server failing a child's create (a 5xx after the operator's own retries), most often a webhook with
failurePolicy Fail it cannot call: the job said nothing (kopf retried every 5 s; the operator's log and kopf's
own per-retry Events held the reason). Its Ready condition now says it, and the job waits, without a deadline
(no fault of its own), and starts once the API server creates its pods. Status writes shed (429) and creates
answered 503 are waited out the same way, each rank made once, and the operator keeps hearing its pods."""

import kmock
from kuberl.core import names
from kuberl.operator import kubeapi

from tests.operator.operatorkit import (
    condition,
    create_job,
    events,
    pods,
    start_gang,
    status,
    wait_for,
    wait_phase,
    wait_reconciles,
)
from tests.support import admission
from tests.support.admission import Refuse


def test_a_webhook_the_api_server_cannot_call_is_said_on_the_job_which_starts_once_it_answers(standin, rest, operator):
    down = Refuse('pods', admission.webhook_unreachable(), labels={names.LABEL_JOB: 'gated'})
    standin.store.hooks.admission.append(down)
    try:
        create_job(rest, 'gated', workers=2)
        ready = wait_for(lambda: condition(rest, 'gated', 'Ready').get('reason') == 'APIServerError'
                         and condition(rest, 'gated', 'Ready'), timeout=60, what='the APIServerError condition')
        assert 'failed calling webhook "policy.example.com"' in ready['message'] and '(500)' in ready['message'], ready
        # its Event follows the status write that set the condition (status first, Events after)
        warned = wait_for(lambda: [e for e in events(rest, 'gated') if e['reason'] == 'APIServerError' and e['type'] == 'Warning'],
                          what='the APIServerError Event')
        assert warned and 'retried every 1s until the API server creates it' in warned[0]['message'], warned
        assert pods(standin, 'gated') == []
    finally:
        standin.store.hooks.admission.remove(down)
    start_gang(standin, 'gated', 2)
    wait_phase(rest, 'gated', 'Running', timeout=60)  # 30 s failed once at load 8 (3 workers), passing alone
    assert "Daemon 'reconcile' failed" not in operator.log(), operator.log()[-3000:]


def test_writes_the_api_server_sheds_or_fails_are_retried_the_gang_made_once_and_the_operator_keeps_watching(standin, rest, operator):
    """The API server sheds the job's status writes (429, Retry-After: 1, more in a row than one call's four tries) and
    answers 503 to the first pod creates: the operator waits each out, never crashes, creates each rank once, counts
    the failures in kuberl_operator_api_errors_total and says them on the job; and it still hears the pods after."""
    standin.handler.shed[('patch', f'{names.PLURAL}/status')] = 6
    standin.handler['post', kmock.resource('', 'v1', 'pods')][:2 * (len(kubeapi.API_BACKOFFS) + 1)] << 503  # both ranks' creates, each retried
    create_job(rest, 'shed', workers=2)
    wait_for(lambda: len(pods(standin, 'shed')) == 2, timeout=60, what='the gang, once writes are served',
             explain=lambda: (standin.handler.shed, operator.log()[-2000:]))
    assert standin.handler.shed[('patch', f'{names.PLURAL}/status')] == 0, 'every shed write was tried again'
    warnings = lambda: [(e['reason'], e['message']) for e in events(rest, 'shed') if e['type'] == 'Warning']
    wait_for(lambda: any(reason == 'ReconcileFailed' and 'answered 429' in message and 'Too many requests' in message
                         for reason, message in warnings()), what='the shed status writes said on the job', explain=warnings)
    wait_for(lambda: any(reason == 'APIServerError' and '(503)' in message for reason, message in warnings()),
             what='the failed creates said on the job', explain=warnings)
    metrics = operator.metrics()
    assert f'kuberl_operator_api_errors_total{{code="429",resource="{names.PLURAL}/status",verb="patch"}}' in metrics, metrics
    assert 'kuberl_operator_api_errors_total{code="503",resource="pods",verb="create"}' in metrics, metrics
    gang = start_gang(standin, 'shed', 2)
    wait_phase(rest, 'shed', 'Running', timeout=30)  # the pods' watch still delivers
    wait_reconciles(operator, 3, 'nothing made twice')
    assert sorted((p['metadata']['labels'][names.LABEL_RANK], p['metadata']['uid']) for p in pods(standin, 'shed')) == \
        sorted((p['metadata']['labels'][names.LABEL_RANK], p['metadata']['uid']) for p in gang)
    assert status(rest, 'shed').get('restarts', 0) == 0
    assert operator.process.poll() is None and 'Traceback' not in operator.log(), operator.log()[-3000:]
