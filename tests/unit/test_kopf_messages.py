"""What kopf is handed when an exception leaves a handler: it logs `f"{handler} failed ...: {str(e) or repr(e)}"`
and, through its K8sPoster, posts that line as an Event on the job (kopf/_core/actions/execution.py,
kopf/_core/engines/posting.py). An API server's message can quote a tenant's values (an admission webhook's
words, a field's value, a name it refused), so the text kopf gets is escaped (kuberl.core.safetext) and on one
line, while the raw message stays where kuberl itself reads it."""

import json
import traceback

import pytest
from kuberl.core import jobstatus, lifecycle
from kuberl.operator import kubeapi
from kuberl.operator.handlers import ChildRefused

HOSTILE = 'admission webhook "check.example.com" denied the request: label team="\x1b[2J\x1b]8;;http://evil\x07x\u202eevil\u2066"\nkopf: all good'
ESCAPED = ('admission webhook "check.example.com" denied the request: label team="\\x1b[2J\\x1b]8;;http://evil\\x07x\\u202eevil'
           '\\u2066"\\nkopf: all good')


def what_kopf_gets(error: Exception) -> list[str]:
    """The text kopf puts in its log line and Event, and the exception line of the traceback it logs beside it."""
    return [str(error) or repr(error), *traceback.format_exception_only(error)]


def assert_safe(texts: list[str]) -> None:
    for text in texts:
        assert ESCAPED in text
        assert not any(c in text.rstrip("\n") for c in "\x1b\x07\u202e\u2066\n"), text


@pytest.mark.parametrize("status", [400, 403, 422, 500])
def test_an_api_error_reaches_kopf_escaped_and_keeps_the_raw_message_for_kuberl(status):
    body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Invalid", "message": HOSTILE})
    error = kubeapi.api_error(status, body)
    assert_safe(what_kopf_gets(error))
    assert error.message == HOSTILE  # what child_refusal matches its patterns against
    # KubeApi logs a retried call's error with repr() on kopf's per-object logger, which posts it too
    assert not any(c in repr(error) for c in "\x1b\x07\u202e\u2066\n")


def test_an_answer_from_a_proxy_reaches_kopf_escaped():
    error = kubeapi.api_error(502, HOSTILE.encode())
    assert_safe(what_kopf_gets(error))


def test_a_refused_child_reaches_kopf_escaped_and_the_lifecycle_gets_the_refusal_as_it_came():
    refusal = jobstatus.child_refusal(403, HOSTILE)
    assert refusal is not None and refusal.reason == lifecycle.REASON_ADMISSION_POLICY
    refused = ChildRefused(refusal)
    assert_safe(what_kopf_gets(refused))
    assert refused.refusal.message == HOSTILE
