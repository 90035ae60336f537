"""The faults a cluster throws at a training job, on the shared stack, each on a tiny job of its own.

Waits are deadlines derived from the spec's timeouts with room for a loaded machine, never fixed sleeps.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import time

from kuberl.core import names

from tests.e2e.stack import Scenario, tiny_job, wait_for
from tests.support.selectors import parse_label_selector

RUN = 240  # a tiny job runs in seconds alone; the deadline allows a shared 2-core machine
OPERATOR_SCRAPE_SECONDS = 0.5  # the stack's `kuberl operator --scrape-interval`
# this test's polling plus a reconcile or two on a loaded machine (the operator's reconcile took 2.4 s on average
# at load 9, make test-e2e with two busy loops beside it); under a second stall period (20 s), far under a collective's
OBSERVATION_SLACK = 8.0


def checkpoint_interval(stack, name: str) -> int:
    return stack.job(name)['spec']['checkpoint']['everyUpdates'] * stack.steps_per_update(name)


def running_with_checkpoints(stack, name: str, count: int):
    return wait_for(lambda: stack.status(name).get('phase') == 'Running' and len(stack.checkpoints(name)) >= count,
                    RUN, f'{name} running with {count} checkpoint(s)', explain=lambda: stack.describe(name))


def rank0_steps_now(stack, name: str, before: int) -> int:
    """Rank 0's counter right after a fault, if it still answers (its counter no longer moves once a peer is gone)."""
    with contextlib.suppress(OSError, StopIteration, AttributeError, KeyError):
        return max(before, stack.rank0_steps(name))
    return before


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    try:
        return pathlib.Path(f'/proc/{pid}/stat').read_text().split(') ')[1][0] != 'Z'
    except (OSError, IndexError):
        return False


def test_a_killed_rank_restarts_the_gang_from_its_latest_checkpoint(stack):
    scenario = Scenario('2 SIGKILL one rank', time.monotonic())
    name = 'killed-rank'
    stack.apply(tiny_job(name, totalTimesteps=10000))
    running_with_checkpoints(stack, name, 2)
    reached = stack.rank0_steps(name)
    os.kill(stack.main_pid(name, 1), signal.SIGKILL)
    reached = rank0_steps_now(stack, name, reached)

    done = stack.wait_phase(name, 'Succeeded', RUN)
    (entry,) = done['restartHistory']
    assert done['restarts'] == 1 and done['generation'] == 1 and entry['counted'] and entry['generation'] == 0, done
    assert entry['reason'] and f'{name}-1' in entry['message'], entry
    (resumed_from, resumed_at), = stack.resumed(name)
    assert resumed_from == stack.latest_checkpoint_before_restart(name), (resumed_from, 'is not the latest checkpoint')
    reached = stack.reached_before_restart(name, reached)
    lost = reached - resumed_at
    assert 0 < resumed_at and 0 <= lost <= checkpoint_interval(stack, name), (reached, resumed_at)
    assert stack.pids(name) == []
    scenario.done(restarts=done['restarts'], lost=lost,
                  notes=f"reason {entry['reason']}: {entry['message'][:80]}; resumed at {resumed_at} of {reached} (interval {checkpoint_interval(stack, name)})")


