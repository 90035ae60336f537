"""The lifecycle table: every transition and failure class of kuberl.core.lifecycle.decide.

Fixtures come from builders (JobSet style): `job(...)` for a spec, `Pod(rank)`
for an observed pod, and `Status` helpers that replay earlier decisions, so each
case states only what matters to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest
from kuberl.core import lifecycle as lc
from kuberl.core.contract import EXIT_CONFIG_ERROR, TERMINATION_MARKER
from kuberl.core.lifecycle import (
    CreatePods,
    DeletePods,
    Event,
    Fail,
    ObservedPod,
    Rank0Progress,
    Succeed,
    decide,
)

from tests.support.jobs import make_job

T0 = 1_700_000_000.0
JOB = "job"


def job(workers: int = 2, **run_policy) -> object:
    policy = {"restartBackoffSeconds": 10, "backoffLimit": 3, "stallTimeoutSeconds": 100,
              "startupTimeoutSeconds": 50, "maxStartupRetries": 2, **run_policy}
    return make_job().workers(workers).run_policy(**policy).spec()


class Pod:
    """Builder for an ObservedPod of job `job`."""

    def __init__(self, rank: int, gen: int = 0):
        self.pod = ObservedPod(name=f"{JOB}-{rank}", rank=rank, generation=gen)

    def _with(self, **kw) -> Pod:
        self.pod = replace(self.pod, **kw)
        return self

    def running(self) -> Pod:
        return self._with(phase="Running", ready=True, start_time=T0)

    def exited(self, code: int, message: str | None = None) -> Pod:
        """`message` is what the trainer states in its termination log (marked, as it writes it)."""
        stated = TERMINATION_MARKER + message if message else None
        return self._with(phase="Succeeded" if code == 0 else "Failed", ready=False, exit_code=code,
                          message=message, reason=lc.termination_reason(stated))

    def waiting(self, reason: str, message: str = "") -> Pod:
        return self._with(phase="Pending", waiting_reason=reason, waiting_message=message)

    def unschedulable(self, message: str = "0/3 nodes are available") -> Pod:
        return self._with(phase="Pending", scheduling_reason="Unschedulable", scheduling_message=message)

    def deleting(self, grace_ends: float = T0) -> Pod:
        return self._with(deletion_timestamp=grace_ends)

    def disrupted(self, reason: str = "PreemptionByScheduler") -> Pod:
        return self._with(disruption=reason)

    def obj(self) -> ObservedPod:
        return self.pod


def gang(state: str = "running", gen: int = 0, workers: int = 2) -> list[ObservedPod]:
    """Every rank of one generation, all running or all just created."""
    pods = [Pod(r, gen) for r in range(workers)]
    return [p.running().obj() if state == "running" else p.obj() for p in pods]


def progress(timesteps: int, changed_at: float, gen: int = 0, succeeded: bool = False) -> Rank0Progress:
    return Rank0Progress(generation=gen, timesteps=timesteps, changed_at=changed_at, succeeded=succeeded, steps_per_second=100.0)


def running_status(spec, gen: int = 0, at: float = T0) -> dict:
    """The status of a gang that came up at `at` (replayed through decide)."""
    status = {"generation": gen}
    status = decide(spec, status, [], None, at).status
    return decide(spec, status, gang("running", gen, spec.workers), None, at).status


def restarted_status(spec, crashes: int, at: float = T0) -> dict:
    """Status after `crashes` counted restarts, the last one at `at`."""
    status = running_status(spec, 0, at)
    for g in range(crashes):
        pods = gang("running", g, spec.workers)
        pods[1] = Pod(1, g).exited(1, "Crashed: boom").obj()
        status = decide(spec, status, pods, None, at).status
        if g + 1 < crashes:
            status = decide(spec, status, gang("running", g + 1, spec.workers), None, at).status
            status = {**status, "gangRunningTime": lc.rfc3339(at)}
    return status


def events(decision) -> list[str]:
    return [e.reason for e in decision.of(Event)]


# --- the failure classes, one table -----------------------------------------


@dataclass(frozen=True)
class Case:
    """One way a running gang (2 workers, restartBackoffSeconds=10, backoffLimit=3, stallTimeoutSeconds=100,
    startupTimeoutSeconds=50) stops: the pods seen at `at`, and what decide makes of it. `counted`: the
    restart spends backoffLimit (None: the job ends). `fresh`: the gang never came up (a new job's status)."""

    id: str
    pods: tuple[Pod, ...]
    phase: str
    reason: str
    counted: bool | None = None
    said: str = ""  # a phrase the restart record or the Fail message carries
    run_policy: dict = field(default_factory=dict)
    rank0: Rank0Progress | None = None
    at: float = T0 + 1
    fresh: bool = False
    refusal: lc.Refusal | None = None


CASES = [
    # counted: the workload's own failures
    Case("crash", (Pod(0).running(), Pod(1).exited(1, "Crashed: CUDA error")), lc.RESTARTING, "Crashed", True, "CUDA error"),
    Case("oom-killed", (Pod(0).running(), Pod(1).exited(137)._with(reason="OOMKilled")), lc.RESTARTING, "OOMKilled", True),
    Case("stalled", (Pod(0).running(), Pod(1).running()), lc.RESTARTING, lc.REASON_STALLED, True, "800 timesteps",
         rank0=Rank0Progress(0, 800, T0 + 50), at=T0 + 150),
    # a full volume is the job's to fix (expand the claim, lower keep): counted, as before
    Case("checkpoint-volume-full", (Pod(0).exited(1, "CheckpointVolumeFull: [Errno 28] the checkpoint volume is full"),
                                    Pod(1).exited(1, "PeerLost: rank 0 left")), lc.RESTARTING, "CheckpointVolumeFull", True),
    # not counted: the cluster's doing
    *(Case(f"disrupted-{r}", (Pod(0).running(), Pod(1).exited(137).disrupted(r)), lc.RESTARTING, r, False, f"disrupted: {r}")
      for r in ("PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager", "TerminationByKubelet")),
    Case("pod-deleted", (Pod(0).running(), Pod(1).running().deleting(T0 + 30)), lc.RESTARTING, lc.REASON_POD_DELETED, False),
    Case("pod-lost", (Pod(0).running(),), lc.RESTARTING, lc.REASON_POD_LOST, False, "disappeared"),
    # the checkpoint volume failed under the job (EIO, a kernel's read-only remount): the storage's doing; rank 1's
    # PeerLost is its echo
    Case("checkpoint-volume-unavailable", (Pod(0).exited(1, "CheckpointVolumeUnavailable: saving /c/ckpt-0000000040.pt "
                                                            "failed: EIO (Input/output error)"),
                                           Pod(1).exited(1, "PeerLost: rank 0 left")),
         lc.RESTARTING, "CheckpointVolumeUnavailable", False, "EIO"),
    Case("stopped-by-a-signal", (Pod(0).exited(0, "Stopped: at 900; resumable"), Pod(1).exited(0, "Stopped: at 900; resumable")),
         lc.RESTARTING, "Stopped", False),
    # ... but only from a pod that exited 0: torch's launcher exited 1 after a clean stop until
    # kuberl_trainer.launch made it exit 0 (tests/distributed/test_pod_launcher.py)
    Case("stopped-but-exited-1", (Pod(0).exited(1, "Stopped: at 900; resumable"), Pod(1).exited(1, "Stopped: at 900; resumable")),
         lc.RESTARTING, "Stopped", True),
    # not counted: start-up problems, retried up to maxStartupRetries
    Case("never-scheduled", (Pod(0).running(), Pod(1).unschedulable()), lc.RESTARTING, "Unschedulable", False,
         "startupTimeoutSeconds=50", at=T0 + 50, fresh=True),
    Case("image-pull", (Pod(0).running(), Pod(1).waiting("ImagePullBackOff")), lc.RESTARTING, "ImagePullBackOff", False,
         at=T0 + 50, fresh=True),
    Case("crash-before-up", (Pod(0).unschedulable(), Pod(1).exited(1, "Crashed: import failed")), lc.RESTARTING, "Crashed", False,
         "before all workers were running", fresh=True),
    # the job ends
    Case("config-error", (Pod(0).running(), Pod(1).exited(1, "ConfigError: spec.env.id: no such env")), lc.FAILED, "ConfigError",
         said="spec.env.id"),
    Case("exit-78-unstated", (Pod(0).running(), Pod(1).exited(EXIT_CONFIG_ERROR)), lc.FAILED, "ConfigError", said="exit code 78"),
    # checkpoints no restart can make usable: the job fails at once, under the trainer's own reason
    Case("no-usable-checkpoint", (Pod(0).exited(1, "NoUsableCheckpoint: /c holds 2 checkpoint(s) and none is usable"),
                                  Pod(1).exited(1, "PeerLost: rank 0 left")), lc.FAILED, "NoUsableCheckpoint", said="none is usable"),
    Case("checkpoint-volume-read-only", (Pod(0).exited(1, "CheckpointVolumeReadOnly: the checkpoint volume at /c is read-only"),
                                         Pod(1).running()), lc.FAILED, "CheckpointVolumeReadOnly", said="read-only"),
    Case("checkpoint-volume-forbidden", (Pod(0).exited(78, "CheckpointVolumeForbidden: the checkpoint volume at /c denies this "
                                                        "trainer (uid 1000, gid 1000) access to /c"),
                                         Pod(1).running()), lc.FAILED, "CheckpointVolumeForbidden", said="denies this trainer"),
    # a run that diverged: a restart would resume the same checkpoint and hyperparameters and diverge again
    Case("diverged", (Pod(0).exited(1, "Diverged: rank 0's value_loss not finite at update 14 (timesteps 1708); last finite "
                                       "checkpoint kept: /c/ckpt-0000000010.pt (timesteps 1220); try a lower spec.ppo.learningRate"),
                      Pod(1).exited(1, "Diverged: training diverged: rank 0 says what went non-finite")),
         lc.FAILED, "Diverged", said="ckpt-0000000010.pt (timesteps 1220)"),
    Case("backoff-limit-0", (Pod(0).running(), Pod(1).exited(2)), lc.FAILED, lc.REASON_BACKOFF_LIMIT, run_policy={"backoffLimit": 0}),
    Case("deadline", (Pod(0).running(), Pod(1).running()), lc.FAILED, lc.REASON_DEADLINE, said="activeDeadlineSeconds=60",
         run_policy={"activeDeadlineSeconds": 60}, at=T0 + 60),
    *(Case(f"refused-{r.reason}", (Pod(0).running(), Pod(1).running()), lc.FAILED, r.reason, said=r.message[:20], refusal=r)
      for r in (lc.Refusal(lc.REASON_INVALID_SPEC, "spec.seed: expected an integer"),
                lc.Refusal(lc.REASON_POD_SECURITY, "spec.hostNetwork: Host Namespaces"),
                lc.Refusal(lc.REASON_INVALID_CHILD, 'admission webhook "x" denied the request: no'))),
    # waits
    Case("quota", (Pod(0),), lc.PENDING, lc.REASON_QUOTA, said="exceeded quota", fresh=True,
         refusal=lc.Refusal(lc.REASON_QUOTA, 'pods "job-1" is forbidden: exceeded quota: q', retryable=True)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_failure_class(case: Case):
    spec = job(**case.run_policy)
    status = decide(spec, {}, [], None, T0).status if case.fresh else running_status(spec)
    given = None if case.refusal is not None and case.refusal.reason == lc.REASON_INVALID_SPEC else spec
    d = decide(given, status, [p.obj() for p in case.pods], case.rank0, case.at, refusal=case.refusal)
    assert d.phase == case.phase
    if case.phase == lc.RESTARTING:
        entry = d.status["restartHistory"][-1]
        assert (entry["reason"], entry["counted"], case.said in entry["message"]) == (case.reason, case.counted, True), entry
        assert (d.status["restarts"], d.status["startupRetries"]) == (int(case.counted), int(case.fresh))
        assert d.status["generation"] == 1 and d.of(CreatePods) == [] and d.of(Fail) == []
    elif case.phase == lc.FAILED:
        [fail] = d.of(Fail)
        assert fail.reason == case.reason and case.said in fail.message, fail
        assert d.status["completionTime"] == lc.rfc3339(case.at) and d.status["restarts"] == 0
        assert ("Warning", case.reason) in [(e.type, e.reason) for e in d.of(Event)]
    else:
        ready = next(c for c in d.status["conditions"] if c["type"] == "Ready")
        assert (ready["reason"], case.said in ready["message"]) == (case.reason, True)
        assert d.of(Fail) == [] and d.of(CreatePods) == []
    deleted = {name for action in d.of(DeletePods) for name in action.names}
    left = [p.name for p in (c.obj() for c in case.pods) if p.phase == "Running" and p.deletion_timestamp is None and p.name not in deleted]
    assert left == [] or case.phase == lc.PENDING, "a gang that stops is deleted whole"


# --- creation and start-up -------------------------------------------------


def test_a_new_job_creates_generation_zero():
    d = decide(job(), {}, [], None, T0)
    assert d.phase == lc.PENDING
    assert d.of(CreatePods) == [CreatePods(0, (0, 1))]
    assert d.status["generation"] == 0 and d.status["restarts"] == 0
    assert d.status["startTime"] == lc.rfc3339(T0)
    assert events(d) == [lc.REASON_CREATING]


def test_the_same_inputs_give_the_same_decision():
    spec, pods = job(), gang("running")
    status = running_status(spec)
    assert decide(spec, status, pods, progress(5, T0), T0 + 7) == decide(spec, status, pods, progress(5, T0), T0 + 7)


def test_no_create_when_the_pods_exist_and_no_repeated_event_when_replayed():
    spec = job()
    first = decide(spec, {}, [], None, T0)
    again = decide(spec, first.status, [], None, T0 + 1)  # the watch has not seen the pods yet
    assert again.of(CreatePods) == [CreatePods(0, (0, 1))] and events(again) == []
    seen = decide(spec, first.status, gang("pending"), None, T0 + 1)
    assert seen.of(CreatePods) == []


def test_only_missing_ranks_are_created():
    d = decide(job(workers=3), decide(job(workers=3), {}, [], None, T0).status, [Pod(1).obj()], None, T0 + 1)
    assert d.of(CreatePods) == [CreatePods(0, (0, 2))]


def test_all_pods_running_moves_to_running_once():
    spec = job()
    status = decide(spec, {}, [], None, T0).status
    d = decide(spec, status, gang("running"), None, T0 + 3)
    assert d.phase == lc.RUNNING
    assert d.status["gangRunningTime"] == lc.rfc3339(T0 + 3)
    ready = next(c for c in d.status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == lc.rfc3339(T0 + 3)
    assert events(d) == [lc.REASON_ALL_RUNNING]
    later = decide(spec, d.status, gang("running"), None, T0 + 9)
    assert events(later) == [] and later.status["conditions"] == d.status["conditions"]
    assert later.status["workers"] == {"active": 2, "ready": 2, "succeeded": 0, "failed": 0}


@pytest.mark.parametrize("pod,reason", [
    (Pod(1).waiting("ImagePullBackOff", "Back-off pulling image"), "ImagePullBackOff"),
    (Pod(1).waiting("ErrImagePull"), "ErrImagePull"),
    (Pod(1).waiting("CreateContainerConfigError", "secret not found"), "CreateContainerConfigError"),
    (Pod(1).unschedulable(), "Unschedulable"),
    (Pod(1), lc.REASON_STARTING),
])
def test_a_start_up_problem_is_reported_with_its_reason_then_retried_uncounted(pod, reason):
    spec = job()
    status = decide(spec, {}, [], None, T0).status
    pods = [Pod(0).running().obj(), pod.obj()]
    before = decide(spec, status, pods, None, T0 + 10)
    ready = next(c for c in before.status["conditions"] if c["type"] == "Ready")
    assert before.phase == lc.PENDING and ready["reason"] == reason and "job-1" in ready["message"]
    assert before.requeue_after == 40 and before.of(DeletePods) == []
    after = decide(spec, status, pods, None, T0 + 50)
    assert after.phase == lc.RESTARTING
    assert after.status["generation"] == 1 and after.status["restarts"] == 0 and after.status["startupRetries"] == 1
    assert after.status["restartHistory"][-1]["reason"] == reason and not after.status["restartHistory"][-1]["counted"]
    assert after.of(DeletePods) == [DeletePods(("job-0", "job-1"), reason)]


def test_start_up_retries_exhausted_fail_with_the_reason():
    spec = job(maxStartupRetries=1)
    status = {**decide(spec, {}, [], None, T0).status, "startupRetries": 1}
    d = decide(spec, status, [Pod(0).running().obj(), Pod(1).unschedulable().obj()], None, T0 + 50)
    assert d.phase == lc.FAILED
    assert d.of(Fail)[0].reason == "Unschedulable" and "maxStartupRetries=1" in d.of(Fail)[0].message
    assert d.of(DeletePods) == [DeletePods(("job-0", "job-1"), "Unschedulable")]


def test_a_crash_before_the_gang_was_ever_up_is_not_counted():
    spec = job()
    status = decide(spec, {}, [], None, T0).status
    pods = [Pod(0).unschedulable().obj(), Pod(1).exited(1, "Crashed: import failed").obj()]
    d = decide(spec, status, pods, None, T0 + 5)
    assert d.phase == lc.RESTARTING
    assert d.status["restarts"] == 0 and d.status["startupRetries"] == 1


# --- gang restarts ---------------------------------------------------------


def test_a_crash_restarts_the_whole_gang_recording_the_new_generation_first():
    spec = job()
    status = running_status(spec)
    pods = [Pod(0).running().obj(), Pod(1).exited(1, "Crashed: CUDA error").obj()]
    d = decide(spec, status, pods, None, T0 + 20)
    assert d.phase == lc.RESTARTING
    assert d.status["generation"] == 1 and d.status["restarts"] == 1
    assert d.of(DeletePods) == [DeletePods(("job-0", "job-1"), "Crashed")]
    assert d.of(CreatePods) == []
    assert d.status["restartHistory"] == [{"generation": 0, "reason": "Crashed", "message": "worker 1 (job-1): Crashed: CUDA error",
                                           "time": lc.rfc3339(T0 + 20), "counted": True}]
    assert d.status["nextStartTime"] == lc.rfc3339(T0 + 30) and d.requeue_after == 10
    restart = next(e for e in d.of(Event) if e.reason == lc.REASON_GANG_RESTART)
    assert restart.type == "Warning" and "Crashed" in restart.message


def test_the_cause_is_named_not_the_peers_that_lost_it():
    spec = job(workers=3)
    status = running_status(spec)
    pods = [Pod(0).exited(1, "PeerLost: gloo timeout").obj(), Pod(1).exited(137).obj(), Pod(2).exited(1, "PeerLost: x").obj()]
    pods[1] = replace(pods[1], reason="OOMKilled")
    assert decide(spec, status, pods, None, T0 + 1).status["restartHistory"][-1]["reason"] == "OOMKilled"


def test_an_echo_reported_before_its_cause_waits_for_the_cause_at_most_the_kubelet_s_sync_period():
    """Each kubelet reports its own pod: rank 1's PeerLost often came first, and the restart counted it and never
    recorded rank 0's OOMKilled. While a pod of the gang has not failed, PeerLost alone waits for it (from the echo's
    finishedAt), then restarts as before."""
    spec = job(workers=3)
    status = running_status(spec)
    echoes = [Pod(1).exited(1, "PeerLost: rank 0 left")._with(finished_at=T0 + 10).obj(),
              Pod(2).exited(1, "PeerLost: rank 0 left")._with(finished_at=T0 + 11).obj()]
    waiting = decide(spec, status, [Pod(0).running().obj(), *echoes], None, T0 + 11)
    assert (waiting.phase, waiting.status["generation"], waiting.of(DeletePods)) == (lc.RUNNING, 0, [])
    ready = next(c for c in waiting.status["conditions"] if c["type"] == "Ready")
    due = lc.rfc3339(T0 + 10 + lc.PEER_LOST_CAUSE_SECONDS)
    assert ready["reason"] == "PeerLost" and ready["message"].endswith(f"waiting until {due} for the rank that left to report why")
    again = decide(spec, waiting.status, [Pod(0).running().obj(), *echoes], None, T0 + 13)
    assert again.status == waiting.status  # nothing new to write while it waits
    assert waiting.requeue_after == pytest.approx(T0 + 10 + lc.PEER_LOST_CAUSE_SECONDS - (T0 + 11))
    oom = Pod(0).exited(137)._with(reason="OOMKilled", finished_at=T0 + 10).obj()
    caused = decide(spec, waiting.status, [oom, *echoes], None, T0 + 12).status["restartHistory"][-1]
    assert (caused["reason"], caused["counted"]) == ("OOMKilled", True) and caused["message"].startswith("worker 0 (job-0)")
    # the cause never reported (a hung rank, a lost node): the echo restarts the gang when the wait is over
    late = decide(spec, waiting.status, [Pod(0).running().obj(), *echoes], None, T0 + 10 + lc.PEER_LOST_CAUSE_SECONDS)
    assert late.status["restartHistory"][-1]["reason"] == "PeerLost" and late.status["generation"] == 1
    # nothing left that could report, or a kubelet's clock far ahead of the API server's: no wait
    assert decide(spec, status, [replace(echoes[0], rank=0, name="job-0"), *echoes], None, T0 + 11).status["generation"] == 1
    ahead = [replace(e, finished_at=T0 + 3600) for e in echoes]
    assert decide(spec, status, [Pod(0).running().obj(), *ahead], None, T0 + 11).status["generation"] == 1


def test_of_scripts_that_state_no_reason_the_first_to_fail_is_named_not_its_echo():
    """A user's script: rank 1 exits 3 on a bad batch, rank 0 dies 50 ms later of 'Connection closed by peer'; one
    look at the pods saw both failed, and the job blamed worker 0 (the lowest rank) for the echo."""
    spec = job(workers=3)
    status = running_status(spec)
    pods = [Pod(0).exited(1, "RuntimeError: Connection closed by peer")._with(reason="Error", finished_at=T0 + 0.35).obj(),
            Pod(1).exited(3, "ValueError: bad batch 17")._with(reason="Error", finished_at=T0 + 0.3).obj(),
            Pod(2).running().obj()]
    history = decide(spec, status, pods, None, T0 + 1).status["restartHistory"][-1]
    assert history["message"].startswith("worker 1 (job-1) exit code 3: ValueError: bad batch 17"), history
    tie = [replace(pods[0], finished_at=T0), replace(pods[1], finished_at=T0), pods[2]]  # finishedAt counts seconds
    assert decide(spec, status, tie, None, T0 + 1).status["restartHistory"][-1]["message"].startswith("worker 0 (job-0)")


def test_new_pods_wait_for_the_old_generation_to_be_gone():
    spec = job()
    status = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0).status
    old = [Pod(0).running().deleting(T0 + 30).obj(), Pod(1).exited(1).deleting(T0 + 30).obj()]
    d = decide(spec, status, old, None, T0 + 15)
    assert d.of(CreatePods) == [] and d.of(DeletePods) == []
    assert next(c for c in d.status["conditions"] if c["type"] == "Ready")["reason"] == lc.REASON_OLD_PODS
    assert d.phase == lc.RESTARTING


def test_an_old_pod_not_yet_deleting_is_deleted_again_and_never_adopted():
    spec = job()
    status = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0).status
    d = decide(spec, status, [Pod(0, gen=0).running().obj()], None, T0 + 100)
    assert d.of(DeletePods) == [DeletePods(("job-0",), lc.REASON_STALE)]
    assert d.of(CreatePods) == []


FORBIDDEN_DELETE = lc.Refusal(lc.REASON_OPERATOR_FORBIDDEN, 'pods "job-0" is forbidden: User "op" cannot delete resource "pods"',
                              retryable=True, deleting=True)


def ready(decision) -> dict:
    return next(c for c in decision.status["conditions"] if c["type"] == "Ready")


def test_a_delete_rbac_refuses_is_said_in_ready_and_asked_again_later_not_at_once():
    spec = job(restartBackoffSeconds=2)
    status = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0).status
    old = [Pod(0).running().obj(), Pod(1).exited(1).obj()]
    refused = decide(spec, status, old, None, T0 + 1, refusal=FORBIDDEN_DELETE)
    assert refused.of(DeletePods) == [] and refused.of(CreatePods) == [] and refused.phase == lc.RESTARTING
    assert (ready(refused)["reason"], ready(refused)["message"]) == (lc.REASON_OPERATOR_FORBIDDEN, FORBIDDEN_DELETE.message)
    assert events(refused) == [lc.REASON_OPERATOR_FORBIDDEN] and refused.requeue_after == 2
    again = decide(spec, refused.status, old, None, T0 + 3)  # granted by now: asked again, and Ready says what it waits for
    assert again.of(DeletePods) == [DeletePods(("job-0", "job-1"), lc.REASON_STALE)]
    assert ready(again)["reason"] == lc.REASON_OLD_PODS


def test_a_suspend_whose_delete_rbac_refuses_says_so_until_the_pods_are_gone():
    spec, suspended_spec = job(), job(suspend=True)
    suspended = decide(suspended_spec, running_status(spec), gang("running"), None, T0 + 10)
    refused = decide(suspended_spec, suspended.status, gang("running"), None, T0 + 11, refusal=FORBIDDEN_DELETE)
    assert refused.phase == lc.SUSPENDED and refused.of(DeletePods) == []
    assert ready(refused)["reason"] == lc.REASON_OPERATOR_FORBIDDEN
    gone = decide(suspended_spec, refused.status, [], None, T0 + 20)
    assert ready(gone)["reason"] == lc.REASON_SUSPEND and gone.status["generation"] == refused.status["generation"]


def test_a_finished_job_whose_delete_rbac_refuses_keeps_its_conditions_and_says_it_in_an_event():
    spec = job(ttlSecondsAfterFinished=0)
    done = decide(spec, running_status(spec), [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).exited(0).obj()], None, T0)
    refused = decide(spec, done.status, [], None, T0 + 1, refusal=FORBIDDEN_DELETE)
    assert refused.of(lc.DeleteJob) == [] and refused.phase == lc.SUCCEEDED
    assert ready(refused) == ready(done) and events(refused) == [lc.REASON_OPERATOR_FORBIDDEN]


