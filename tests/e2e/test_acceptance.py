"""Acceptance: the CartPole PPO example, applied with kubectl, trains to its target on the shared stack.

The one scenario that trains to a target; the others end on small budgets.
"""
from __future__ import annotations

import re
import time

import yaml
from kuberl import metricnames as m
from kuberl import names

from tests.e2e.conftest import EXAMPLES, Scenario, wait_for

EXAMPLE = EXAMPLES / 'cartpole-ppo.yaml'
TRAINS_WITHIN_SECONDS = 420  # measured about 1-2 min alone; a loaded shared machine and concurrent scenarios slow it


def test_the_cartpole_example_trains_to_its_target_and_deleting_it_removes_its_children(stack):
    scenario = Scenario('1 cartpole-ppo example to target', time.monotonic())
    name = yaml.safe_load(EXAMPLE.read_text())['metadata']['name']
    target = yaml.safe_load(EXAMPLE.read_text())['spec']['success']['targetReturn']
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
    assert stack.watch.phases(name) == ['Pending', 'Running', 'Succeeded'], stack.watch.phases(name)
    succeeded = stack.condition(name, 'Succeeded')
    # status.progress is rank 0's last scrape, which may predate the final evaluation: the condition carries rank 0's own words.
    reached = float(re.search(r'eval return ([\d.]+) >= ', succeeded['message']).group(1))
    assert succeeded['reason'] == 'RankZeroSucceeded' and reached >= target, succeeded
    assert int(shown['TIMESTEPS']) > 0 and float(shown['RETURN']) > 0, f'kubectl get rltj never showed progress: {shown}'
    assert done['restarts'] == 0

    for metric in (m.ENV_STEPS_TOTAL, m.EPISODE_RETURN):  # the targets are gone now: look back over the run
        series = stack.prom.query(f'last_over_time({metric}{{rltj="{name}"}}[30m])')
        assert {s['metric']['rank'] for s in series} == {'0', '1'}, (metric, series)
    steps = stack.prom.query(f'max_over_time({m.ENV_STEPS_TOTAL}{{rltj="{name}",rank="0"}}[30m])')
    assert float(steps[0]['value'][1]) > 0

    owned_before = stack.children(name)
    assert any(c.startswith('services/') for c in owned_before) and any(c.startswith('configmaps/') for c in owned_before)
    stack.kubectl('delete', 'rltj', name, '--wait=false')
    # checkpoint.retain defaults to true: the PVC is left for the user, by design (DESIGN.md); everything else goes.
    wait_for(lambda: stack.job(name) is None and all(c.startswith('persistentvolumeclaims/') for c in stack.children(name)),
             60, f'{name} and its children to go', interval=0.5)
    assert stack.children(name) == [f'persistentvolumeclaims/{names.pvc_name(name)}']
    assert stack.pids(name) == []
    scenario.done(restarts=done['restarts'], notes=f"phases {'>'.join(stack.watch.phases(name))}; {succeeded['message'][:90]};"
                                                  f" kubectl showed {shown.get('TIMESTEPS')} steps, return {shown.get('RETURN')}")