def test_a_stopped_rank_is_a_stall_and_the_gang_restarts(stack):
    scenario = Scenario('3 SIGSTOP one rank (stall)', time.monotonic())
    name = 'stalled-rank'
    stall = 10  # longer than a gang's start (imports, rendezvous) on a loaded machine, when no step has been counted yet
    # Collectives outwait the stall timeout, so the operator's stall clock, not a collective's timeout, ends the gang.
    stack.apply(tiny_job(name, totalTimesteps=10000, runPolicy={'stallTimeoutSeconds': stall, 'collectiveTimeoutSeconds': 120}))
    running_with_checkpoints(stack, name, 1)
    reached = stack.rank0_steps(name)
    victim = stack.main_pid(name, 1)
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        entry = wait_for(lambda: (stack.status(name).get('restartHistory') or [None])[0], stall + 60, f'{name} to restart', interval=0.05)
    except AssertionError:
        os.kill(victim, signal.SIGCONT)  # never leave a stopped process behind a failed test
        raise
    noticed = time.monotonic() - stopped
    assert entry['reason'] == 'Stalled' and entry['counted'], entry
    assert noticed <= stall + OPERATOR_SCRAPE_SECONDS + OBSERVATION_SLACK, f'restart {noticed:.1f}s after SIGSTOP'

    done = stack.wait_phase(name, 'Succeeded', RUN)
    assert done['restarts'] == 1, done
    wait_for(lambda: not alive(victim), 30, 'the stopped process to be killed')
    (resumed_from, resumed_at), = stack.resumed(name)
    assert resumed_from == stack.latest_checkpoint_before_restart(name), (resumed_from, 'is not the latest checkpoint')
    reached = stack.reached_before_restart(name, reached)
    assert 0 <= reached - resumed_at <= checkpoint_interval(stack, name), (reached, resumed_at)
    scenario.done(restarts=done['restarts'], lost=reached - resumed_at,
                  notes=f'restart {noticed:.1f}s after SIGSTOP (stall {stall}s + scrape {OPERATOR_SCRAPE_SECONDS}s); {entry["message"][:70]}')