def test_an_old_generation_failing_never_restarts_the_new_one():
    spec = job()
    status = running_status(spec, gen=1)
    pods = gang("running", gen=1) + [Pod(0, gen=0).exited(1, "Crashed: old").deleting(T0).obj()]
    d = decide(spec, status, pods, None, T0 + 1)
    assert d.phase == lc.RUNNING and d.status["restarts"] == 0 and d.of(DeletePods) == []


def test_a_terminating_pod_of_the_current_generation_is_not_taken_as_running():
    spec = job()
    status = decide(spec, {}, [], None, T0).status
    pods = [Pod(0).running().obj(), Pod(1).running().deleting(T0 + 30).obj()]
    d = decide(spec, status, pods, None, T0 + 1)
    assert d.phase == lc.RESTARTING and d.status["restarts"] == 0
    assert d.status["restartHistory"][-1]["reason"] == lc.REASON_POD_DELETED
    assert d.of(CreatePods) == [] and d.of(DeletePods) == [DeletePods(("job-0",), lc.REASON_POD_DELETED)]


def test_after_the_backoff_the_next_generation_is_created():
    spec = job()
    status = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0).status
    waiting = decide(spec, status, [], None, T0 + 4)
    assert waiting.of(CreatePods) == [] and waiting.requeue_after == pytest.approx(6)
    assert next(c for c in waiting.status["conditions"] if c["type"] == "Ready")["reason"] == lc.REASON_BACKOFF
    created = decide(spec, status, [], None, T0 + 10)
    assert created.of(CreatePods) == [CreatePods(1, (0, 1))]
    assert created.status["generationStartTime"] == lc.rfc3339(T0 + 10)
    up = decide(spec, created.status, gang("running", gen=1), None, T0 + 12)
    assert up.phase == lc.RUNNING and up.status["generation"] == 1


