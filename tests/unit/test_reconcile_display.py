"""`kubectl get rltj` columns: a printer column is one JSONPath and cannot round or format, so the operator
writes display strings into status beside the exact values (reconcile.display)."""

from __future__ import annotations

from kuberl.core import crd, lifecycle
from kuberl.core.jobstatus import job_status

PATHS = {"checkpointDir": "/checkpoints/j-u", "finalModel": "/checkpoints/j-u/final-model.pt"}


def written(status: dict, workers: int = 2) -> dict:
    return job_status(status, observed_generation=1, reading=None, paths=PATHS, desired_workers=workers)["display"]


def test_running_shows_ready_of_desired_workers_and_rounded_returns():
    shown = written({"phase": "Running", "workers": {"active": 2, "ready": 1},
                     "progress": {"timesteps": 10, "episodeReturnMean": 454.18446601941747, "evalReturn": None}})
    assert shown == {"workers": "1/2", "return": "454.2"}


def test_after_success_the_last_known_returns_stay():
    running = {"phase": "Running", "workers": {"ready": 2}, "progress": {"episodeReturnMean": 480.04, "evalReturn": 500.0}}
    first = job_status(running, observed_generation=1, reading=None, paths=PATHS, desired_workers=2)
    done = {**first, "phase": "Succeeded", "workers": {"ready": 0, "succeeded": 2},
            "progress": {"timesteps": 20000, "episodeReturnMean": None, "evalReturn": 500.0}}
    assert written(done) == {"workers": "0/2", "return": "480.0", "eval": "500.0"}


def test_a_failed_or_suspended_job_shows_its_reason_and_others_none():
    failed = {"phase": lifecycle.FAILED, "conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "3 restarts"}]}
    assert written(failed)["reason"] == "BackoffLimitExceeded"
    suspended = {"phase": lifecycle.SUSPENDED, "conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended"}]}
    assert written(suspended)["reason"] == "Suspended"
    assert "reason" not in written({"phase": "Running", "conditions": failed["conditions"]})


def test_a_pending_or_restarting_job_shows_why_its_workers_are_not_all_running():
    """`kubectl get rltj -A` is where a platform team looks first: a job stuck Pending says why there."""
    def not_ready(phase: str, reason: str) -> dict:
        return {"phase": phase, "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "worker 0 ..."}]}

    assert written(not_ready(lifecycle.PENDING, "Unschedulable"))["reason"] == "Unschedulable"
    assert written(not_ready(lifecycle.PENDING, "ImagePullBackOff"))["reason"] == "ImagePullBackOff"
    assert written(not_ready(lifecycle.RESTARTING, "BackoffWait"))["reason"] == "BackoffWait"
    assert "reason" not in written({"phase": lifecycle.PENDING, "conditions": []})
    ready = {"phase": lifecycle.RUNNING, "conditions": [{"type": "Ready", "status": "True", "reason": "AllWorkersRunning"}]}
    assert "reason" not in written(ready)


def test_the_printer_columns_are_the_issues_and_read_the_display_strings():
    columns = {c["name"]: c for c in crd.PRINTER_COLUMNS}
    assert list(columns) == ["Phase", "Workers", "Restarts", "Timesteps", "Return", "Eval", "Reason", "Age"]
    assert all("priority" not in c for c in crd.PRINTER_COLUMNS), "eval shows without -o wide"
    display = crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["display"]
    for name in ("Workers", "Return", "Eval", "Reason"):
        path = columns[name]["jsonPath"]
        assert path.startswith(".status.display.") and path.rsplit(".", 1)[1] in display["properties"]
        assert columns[name]["type"] == "string"
