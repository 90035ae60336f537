"""A status the operator cannot read is decided on as if the unreadable parts were never written, and rewritten.

The CRD's schema types the status's top-level fields only: its timestamps are any strings, its progress record and
conditions objects of any fields (manifests/crd.yaml; the API server checks nothing more, as apiextensions
validates a CRD's `type` and leaves a string without `format` free). A status restored from a backup, written by
another version of the operator or by hand with `kubectl edit --subresource=status`, crashed decide() on every
reconcile of its job, for ever, while the job's status said nothing."""

from __future__ import annotations

import pytest
from kuberl.core import lifecycle as lc
from kuberl.core.lifecycle import CreatePods, ObservedPod, decide

from tests.support.jobs import make_job

T0 = 1_700_000_000.0


def spec():
    return make_job("job").workers(2).spec()


def running_pods(gen: int = 0) -> list[ObservedPod]:
    return [ObservedPod(name=f"job-{r}", rank=r, generation=gen, phase="Running", ready=True, start_time=T0) for r in range(2)]


def running_status() -> dict:
    status = decide(spec(), {"generation": 0}, [], None, T0).status
    return decide(spec(), status, running_pods(), None, T0).status


@pytest.mark.parametrize("field, value", [
    ("startTime", "garbage"),
    ("startTime", "2026-13-45T99:99:99Z"),
    ("generationStartTime", "yesterday"),
    ("gangRunningTime", ""),
    ("gangRunningTime", "garbage"),
    ("nextStartTime", "soon"),
    ("completionTime", "never"),
    ("rank0Progress", {"changedTime": "x"}),
    ("rank0Progress", {"generation": "x", "timesteps": 5, "changedTime": lc.rfc3339(T0)}),
    ("rank0Progress", {"generation": 0, "timesteps": [1], "changedTime": lc.rfc3339(T0)}),
    ("conditions", [{}]),
    ("conditions", [{"type": "Ready", "status": "True", "lastTransitionTime": "x", "reason": "R", "message": ""}]),
    ("conditions", [{"type": "Ready"}]),
    ("conditions", [{"type": 1, "status": None}]),
])
@pytest.mark.parametrize("phase", ["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"])
def test_an_unreadable_field_is_decided_on_as_unwritten_and_rewritten(field, value, phase):
    status = {**running_status(), "phase": phase, field: value}
    decided = decide(spec(), status, running_pods(), None, T0 + 5)
    assert decided.status.get(field) != value
    assert lc.progress_from_status(status) is None or field != "rank0Progress"
    again = decide(spec(), decided.status, running_pods(), None, T0 + 6)  # what it wrote reads back
    assert again.phase == decided.phase


def test_a_gang_whose_start_time_is_unreadable_is_timed_from_now_not_failed_nor_crashed():
    status = {**running_status(), "gangRunningTime": "garbage", "generationStartTime": "garbage"}
    decided = decide(spec(), status, running_pods(), None, T0 + 5)
    assert decided.phase == lc.RUNNING and not decided.of(CreatePods)
    assert lc.parse_time(decided.status["gangRunningTime"]) == T0 + 5


@pytest.mark.parametrize("record", ["garbage", None])
def test_a_gang_stuck_starting_whose_creation_time_is_unreadable_or_missing_still_meets_its_startup_timeout(record):
    """A gang whose pods never start (ImagePullBackOff), under a status whose generationStartTime is unreadable
    (read as never written) or missing (an older operator's, a restored backup's): the startup timeout was counted
    from each reconcile's now, so it never came, and the job waited for ever, saying only ImagePullBackOff. Its
    clock starts when this operator first sees the gang."""
    stuck = [ObservedPod(name=f"job-{r}", rank=r, generation=0, phase="Pending", waiting_reason="ImagePullBackOff",
                         waiting_message="Back-off pulling image") for r in range(2)]
    status = decide(spec(), {"generation": 0}, [], None, T0).status
    status = {**status, "generationStartTime": record}
    timeout = spec().run_policy.startup_timeout_seconds
    decided = decide(spec(), status, stuck, None, T0 + 10)
    assert decided.phase == lc.PENDING and lc.parse_time(decided.status["generationStartTime"]) == T0 + 10
    later = decide(spec(), decided.status, stuck, None, T0 + 10 + timeout + 1)
    assert later.phase == lc.RESTARTING and later.status["startupRetries"] == 1, later.status
    assert "ImagePullBackOff" in later.status["restartHistory"][-1]["reason"] + later.status["restartHistory"][-1]["message"]