def test_the_operator_killed_mid_run_and_restarted_loses_nothing(stack):
    scenario = Scenario('4 operator killed and restarted', time.monotonic())
    name = 'operator-restart'
    stack.apply(tiny_job(name, totalTimesteps=15000))
    def progressing():
        status = stack.status(name)
        return status.get('phase') == 'Running' and (status.get('progress') or {}).get('timesteps') and status
    wait_for(progressing, RUN, f'{name} running with progress in status')
    gang = {p['metadata']['name']: p['metadata']['uid'] for p in stack.pods(name)}
    stack.operator.kill()
    down = time.monotonic()
    before = stack.status(name)
    steps = stack.rank0_steps(name)
    wait_for(lambda: stack.rank0_steps(name) > steps, 60, 'the gang to train on without its operator')
    assert stack.status(name) == before, 'nobody else writes the status while the operator is down'
    stack.operator.start()
    restarted = time.monotonic() - down

    def reported_again():
        status = stack.status(name)
        return (status['progress']['timesteps'] > before['progress']['timesteps'] or status['phase'] == 'Succeeded') and status
    after = wait_for(reported_again, 60, 'the restarted operator to report progress')
    for key in ('startTime', 'generation', 'restarts', 'observedGeneration'):
        assert after.get(key) == before.get(key), (key, before, after)
    done = stack.wait_phase(name, 'Succeeded', RUN)
    assert {p['metadata']['name']: p['metadata']['uid'] for p in stack.pods(name)} == gang, 'the same pods, none created again'
    assert done['restarts'] == 0 and done['generation'] == 0 and not done.get('restartHistory'), done
    assert stack.operator.healthy()
    scenario.done(restarts=0, lost=0, notes=f'operator down {restarted:.1f}s (SIGKILL to healthy again); same 2 pod uids; status kept')


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(stack):
    scenario = Scenario('5 truncated newest checkpoint', time.monotonic())
    name = 'truncated'
    stack.apply(tiny_job(name, totalTimesteps=10000))
    running_with_checkpoints(stack, name, 3)
    held = stack.hold(name, generation=1)  # the node's hook: generation 1 stays Pending until the file is cut
    try:
        reached = stack.rank0_steps(name)
        os.kill(stack.main_pid(name, 1), signal.SIGKILL)
        reached = rank0_steps_now(stack, name, reached)
        wait_for(lambda: len(stack.pods(name, generation=1)) == 2 and not stack.pods(name, generation=0) and not stack.pids(name),
                 60, 'generation 1 held Pending with generation 0 gone')
        assert all(p['status']['phase'] == 'Pending' for p in stack.pods(name, generation=1))
        *older, newest = stack.checkpoints(name)
        cut = newest.read_bytes()[: newest.stat().st_size // 2]
        newest.write_bytes(cut)
    finally:
        stack.release(held)

    done = stack.wait_phase(name, 'Succeeded', RUN)
    assert re.search(rf'skipping checkpoint \S*{newest.name}: ', stack.pod_logs(name)), stack.pod_logs(name)[-2000:]
    (resumed_from, resumed_at), = stack.resumed(name)
    assert resumed_from.endswith(older[-1].name), (resumed_from, older[-1])
    assert done['restarts'] == 1
    # kept aside for inspection, not replaced by the resumed run's save under its name
    assert (newest.parent / 'unreadable' / newest.name).read_bytes() == cut
    # said on the job too: rank 0's log goes with its pod at the next gang restart
    events = json.loads(stack.kubectl('get', 'events', '-o', 'json').stdout)['items']
    [skipped] = [e for e in events if e['involvedObject'].get('name') == name and e['reason'] == 'CheckpointsSkipped']
    assert skipped['type'] == 'Warning' and 'could not use the 1 newest checkpoint(s)' in skipped['message'], skipped
    reached = stack.reached_before_restart(name, reached)
    assert resumed_at < reached, 'the cut checkpoint held later work than the one resumed from'
    scenario.done(restarts=done['restarts'], lost=reached - resumed_at,
                  notes=f'cut {newest.name}; resumed from {older[-1].name} at {resumed_at} (reached {reached})')


def test_a_configuration_error_fails_at_once_naming_the_field_also_through_torchrun(stack):
    scenario = Scenario('6a ConfigError (direct, and torchrun procsPerWorker 2)', time.monotonic())
    bad_env = {'id': 'nosuchpkg.envs:Env', 'numEnvs': 2}
    jobs = {'config-error': tiny_job('config-error', workers=1, env=bad_env),
            'config-error-torchrun': tiny_job('config-error-torchrun', workers=1, procsPerWorker=2, env=bad_env)}
    stack.apply(*jobs.values())
    for name in jobs:
        failed = stack.wait_phase(name, 'Failed', RUN)
        reason = stack.condition(name, 'Failed')
        assert reason['reason'] == 'ConfigError' and 'spec.env.id' in reason['message'], reason
        assert failed['restarts'] == 0 and not failed.get('restartHistory') and failed['generation'] == 0, failed
        wait_for(lambda name=name: not stack.pids(name), 30, f'{name} processes to end')
    scenario.done(restarts=0, notes=f"{reason['message'][:100]}")


CRASH_ON_EVERY_START = (pathlib.Path(__file__).parent / 'scripts' / 'crash_on_every_start.py').read_text()


def test_a_crash_on_every_start_exhausts_the_backoff_and_leaves_no_process(stack):
    scenario = Scenario('6b crash on every start', time.monotonic())
    name = 'crash-loop'
    limit = 2
    stack.apply(tiny_job(name, template={'spec': {'containers': [{'name': 'trainer', 'command': ['python', '-c', CRASH_ON_EVERY_START]}]}},
                         runPolicy={'backoffLimit': limit, 'restartBackoffSeconds': 0.2, 'terminationGracePeriodSeconds': 1}))
    seen: set[int] = set()

    def failed():
        seen.update(stack.pids(name))
        return stack.status(name).get('phase') == 'Failed' and stack.status(name)
    done = wait_for(failed, RUN, f'{name} to fail', interval=0.1)
    reason = stack.condition(name, 'Failed')
    assert reason['reason'] == 'BackoffLimitExceeded' and f'backoffLimit={limit}' in reason['message'], reason
    # each restart, then the failure that spent the budget, recorded with its reason too (issue 31)
    assert done['restarts'] == limit and [h['counted'] for h in done['restartHistory']] == [True] * (limit + 1), done
    # The failed pod stays, as a Job's do, to show why; nothing may still run.
    wait_for(lambda: not stack.pids(name) and all(p['status'].get('phase') in ('Succeeded', 'Failed') for p in stack.pods(name)),
             30, f'{name} processes to end',
             explain=lambda: stack.describe(name))
    survivors = [pid for pid in seen if alive(pid)]
    assert seen and not survivors, f'left running: {survivors}'
    scenario.done(restarts=done['restarts'], notes=f"{reason['message'][:90]}; {len(seen)} PIDs seen, none left")


def test_suspend_and_resume_continue_from_the_checkpoint(stack):
    scenario = Scenario('8 suspend and resume', time.monotonic())
    name = 'suspended'
    stack.apply(tiny_job(name, totalTimesteps=10000))
    running_with_checkpoints(stack, name, 1)
    stack.kubectl('patch', 'rltj', name, '--type=merge', '-p', '{"spec":{"runPolicy":{"suspend":true}}}')
    reached = rank0_steps_now(stack, name, 0)
    stack.wait_phase(name, 'Suspended', 60)
    wait_for(lambda: not stack.pods(name) and not stack.pids(name), 60, f'{name} pods to go')
    saved = stack.checkpoints(name)[-1]
    stack.kubectl('patch', 'rltj', name, '--type=merge', '-p', '{"spec":{"runPolicy":{"suspend":false}}}')
    wait_for(lambda: len(stack.pods(name, live=True)) == 2, 60, f'{name} pods to come back')

    done = stack.wait_phase(name, 'Succeeded', RUN)
    (resumed_from, resumed_at), = stack.resumed(name)
    assert resumed_from.endswith(saved.name) and resumed_at > 0, (resumed_from, saved)
    assert done['restarts'] == 0 and done['generation'] == 1 and [h['counted'] for h in done['restartHistory']] == [False], done
    reached = stack.reached_before_restart(name, reached)
    assert 0 <= reached - resumed_at <= checkpoint_interval(stack, name), (reached, resumed_at)
    scenario.done(restarts=0, lost=reached - resumed_at, notes=f'resumed from {saved.name} at {resumed_at} (generation 0 reached {reached})')


def test_an_evicted_pod_restarts_the_gang_without_spending_the_backoff(stack):
    scenario = Scenario('9a eviction (DisruptionTarget)', time.monotonic())
    name = 'evicted'
    stack.apply(tiny_job(name, totalTimesteps=10000, runPolicy={'backoffLimit': 0}))  # one counted restart would fail it
    running_with_checkpoints(stack, name, 1)
    reached = stack.rank0_steps(name)
    stack.server.store.evict('default', f'{name}-1')
    done = stack.wait_phase(name, 'Succeeded', RUN)
    (entry,) = done['restartHistory']
    assert done['restarts'] == 0 and not entry['counted'] and done['generation'] == 1, done
    (resumed_from, resumed_at), = stack.resumed(name)
    assert resumed_from == stack.latest_checkpoint_before_restart(name), (resumed_from, 'is not the latest checkpoint')
    reached = stack.reached_before_restart(name, reached)
    assert 0 <= reached - resumed_at <= checkpoint_interval(stack, name), (reached, resumed_at)
    scenario.done(restarts=f"0 counted, 1 not ({entry['reason']})", lost=reached - resumed_at, notes=entry['message'][:90])


def test_an_image_that_cannot_be_pulled_is_named_after_the_startup_timeout(stack):
    scenario = Scenario('9b ImagePullBackOff past startup timeout', time.monotonic())
    name = 'unpullable'
    # long enough for the released generation to get Running: at 3 s, a loaded machine (operator, local node and
    # stand-in on 2 busy cores) left its next two generations ContainerCreating past it, and the job Failed
    startup = 20
    hook = parse_label_selector(f'{names.LABEL_JOB}={name}')
    stack.server.store.hooks.image_pull_failure.append(hook)
    try:
        stack.apply(tiny_job(name, workers=1, totalTimesteps=1000, runPolicy={'startupTimeoutSeconds': startup}))
        ready = wait_for(lambda: stack.condition(name, 'Ready').get('reason') == 'ImagePullBackOff' and stack.condition(name, 'Ready'),
                         startup + 60, 'a condition naming ImagePullBackOff', interval=0.05)
        named = wait_for(lambda: next((h for h in stack.status(name).get('restartHistory') or [] if h['reason'] == 'ImagePullBackOff'), None),
                         startup + 60, 'the start-up timeout to retry the gang')
    finally:
        stack.server.store.hooks.image_pull_failure.remove(hook)
    assert not named['counted'] and f'{name}-0' in ready['message'], (ready, named)
    done = stack.wait_phase(name, 'Succeeded', RUN)  # released: the next generation pulls and runs
    assert done['restarts'] == 0, done
    scenario.done(restarts=f"0 counted, {len(done['restartHistory'])} start-up retry", notes=named['message'][:100])
