"""Fixtures for the operator tier: the API stand-in with kuberl's CRD, clients pointed at it
(tests.support.fixtures), and a running kuberl operator (`operator`); helpers live in operatorkit."""
import pathlib

import pytest
from kuberl.operator.kubeapi import API_CALLS

from tests.operator.operatorkit import TRAINER_IMAGE, Operator
from tests.support.apiserver import StandinServer
from tests.support.fixtures import kube_api, local_node, rest, standin  # noqa: F401 — fixtures


@pytest.fixture
def operator(standin: StandinServer, tmp_path: pathlib.Path, request: pytest.FixtureRequest):  # noqa: F811 — the fixture above
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE).start()
    yield op
    op.stop()
    # shown under a failed test: what the operator did (or where it stalled) is in its own log
    request.node.add_report_section('teardown', 'operator log (last 300 lines)', '\n'.join(op.log().splitlines()[-300:]))
    made = {(c.verb, c.group, c.resource, c.subresource) for c in standin.calls if c.agent == 'kopf'}
    assert made <= API_CALLS, f'calls the RBAC list does not declare: {sorted(made - API_CALLS)}'
