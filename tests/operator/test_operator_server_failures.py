"""The API server failing a child's create (a 5xx after the operator's own retries), most often a webhook with
failurePolicy Fail it cannot call: the job said nothing (kopf retried every 5 s; the operator's log and kopf's
own per-retry Events held the reason). Its Ready condition now says it, and the job waits, without a deadline
(no fault of its own), and starts once the API server creates its pods."""
from kuberl.core import names

from tests.operator.operatorkit import (
    condition,
    create_job,
    events,
    pods,
    start_gang,
    wait_for,
    wait_phase,
)
from tests.support import admission
from tests.support.admission import Refuse


def test_a_webhook_the_api_server_cannot_call_is_said_on_the_job_which_starts_once_it_answers(standin, rest, operator):
    down = Refuse('pods', admission.webhook_unreachable(), labels={names.LABEL_JOB: 'gated'})
    standin.store.hooks.admission.append(down)
    try:
        create_job(rest, 'gated', workers=2)
        ready = wait_for(lambda: condition(rest, 'gated', 'Ready').get('reason') == 'APIServerError'
                         and condition(rest, 'gated', 'Ready'), timeout=30, what='the APIServerError condition')
        assert 'failed calling webhook "policy.example.com"' in ready['message'] and '(500)' in ready['message'], ready
        warned = [e for e in events(rest, 'gated') if e['reason'] == 'APIServerError' and e['type'] == 'Warning']
        assert warned and 'retried every 1s until the API server creates it' in warned[0]['message'], warned
        assert pods(standin, 'gated') == []
    finally:
        standin.store.hooks.admission.remove(down)
    start_gang(standin, 'gated', 2)
    wait_phase(rest, 'gated', 'Running', timeout=30)
    assert "Daemon 'reconcile' failed" not in operator.log(), operator.log()[-3000:]