@pytest.mark.parametrize("crashes,delay", [(1, 10), (2, 20), (3, 40), (4, 80)])
def test_backoff_doubles_with_each_counted_restart(crashes, delay):
    spec = job(backoffLimit=10)
    status = restarted_status(spec, crashes)
    assert status["restarts"] == crashes
    assert lc.parse_time(status["nextStartTime"]) - T0 == delay


def test_backoff_is_capped():
    spec = job(backoffLimit=10, restartBackoffSeconds=500)
    assert lc.parse_time(restarted_status(spec, 2)["nextStartTime"]) - T0 == lc.MAX_RESTART_BACKOFF_SECONDS


def test_the_backoff_survives_the_largest_failure_budgets_the_schema_allows():
    """backoffLimit and maxStartupRetries go to 1000 each (spec.py); 10 * 2 ** 1999 does not fit a
    float, and decide raising there froze the job: it restarted neither failed."""
    spec = job(backoffLimit=1000, maxStartupRetries=1000, restartBackoffSeconds=0.5)
    status = {**running_status(spec), "restarts": 999, "startupRetries": 999, "generation": 1998}
    crashed = decide(spec, status, [Pod(0, 1998).running().obj(), Pod(1, 1998).exited(1).obj()], None, T0)
    assert crashed.status["restarts"] == 1000
    assert lc.parse_time(crashed.status["nextStartTime"]) - T0 == lc.MAX_RESTART_BACKOFF_SECONDS
    assert lc.restart_delay(0, 10_000) == 0 and lc.restart_delay(3600, 10_000) == lc.MAX_RESTART_BACKOFF_SECONDS


