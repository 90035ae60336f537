"""Acceptance: the CartPole PPO example, applied with kubectl, trains to its target on the shared stack.

The one scenario that trains to a target; the others end on small budgets.
"""
from __future__ import annotations

import pathlib
import re
import time

import yaml
from kuberl.core import metricnames as m
from kuberl.core import names

from tests.e2e.stack import EXAMPLES, Scenario, tiny_job, wait_for
from tests.operator.operatorkit import cpu_seconds

EXAMPLE = EXAMPLES / 'cartpole-ppo.yaml'
TRAINS_WITHIN_SECONDS = 420  # measured about 6 s alone; a loaded shared machine and concurrent scenarios slow it


def operator_counts_succeeded(stack) -> float:
    """The operator's Succeeded-jobs gauge as Prometheus last scraped it (0 before any)."""
    return sum(float(s['value'][1]) for s in stack.prom.query(f'{m.OPERATOR_JOBS}{{{m.LABEL_PHASE}="Succeeded"}}'))


def test_the_cartpole_example_trains_to_its_target_and_deleting_it_removes_its_children(stack):
    scenario = Scenario('1 cartpole-ppo example to target', time.monotonic())
    name = yaml.safe_load(EXAMPLE.read_text())['metadata']['name']
    target = yaml.safe_load(EXAMPLE.read_text())['spec']['success']['targetReturn']
    succeeded_before = operator_counts_succeeded(stack)
    stack.kubectl('apply', '-f', str(EXAMPLE))

    phases: list[str] = []
    shown: dict[str, str] = {}
    deadline = time.monotonic() + TRAINS_WITHIN_SECONDS
    while True:
        phase = stack.status(name).get('phase')
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)
        if phase == 'Running' and not (shown.get('TIMESTEPS') and shown.get('RETURN')):
            row = stack.get_rltj(name)
            if row.get('TIMESTEPS', '<none>') not in ('', '<none>', '0') and row.get('RETURN', '<none>') not in ('', '<none>'):
                shown = row
        if phase in ('Succeeded', 'Failed'):
            break
        assert time.monotonic() < deadline, f'{name} still {phase} after {TRAINS_WITHIN_SECONDS}s: {stack.status(name)}'
        time.sleep(0.5)

    done = stack.status(name)
    assert done['phase'] == 'Succeeded', f'{done}\n{stack.pod_logs(name)[-3000:]}'
    assert stack.watch.phases_through(name, 'Succeeded') == ['Pending', 'Running', 'Succeeded'], stack.watch.phases(name)
    succeeded = stack.condition(name, 'Succeeded')
    # status.progress is rank 0's last scrape, which may predate the final evaluation: the condition carries rank 0's own words.
    reached = float(re.search(r'eval return ([\d.]+) >= ', succeeded['message']).group(1))
    assert succeeded['reason'] == 'RankZeroSucceeded' and reached >= target, succeeded
    assert int(shown['TIMESTEPS']) > 0 and float(shown['RETURN']) > 0, f'kubectl get rltj never showed progress: {shown}'
    assert done['restarts'] == 0

    # The example solves CartPole in a few seconds now, shorter than Prometheus' own discovery cycle (its
    # discovery manager hands new targets to the scrapers every 5 s), so whether the trainers were scraped
    # is timing; test_dashboard.py scrapes a long run of this example through the same PodMonitor config.
    # What Prometheus must hold here is the operator's account of the job, through the ServiceMonitor.
    wait_for(lambda: operator_counts_succeeded(stack) > succeeded_before,
             30, 'Prometheus to see the operator count this job Succeeded', interval=0.5)

    owned_before = stack.children(name)
    assert any(c.startswith('services/') for c in owned_before) and any(c.startswith('configmaps/') for c in owned_before)
    stack.kubectl('delete', 'rltj', name, '--wait=false')
    # checkpoint.retain defaults to true: the PVC is left for the user, by design; everything else goes.
    wait_for(lambda: stack.job(name) is None and all(c.startswith('persistentvolumeclaims/') for c in stack.children(name)),
             60, f'{name} and its children to go', interval=0.5)
    assert stack.children(name) == [f'persistentvolumeclaims/{names.pvc_name(name)}']
    assert stack.pids(name) == []
    scenario.done(restarts=done['restarts'], notes=f"phases {'>'.join(stack.watch.phases(name))}; {succeeded['message'][:90]};"
                                                  f" kubectl showed {shown.get('TIMESTEPS')} steps, return {shown.get('RETURN')}")


