"""Logging in through an exec-plugin kubeconfig (how GKE, EKS and AKS clusters authenticate), against
a stand-in that checks bearer tokens as the API server does: kopf's client and the operator's own
client both get their token from the plugin, and both run it again after a 401."""
import asyncio
import pathlib
import sys
import time

import pytest
import yaml
from kuberl.operator import kubeapi

from tests.operator.operatorkit import (
    CRD,
    NS,
    TRAINER_IMAGE,
    Operator,
    create_job,
    pods,
    wait_for,
)
from tests.operator.test_kubeapi import api_errors, run_api
from tests.support.apiserver import StandinServer, kubeconfig
from tests.support.rest import Rest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = ROOT / 'tests' / 'support' / 'execplugin.py'
ADMIN = 'admin'  # the test's own token (the kubelet's and the user's part)
PLUGIN_TOKENS = {f'exec-{n}' for n in range(1, 200)}  # what the plugin may issue: exec-1, exec-2, …


def exec_kubeconfig(standin: StandinServer, state: pathlib.Path) -> pathlib.Path:
    """A kubeconfig whose user is an exec plugin, as `gcloud container clusters get-credentials` writes one."""
    state.mkdir(exist_ok=True)
    user = {'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': sys.executable,
                     'args': [str(PLUGIN), str(state)], 'interactiveMode': 'Never'}}
    path = state / 'kubeconfig'
    path.write_text(yaml.safe_dump(kubeconfig(standin.url, user=user)))
    return path


def plugin_runs(state: pathlib.Path) -> int:
    runs = state / 'runs'
    return int(runs.read_text()) if runs.exists() else 0


def revoke_issued(standin: StandinServer, state: pathlib.Path) -> int:
    """Every token the plugin issued so far expires: the next request with one gets 401."""
    issued = plugin_runs(state)
    standin.handler.tokens -= {f'exec-{n}' for n in range(1, issued + 1)}
    return issued


@pytest.fixture
def authenticating_standin(tmp_path: pathlib.Path):
    with StandinServer(workdir=tmp_path, tokens={ADMIN, *PLUGIN_TOKENS}) as server:
        server.apply_crd(CRD)
        yield server


def test_operator_logs_in_through_an_exec_plugin_and_again_after_its_token_expires(authenticating_standin, tmp_path):
    standin, state = authenticating_standin, tmp_path / 'plugin'
    rest = Rest(standin.url, token=ADMIN)
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, kubeconfig=exec_kubeconfig(standin, state)).start()
    try:
        create_job(rest, 'first', workers=2)
        wait_for(lambda: len(pods(standin, 'first')) == 2, what='the pods of the first job')  # created by the operator's own client
        assert plugin_runs(state) >= 2, 'kopf and the operator each logged in through the plugin'
        issued = revoke_issued(standin, state)
        rejected = standin.handler.unauthorized

        create_job(rest, 'second', workers=2)
        wait_for(lambda: len(pods(standin, 'second')) == 2, timeout=30, what='the pods of the job created after the tokens expired')
        assert standin.handler.unauthorized > rejected, 'the expired token was refused'
        assert plugin_runs(state) >= issued + 2, 'the plugin ran again, for kopf and for the operator'
        assert 'Re-authentication has finished' in op.log()
        assert 'code="401"' not in op.metrics(), 'no call failed: the one refused was made again with the new token'
    finally:
        op.stop()
    made = {(c.verb, c.group, c.resource, c.subresource) for c in standin.calls if c.agent == 'kopf'}
    assert made <= kubeapi.API_CALLS


# --- the operator's own client, in this process ----------------------------------------------


def run_exec_api(standin: StandinServer, state: pathlib.Path, monkeypatch, calls):
    return run_api(monkeypatch, exec_kubeconfig(standin, state), calls)