def stopped_gang(gen: int) -> list[ObservedPod]:
    """Every rank exited 0 stating `Stopped`, which any container can write to its termination log."""
    return [Pod(r, gen).exited(0, lc.REASON_STOPPED + ": signalled").obj() for r in range(2)]


def test_uncounted_restarts_in_a_row_back_off_like_crash_loop_backoff():
    """A gang that states `Stopped` over and over (or keeps being disrupted) is restarted without
    spending backoffLimit; it used to be restarted at once each time with restartBackoffSeconds=0,
    2 x workers API calls per loop for ever. Now: the base for the first, then 10, 20, 40 ... 600 s
    in a row, starting over once two are UNCOUNTED_RESET_SECONDS apart (kubelet's CrashLoopBackOff)."""
    spec = job(restartBackoffSeconds=0)
    status, now, delays = running_status(spec), T0, []
    for _ in range(9):
        status = decide(spec, status, stopped_gang(status["generation"]), None, now).status
        delays.append(lc.parse_time(status["nextStartTime"]) - now)
        now += delays[-1]
        status = decide(spec, status, gang("running", gen=status["generation"]), None, now).status
        assert status["restarts"] == 0, "a stated Stop is never counted"
    assert delays == [0, 10, 20, 40, 80, 160, 320, 600, 600]
    last_restart = lc.parse_time(status["restartHistory"][-1]["time"])
    just_before = last_restart + lc.UNCOUNTED_RESET_SECONDS - 1
    soon = decide(spec, status, stopped_gang(status["generation"]), None, just_before).status
    assert lc.parse_time(soon["nextStartTime"]) - just_before == 600
    apart = last_restart + lc.UNCOUNTED_RESET_SECONDS
    status = decide(spec, status, stopped_gang(status["generation"]), None, apart).status
    assert lc.parse_time(status["nextStartTime"]) == apart, "restarts this far apart start the backoff over"


def test_a_long_checkpoint_storage_outage_never_spends_backoff_limit_and_backs_off_like_a_disruption():
    """Rank 0's checkpoint volume answers EIO at every save for an hour: each gang restarts without spending
    backoffLimit (it failed the job after 3), 10, 20, 40 ... 600 s apart; a crash after it is still counted."""
    spec = job(restartBackoffSeconds=0, backoffLimit=3)
    status, now, delays = running_status(spec), T0, []
    for _ in range(8):
        gen = status["generation"]
        pods = [Pod(0, gen).exited(1, "CheckpointVolumeUnavailable: saving /c/ckpt-0000000040.pt failed: EIO").obj(),
                Pod(1, gen).exited(1, "PeerLost: rank 0 left").obj()]
        d = decide(spec, status, pods, None, now)
        assert d.phase == lc.RESTARTING and d.of(Fail) == [], d.of(Fail)
        status = d.status
        delays.append(lc.parse_time(status["nextStartTime"]) - now)
        now += delays[-1]
        status = decide(spec, status, gang("running", gen=status["generation"]), None, now).status
    assert status["restarts"] == 0 and delays == [0, 10, 20, 40, 80, 160, 320, 600]
    assert {e["reason"] for e in status["restartHistory"]} == {"CheckpointVolumeUnavailable"}
    gen = status["generation"]
    crashed = decide(spec, status, [Pod(0, gen).running().obj(), Pod(1, gen).exited(1, "Crashed: boom").obj()], None, now)
    assert crashed.status["restarts"] == 1


def test_only_the_uncounted_reasons_spare_the_budget():
    assert not lc.counts_toward_backoff("CheckpointVolumeUnavailable")
    assert all(lc.counts_toward_backoff(r) for r in ("Crashed", "CheckpointVolumeFull", "PeerLost", "Error", "OOMKilled"))


def test_start_up_retries_do_not_lengthen_the_uncounted_backoff():
    """A start-up retry has its own budget and backoff: a stated Stop right after one waits only the base."""
    spec = job(restartBackoffSeconds=0, startupTimeoutSeconds=50)
    status = decide(spec, {}, [], None, T0).status
    retried = decide(spec, status, [Pod(0).running().obj(), Pod(1).unschedulable().obj()], None, T0 + 50).status
    assert retried["startupRetries"] == 1 and retried["restartHistory"][-1]["startup"] is True
    up = decide(spec, decide(spec, retried, [], None, T0 + 50).status, gang("running", gen=1), None, T0 + 51).status
    stopped = decide(spec, up, stopped_gang(1), None, T0 + 60).status
    assert lc.parse_time(stopped["nextStartTime"]) == T0 + 60
    assert "startup" not in stopped["restartHistory"][-1]


