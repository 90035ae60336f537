"""The end-to-end tier's fixture: ONE shared stack per session (tests/e2e/stack.py), and the scenario table at the end.

Under pytest-xdist (`make test-e2e` runs two workers, --dist loadfile: in one process the tier keeps
about one core busy) each worker that runs a test of the stack starts one (its ports from its own slice,
tests/support/ports.py, and so its pods' addresses, tests/support/localnode.py); the workers' scenario rows come back to the
controller through xdist's workeroutput, to make one table."""
from __future__ import annotations

import pytest
from kuberl.operator.kubeapi import API_CALLS

from tests.e2e.stack import SCENARIOS, Stack


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its rows go to the controller
        session.config.workeroutput["kuberl_e2e_scenarios"] = list(SCENARIOS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    SCENARIOS.extend(getattr(node, "workeroutput", {}).get("kuberl_e2e_scenarios", []))


def pytest_terminal_summary(terminalreporter) -> None:
    if not SCENARIOS:
        return
    terminalreporter.section('kuberl e2e scenarios')
    terminalreporter.write_line(f"{'scenario':<48} {'wall s':>7} {'restarts':<28} {'lost':>5}  notes")
    for row in SCENARIOS:
        terminalreporter.write_line(f"{row['scenario']:<48} {row['wall_s']:>7} {row['restarts']!s:<28} {row['timesteps_lost']!s:>5}  {row['notes']}")


@pytest.fixture(scope='session')
def stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp('stack'))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
    made = {(c.verb, c.group, c.resource, c.subresource) for c in stack.server.calls if c.agent == 'kopf'}
    assert made <= API_CALLS, f'the operator called what its RBAC does not grant: {sorted(made - API_CALLS)}'
