"""Many jobs at once: the real `kuberl operator` (its own process) against the API stand-in.

    .venv/bin/python bench/operator_scale.py --jobs 100 [--workers 2] [--namespaces 4] [--quiet-seconds 15]

Creates N jobs of W workers spread over a few namespaces; a kubelet thread reports each pod Running
as it appears (the stand-in's store, as tests/operator do). Prints the time from the first create
until every pod exists and until every job is Running; the operator's CPU seconds per reconcile
(its process's CPU over its reconcile count, so watch handling and kopf's own work are included);
its event-loop lag (the latency of its /healthz, served on the same loop, probed every 50 ms); and
the same over a quiet period with every job Running. Then, in this process, what each pure step
of one reconcile costs for the largest example spec.
"""
import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit

import kopf

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support, run as a script from anywhere

from kuberl.core import jobstatus, lifecycle, names, render
from kuberl.core.rules import defaulted, validate_job
from kuberl.core.trainerconfig import trainer_config
from kuberl.core.yamlreader import load_documents
from kuberl.operator import handlers

from tests.operator.bench_operator import cpu_seconds, histogram, quantile
from tests.operator.operatorkit import CRD, Operator, manifest, wait_for
from tests.support.apiserver import StandinServer
from tests.support.rest import Rest
from tests.support.store import timestamp
from tests.unit.test_hostile_spec import nested_kwargs

RUNNING_STATUS = {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True'}],
                  'containerStatuses': [{'name': names.TRAINER_CONTAINER, 'ready': True, 'restartCount': 0, 'started': True,
                                         'image': '', 'imageID': '', 'state': {'running': {}}}]}


class Kubelet(threading.Thread):
    """Reports every new pod Running, as a node that starts pods at once would."""

    def __init__(self, standin: StandinServer):
        super().__init__(daemon=True)
        self.standin, self.seen, self.stop = standin, set(), threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            with self.standin.store.lock:
                new = [key for key in self.standin.store.objects[('', 'pods')] if key not in self.seen]
            for namespace, name in new:
                self.seen.add((namespace, name))
                self.standin.store.report_pod(namespace, name, {**RUNNING_STATUS, 'startTime': timestamp()})


PROBE = """import sys, time, urllib.request
while True:
    time.sleep(0.05)
    start = time.monotonic()
    try:
        urllib.request.urlopen(sys.argv[1], timeout=10).read()
    except OSError:
        pass
    print(time.monotonic() - start, flush=True)
"""


class LoopLag:
    """The operator's /healthz latency every 50 ms: kopf answers it on the loop every reconcile runs on.
    Probed from a process of its own, so the stand-in's threads (this process's GIL) do not delay it."""

    def __init__(self, op: Operator, path: pathlib.Path):
        self.path, self.read = path, 0
        self.process = subprocess.Popen([sys.executable, '-c', PROBE, f'http://127.0.0.1:{op.health_port}{op.health_path}'],
                                        stdout=path.open('w'))

    def take(self) -> list[float]:
        lines = self.path.read_text().splitlines()[:-1]  # the last may be half written
        taken, self.read = lines[self.read:], len(lines)
        return [float(line) for line in taken]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


def lag_line(samples: list[float]) -> str:
    if not samples:
        return 'no samples'
    ordered = sorted(samples)
    return (f'/healthz latency p50 {1000 * statistics.median(ordered):.0f} ms, p99 {1000 * ordered[int(0.99 * (len(ordered) - 1))]:.0f} ms, '
            f'max {1000 * ordered[-1]:.0f} ms ({len(ordered)} probes)')


def p99(buckets: dict, count: float) -> str:
    bound = quantile(buckets, count, 0.99)
    return f'<= {1000 * bound:.0f} ms' if bound != float('inf') else f'> {1000 * max(b for b in buckets if b != bound):.0f} ms'


def reconciles(op: Operator) -> tuple[float, float, dict]:
    return histogram(op.metrics(), 'kuberl_operator_reconcile_duration_seconds')


def jobs_running(standin: StandinServer) -> int:
    with standin.store.lock:
        return sum(1 for job in standin.store.objects[(names.GROUP, names.PLURAL)].values()
                   if (job.get('status') or {}).get('phase') == 'Running')


def pod_count(standin: StandinServer) -> int:
    with standin.store.lock:
        return len(standin.store.objects[('', 'pods')])


PROFILER = '''import atexit, cProfile, os
profile = cProfile.Profile()
profile.enable()
atexit.register(lambda: profile.dump_stats(os.environ['KUBERL_BENCH_PROFILE']))
'''