def test_backoff_limit_exhausted_fails_and_stops_the_gang():
    spec = job(backoffLimit=2)
    status = restarted_status(spec, 2)
    status = decide(spec, status, gang("running", gen=2), None, T0 + 100).status
    pods = [Pod(0, 2).running().obj(), Pod(1, 2).exited(1, "Crashed: again").obj()]
    d = decide(spec, status, pods, None, T0 + 101)
    assert d.phase == lc.FAILED and d.status["restarts"] == 2 and d.status["generation"] == 2
    assert d.of(Fail)[0].reason == lc.REASON_BACKOFF_LIMIT and "Crashed: again" in d.of(Fail)[0].message
    assert d.of(DeletePods) == [DeletePods(("job-0",), lc.REASON_BACKOFF_LIMIT)]
    assert d.status["completionTime"] == lc.rfc3339(T0 + 101)
    failed = next(c for c in d.status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == lc.REASON_BACKOFF_LIMIT


# --- permanent failures, deadlines, success -------------------------------


@pytest.mark.parametrize("code", [EXIT_CONFIG_ERROR, 1])
def test_a_configuration_error_fails_at_once_naming_the_field(code):
    spec = job(backoffLimit=5)
    message = "ConfigError: spec.env.id: cannot import module 'nosuchpkg.envs'"
    pods = [Pod(0).running().obj(), Pod(1).exited(code, message).obj()]
    d = decide(spec, running_status(spec), pods, None, T0 + 1)
    assert d.phase == lc.FAILED
    assert d.of(Fail) == [Fail("ConfigError", f"worker 1 (job-1): {message}")]
    assert d.of(DeletePods) == [DeletePods(("job-0",), "ConfigError")]
    assert d.status["restarts"] == 0


def test_the_active_deadline_fails_the_job():
    spec = job(activeDeadlineSeconds=60)
    status = running_status(spec)
    assert decide(spec, status, gang("running"), progress(9, T0 + 59), T0 + 59).requeue_after == 1
    d = decide(spec, status, gang("running"), progress(9, T0 + 59), T0 + 60)
    assert d.phase == lc.FAILED and d.of(Fail)[0].reason == lc.REASON_DEADLINE
    assert d.of(DeletePods) == [DeletePods(("job-0", "job-1"), lc.REASON_DEADLINE)]


def test_rank_zero_reporting_success_succeeds_the_job():
    spec = job()
    pods = [Pod(0).exited(0, "Succeeded: eval return 500.0 >= 475").obj(), Pod(1).running().obj()]
    d = decide(spec, running_status(spec), pods, None, T0 + 1)
    assert d.phase == lc.SUCCEEDED
    assert d.of(Succeed) == [Succeed(lc.REASON_RANK0_SUCCEEDED, "Succeeded: eval return 500.0 >= 475")]
    assert d.of(DeletePods) == [DeletePods(("job-1",), lc.REASON_RANK0_SUCCEEDED)]
    assert d.status["completionTime"] == lc.rfc3339(T0 + 1)


def test_success_records_rank_zeros_final_numbers_over_the_last_scrape():
    from kuberl.core.contract import final_numbers

    spec = job()
    message = f"Succeeded: eval return 496.6 >= 475 at timesteps 30996 {final_numbers(30996, 496.6)}"
    pods = [Pod(0).exited(0, message).obj(), Pod(1).running().obj()]
    d = decide(spec, running_status(spec), pods, progress(29973, T0), T0 + 1)
    assert d.phase == lc.SUCCEEDED
    assert (d.status["progress"]["timesteps"], d.status["progress"]["evalReturn"]) == (30996, 496.6)


@pytest.mark.parametrize("numbers", [
    "[final timesteps=1 evalReturn=e]",  # float() raised ValueError out of decide: every reconcile of the job failed
    "[final timesteps=1 evalReturn=-.]",
    "[final timesteps=1 evalReturn=1e999]",  # infinity: no JSON carries it, the status write failed every time
    f"[final timesteps={'9' * 300} evalReturn=1.0]",  # no integer the CRD's status (an int64) holds
])
def test_final_numbers_a_pod_wrote_that_status_cannot_hold_leave_the_last_scrape(numbers):
    """Rank 0's termination message is the tenant's to write (a custom trainer's, any image's): its final numbers
    reach status only as the bounded, finite numbers a scrape would (rank0metrics' bounds)."""
    spec = job()
    pods = [Pod(0).exited(0, f"Succeeded: done {numbers}").obj(), Pod(1).running().obj()]
    d = decide(spec, running_status(spec), pods, progress(29973, T0), T0 + 1)
    assert d.phase == lc.SUCCEEDED
    json.dumps(d.status, allow_nan=False)
    assert (d.status.get("progress") or {}).get("timesteps") in (None, 29973), d.status["progress"]


def test_every_rank_exiting_zero_succeeds_the_job():
    spec = job()
    d = decide(spec, running_status(spec), [Pod(0).exited(0).obj(), Pod(1).exited(0).obj()], None, T0 + 1)
    assert d.phase == lc.SUCCEEDED and d.of(Succeed)[0].reason == lc.REASON_ALL_SUCCEEDED


def test_rank_zero_exiting_zero_without_a_report_waits_for_the_others():
    spec = job()
    d = decide(spec, running_status(spec), [Pod(0).exited(0).obj(), Pod(1).running().obj()], None, T0 + 1)
    assert d.phase == lc.RUNNING and d.of(DeletePods) == [] and d.of(Succeed) == []


def test_worker0_success_policy_succeeds_when_worker_0_exits_0_however_the_others_end():
    """A PyTorchJob with a Master succeeded once its Master did (training-operator, pytorchjob_controller.go
    UpdateJobStatus); a Worker failing in its teardown after it does not matter."""
    spec = job(workers=3, successPolicy="Worker0")
    pods = [Pod(0).exited(0).obj(), Pod(1).exited(1).obj(), Pod(2).running().obj()]
    d = decide(spec, running_status(spec), pods, None, T0 + 1)
    assert d.phase == lc.SUCCEEDED and d.status["restarts"] == 0
    assert d.of(Succeed) == [Succeed(lc.REASON_WORKER0_SUCCEEDED, "worker 0 exited 0 (runPolicy.successPolicy: Worker0)")]
    assert d.of(DeletePods) == [DeletePods(("job-2",), lc.REASON_WORKER0_SUCCEEDED)]


def test_worker0_success_policy_still_restarts_a_gang_whose_other_worker_failed_while_worker_0_ran():
    spec = job(successPolicy="Worker0")
    d = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0 + 1)
    assert d.phase != lc.SUCCEEDED and d.status["restarts"] == 1


def test_worker0_success_policy_does_not_take_a_stopped_worker_0_for_success():
    spec = job(successPolicy="Worker0")
    pods = [Pod(0).exited(0, lc.REASON_STOPPED + ": signalled").obj(), Pod(1).running().obj()]
    assert decide(spec, running_status(spec), pods, None, T0 + 1).phase != lc.SUCCEEDED


def test_the_default_success_policy_restarts_when_a_worker_fails_after_worker_0_exited_0():
    spec = job()
    assert spec.run_policy.success_policy == "AllWorkers"
    d = decide(spec, running_status(spec), [Pod(0).exited(0).obj(), Pod(1).exited(1).obj()], None, T0 + 1)
    assert d.phase != lc.SUCCEEDED and d.status["restarts"] == 1


def test_after_rank_zero_reports_success_a_peer_ending_first_is_not_a_crash():
    spec = job()
    pods = [Pod(0).running().obj(), Pod(1).exited(1, "PeerLost: rank 0 closed").obj()]
    d = decide(spec, running_status(spec), pods, progress(500, T0, succeeded=True), T0 + 1)
    assert d.phase == lc.RUNNING and d.status["restarts"] == 0
    done = decide(spec, d.status, [Pod(0).exited(0).obj(), pods[1]], progress(500, T0, succeeded=True), T0 + 2)
    assert done.phase == lc.SUCCEEDED


def test_a_finished_job_only_tidies_up():
    spec = job()
    done = decide(spec, running_status(spec), [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).running().obj()], None, T0 + 1)
    again = decide(spec, done.status, [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).exited(1, "PeerLost: x").obj()], None, T0 + 5)
    assert again.phase == lc.SUCCEEDED and again.actions == ()
    assert again.status["completionTime"] == lc.rfc3339(T0 + 1)


# --- stalls ----------------------------------------------------------------


def test_a_stalled_counter_restarts_the_gang_counted():
    spec = job()
    status = running_status(spec)
    moving = decide(spec, status, gang("running"), progress(800, T0 + 50), T0 + 149)
    assert moving.phase == lc.RUNNING and moving.requeue_after == 1
    d = decide(spec, status, gang("running"), progress(800, T0 + 50), T0 + 150)
    assert d.phase == lc.RESTARTING and d.status["restarts"] == 1
    assert d.status["restartHistory"][-1]["reason"] == lc.REASON_STALLED and "800 timesteps" in d.status["restartHistory"][-1]["message"]
    assert d.status["progress"]["timesteps"] == 800


def test_the_stall_clock_starts_when_the_gang_is_up_not_with_an_older_reading():
    spec = job()
    status = running_status(spec, gen=1, at=T0 + 500)
    old_reading = progress(800, T0, gen=0)
    assert decide(spec, status, gang("running", gen=1), old_reading, T0 + 599).phase == lc.RUNNING
    assert decide(spec, status, gang("running", gen=1), progress(800, T0, gen=1), T0 + 599).phase == lc.RUNNING
    assert decide(spec, status, gang("running", gen=1), progress(800, T0 + 501, gen=1), T0 + 601).phase == lc.RESTARTING


def test_without_a_reading_of_this_generation_no_stall_is_judged():
    # A trainer that exports no counter (bring your own) must not be restarted as Stalled.
    spec = job()
    status = running_status(spec, gen=1, at=T0 + 500)
    assert decide(spec, status, gang("running", gen=1), None, T0 + 5000).phase == lc.RUNNING
    assert decide(spec, status, gang("running", gen=1), progress(800, T0, gen=0), T0 + 5000).phase == lc.RUNNING


