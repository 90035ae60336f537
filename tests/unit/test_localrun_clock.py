"""`kuberl run` on a laptop that sleeps: the wall clock jumps, the trainers were frozen with it, and the stall
clock must not take the sleep for a stalled rank 0 (a healthy gang restarted, runPolicy.backoffLimit spent)."""

from __future__ import annotations

from kuberl.core import lifecycle as lc
from kuberl.core.lifecycle import ObservedPod, Rank0Progress, decide
from kuberl.local.runner import clock_jump, discount_clock_jump

from tests.support.jobs import make_job

T0 = 1_700_000_000.0
HOUR = 3600.0


def running_gang_status(spec) -> tuple[dict, list[ObservedPod]]:
    pods = [ObservedPod(name=f"job-{r}", rank=r, generation=0, phase="Running", ready=True, start_time=T0) for r in range(2)]
    status = decide(spec, {"generation": 0}, [], None, T0).status
    return decide(spec, status, pods, None, T0).status, pods


def test_a_normal_loop_turn_is_no_jump_and_a_suspend_or_a_stepped_clock_is():
    assert clock_jump(0.2, 0.2) == 0.0
    assert clock_jump(1.3, 0.21) == 0.0  # an NTP slew, or a slow scrape measured on both clocks alike
    assert clock_jump(HOUR + 0.2, 0.2) == HOUR  # the monotonic clock stands still while the machine sleeps
    assert clock_jump(0.2 - 60, 0.2) == -60  # a clock set back


def test_a_sleep_longer_than_the_stall_timeout_does_not_restart_a_healthy_gang():
    spec = make_job().workers(2).run_policy(stallTimeoutSeconds=100).spec()
    status, pods = running_gang_status(spec)
    before_sleep = Rank0Progress(generation=0, timesteps=800, changed_at=T0 + 50)
    woke = T0 + 60 + HOUR
    assert decide(spec, status, pods, before_sleep, woke).phase == lc.RESTARTING  # what the sleep looked like
    seen = discount_clock_jump(before_sleep, clock_jump(HOUR + 0.2, 0.2))
    assert decide(spec, status, pods, seen, woke).phase == lc.RUNNING
    # a rank 0 that really stops after the machine woke is still a stall, on time
    stalled = decide(spec, status, pods, seen, T0 + 50 + HOUR + 100)
    assert stalled.phase == lc.RESTARTING and stalled.status["restartHistory"][-1]["reason"] == lc.REASON_STALLED


def test_no_reading_yet_stays_none_and_no_jump_changes_nothing():
    reading = Rank0Progress(generation=0, timesteps=1, changed_at=T0)
    assert discount_clock_jump(None, HOUR) is None
    assert discount_clock_jump(reading, 0.0) is reading