def test_a_burst_of_401s_runs_the_plugin_once_and_every_call_succeeds(authenticating_standin, tmp_path, monkeypatch):
    standin, state = authenticating_standin, tmp_path / 'plugin'

    async def calls(api):
        assert await api.list_job_pods(NS, 'none') == []
        revoke_issued(standin, state)
        return await asyncio.gather(*(api.get('', 'v1', 'pods', NS, f'missing-{i}') for i in range(16)))

    answers, metrics = run_exec_api(standin, state, monkeypatch, calls)
    assert answers == [None] * 16
    assert plugin_runs(state) == 2, 'one login at start, one after the burst of 401s'
    assert api_errors(metrics, '401') == 0


def test_a_token_the_server_keeps_refusing_fails_the_call_after_one_new_login(authenticating_standin, tmp_path, monkeypatch):
    standin, state = authenticating_standin, tmp_path / 'plugin'
    standin.handler.tokens = {ADMIN}  # nothing the plugin issues is accepted

    async def calls(api):
        with pytest.raises(kubeapi.Unauthorized) as refused:
            await api.list_job_pods(NS, 'any')
        return refused.value

    error, metrics = run_exec_api(standin, state, monkeypatch, calls)
    assert (error.status, error.reason, error.message) == (401, 'Unauthorized', 'Unauthorized')
    assert plugin_runs(state) == 2
    assert api_errors(metrics, '401') == 1


def test_the_credential_plugin_failing_for_a_while_stops_no_check_of_the_operator(authenticating_standin, tmp_path):
    """The plugin failing when the operator's own client logs in again (a lapsed cloud login) raised kubernetes_asyncio's
    ConfigException, which none of the operator's background checks expected: each one it reached ended for good,
    unseen. The watch heartbeat among them: once the plugin worked again, /healthz still failed its silence and
    the kubelet restarted a healthy operator ("watches silent for …s"). Each check now says it and goes on."""
    standin, state = authenticating_standin, tmp_path / 'plugin'
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '2',
                  kubeconfig=exec_kubeconfig(standin, state)).start()
    try:
        (state / 'fail').touch()
        revoke_issued(standin, state)  # the next call of each client gets 401, and logs in through the failing plugin
        wait_for(lambda: 'the cloud login lapsed' in op.log(), timeout=30, what='a login through the failing plugin')
        # the heartbeat's own login met the failing plugin: waited for, not 3 s (a loaded machine's heartbeat had not tried)
        wait_for(lambda: 'watch heartbeat failed' in op.log(), timeout=60, what='the watch heartbeat to meet the failing plugin')
        (state / 'fail').unlink()
        heard = op.log().count('watches heard from again')
        time.sleep(12)  # twice the heartbeat's silent bound (--watch-timeout 2: 6.2 s): an ended heartbeat is silent by now
        # healthy again once the heartbeat has logged in (its restart waits 1 s after a failure, 2 after two, ...: a
        # loaded machine's plugin failing more than once before the test mends it pushes that past the 12 s)
        wait_for(op.healthy, what='/healthz to pass again', explain=lambda: op.log()[-4000:])
        log = op.log()
        assert 'watches silent for' not in log[log.rindex('the cloud login lapsed'):] or log.count('watches heard from again') > heard, log[-4000:]
    finally:
        op.stop()


def test_the_watch_heartbeat_logs_in_again_when_its_token_expires(authenticating_standin, tmp_path):
    """The heartbeat watches between lists, and only its list logged in again after a 401: once its token expired,
    its watch was refused every second for ever, /healthz failed its silence and the kubelet restarted a healthy
    operator, each time a token expired (hourly for a cloud's exec plugin)."""
    standin, state = authenticating_standin, tmp_path / 'plugin'
    op = Operator(standin, tmp_path, '--trainer-image', TRAINER_IMAGE, '--watch-timeout', '2',
                  kubeconfig=exec_kubeconfig(standin, state)).start()
    try:
        issued = revoke_issued(standin, state)
        time.sleep(12)  # twice the heartbeat's silent bound (--watch-timeout 2: 6.2 s)
        assert op.healthy() and 'watches silent for' not in op.log(), op.log()[-4000:]
        assert plugin_runs(state) >= issued + 2, 'kopf and the operator each logged in again'
    finally:
        op.stop()