def test_no_stall_is_judged_before_every_pod_runs():
    spec = job(startupTimeoutSeconds=1000)
    status = decide(spec, {}, [], None, T0).status
    d = decide(spec, status, [Pod(0).running().obj(), Pod(1).waiting("ContainerCreating").obj()], progress(0, T0), T0 + 900)
    assert d.phase == lc.PENDING and d.status["restarts"] == 0


# --- suspend and resume ----------------------------------------------------


def test_suspend_deletes_the_gang_and_resume_starts_a_new_uncounted_generation():
    spec, suspended_spec = job(), job(suspend=True)
    status = running_status(spec)
    d = decide(suspended_spec, status, gang("running"), None, T0 + 10)
    assert d.phase == lc.SUSPENDED and d.status["generation"] == 1 and d.status["restarts"] == 0
    assert d.of(DeletePods) == [DeletePods(("job-0", "job-1"), lc.REASON_SUSPEND)]
    assert next(c for c in d.status["conditions"] if c["type"] == "Suspended")["status"] == "True"
    still = decide(suspended_spec, d.status, [Pod(0).running().deleting(T0 + 40).obj()], None, T0 + 11)
    assert still.phase == lc.SUSPENDED and still.status["generation"] == 1 and events(still) == []
    resumed = decide(spec, still.status, [], None, T0 + 100)
    assert resumed.phase == lc.PENDING and resumed.of(CreatePods) == [CreatePods(1, (0, 1))]
    assert resumed.status["startTime"] == lc.rfc3339(T0 + 100) and resumed.status["restarts"] == 0
    assert next(c for c in resumed.status["conditions"] if c["type"] == "Suspended")["status"] == "False"


def test_a_job_created_suspended_creates_nothing():
    d = decide(job(suspend=True), {}, [], None, T0)
    assert d.phase == lc.SUSPENDED and d.of(CreatePods) == [] and d.status["generation"] == 0


def test_the_deadline_does_not_run_while_suspended():
    d = decide(job(suspend=True, activeDeadlineSeconds=5), running_status(job()), [], None, T0 + 100)
    assert d.phase == lc.SUSPENDED


# --- pods stuck terminating -----------------------------------------------


def test_a_pod_stuck_terminating_is_force_deleted_and_recorded_once():
    spec = job()
    status = decide(spec, running_status(spec), [Pod(0).running().obj(), Pod(1).exited(1).obj()], None, T0).status
    stuck = [Pod(0, gen=0).running().deleting(T0 + 30).obj()]
    early = decide(spec, status, stuck, None, T0 + 60)
    assert early.of(DeletePods) == [] and early.requeue_after <= 30
    d = decide(spec, status, stuck, None, T0 + 90)
    assert d.of(DeletePods) == [DeletePods(("job-0",), lc.REASON_FORCE_DELETED, force=True)]
    assert d.status["forceDeleted"] == [{"pod": "job-0", "generation": 0, "time": lc.rfc3339(T0 + 90)}]
    assert lc.REASON_FORCE_DELETED in events(d)
    again = decide(spec, d.status, stuck, None, T0 + 95)
    assert again.status["forceDeleted"] == d.status["forceDeleted"] and lc.REASON_FORCE_DELETED not in events(again)


# --- bounded status, Kubernetes shapes --------------------------------------


def test_status_stays_bounded_with_many_workers_and_restarts():
    spec = job(workers=64, backoffLimit=1000)
    status = restarted_status(spec, 25)
    assert len(status["restartHistory"]) == lc.HISTORY_LIMIT and status["restarts"] == 25
    long = [Pod(r, 25).running().obj() for r in range(64)]
    long[3] = Pod(3, 25).exited(1, "Crashed: " + "x" * 5000).obj()
    d = decide(spec, {**status, "gangRunningTime": lc.rfc3339(T0)}, long, progress(1, T0, gen=25), T0 + 1)
    assert len(json.dumps(d.status)) < 8000


def test_conditions_move_their_transition_time_only_when_they_flip():
    spec = job()
    a = decide(spec, {}, [], None, T0).status
    b = decide(spec, a, [Pod(0).running().obj(), Pod(1).unschedulable().obj()], None, T0 + 5).status
    ready_a = next(c for c in a["conditions"] if c["type"] == "Ready")
    ready_b = next(c for c in b["conditions"] if c["type"] == "Ready")
    assert ready_b["reason"] == "Unschedulable" and ready_b["lastTransitionTime"] == ready_a["lastTransitionTime"]
    assert set(ready_b) == {"type", "status", "reason", "message", "lastTransitionTime"}


def test_unknown_status_fields_pass_through():
    d = decide(job(), {"observedGeneration": 4, "finalModel": "/x"}, [], None, T0)
    assert d.status["observedGeneration"] == 4 and d.status["finalModel"] == "/x"


