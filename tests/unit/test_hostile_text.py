"""No control characters from a pod or a spec in status, Events or terminals (kuberl.core.safetext).

A termination message carrying `ESC[2J`, an OSC 8 hyperlink, a C1 CSI, a bidi override and a forged
"[kuberl] ... succeeded" line was copied raw into the job's conditions, restartHistory and Events and
into `kuberl run`'s output; a nodeSelector key with ESC/BEL was printed raw in `validate`'s field path
and in the operator's InvalidSpec refusal."""

from __future__ import annotations

import io
import json
import re
import sys
from dataclasses import replace

import pytest
import yaml
from kuberl import cli
from kuberl.core import jobstatus, safetext
from kuberl.core import lifecycle as lc
from kuberl.core.podsecurity import Violation
from kuberl.core.rules import validate_job
from kuberl.core.validation import InvalidJob
from kuberl.core.yamlreader import UnreadableSpec, load_documents
from kuberl.local.process import Launch, PodProcess
from kuberl.local.sandbox import LocalRunError

from tests.support.jobs import make_job

UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
FORGED = "[kuberl] forged succeeded: 500,000 timesteps"
HOSTILE_LOG = ("\x1b[2J\x1b[H screen cleared\n"
               "\x1b]8;;https://evil.example/\x07click me\x1b]8;;\x07 \x9b31m C1 red \x1b[0m\r overwritten\n"
               "\u202eevil\u202c \u2066isolated\u2069 \x7f\x00\x08\n"
               f"{FORGED}\n"
               "ValueError: boom")


def unsafe_in(value: object) -> list[str]:
    return UNSAFE.findall(json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value)


@pytest.mark.parametrize("char", [chr(c) for c in [*range(0x20), 0x7f, *range(0x80, 0xa0), *range(0x202a, 0x202f), *range(0x2066, 0x206a)]
                                  if chr(c) not in "\n\t"])
def test_every_unsafe_character_becomes_a_visible_escape(char):
    shown = safetext.escape(f"a{char}b")
    assert not unsafe_in(shown) and shown.startswith("a\\") and shown.endswith("b")
    assert safetext.escape(shown) == shown  # escaping twice changes nothing more


def test_line_breaks_and_tabs_stay_except_in_one_line_text():
    assert safetext.escape("a\n\tb") == "a\n\tb"
    assert safetext.one_line("a\nb\x1b") == "a\\nb\\x1b"
    assert safetext.continued("one\ntwo\x1b", "[worker 3]") == "one\n[worker 3] two\\x1b"


def crashed_pod(rank: int, message: str) -> dict:
    return {"metadata": {"name": f"job-{rank}", "labels": {"kuberl.dev/rank": str(rank), "kuberl.dev/restart": "0"}},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {
                "terminated": {"exitCode": 1, "reason": "Error\x1b[2J", "message": message}}}]}}


def decided_after_crash(message: str, backoff_limit: int) -> lc.Decision:
    spec = make_job().env("CartPole-v1").with_spec(totalTimesteps=10).workers(2).run_policy(
        backoffLimit=backoff_limit, restartBackoffSeconds=10).spec()
    up = lc.decide(spec, {"generation": 0}, [], None, 0.0).status
    running = [replace(lc.observed_pod(crashed_pod(r, "")), phase="Running", exit_code=None, reason=None, ready=True,
                       start_time=0.0) for r in range(2)]
    up = lc.decide(spec, up, running, None, 1.0).status
    return lc.decide(spec, up, [running[0], lc.observed_pod(crashed_pod(1, message))], None, 2.0)


@pytest.mark.parametrize("backoff_limit", [3, 0], ids=["restarted", "failed"])
def test_a_hostile_termination_message_reaches_status_and_events_escaped_and_marked(backoff_limit):
    decision = decided_after_crash(HOSTILE_LOG, backoff_limit)
    events = [e.message for e in decision.of(lc.Event)] + [e.reason for e in decision.of(lc.Event)]
    assert decision.status["restartHistory" if backoff_limit else "conditions"]
    assert unsafe_in(decision.status) == [] and unsafe_in(events) == []
    texts = [c["message"] for c in decision.status["conditions"]] + [e.message for e in decision.of(lc.Event)]
    quoting = [t for t in texts if "ValueError: boom" in t]
    assert quoting
    for text in quoting:
        assert "\\x1b[2J" in text and "\\x9b31m" in text and "\\u202e" in text  # visible, as repr writes them
        later = text.split("\n")[1:]
        assert later and all(line.startswith("[worker 1] ") for line in later), text  # no line passes for kuberl's own
        assert f"\n[worker 1] {FORGED}" in text


