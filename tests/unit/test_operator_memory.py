"""What one tenant's job may cost the operator's memory, which every job shares (the chart gives it 256 MiB)."""
import asyncio
import json

import kopf
from kuberl.core import lifecycle
from kuberl.operator import handlers
from kuberl.operator.config import OperatorConfig
from kuberl.operator.metrics import OperatorMetrics

from tests.support.jobs import make_job

WORKERS = 1024


class CountingApi:
    """Takes each create and keeps nothing of it, as the operator drops the API server's answer."""

    def __init__(self):
        self.created: list[str] = []

    async def create(self, obj: dict) -> dict:
        self.created.append(obj["metadata"]["name"])
        await asyncio.sleep(0)
        return {}


def test_the_largest_gang_is_rendered_and_created_a_few_pods_at_a_time(monkeypatch):
    """All 1,024 pods were rendered (and copied for the operator's defaults) before the first create: with a 16 KiB
    template of small fields (what MAX_GANG_TEMPLATE_BYTES lets through) 350 MiB of the operator's RSS for one job
    (an operator process at 99 MiB RSS reached 351 MiB), which the kubelet kills at the chart's 256 MiB limit, and
    every tenant's jobs then waited on a crash-looping operator. Rendered CREATE_CONCURRENCY at a time, a gang
    holds at most that many pods."""
    job = make_job("big").workers(WORKERS).obj()
    job["metadata"].update(namespace="team-a", uid="0c6e2b0e-0000-4000-8000-000000000000")
    spec = make_job().from_spec(job["spec"]).spec()
    api = CountingApi()
    loop = handlers.JobLoop(handlers.Shell(OperatorConfig(), OperatorMetrics()), api, "team-a", "big", kopf.Memo(),
                            handlers.Wake())
    held, render = [], loop._render_pods

    def rendered(spec, uid, ranks, generation, status=None):
        held.append(len(ranks))
        return render(spec, uid, ranks, generation, status)

    monkeypatch.setattr(loop, "_render_pods", rendered)
    asyncio.run(loop._create_pods(job, spec, lifecycle.CreatePods(0, tuple(range(WORKERS)))))
    assert sorted(api.created) == sorted(f"big-{rank}" for rank in range(WORKERS))
    assert max(held) <= handlers.CREATE_CONCURRENCY and sum(held) == WORKERS, held[:5]


def listed_pod(containers: int, message: str, **status) -> dict:
    """A pod as the API server lists it: a large spec, its managedFields, statuses of sidecars beside the trainer's."""
    names_ = ["trainer", *(f"side-{i}" for i in range(containers - 1))]
    env = [{"name": f"E{i}", "value": "v" * 20} for i in range(400)]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big-0", "namespace": "team-a", "uid": "u0", "resourceVersion": "7",
                     "labels": {"kuberl.dev/job": "big", "kuberl.dev/rank": "0", "kuberl.dev/restart": "2", "team": "x" * 60},
                     "annotations": {"kueue.x-k8s.io/retriable-in-group": "false", "note": "x" * 16000},
                     "ownerReferences": [{"uid": "job-uid", "kind": "RLTrainingJob", "apiVersion": "kuberl.dev/v1alpha1", "name": "big"}],
                     "managedFields": [{"manager": "kuberl", "fieldsV1": {f"f:{i}": {} for i in range(2000)}}],
                     "deletionTimestamp": "2026-11-27T10:00:00Z"},
        "spec": {"containers": [{"name": n, "image": "busybox", "env": env} for n in names_]},
        "status": {"phase": "Failed", "podIP": "10.1.2.3", "startTime": "2026-11-27T09:00:00Z",
                   "conditions": [{"type": t, "status": "True", "reason": "R"} for t in
                                  ("Ready", "PodScheduled", "DisruptionTarget", "Initialized", "ContainersReady")],
                   "containerStatuses": [{"name": n, "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}}
                                         for n in reversed(names_)], **status},
    }


def test_a_listed_pod_is_kept_as_the_operator_reads_it_and_read_alike():
    from kuberl.core import jobstatus

    for pod in (listed_pod(50, "boom " * 800), listed_pod(1, "ok"), {"metadata": {"name": "bare"}},
                listed_pod(3, "x", containerStatuses=[{"name": "side-0", "state": {"waiting": {"reason": "ImagePullBackOff"}}}])):
        kept = lifecycle.pod_as_read(pod)
        assert lifecycle.observed_pod(kept) == lifecycle.observed_pod(pod)
        assert jobstatus.owned_by(kept, "job-uid") == jobstatus.owned_by(pod, "job-uid")
        assert jobstatus.is_current_pod(kept, "job-uid", 2) == jobstatus.is_current_pod(pod, "job-uid", 2)
        assert len(json.dumps(kept)) < 6000, len(json.dumps(kept))


def test_the_operator_says_when_its_python_cannot_read_a_job_as_deep_as_the_api_server_stores():
    """The operator raises its recursion limit to read such a job (tests/operator/test_operator_tenancy.py); Python
    3.12's json recursion in C ignores that limit, so there the operator warns at start instead of being stopped
    by the first tenant who writes one. Python's default limit stands in for such an interpreter."""
    import subprocess
    import sys

    def reads(limit: int) -> bool:
        code = f"import sys; sys.setrecursionlimit({limit}); from kuberl.operator.main import reads_api_nesting; print(reads_api_nesting())"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"

    assert reads(40_000) and not reads(1_000)