def test_observed_pod_reads_what_a_cluster_reports():
    pod = {
        "metadata": {"name": "job-1", "labels": {"kuberl.dev/rank": "1", "kuberl.dev/restart": "3"},
                     "deletionTimestamp": "2026-01-01T00:00:30Z"},
        "status": {
            "phase": "Failed", "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
                           {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 1, "reason": "Error", "message": TERMINATION_MARKER + "PeerLost: rank 0 unreachable",
                "finishedAt": "2026-01-01T00:00:20Z"}}}],
        },
    }
    seen = lc.observed_pod(pod)
    assert (seen.rank, seen.generation, seen.phase, seen.exit_code) == (1, 3, "Failed", 1)
    assert seen.reason == "PeerLost" and seen.disruption == "EvictionByEvictionAPI" and seen.scheduling_reason is None
    assert seen.deletion_timestamp == lc.parse_time("2026-01-01T00:00:30Z")
    assert seen.finished_at == lc.parse_time("2026-01-01T00:00:20Z")
    pending = lc.observed_pod({"metadata": {"name": "job-0", "labels": {"kuberl.dev/rank": "0"}}, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no nodes"}]}})
    assert pending.scheduling_reason == "Unschedulable" and pending.generation == 0 and not pending.started


def kubelet_disrupted_pod(status_reason: str, message: str) -> dict:
    """A pod the kubelet ended as it writes one (the pod's status.reason and message, a DisruptionTarget condition of
    reason TerminationByKubelet carrying the same message): pkg/kubelet/eviction/eviction_manager.go (evictPod, its
    message from evictionMessage), pkg/kubelet/nodeshutdown (nodeShutdownReason "Terminated") and
    pkg/kubelet/preemption (events.PreemptContainer, "Preempting")."""
    return {
        "metadata": {"name": "job-1", "labels": {"kuberl.dev/rank": "1", "kuberl.dev/restart": "0"}},
        "status": {"phase": "Failed", "reason": status_reason, "message": message, "startTime": "2026-01-01T00:00:00Z",
                   "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                   "message": message}],
                   "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]},
    }


KUBELET_DISRUPTIONS = {
    "Evicted": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 61440Ki. Container trainer "
               "was using 7340032Ki, request is 1Gi, has larger consumption of memory. ",
    "Terminated": "Pod was terminated in response to imminent node shutdown.",
    "Preempting": "Pod was preempted by Kubelet to accommodate a critical pod.",
}


@pytest.mark.parametrize("status_reason", KUBELET_DISRUPTIONS)
def test_the_kubelet_s_disruptions_are_told_apart_in_the_restart_record(status_reason):
    """A node-pressure eviction, a node shutdown and a critical pod's admission share one DisruptionTarget reason,
    TerminationByKubelet: the restart said "disrupted: TerminationByKubelet" for each, and an eviction for the
    trainer's own memory (what a user can fix: its request) read as a node going away. The operator reads pods
    through pod_as_read, so what it keeps of them must carry the pod's reason and message too."""
    spec = job()
    worker = lc.observed_pod(lc.pod_as_read(kubelet_disrupted_pod(status_reason, KUBELET_DISRUPTIONS[status_reason])))
    d = decide(spec, running_status(spec), [Pod(0).running().obj(), worker], None, T0 + 1)
    entry = d.status["restartHistory"][-1]
    assert entry["reason"] == "TerminationByKubelet" and not entry["counted"]
    assert entry["message"].startswith(f"worker 1 (job-1) disrupted: TerminationByKubelet ({status_reason}: ")
    assert KUBELET_DISRUPTIONS[status_reason].strip() in entry["message"]


KUBELET_REJECTIONS = {  # kubelet.go canAdmitPod's reasons, as rejectPod writes them (message after "Pod was rejected: ")
    "UnexpectedAdmissionError": "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                                "Requested: 1, Available: 0, which is unexpected",
    "OutOfcpu": "Node didn't have enough resource: cpu, requested: 4000, used: 3800, capacity: 4000",
}


@pytest.mark.parametrize("reason", KUBELET_REJECTIONS)
def test_a_pod_its_kubelet_rejected_is_named_by_the_kubelet_s_reason_and_message(reason):
    """A pod refused at admission (a GPU device plugin that lost track of its devices, a node overcommitted since the
    scheduler chose it) is Failed with no container state, its reason and message the pod's own: the restart said
    'Error: worker 1 (job-1): exit code None'."""
    spec = job()
    rejected = {"metadata": {"name": "job-1", "labels": {"kuberl.dev/rank": "1", "kuberl.dev/restart": "0"}},
                "status": {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {KUBELET_REJECTIONS[reason]}"}}
    worker = lc.observed_pod(lc.pod_as_read(rejected))
    d = decide(spec, {}, [Pod(0).running().obj(), worker], None, T0 + 1)
    entry = d.status["restartHistory"][-1]
    assert (entry["reason"], entry["counted"], entry["startup"]) == (reason, False, True)
    assert entry["message"] == f"worker 1 (job-1): Pod was rejected: {KUBELET_REJECTIONS[reason]} (before all workers were running)"
    # a trainer's own termination message still comes first
    ran = {**rejected, "status": {**rejected["status"], "containerStatuses": [{"name": "trainer", "state": {"terminated": {
        "exitCode": 1, "reason": "Error", "message": TERMINATION_MARKER + "Crashed: boom"}}}]}}
    assert (lc.observed_pod(ran).reason, lc.observed_pod(ran).message) == ("Crashed", "Crashed: boom")


def test_progress_changes_time_only_when_the_counter_moves():
    first = lc.next_progress(None, 0, 100, T0, succeeded=False)
    same = lc.next_progress(first, 0, 100, T0 + 30, eval_return=20.0)
    assert same.changed_at == T0 and same.eval_return == 20.0
    assert lc.next_progress(same, 0, 164, T0 + 31).changed_at == T0 + 31
    assert lc.next_progress(same, 1, 100, T0 + 32).changed_at == T0 + 32


def test_a_pod_gone_unknown_in_a_running_gang_is_not_a_start_up_problem():
    spec = job()
    pods = [Pod(0).running().obj(), Pod(1).running()._with(phase="Unknown", ready=False).obj()]
    d = decide(spec, running_status(spec), pods, progress(99, T0 + 55), T0 + 60)  # startupTimeoutSeconds=50
    assert d.phase == lc.RUNNING and d.of(DeletePods) == [] and d.status["startupRetries"] == 0


def test_the_stall_clock_survives_an_operator_restart_through_status():
    spec = job()
    d = decide(spec, running_status(spec), gang("running"), progress(640, T0 + 20), T0 + 30)
    remembered = lc.progress_from_status(d.status)
    assert (remembered.generation, remembered.timesteps, remembered.changed_at) == (0, 640, T0 + 20)
    assert lc.next_progress(remembered, 0, 640, T0 + 90).changed_at == T0 + 20
    assert lc.progress_from_status({}) is None


# --- refusals: the job cannot run as written ------------------------------

REFUSALS = [
    lc.Refusal(lc.REASON_INVALID_SPEC, "spec.labels.a b: expected a label key"),
    lc.Refusal(lc.REASON_POD_SECURITY, "spec.hostNetwork: Host Namespaces: false (got True); "
                                       "spec.containers[trainer].securityContext.privileged: Privileged Containers: false (got True)"),
    lc.Refusal(lc.REASON_INVALID_CHILD, 'admission webhook "deny.example.com" denied the request: no GPUs for team-a'),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.reason)
def test_a_refusal_fails_a_new_job_at_once_and_creates_nothing(refusal):
    spec = None if refusal.reason == lc.REASON_INVALID_SPEC else job()
    d = decide(spec, {}, [], None, T0, refusal=refusal)
    assert d.phase == lc.FAILED and d.of(CreatePods) == [] and d.status["restarts"] == 0
    assert d.of(Fail) == [Fail(refusal.reason, refusal.message)]
    assert [(e.type, e.reason, e.message) for e in d.of(Event)] == [("Warning", refusal.reason, refusal.message)]
    failed = next(c for c in d.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == ("True", refusal.reason, refusal.message)
    again = decide(spec, d.status, [], None, T0 + 60, refusal=refusal)
    assert again.status == d.status and again.actions == (), "a second reconcile writes and posts nothing"


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.reason)
def test_a_refusal_of_a_running_job_stops_its_whole_gang(refusal):
    spec = job()
    pods = [Pod(0).running().obj(), Pod(1).running().obj(), Pod(0, gen=1).running().obj()]
    d = decide(None if refusal.reason == lc.REASON_INVALID_SPEC else spec, running_status(spec), pods, None, T0 + 5, refusal=refusal)
    assert d.phase == lc.FAILED
    assert sorted(d.of(DeletePods), key=lambda a: a.reason) == sorted(
        [DeletePods(("job-0",), lc.REASON_STALE), DeletePods(("job-0", "job-1"), refusal.reason)], key=lambda a: a.reason)


def test_a_child_refused_half_way_through_the_gang_deletes_the_pods_already_made():
    spec = job(workers=3)
    created = decide(spec, {}, [], None, T0)
    refusal = lc.Refusal(lc.REASON_INVALID_CHILD, 'pods "job-2" is forbidden: maximum cpu usage per Container is 1, but limit is 2')
    d = decide(spec, created.status, [Pod(0).obj(), Pod(1).obj()], None, T0 + 1, refusal=refusal)
    assert d.phase == lc.FAILED and d.of(DeletePods) == [DeletePods(("job-0", "job-1"), lc.REASON_INVALID_CHILD)]


def test_without_a_spec_only_a_refusal_can_be_decided():
    with pytest.raises(ValueError, match="needs a spec"):
        decide(None, {}, [], None, T0)
    with pytest.raises(ValueError, match="needs a spec"):
        decide(None, {}, [], None, T0, refusal=lc.Refusal(lc.REASON_QUOTA, "exceeded quota", retryable=True))


QUOTA = lc.Refusal(lc.REASON_QUOTA, 'pods "job-1" is forbidden: exceeded quota: team-a, requested: pods=1, used: pods=4, limited: pods=4',
                   retryable=True)


def test_a_quota_refusal_keeps_the_job_pending_quoting_the_server_and_retries_with_backoff():
    spec = job(startupTimeoutSeconds=100, restartBackoffSeconds=0)
    created = decide(spec, {}, [], None, T0)
    refused = decide(spec, created.status, [Pod(0).obj()], None, T0, refusal=QUOTA)
    assert refused.phase == lc.PENDING and refused.of(CreatePods) == [] and refused.of(DeletePods) == []
    ready = next(c for c in refused.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", lc.REASON_QUOTA, QUOTA.message)
    [warning] = refused.of(Event)
    assert warning.type == "Warning" and warning.reason == lc.REASON_QUOTA and QUOTA.message in warning.message
    assert refused.requeue_after == lc.MIN_QUOTA_RETRY_SECONDS

    waiting = decide(spec, refused.status, [Pod(0).obj()], None, T0 + 0.5)
    assert waiting.of(CreatePods) == [] and waiting.status["conditions"] == refused.status["conditions"]
    retried = decide(spec, refused.status, [Pod(0).obj()], None, T0 + 1)
    assert retried.of(CreatePods) == [CreatePods(0, (1,))] and retried.status["conditions"] == refused.status["conditions"]
    # each wait as long as all the waiting before it: 1, 1, 2, 4, ... seconds
    again = decide(spec, retried.status, [Pod(0).obj()], None, T0 + 8, refusal=QUOTA)
    assert again.requeue_after == 8 and again.phase == lc.PENDING


def test_a_quota_refusal_past_the_startup_timeout_fails_the_job_with_the_servers_words():
    spec = job(startupTimeoutSeconds=100)
    created = decide(spec, {}, [], None, T0)
    d = decide(spec, created.status, [Pod(0).obj()], None, T0 + 100, refusal=QUOTA)
    assert d.phase == lc.FAILED and d.of(Fail)[0].reason == lc.REASON_QUOTA
    assert "startupTimeoutSeconds=100" in d.of(Fail)[0].message and QUOTA.message in d.of(Fail)[0].message
    assert d.of(DeletePods) == [DeletePods(("job-0",), lc.REASON_QUOTA)]
    last_wait = decide(spec, created.status, [Pod(0).obj()], None, T0 + 90, refusal=QUOTA)
    assert last_wait.phase == lc.PENDING and last_wait.requeue_after == 10, "no retry is scheduled past the deadline"


def test_a_name_in_use_waits_like_quota_and_its_condition_stays_between_retries():
    """A ConfigMap or pod a user made under a child's name: Pending, saying so until the retry
    (not 'starts in 1s' nor 'creating'), then Failed at the startup timeout."""
    taken = lc.Refusal(lc.REASON_NAME_IN_USE, "ConfigMap job-config exists and was not created by this job", retryable=True)
    spec = job(startupTimeoutSeconds=100, restartBackoffSeconds=0)
    created = decide(spec, {}, [], None, T0)
    refused = decide(spec, created.status, [], None, T0, refusal=taken)
    assert refused.phase == lc.PENDING and refused.of(CreatePods) == [] and refused.requeue_after == lc.MIN_QUOTA_RETRY_SECONDS
    waiting = decide(spec, refused.status, [], None, T0 + 0.5)
    retried = decide(spec, refused.status, [], None, T0 + 1)
    assert waiting.status["conditions"] == retried.status["conditions"] == refused.status["conditions"]
    assert retried.of(CreatePods) == [CreatePods(0, (0, 1))]
    failed = decide(spec, refused.status, [], None, T0 + 100, refusal=taken)
    assert failed.phase == lc.FAILED and failed.of(Fail)[0].reason == lc.REASON_NAME_IN_USE and taken.message in failed.of(Fail)[0].message


# --- after the end: TTL and Kueue ---------------------------------------------


def test_a_finished_job_is_deleted_once_its_ttl_has_passed():
    spec = job(ttlSecondsAfterFinished=30)
    done = decide(spec, running_status(spec), [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).running().obj()], None, T0 + 1)
    assert done.phase == lc.SUCCEEDED and done.requeue_after == 30 and done.of(lc.DeleteJob) == []
    early = decide(spec, done.status, [], None, T0 + 20)
    assert early.requeue_after == 11 and early.of(lc.DeleteJob) == []
    due = decide(spec, done.status, [], None, T0 + 31)
    assert due.of(lc.DeleteJob) == [lc.DeleteJob(lc.REASON_TTL)] and due.status == early.status


def test_without_a_ttl_a_finished_job_stays_and_sleeps():
    spec = job()
    done = decide(spec, running_status(spec), [Pod(0).exited(0).obj(), Pod(1).exited(0).obj()], None, T0 + 1)
    later = decide(spec, done.status, [], None, T0 + 10**6)
    assert later.actions == () and later.requeue_after is None


def finished(spec, pods=None) -> dict:
    """The status of a job that succeeded at T0 + 1."""
    ended = pods or [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).exited(0).obj()]
    return decide(spec, running_status(spec), ended, None, T0 + 1).status


QUEUED = make_job().queue("team-a").spec()
ENDED_GANG = [Pod(0).exited(0, "Succeeded: done").obj(), Pod(1).running().obj(), Pod(0, gen=1).deleting(T0).obj()]


@dataclass(frozen=True)
class ShellCase:
    """One row of what decide asks of the shell besides pods: Kueue's end-of-group mark, the TTL's
    deletion, the NetworkPolicy check. `check_policy`: this operator has not yet compared the job's
    NetworkPolicy with its own (decide's networkpolicy_checked input, negated)."""

    id: str
    spec: object
    status: dict
    pods: tuple[ObservedPod, ...]
    expected: tuple
    at: float = T0 + 1
    check_policy: bool = False


TTL30 = job(ttlSecondsAfterFinished=30)
SHELL_ACTIONS = (lc.FinishPodGroup, lc.DeleteJob, lc.CheckNetworkPolicy)
SHELL_CASES = [
    ShellCase("kueue: an ended job marks its live pods, first", QUEUED, running_status(QUEUED), tuple(ENDED_GANG),
              (lc.FinishPodGroup(("job-0", "job-1")),)),
    ShellCase("kueue: a pod already marked is left alone", QUEUED, running_status(QUEUED),
              (ENDED_GANG[0], replace(ENDED_GANG[1], group_finished=True)), (lc.FinishPodGroup(("job-0",)),)),
    ShellCase("kueue: all marked, nothing to do", QUEUED, finished(QUEUED),
              tuple(replace(p, group_finished=True) for p in ENDED_GANG[:2]), ()),
    ShellCase("kueue: no queue, no mark", job(), running_status(job()), tuple(ENDED_GANG[:2]), ()),
    ShellCase("kueue: a running job is not marked", QUEUED, running_status(QUEUED), tuple(gang("running")), ()),
    ShellCase("ttl: before it passes, nothing", TTL30, finished(TTL30), (), (), at=T0 + 20),
    ShellCase("ttl: once it passed, the job is deleted", TTL30, finished(TTL30), (), (lc.DeleteJob(lc.REASON_TTL),), at=T0 + 31),
    ShellCase("ttl: none set, the job stays", job(), finished(job()), (), (), at=T0 + 10**6),
    ShellCase("networkpolicy: a running job this operator has not checked", job(), running_status(job()), tuple(gang("running")),
              (lc.CheckNetworkPolicy(),), check_policy=True),
    ShellCase("networkpolicy: checked once, not again", job(), running_status(job()), tuple(gang("running")), ()),
    ShellCase("networkpolicy: a new gang has nothing to scrape yet", job(), {}, (), (), check_policy=True),
    ShellCase("networkpolicy: a finished job is not checked", job(), finished(job()), (), (), check_policy=True),
]


@pytest.mark.parametrize("case", SHELL_CASES, ids=lambda c: c.id)
def test_what_decide_asks_of_the_shell(case: ShellCase):
    d = decide(case.spec, case.status, list(case.pods), None, case.at, networkpolicy_checked=not case.check_policy)
    assert tuple(a for a in d.actions if isinstance(a, SHELL_ACTIONS)) == case.expected
    if case.expected[:1] and isinstance(case.expected[0], lc.FinishPodGroup):
        assert d.actions[0] == case.expected[0], "Kueue hears of the end before anything is deleted"


def test_a_pod_marked_in_its_kueue_group_is_read_as_such():
    pod = {"metadata": {"name": "job-0", "labels": {"kuberl.dev/rank": "0"},
                        "annotations": {lc.names.KUEUE_RETRIABLE_IN_GROUP: "false"}}}
    assert lc.observed_pod(pod).group_finished and not lc.observed_pod({"metadata": {"name": "job-1"}}).group_finished


FORBIDDEN = lc.Refusal(lc.REASON_OPERATOR_FORBIDDEN, 'pods is forbidden: User "system:serviceaccount:k:op" cannot create resource'
                       ' "pods" in API group "" in the namespace "default": the operator\'s ServiceAccount lacks this permission',
                       retryable=True)


def test_rbac_refusing_the_operator_keeps_the_job_pending_saying_so_past_any_deadline():
    spec = job(startupTimeoutSeconds=100, restartBackoffSeconds=5)
    created = decide(spec, {}, [], None, T0)
    refused = decide(spec, created.status, [], None, T0, refusal=FORBIDDEN)
    assert refused.phase == lc.PENDING and refused.of(CreatePods) == [] and refused.requeue_after == 5
    ready = next(c for c in refused.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", lc.REASON_OPERATOR_FORBIDDEN, FORBIDDEN.message)
    [warning] = refused.of(Event)
    assert warning.type == "Warning" and FORBIDDEN.message in warning.message and "until the operator may" in warning.message
    late = decide(spec, refused.status, [], None, T0 + 1000, refusal=FORBIDDEN)
    assert late.phase == lc.PENDING and not late.of(Fail), "the operator's permissions never fail the job"
    granted = decide(spec, late.status, [], None, T0 + 1005)
    assert granted.of(CreatePods) == [CreatePods(0, (0, 1))]
    pending = decide(spec, granted.status, [Pod(0).obj(), Pod(1).obj()], None, T0 + 1050)
    assert pending.phase == lc.PENDING and not pending.of(DeletePods), "the startup clock counts from the create let through"


def test_rbac_retries_wait_at_most_thirty_seconds_and_at_least_one():
    for backoff, wait in ((0, lc.MIN_QUOTA_RETRY_SECONDS), (3600, lc.MAX_FORBIDDEN_RETRY_SECONDS)):
        spec = job(restartBackoffSeconds=backoff)
        assert decide(spec, decide(spec, {}, [], None, T0).status, [], None, T0, refusal=FORBIDDEN).requeue_after == wait


def test_a_kueue_mark_rbac_refuses_keeps_the_phase_and_is_asked_again_later_not_at_once():
    forbidden = lc.Refusal(lc.REASON_OPERATOR_FORBIDDEN, 'pods "job-0" is forbidden: User "op" cannot patch resource "pods"',
                           retryable=True, patching=True)
    done = decide(QUEUED, running_status(QUEUED), list(ENDED_GANG), None, T0)
    refused = decide(QUEUED, done.status, list(ENDED_GANG), None, T0 + 1, refusal=forbidden)
    assert refused.of(lc.FinishPodGroup) == [] and refused.phase == done.phase and refused.status == done.status
    assert events(refused) == [lc.REASON_OPERATOR_FORBIDDEN] and refused.requeue_after is not None
    assert decide(QUEUED, refused.status, list(ENDED_GANG), None, T0 + 3).of(lc.FinishPodGroup)  # asked again later
