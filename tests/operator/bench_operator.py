"""Operator benchmark (a report, not a test): the real `kuberl operator` against the API stand-in.

    .venv/bin/python -m tests.operator.bench_operator [--jobs 200] [--unrelated-pods 2000]
    .venv/bin/python -m tests.operator.bench_operator --edit-loop 60 [--tenants 3]

Prints: create -> all pods created for 2, 16 and 64 workers; API requests of one job's whole
lifecycle; writes over a quiet period; reconcile latency, time to Running and operator memory
with many jobs beside many unrelated pods. `--edit-loop N` instead: each of `--tenants` edits a job with a
330 KB template (11,000 env vars) N times, as fast as the stand-in takes it, while a neighbour's
edits are timed; the operator's CPU over the loop and the latency of the tenant's last edit.
"""
import argparse
import collections
import pathlib
import re
import tempfile
import threading
import time

from kuberl.core.names import GROUP, PLURAL

from tests.operator.operatorkit import (
    CRD,
    JOBS,
    NS,
    Operator,
    cpu_seconds,
    create_job,
    job,
    pods,
    running,
    status,
    terminated,
    wait_for,
)
from tests.support.apiserver import StandinServer
from tests.support.rest import Rest


def calls_by(standin: StandinServer, since: collections.Counter) -> collections.Counter:
    now = collections.Counter({c: n for c, n in standin.calls.items() if c.agent == 'kopf'})
    return now - since


def snapshot(standin: StandinServer) -> collections.Counter:
    return collections.Counter({c: n for c, n in standin.calls.items() if c.agent == 'kopf'})


def count_pods(standin: StandinServer, prefix: str) -> int:
    """Without copying 2,000 pods per poll: the bench must not starve the stand-in it measures."""
    with standin.store.lock:
        return sum(1 for (_, name) in standin.store.objects[('', 'pods')] if name.startswith(prefix))


def rss_mib(pid: int) -> float:
    text = pathlib.Path(f'/proc/{pid}/status').read_text()
    return int(re.search(r'VmRSS:\s+(\d+)', text).group(1)) / 1024


def histogram(metrics: str, name: str) -> tuple[float, float, dict[float, float]]:
    count = float(re.search(rf'^{name}_count (\S+)', metrics, re.MULTILINE).group(1))
    total = float(re.search(rf'^{name}_sum (\S+)', metrics, re.MULTILINE).group(1))
    buckets = {float(le) if le != '+Inf' else float('inf'): float(v)
               for le, v in re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)', metrics, re.MULTILINE)}
    return count, total, buckets


def quantile(buckets: dict[float, float], count: float, q: float) -> float:
    for le, cumulative in sorted(buckets.items()):
        if cumulative >= q * count:
            return le
    return float('inf')


def bench_creation(standin: StandinServer, rest: Rest) -> None:
    for workers in (2, 16, 64):
        name = f'size-{workers}'
        start = time.monotonic()
        create_job(rest, name, workers=workers)
        wait_for(lambda n=name, w=workers: len(pods(standin, n)) == w, timeout=120, interval=0.005)
        print(f'create -> all {workers:>2} pods created: {time.monotonic() - start:.3f} s')
        rest.delete(f'{JOBS}/{name}')
        wait_for(lambda n=name: job(rest, n) is None and not pods(standin, n), timeout=60)


def bench_lifecycle(standin: StandinServer, rest: Rest) -> None:
    before = snapshot(standin)
    create_job(rest, 'lifecycle', workers=2, runPolicy={'ttlSecondsAfterFinished': 0})
    gang = wait_for(lambda: len(pods(standin, 'lifecycle')) == 2 and pods(standin, 'lifecycle'))
    for pod in gang:
        running(standin, pod)
    wait_for(lambda: status(rest, 'lifecycle').get('phase') == 'Running')
    for pod in gang:
        terminated(standin, pod, 0, 'Succeeded: done')
    wait_for(lambda: job(rest, 'lifecycle') is None, timeout=30)
    time.sleep(1.0)
    made = calls_by(standin, before)
    by_verb = collections.Counter()
    for call, n in made.items():
        by_verb[call.verb] += n
    print(f'API requests for one 2-worker job, create -> Running -> Succeeded -> TTL delete: {sum(made.values())} '
          f'({", ".join(f"{v} {n}" for v, n in sorted(by_verb.items()))})')
    for call, n in sorted(made.items(), key=lambda item: (item[0].verb, item[0].resource)):
        print(f'    {n:>3}  {call.verb} {call.group or "core"}/{call.resource}{"/" + call.subresource if call.subresource else ""}')


