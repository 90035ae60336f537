"""`kuberl.operator.kubeapi` against the stand-in, in this process: errors carry the server's Status,
5xx answers are retried with backoff, and a failure is counted once, after the last attempt."""
import asyncio
import logging

import kmock
import kopf
import pytest
from kuberl.core import names
from kuberl.operator import kubeapi
from kuberl.operator.config import WatchBounds
from kuberl.operator.handlers import WatchHeartbeat
from kuberl.operator.metrics import OperatorMetrics

NS = 'default'
POD = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'twice', 'namespace': NS, 'labels': {names.LABEL_JOB: 'j'}},
       'spec': {'containers': [{'name': 'c', 'image': 'busybox'}]}}


def run_api(monkeypatch, kubeconfig, calls):
    """`calls(api)` with a KubeApi logged in from `kubeconfig`; returns what it returns, and the metrics."""
    monkeypatch.setenv('KUBECONFIG', str(kubeconfig))
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    metrics = OperatorMetrics()

    async def main():
        connection = kubeapi.Connection()
        try:
            return await calls(kubeapi.KubeApi(kopf.OperatorSettings(), logging.getLogger('test'), metrics, connection))
        finally:
            await connection.close()

    return asyncio.run(main()), metrics


def api_errors(metrics: OperatorMetrics, code: str, counter: str = 'api_errors') -> float:
    return sum(sample.value for metric in getattr(metrics, counter).collect() for sample in metric.samples
               if sample.name.endswith('_total') and sample.labels['code'] == code)


def test_errors_carry_the_servers_status(standin, monkeypatch):
    async def calls(api):
        await api.create(POD)
        with pytest.raises(kubeapi.Conflict) as conflict:
            await api.create(POD)
        with pytest.raises(kubeapi.Unprocessable) as invalid:
            await api.create({**POD, 'metadata': {**POD['metadata'], 'name': 'Not_A_Name'}})
        return conflict.value, invalid.value, await api.list_job_pods(NS, 'j'), await api.get('', 'v1', 'pods', NS, 'none')

    (conflict, invalid, listed, missing), metrics = run_api(monkeypatch, standin.kubeconfig, calls)
    assert isinstance(conflict, kubeapi.ApiError) and (conflict.status, conflict.reason) == (409, 'AlreadyExists')
    assert str(conflict) == conflict.message == 'pods "twice" already exists'
    assert (invalid.status, invalid.reason) == (422, 'Invalid') and 'Not_A_Name' in invalid.message
    assert [p['metadata']['name'] for p in listed] == ['twice'] and missing is None
    assert api_errors(metrics, '422') == 1
    # a name taken, an object gone: answers the caller acts on, counted apart from errors
    assert api_errors(metrics, '409') == 0 and api_errors(metrics, '404') == 0
    assert api_errors(metrics, '409', 'api_resolved') == 1 and api_errors(metrics, '404', 'api_resolved') == 1


def test_server_errors_are_retried_with_backoff_and_counted_only_when_the_last_attempt_fails(standin, monkeypatch):
    pods = kmock.resource('', 'v1', 'pods')
    standin.handler['get', pods][:len(kubeapi.API_BACKOFFS)] << 503  # every retry is used, the last attempt succeeds

    async def calls(api):
        started = asyncio.get_running_loop().time()
        listed = await api.list_job_pods(NS, 'j')
        waited = asyncio.get_running_loop().time() - started
        standin.handler['post', pods] << 500  # never recovers
        with pytest.raises(kubeapi.ServerError) as failed:
            await api.create(POD)
        return listed, waited, failed.value

    (listed, waited, failed), metrics = run_api(monkeypatch, standin.kubeconfig, calls)
    assert listed == [] and waited >= sum(kubeapi.API_BACKOFFS)
    assert failed.status == 500
    assert api_errors(metrics, '503') == 0 and api_errors(metrics, '500') == 1