def test_an_invalid_job_is_refused_and_one_only_the_operator_can_judge_fails_while_a_valid_one_succeeds(stack):
    scenario = Scenario('7 invalid jobs', time.monotonic())
    refused = stack.kubectl('apply', '-f', '-', stdin=yaml.safe_dump(tiny_job('refused', workers=0)), check=False)
    assert refused.returncode != 0 and 'spec.workers' in refused.stderr, refused.stderr
    mismatched = stack.kubectl('apply', '-f', '-', stdin=yaml.safe_dump(tiny_job('mismatched', dqn={})), check=False)
    assert mismatched.returncode != 0 and 'spec.dqn' in mismatched.stderr, mismatched.stderr
    assert stack.job('refused') is None and stack.job('mismatched') is None

    judged, valid = 'operator-judged', 'beside-it'
    stack.apply(tiny_job(judged, labels={'not a key': 'x'}), tiny_job(valid, workers=1, totalTimesteps=1500))
    failed = stack.wait_phase(judged, 'Failed', 60)
    condition = stack.condition(judged, 'Failed')
    assert condition['reason'] == 'InvalidSpec' and 'spec.labels.not a key' in condition['message'], condition
    assert failed['observedGeneration'] == 1 and not stack.pods(judged)
    def event_shown():
        events = stack.kubectl('describe', 'rltj', judged).stdout.split('Events:')[-1]
        return 'InvalidSpec' in events and events
    assert 'spec.labels' in wait_for(event_shown, 30, 'kubectl describe to show the Warning event')
    stack.wait_phase(valid, 'Succeeded', 240)
    assert stack.operator.healthy()
    scenario.done(restarts=0, notes=f"kubectl: {refused.stderr.strip().splitlines()[-1][:80]}; operator: {condition['message'][:80]}")


def operator_reconciles(stack) -> tuple[float, float]:
    """(sum of seconds, count) of the operator's reconcile histogram, read from its /metrics."""
    page = stack.operator.metrics()
    value = {suffix: float(re.search(rf'^{m.OPERATOR_RECONCILE_DURATION}_{suffix} (\S+)$', page, re.MULTILINE).group(1)) for suffix in ('sum', 'count')}
    return value['sum'], value['count']


def memory_kib(pid: int) -> dict[str, int]:
    status = pathlib.Path(f'/proc/{pid}/status').read_text()
    return {key: int(re.search(rf'^{key}:\s+(\d+) kB', status, re.MULTILINE).group(1)) for key in ('VmRSS', 'VmHWM')}


def test_ten_small_jobs_applied_at_once_all_succeed(stack):
    scenario = Scenario('10 ten 1-worker jobs at once', time.monotonic())
    jobs = [tiny_job(f'load-{i}', workers=1, totalTimesteps=1500, env={'id': 'CartPole-v1', 'numEnvs': 2}) for i in range(10)]
    total_before, count_before = operator_reconciles(stack)
    cpu_before = cpu_seconds(stack.operator.process.pid)
    started = time.time()
    stack.apply(*jobs)
    for job in jobs:
        stack.wait_phase(job['metadata']['name'], 'Succeeded', 300)
    wall = time.time() - started
    total, count = operator_reconciles(stack)
    mean_ms = 1000 * (total - total_before) / (count - count_before)
    cpu_ms = 1000 * (cpu_seconds(stack.operator.process.pid) - cpu_before) / (count - count_before)  # watches, scrapes too
    window = f'{int(time.time() - started) + 5}s'
    p99 = stack.prom.query(f'histogram_quantile(0.99, sum by (le) (increase({m.OPERATOR_RECONCILE_DURATION}_bucket{{job="kuberl"}}[{window}])))')
    memory = memory_kib(stack.operator.process.pid)
    assert all(stack.status(j['metadata']['name'])['restarts'] == 0 for j in jobs)
    assert p99, 'Prometheus holds the operator series scraped through the chart ServiceMonitor config'
    # the operator's CPU per reconcile (5 ms measured), not their wall time (a 2.4 s mean on a loaded 2-core machine)
    assert cpu_ms < 100 and memory['VmRSS'] < 400 * 1024, (cpu_ms, memory)
    scenario.done(restarts=0, notes=f"all 10 Succeeded in {wall:.0f}s; reconcile mean {mean_ms:.0f} ms ({cpu_ms:.0f} ms CPU) over {count - count_before:.0f}, "
                                    f"p99 {float(p99[0]['value'][1]) * 1000:.0f} ms (Prometheus); operator RSS {memory['VmRSS'] // 1024} MiB, peak {memory['VmHWM'] // 1024} MiB")