def bench_scale(standin: StandinServer, rest: Rest, op: Operator, jobs: int, unrelated: int, quiet: float) -> None:
    pods_type = standin.store.type_of('', 'v1', 'pods')
    for i in range(unrelated):
        standin.store.create(pods_type, NS, {'metadata': {'name': f'unrelated-{i}', 'labels': {'app': 'web'}},
                                             'spec': {'containers': [{'name': 'c', 'image': 'nginx'}]}})
    rss_before, cpu_before = rss_mib(op.process.pid), cpu_seconds(op.process.pid)
    start = time.monotonic()
    for i in range(jobs):
        create_job(rest, f'many-{i}', workers=1)
    created = wait_for(lambda: count_pods(standin, 'many-') == jobs, timeout=900, interval=0.2) and time.monotonic() - start
    for i in range(jobs):
        running(standin, standin.store.find('', 'pods', NS, f'many-{i}-0'))
    wait_for(lambda: all((standin.store.find(GROUP, PLURAL, NS, f'many-{i}').get('status') or {}).get('phase') == 'Running'
                         for i in range(jobs)), timeout=900, interval=1.0)
    to_running = time.monotonic() - start
    cpu_used = cpu_seconds(op.process.pid) - cpu_before
    count, total, buckets = histogram(op.metrics(), 'kuberl_operator_reconcile_duration_seconds')
    print(f'{jobs} jobs beside {unrelated} unrelated pods: all pods created {created:.1f} s, all Running {to_running:.1f} s after the first create')
    print(f'reconcile latency: {count:.0f} reconciles, mean {1000 * total / count:.1f} ms, '
          f'p50 <= {1000 * quantile(buckets, count, 0.5):.0f} ms, p99 <= {1000 * quantile(buckets, count, 0.99):.0f} ms')
    time.sleep(2.0)
    quiet_count, quiet_total, _ = histogram(op.metrics(), 'kuberl_operator_reconcile_duration_seconds')
    writes = standin.writes('kopf')
    reads = sum(n for c, n in standin.calls.items() if c.agent == 'kopf' and c.verb in ('get', 'list'))
    time.sleep(quiet)
    print(f'steady state with {jobs} Running jobs over {quiet:.0f} s: {standin.writes("kopf") - writes} writes, '
          f'{sum(n for c, n in standin.calls.items() if c.agent == "kopf" and c.verb in ("get", "list")) - reads} reads')
    count, total, _ = histogram(op.metrics(), 'kuberl_operator_reconcile_duration_seconds')
    print(f'steady-state reconcile latency: {count - quiet_count:.0f} reconciles, mean {1000 * (total - quiet_total) / max(1, count - quiet_count):.1f} ms')
    print(f'operator memory (RSS): {rss_before:.0f} MiB before the jobs, {rss_mib(op.process.pid):.0f} MiB with them')
    print(f'operator CPU from the first create to all Running: {cpu_used:.1f} s ({1000 * cpu_used / jobs:.0f} ms per job); '
          f'the rest of the wall time is the stand-in (one Python thread) serving every request')


def bench_edit_loop(standin: StandinServer, rest: Rest, op: Operator, edits: int, tenants: int) -> None:
    sidecar = {'name': 'side', 'image': 'busybox', 'env': [{'name': f'V{i}', 'value': 'v'} for i in range(11_000)]}
    hefty = [f'hefty-{t}' for t in range(tenants)]
    for name in hefty:
        create_job(rest, name, workers=1, template={'spec': {'containers': [sidecar]}})
    create_job(rest, 'neighbour', workers=1)
    for name in [*hefty, 'neighbour']:
        wait_for(lambda n=name: status(rest, n).get('observedGeneration') == 1, timeout=60)
    stop, lags = threading.Event(), []

    def neighbour() -> None:
        client = Rest(standin.url)
        while not stop.is_set():
            reply = client.patch(f'{JOBS}/neighbour', {'spec': {'runPolicy': {'stallTimeoutSeconds': 700 + len(lags)}}})
            started, generation = time.monotonic(), reply.body['metadata']['generation']
            while (client.get(f'{JOBS}/neighbour').body.get('status') or {}).get('observedGeneration') != generation:
                time.sleep(0.02)
            lags.append(time.monotonic() - started)
            time.sleep(0.3)

    def tenant(name: str) -> None:
        client = Rest(standin.url)
        for i in range(edits):
            client.patch(f'{JOBS}/{name}', {'spec': {'runPolicy': {'stallTimeoutSeconds': 601 + i}}})

    side, editors = threading.Thread(target=neighbour), [threading.Thread(target=tenant, args=(n,)) for n in hefty]
    cpu_before, started = cpu_seconds(op.process.pid), time.monotonic()
    side.start()
    for editor in editors:
        editor.start()
    for editor in editors:
        editor.join()
    edited, cpu = time.monotonic(), cpu_seconds(op.process.pid) - cpu_before
    stop.set()
    side.join()
    for name in hefty:
        wait_for(lambda n=name: status(rest, n).get('observedGeneration') == edits + 1, timeout=120)
    lags.sort()
    print(f'{tenants} tenant(s) x {edits} edits of a 330 KB template in {edited - started:.1f} s: operator CPU {cpu:.1f} s '
          f'({cpu / (edited - started):.0%}); their last edits observed {time.monotonic() - edited:.1f} s after them; '
          f"a neighbour's edits observed in {lags[len(lags) // 2]:.2f} s (median), {lags[-1]:.2f} s (max)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--jobs', type=int, default=200)
    parser.add_argument('--unrelated-pods', type=int, default=2000)
    parser.add_argument('--quiet-seconds', type=float, default=30.0)
    parser.add_argument('--edit-loop', type=int, default=0, metavar='N', help='only the edit loop, of N edits')
    parser.add_argument('--tenants', type=int, default=1, help='tenants editing at once in the edit loop')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, StandinServer(workdir=pathlib.Path(tmp)) as standin:
        standin.apply_crd(CRD)
        rest = Rest(standin.url)
        op = Operator(standin, pathlib.Path(tmp), '--scrape-interval', '10').start()
        try:
            if args.edit_loop:
                bench_edit_loop(standin, rest, op, args.edit_loop, args.tenants)
                return
            bench_creation(standin, rest)
            bench_lifecycle(standin, rest)
            bench_scale(standin, rest, op, args.jobs, args.unrelated_pods, args.quiet_seconds)
        finally:
            op.stop()


if __name__ == '__main__':
    main()