def test_escaping_comes_before_the_cut():
    """An escape is four characters for one: escaped after the cut, a message of ESCs grew past the limit."""
    decision = decided_after_crash("\x1b" * 5000 + "\nValueError: at the end", 0)
    for condition in decision.status["conditions"]:
        assert len(condition["message"]) <= lc.MESSAGE_LIMIT and not unsafe_in(condition["message"])
    assert any(c["message"].endswith("ValueError: at the end") for c in decision.status["conditions"])


@pytest.mark.parametrize(("text", "kept"), [
    ("x" * 600, "x" * lc.MESSAGE_LIMIT),  # ASCII: the character limit binds first
    ("训" * 500, "训" * 341),  # 1,500 bytes: cut to 1,023, not into the 342nd character's three bytes
    ("\x1b" * 300, "\\x1b" * 128),  # escaped before the cut
])
def test_an_event_message_is_cut_to_the_bytes_the_api_server_takes(text, kept):
    """legacyValidateEvent refuses a message past 1,024 bytes (NoteLengthLimit: Go's len); kopf cuts characters."""
    message = safetext.event_message(text, lc.MESSAGE_LIMIT)
    assert message == kept and len(message.encode()) <= safetext.EVENT_MESSAGE_BYTES


NODE_SELECTOR_KEY = "pool\x1b[2J\x07\u202e"


def test_a_spec_key_with_control_characters_is_escaped_in_every_refusal():
    job = make_job("keys").with_spec(nodeSelector={NODE_SELECTOR_KEY: "gpu"}).obj()
    with pytest.raises(InvalidJob) as refused:
        validate_job(job)
    [problem] = [str(p) for p in refused.value.problems]
    assert problem.startswith("spec.nodeSelector.pool\\x1b[2J\\x07\\u202e: ") and not unsafe_in(problem)
    _, refusal = jobstatus.judge(job)
    assert refusal.reason == lc.REASON_INVALID_SPEC and "pool\\x1b[2J" in refusal.message and not unsafe_in(refusal.message)
    assert not unsafe_in(str(Violation("spec.containers[0].securityContext", "x\x1b", "y\x9b", "z")))
    assert not unsafe_in(str(LocalRunError("volumeMount /a\x1b[2J\nforged")))
    with pytest.raises(UnreadableSpec) as unreadable:
        load_documents('a: {"k\\e[2J": 1, "k\\e[2J": 2}\n')
    assert "k\\x1b[2J" in str(unreadable.value) and not unsafe_in(str(unreadable.value))


def test_validate_prints_the_key_escaped(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(make_job("keys").with_spec(nodeSelector={NODE_SELECTOR_KEY: "gpu"}).obj()))
    assert cli.main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "spec.nodeSelector.pool\\x1b[2J\\x07\\u202e" in err and not unsafe_in(err)


def test_a_pods_output_reaches_the_terminal_escaped_and_the_log_file_raw(tmp_path):
    out = io.StringIO()
    process = PodProcess(Launch([sys.executable, "-c", f"print({HOSTILE_LOG!r})"], {}, str(tmp_path), str(tmp_path / "t")),
                         "[rank 0]", out, log_path=str(tmp_path / "log"))
    assert process.wait(30) == 0
    shown = out.getvalue()
    assert not unsafe_in(shown) and f"[rank 0] {FORGED}\n" in shown
    assert all(line.startswith("[rank 0] ") for line in shown.splitlines())
    assert HOSTILE_LOG in (tmp_path / "log").read_bytes().decode()  # what `kubectl logs` would show, as written


def test_kuberl_runs_output_and_status_carry_no_control_character(tmp_path, capsys):
    """The whole local run: the pod's lines, the GangRestart and failure Events, and the final summary."""
    job = {"apiVersion": "kuberl.dev/v1alpha1", "kind": "RLTrainingJob", "metadata": {"name": "hostile"}, "spec": {
        "trainer": "custom", "runPolicy": {"backoffLimit": 0}, "template": {"spec": {"containers": [
            {"name": "trainer", "command": ["python", "-c", f"print({HOSTILE_LOG!r}); raise SystemExit(1)"]}]}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert cli.main(["run", str(tmp_path / "job.yaml"), "--dir", str(tmp_path / "runs")]) == 1
    out = capsys.readouterr().out
    assert not unsafe_in(out), out
    assert not [line for line in out.splitlines() if line.startswith(FORGED)], out  # only ever behind a pod's mark
    assert f"[worker 0] {FORGED}" in out and "hostile failed" in out
    status = json.loads((tmp_path / "runs" / "hostile" / "status.json").read_text())
    assert not unsafe_in(status) and "\\x1b[2J" in json.dumps(status)