def bench_operator(jobs: int, workers: int, namespaces: int, quiet: float, profile: pathlib.Path | None, kwargs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, StandinServer(workdir=pathlib.Path(tmp)) as standin:
        env = {}
        if profile is not None:  # cProfile of the operator's main thread (its event loop), written when it stops
            (pathlib.Path(tmp) / 'sitecustomize.py').write_text(PROFILER)
            env = {'PYTHONPATH': tmp, 'KUBERL_BENCH_PROFILE': str(profile.resolve())}
        standin.apply_crd(CRD)
        rest = Rest(standin.url)
        for i in range(namespaces):
            assert rest.post('/api/v1/namespaces', {'metadata': {'name': f'team-{i}'}}).status == 201
        op = Operator(standin, pathlib.Path(tmp), '--scrape-interval', '10', env=env).start()
        kubelet, lag = Kubelet(standin), LoopLag(op, pathlib.Path(tmp) / 'healthz-latency.txt')
        kubelet.start()
        try:
            time.sleep(1.0)
            lag.take()
            cpu0, (count0, total0, _) = cpu_seconds(op.process.pid), reconciles(op)
            start = time.monotonic()
            for i in range(jobs):
                namespace = f'team-{i % namespaces}'
                body = {**manifest(f'job-{i}', workers=workers), 'metadata': {'name': f'job-{i}', 'namespace': namespace}}
                if kwargs:
                    body['spec']['env']['kwargs'] = nested_kwargs(kwargs)
                reply = rest.post(f'/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}', body)
                assert reply.status == 201, reply.body
            created = time.monotonic() - start
            all_pods = wait_for(lambda: pod_count(standin) >= jobs * workers, timeout=1200, interval=0.2) and time.monotonic() - start
            wait_for(lambda: jobs_running(standin) == jobs, timeout=1200, interval=0.5, what=f'{jobs} jobs Running')
            all_running = time.monotonic() - start
            cpu1, (count1, total1, buckets) = cpu_seconds(op.process.pid), reconciles(op)
            ramp_lag = lag.take()
            print(f'{jobs} jobs x {workers} workers{f" ({kwargs} env.kwargs elements each)" if kwargs else ""} in {namespaces} namespaces: created {created:.1f} s, all {jobs * workers} pods '
                  f'{all_pods:.1f} s, all Running {all_running:.1f} s after the first create '
                  f'(the last create -> all pods {all_pods - created:.1f} s, all Running {all_running - created:.1f} s)')
            n = count1 - count0
            print(f'  ramp: {n:.0f} reconciles, operator CPU {cpu1 - cpu0:.1f} s = {1000 * (cpu1 - cpu0) / max(n, 1):.1f} ms per reconcile; '
                  f'reconcile wall mean {1000 * (total1 - total0) / max(n, 1):.1f} ms, p99 {p99(buckets, count1)}')
            print(f'  ramp event-loop lag: {lag_line(ramp_lag)}')
            time.sleep(quiet)
            cpu2, (count2, _, _) = cpu_seconds(op.process.pid), reconciles(op)
            n = count2 - count1
            print(f'  quiet {quiet:.0f} s, all Running: {n:.0f} reconciles, operator CPU {cpu2 - cpu1:.1f} s'
                  f' ({1000 * (cpu2 - cpu1) / max(n, 1):.1f} ms per reconcile); {lag_line(lag.take())}')
        finally:
            kubelet.stop.set()
            lag.stop()
            op.stop()


def configured(settings: kopf.OperatorSettings) -> kopf.OperatorSettings:
    handlers.configure_persistence(settings)
    return settings


def bench_steps(spec_path: pathlib.Path) -> None:
    """One reconcile's pure steps, in this process, for one spec (ms each, best of 5)."""
    job = load_documents((ROOT / spec_path).read_text())[0]
    job['metadata'].update(uid='u-1', generation=1)
    spec = validate_job(job)
    pods = render.render_pods(render.Job(job['metadata']['name'], spec), 'ns', 'u-1', list(range(spec.workers)), 0)
    observed = [lifecycle.observed_pod(p) for p in pods]

    def ms(fn) -> float:
        return 1000 * min(timeit.repeat(fn, number=5, repeat=5)) / 5

    print(f'pure steps for {spec_path} ({spec.workers} workers), ms each, best of 5:')
    print(f'  validate_job (validation + defaulting; once per generation, off the loop): {ms(lambda: validate_job(job)):.2f}')
    print(f'  defaulted(spec) (the trainer config\'s spec): {ms(lambda: defaulted(spec)):.2f}')
    print(f'  trainer_config (every reconcile, for status.paths; defaulted inside): {ms(lambda: trainer_config(job["metadata"]["name"], "ns", "u-1", spec)):.2f}')
    print(f'  lifecycle.observed_pod x {len(pods)} (every reconcile): {ms(lambda: [lifecycle.observed_pod(p) for p in pods]):.2f}')
    body = kopf.Body({**job, 'status': jobstatus.job_status({'phase': 'Running'}, observed_generation=1, reading=None, paths=None,
                                                                desired_workers=spec.workers)})
    for who, settings in (('kopf\'s default', kopf.OperatorSettings()), ('the operator\'s', configured(kopf.OperatorSettings()))):
        storages = settings.persistence
        print(f'  kopf\'s essence of each job event, ours included, on the loop ({who} diff base): '
              f'{ms(lambda s=storages: s.progress_storage.clear(essence=s.diffbase_storage.build(body=body))):.2f}')
    print(f'  jobstatus.job_status (every reconcile): '
          f'{ms(lambda: jobstatus.job_status({"phase": "Running"}, observed_generation=1, reading=None, paths=None, desired_workers=spec.workers, defaults=("i", render.PerProcess()))):.3f}')
    del observed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--jobs', type=int, default=100)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--namespaces', type=int, default=4)
    parser.add_argument('--quiet-seconds', type=float, default=15.0)
    parser.add_argument('--spec', type=pathlib.Path, default=None, help='the spec whose pure steps are timed (default: the largest example)')
    parser.add_argument('--kwargs-elements', type=int, default=0,
                        help='give each job env.kwargs of this many zeros 40 lists deep (a spec of many small nodes)')
    parser.add_argument('--profile', type=pathlib.Path, default=None,
                        help='write a cProfile of the operator\'s event-loop thread here (read it with pstats)')
    parser.add_argument('--steps-only', action='store_true', help='time the pure steps only, without the operator')
    args = parser.parse_args()
    examples = sorted((ROOT / 'manifests' / 'examples').glob('*.yaml'), key=lambda p: p.stat().st_size)
    bench_steps(args.spec or examples[-1].relative_to(ROOT))
    if not args.steps_only:
        bench_operator(args.jobs, args.workers, args.namespaces, args.quiet_seconds, args.profile, args.kwargs_elements)


if __name__ == '__main__':
    main()