@pytest.mark.parametrize('proxy', [None, 'http://proxy.corp.example:3128'])
def test_the_client_skips_environment_lookups_unless_a_proxy_is_set(standin, monkeypatch, proxy):
    """aiohttp's trust_env reads ~/.netrc in a thread on every request (0.56 instead of 0.24 ms per
    call against the stand-in); without proxy variables it is off, on the same connector, and the
    calls still work. With one, the environment is kept so the proxy is used."""
    for name in kubeapi.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv('HTTPS_PROXY', proxy)
        monkeypatch.setenv('NO_PROXY', '127.0.0.1')  # the stand-in stays reachable

    async def calls(api):
        client, _ = await api.connection.client()
        session = client.rest_client.pool_manager
        await api.create(POD)
        return session.trust_env, session.connector is not None, (await api.get('', 'v1', 'pods', NS, 'twice'))['metadata']['name']

    (trust_env, connected, name), _ = run_api(monkeypatch, standin.kubeconfig, calls)
    assert (trust_env, connected, name) == (bool(proxy), True, 'twice')


def test_a_client_made_in_an_ended_event_loop_is_not_used_by_the_next(standin, monkeypatch):
    """The operator restarts kopf in the same process, each run in a new event loop (main.run_kopf). A
    daemon kopf lets run past the cleanup handler logged in again after `close`; the next run took that
    client, and every call of every job failed with "Event loop is closed": no job got pods again."""
    monkeypatch.setenv('KUBECONFIG', str(standin.kubeconfig))
    monkeypatch.delenv('KUBERNETES_SERVICE_HOST', raising=False)
    connection = kubeapi.Connection()

    async def late_login():
        await connection.close()  # kopf's cleanup handler
        return (await connection.client())[0]  # a daemon still running: logs in again

    async def next_run():
        api = kubeapi.KubeApi(kopf.OperatorSettings(), logging.getLogger('test'), OperatorMetrics(), connection)
        try:
            return (await connection.client())[0], await api.get('', 'v1', 'pods', NS, 'none')
        finally:
            await connection.close()

    stale = asyncio.run(late_login())
    fresh, missing = asyncio.run(next_run())
    assert fresh is not stale and missing is None


def test_a_jobs_pods_are_listed_in_pages_and_kept_as_the_operator_reads_them(standin, monkeypatch):
    """1,024 pods of a 16 KiB template listed as one answer of 70 MB of JSON, 380 MB parsed, in an operator the chart
    gives 256 MiB: listed LIST_PAGE at a time, and only what the operator reads of each kept (no spec, no
    managedFields), a job's pods cost the same whatever its template."""
    monkeypatch.setattr(kubeapi, 'LIST_PAGE', 7)
    big = {'name': 'trainer', 'image': 'busybox', 'env': [{'name': f'E{i}', 'value': 'v'} for i in range(200)]}

    async def calls(api):
        for i in range(20):
            await api.create({**POD, 'metadata': {**POD['metadata'], 'name': f'p{i}'}, 'spec': {'containers': [big]}})
        await api.create({**POD, 'metadata': {'name': 'other', 'namespace': NS, 'labels': {names.LABEL_JOB: 'k'}}})
        return await api.list_job_pods(NS, 'j')

    listed, _ = run_api(monkeypatch, standin.kubeconfig, calls)
    assert sorted(p['metadata']['name'] for p in listed) == sorted(f'p{i}' for i in range(20))
    assert all(set(p) == {'metadata', 'status'} and p['metadata']['labels'] == {names.LABEL_JOB: 'j'} for p in listed)
    assert sum(n for call, n in standin.calls.items() if call.verb == 'list' and call.resource == 'pods') == 3


def test_a_paged_list_whose_revision_is_compacted_between_pages_is_listed_again_from_the_start(standin, monkeypatch):
    """A gang's pages are read at the first page's revision; a pod that came and a compaction between two pages make
    the next one 410 Expired (the stand-in as etcd3's store.go). The operator lists again from the start, once, as
    client-go's pager does (FullListIfExpired), and has the gang as it is now; the 410 is an answer it acted on,
    counted resolved, not an error its alert fires on. A list compacted under it again is raised."""
    monkeypatch.setattr(kubeapi, 'LIST_PAGE', 7)

    def listing(job: str, compact_after: set[int]):
        """`job`'s 20 pods listed; after each list call in `compact_after` a pod comes and etcd compacts."""
        def job_pod(name: str) -> dict:
            return {**POD, 'metadata': {'name': f'{job}-{name}', 'namespace': NS, 'labels': {names.LABEL_JOB: job}}}

        async def calls(api):
            for i in range(20):
                await api.create(job_pod(f'p{i}'))
            call, pages = api.call, []

            async def compacting(method, verb, plural, path, payload=None, content_type=None, query=None, resolves=()):
                answer = await call(method, verb, plural, path, payload, content_type, query, resolves)
                if verb == 'list':
                    pages.append(dict(query))
                    if len(pages) in compact_after:
                        await api.create(job_pod(f'late{len(pages)}'))
                        standin.store.history_floor[('', 'pods')] = standin.store.revision
                return answer

            api.call = compacting
            try:
                return await api.list_job_pods(NS, job), pages
            except kubeapi.Expired as error:
                return error, pages
        return calls

    (listed, pages), metrics = run_api(monkeypatch, standin.kubeconfig, listing('a', {1}))
    assert sorted(p['metadata']['name'] for p in listed) == sorted([f'a-p{i}' for i in range(20)] + ['a-late1'])
    assert len(pages) == 1 + 3 and 'continue' not in pages[1], pages  # the first page, then 21 pods from the start
    assert api_errors(metrics, '410', 'api_resolved') == 1 and api_errors(metrics, '410') == 0

    # compacted again under the second listing: raised, not looped on, and counted as the error it is
    (error, pages), metrics = run_api(monkeypatch, standin.kubeconfig, listing('b', {1, 2, 3}))
    assert isinstance(error, kubeapi.Expired) and len(pages) == 2, pages
    assert error.message.startswith('The provided continue parameter is too old'), error.message
    assert api_errors(metrics, '410', 'api_resolved') == 1 and api_errors(metrics, '410') == 1


def test_a_410_the_watch_heartbeat_lists_again_after_is_counted_resolved(standin, monkeypatch):
    """The heartbeat's watch answered 410 (an old resourceVersion) lists again and goes on: an answer it acts on,
    counted in kuberl_operator_api_resolved_total, not in the errors the operator's alert fires on."""
    standin.handler.watch_gone[names.PLURAL] = 1

    async def calls(api):
        watch_lines, watches = api.watch_lines, []

        def counted(*args, **kwargs):
            watches.append(args)
            return watch_lines(*args, **kwargs)

        api.watch_lines = counted
        task = asyncio.create_task(WatchHeartbeat(WatchBounds(2)).run(api, (NS,)))
        for _ in range(200):  # the 410, its 1 s pause, the list, then the next watch: up to 20 s on a loaded machine
            if len(watches) >= 2:
                break
            await asyncio.sleep(0.1)
        task.cancel()
        return len(watches)

    watches, metrics = run_api(monkeypatch, standin.kubeconfig, calls)
    assert watches >= 2, 'it watched again after the 410'
    assert api_errors(metrics, '410', 'api_resolved') == 1 and api_errors(metrics, '410') == 0


def test_the_request_budget_lets_a_burst_through_and_paces_the_rest(standin, monkeypatch):
    """--kube-api-burst 3, --kube-api-qps 20: nine creates at once, three go and six wait their turn (the last 0.3 s);
    the waits are counted (kuberl_operator_api_throttled_seconds_total). Without a budget none waits. The budget's
    clock stands still (its refill is tests/unit/test_operator_api_budget.py's): what is counted is then exact, where
    on the real clock a loaded machine's slow event loop spread the nine and refilled tokens between them."""
    limiter = kubeapi.RateLimiter(qps=20, burst=3, clock=lambda: 0.0)

    async def calls(api):
        await api.connection.client()  # logged in first: the login's own CPU is no part of the budget's waits
        api.limiter = limiter
        started = asyncio.get_running_loop().time()
        await asyncio.gather(*(api.create({**POD, 'metadata': {**POD['metadata'], 'name': f'b{i}'}}) for i in range(9)))
        return asyncio.get_running_loop().time() - started, len(await api.list_job_pods(NS, 'j'))

    (took, created), metrics = run_api(monkeypatch, standin.kubeconfig, calls)
    throttled = metrics.api_throttled._value.get()
    assert created == 9 and took >= 0.29  # the six waited in fact: the last 0.3 s
    # the six creates' waits, 0.05 + 0.10 + ... + 0.30, and the list's after them, 0.35: a wait counted twice is 2.8
    assert throttled == pytest.approx(1.4), throttled

    async def unbudgeted(api):
        await asyncio.gather(*(api.create({**POD, 'metadata': {**POD['metadata'], 'name': f'u{i}'}}) for i in range(9)))

    _, free = run_api(monkeypatch, standin.kubeconfig, unbudgeted)
    assert free.api_throttled._value.get() == 0
