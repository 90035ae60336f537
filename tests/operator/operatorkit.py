"""The real operator (`kuberl operator`, its own process) against the API stand-in, and the
kubelet's part played through the stand-in's store: pods reported Running, Failed, Succeeded."""
import contextlib
import copy
import http.server
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Self

from kuberl.core import contract, metricnames, names

from tests.support.apiserver import StandinServer
from tests.support.jobs import make_job
from tests.support.ports import free_port
from tests.support.rest import Rest
from tests.support.store import container_terminated, timestamp

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / 'manifests' / 'crd.yaml'
NS = 'default'
TRAINER_IMAGE = 'registry.test/kuberl/trainer:ci'
JOBS = f'/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/{names.PLURAL}'
PODS = f'/api/v1/namespaces/{NS}/pods'


# Its start (imports, kopf's login and discovery, the first list) took 1.1 s of CPU here, 2.4 s of wall clock; 30 s
# of wall clock was too little for it with two xdist workers beside two busy loops (load 15 on 2 cores). A start
# that loops is caught by its CPU, one that hangs (it uses none) by the wall clock.
START_CPU_SECONDS = 20.0
START_WALL_SECONDS = 180.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (proc(5): /proc/pid/stat fields 14 and 15, in clock ticks)."""
    fields = pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class Operator:
    """`kuberl operator` in a subprocess, pointed at the stand-in by $KUBECONFIG (the stand-in's own, or `kubeconfig`)."""

    def __init__(self, standin: StandinServer, logdir: pathlib.Path, *extra: str, kubeconfig: pathlib.Path | None = None,
                 env: dict[str, str] | None = None, preload: str | None = None):
        """`preload`: Python run in the operator's process before `kuberl operator` starts (an extra kopf handler)."""
        self.standin, self.logdir, self.extra, self.kubeconfig, self.env = standin, logdir, extra, kubeconfig, env or {}
        self.preload = preload
        self.health_port, self.metrics_port = free_port(), free_port()
        self.health_path = extra[extra.index('--health-path') + 1] if '--health-path' in extra else '/healthz'
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, watching: bool = True) -> 'Operator':
        """Start and wait for /healthz, then (unless `watching` is False: a paused peer never
        lists) for its first list or watch of RLTrainingJobs. kopf answers /healthz before its
        discovery is done; a test that creates a job at once must not race that (once, a
        discovery request got no answer and kopf retried it only after its 30 s timeout)."""
        listings = self._job_listings()
        self.starts += 1
        self.logfile = (self.logdir / f'operator-{self.starts}.log').open('wb')
        env = {**os.environ, 'KUBECONFIG': str(self.kubeconfig or self.standin.kubeconfig), 'PYTHONUNBUFFERED': '1',
               'KUBERL_TRAINER_IMAGE_PULL_POLICY': 'Always', 'KUBERL_TRAINER_IMAGE_PULL_SECRETS': 'regcred, mirror', **self.env}
        entry = ['-m', 'kuberl.cli'] if self.preload is None else [
            '-c', f'{self.preload}\nimport sys\nfrom kuberl.cli import main\nsys.exit(main(sys.argv[1:]))']
        self.process = subprocess.Popen(
            [sys.executable, *entry, 'operator', '--listen-address', '127.0.0.1',
             '--health-port', str(self.health_port), '--metrics-port', str(self.metrics_port),
             '--scrape-interval', '0.5', *self.extra],
            stdout=self.logfile, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            wait_for(lambda: self._starting() and self.healthy(), timeout=START_WALL_SECONDS,
                     what='the operator to answer its health endpoint')
            if watching:
                wait_for(lambda: self._starting() and self.healthy() and self._job_listings() > listings, timeout=START_WALL_SECONDS,
                         what='the operator to list or watch RLTrainingJobs')
        except AssertionError as e:
            # a start that failed is stopped here: no teardown stops an operator its fixture never returned,
            # and one left behind retried against a stopped stand-in for minutes, slowing every later test
            self.kill()
            raise AssertionError(f'{e}; its log ends:\n{self.log()[-3000:]}') from None
        return self

    def _starting(self) -> bool:
        """True while its start costs the CPU a start costs; a loaded machine stretches the wall clock instead."""
        used = 0.0
        with contextlib.suppress(FileNotFoundError):  # no /proc (macOS), or the process has gone: healthy() says why
            used = cpu_seconds(self.process.pid)
        assert used < START_CPU_SECONDS, f'the operator used {used:g} s of CPU and has not started: {self.log()[-3000:]}'
        return True

    def _job_listings(self) -> int:
        return sum(n for call, n in self.standin.calls.items()
                   if call.agent == 'kopf' and call.resource == names.PLURAL and call.verb in ('list', 'watch'))

    def healthy(self) -> bool:
        assert self.process.poll() is None, f'operator exited with {self.process.returncode}: {self.log()[-3000:]}'
        with contextlib.suppress(OSError):  # not listening yet
            return self.health_status(timeout=1) == 200
        return False

    def health_status(self, timeout: float = 30) -> int:
        """What its health endpoint answers: 200, or 500 while kopf's probes fail (silent watches, equal peering priorities).
        An answer slower than `timeout` raises, failing the test: 30 s, where a loaded machine's 2 s could."""
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{self.health_port}{self.health_path}', timeout=timeout) as reply:
                return reply.status
        except urllib.error.HTTPError as e:
            return e.code

    def metrics(self) -> str:
        with urllib.request.urlopen(f'http://127.0.0.1:{self.metrics_port}/metrics', timeout=30) as reply:  # a slow answer fails the test
            return reply.read().decode()

    def log(self) -> str:
        return (self.logdir / f'operator-{self.starts}.log').read_text(errors='replace')

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.logfile.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


# --- jobs ---------------------------------------------------------------------

def manifest(name: str, **spec) -> dict:
    """A small valid job (tests.support.jobs) that restarts fast; keyword arguments are spec fields (camelCase)."""
    quick = make_job(name).run_policy(restartBackoffSeconds=0.2, stallTimeoutSeconds=600, startupTimeoutSeconds=600)
    return quick.with_spec(**spec).obj()


def create_job(rest: Rest, name: str, **spec) -> dict:
    reply = rest.post(JOBS, manifest(name, **spec))
    assert reply.status == 201, reply.body
    return reply.body


def job(rest: Rest, name: str) -> dict | None:
    reply = rest.get(f'{JOBS}/{name}')
    return reply.body if reply.status == 200 else None


def status(rest: Rest, name: str) -> dict:
    return (job(rest, name) or {}).get('status') or {}


def condition(rest: Rest, name: str, type_: str) -> dict:
    return next((c for c in status(rest, name).get('conditions') or [] if c['type'] == type_), {})


def pods(standin: StandinServer, name: str, generation: int | None = None) -> list[dict]:
    found = [p for p in standin.store.objects_of('', 'pods')
             if p['metadata']['labels'].get(names.LABEL_JOB) == name and names.LABEL_RANK in p['metadata']['labels']]
    if generation is not None:
        found = [p for p in found if p['metadata']['labels'].get(names.LABEL_RESTART) == str(generation)]
    return sorted(found, key=lambda p: int(p['metadata']['labels'][names.LABEL_RANK]))


def events(rest: Rest, name: str) -> list[dict]:
    items = rest.get(f'/api/v1/namespaces/{NS}/events').body['items']
    return [e for e in items if e['involvedObject'].get('name') == name]


def wait_for(predicate, timeout: float = 60.0, what: str = 'the condition', interval: float = 0.1, explain=None):
    """Poll until `predicate()` is truthy and return its value; on timeout, fail with `what` and `explain()`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout:g}s waiting for {what}' + (f'\n{explain()}' if explain else ''))
        time.sleep(interval)


def wait_phase(rest: Rest, name: str, phase: str, timeout: float = 60.0) -> dict:
    return wait_for(lambda: status(rest, name).get('phase') == phase and status(rest, name), timeout, f'{name} to be {phase}')


def reconciles(op: Operator) -> int:
    """Reconciles the operator's process has finished, of every job (its reconcile-duration histogram's count)."""
    found = re.search(rf'^{metricnames.OPERATOR_RECONCILE_DURATION}_count (\S+)$', op.metrics(), re.MULTILINE)
    return int(float(found[1])) if found else 0


def wait_reconciles(op: Operator, count: int, what: str) -> None:
    """Until `count` more reconciles have finished, all but the first begun after this call: the operator has looked
    at what the test set up, where a fixed sleep passed on a loaded machine before it had."""
    since = reconciles(op)
    wait_for(lambda: reconciles(op) >= since + count, what=f'{count} more reconciles ({what})')


def pod_lists(standin: StandinServer) -> int:
    """The operator's LISTs of pods: a job's loop lists its pods at a reconcile after any event of its pods."""
    return sum(n for c, n in standin.calls.items() if c.agent == 'kopf' and c.verb == 'list' and c.resource == 'pods')


def wait_loop_passed(standin: StandinServer, name: str) -> None:
    """Until the job's loop has finished a reconcile begun after this call, so that a test may then assert that nothing
    more was done (a fixed sleep passes on a loaded machine before the loop has looked). A pod of the job's label that
    the job does not own (the loop lists it and leaves it alone) is an event that wakes the loop; twice, as the second
    list can only be a later reconcile's, begun once the first was over: one job's reconciles run one at a time, each
    listing once (twice where a create was refused, and that second list comes after the create)."""
    client = Rest(standin.url)
    for _ in range(2):
        listed = pod_lists(standin)
        poke = {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'generateName': f'{name}-poke-', 'labels': {names.LABEL_JOB: name}},
                'spec': {'containers': [{'name': 'main', 'image': 'busybox:1'}]}}
        assert client.post(f'/api/v1/namespaces/{NS}/pods', poke).status == 201
        wait_for(lambda listed=listed: pod_lists(standin) > listed, what=f"{name}'s loop to list its pods again")


# --- the kubelet's part -------------------------------------------------------

def running(standin: StandinServer, pod: dict, ip: str | None = None) -> None:
    """Report a pod Running as its kubelet would."""
    state = {'phase': 'Running', 'startTime': timestamp(),
             'conditions': [{'type': 'Ready', 'status': 'True', 'lastTransitionTime': timestamp()}],
             'containerStatuses': [{'name': names.TRAINER_CONTAINER, 'ready': True, 'restartCount': 0, 'started': True,
                                    'image': '', 'imageID': '', 'state': {'running': {'startedAt': timestamp()}}}]}
    if ip:
        state['podIP'] = ip
    standin.store.report_pod(NS, pod['metadata']['name'], state)


def terminated(standin: StandinServer, pod: dict, exit_code: int, message: str = '') -> None:
    """Report a pod's trainer as ended; `message` is the line it states (marked, as the trainer writes it)."""
    stated = contract.TERMINATION_MARKER + message if message else ''
    standin.store.report_pod(NS, pod['metadata']['name'], {
        'phase': 'Succeeded' if exit_code == 0 else 'Failed',
        'conditions': [{'type': 'Ready', 'status': 'False', 'lastTransitionTime': timestamp()}],
        'containerStatuses': [container_terminated(names.TRAINER_CONTAINER, exit_code, stated)]})


def start_gang(standin: StandinServer, name: str, workers: int, generation: int = 0, ip: str | None = None) -> list[dict]:
    gang = wait_for(lambda: len(pods(standin, name, generation)) == workers and pods(standin, name, generation),
                    what=f'{workers} pods of {name} generation {generation}')
    for pod in gang:
        running(standin, pod, ip if pod['metadata']['labels'][names.LABEL_RANK] == '0' else None)
    return gang


def running_job(standin: StandinServer, rest: Rest, name: str, workers: int) -> list[dict]:
    """A job of `workers` created, its gang's pods running and the job seen Running: the gang's pods."""
    create_job(rest, name, workers=workers)
    gang = start_gang(standin, name, workers)
    wait_phase(rest, name, 'Running')
    return gang


# --- rank 0's metrics endpoint ------------------------------------------------

class LocalServer:
    """A request handler served on a free 127.0.0.1 port from a thread, while in a `with` block."""

    def serve(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', self.port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class MetricsPage(LocalServer):
    """A Prometheus text page served on 127.0.0.1 while in a `with` block: `text`, or what a subclass's `page()`
    returns at each request (read then, so a test changes it while it is scraped)."""

    def __init__(self, text: str = ''):
        self.text = text
        kit = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = kit.page().encode()
                self.send_response(200)
                self.send_header('Content-Type', 'text/plain; version=0.0.4')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.serve(Handler)

    def page(self) -> str:
        return self.text


class FakeMetrics(MetricsPage):
    """A tiny Prometheus endpoint on 127.0.0.1 standing in for rank 0's exporter."""

    def __init__(self, job: str):
        self.job, self.timesteps, self.success, self.eval_return, self.last_checkpoint = job, 0, 0, 0.0, 0.0
        self.checkpoints_skipped = 0
        self.checkpoint_save_seconds = 0.0
        self.resumed_timesteps: int | None = None  # None: not on the page (rank 0 has not looked yet)
        super().__init__()

    def page(self) -> str:
        labels = f'rltj="{self.job}",rank="0"'
        return (f'# TYPE kuberl_trainer_env_steps_total counter\nkuberl_trainer_env_steps_total{{{labels}}} {self.timesteps}\n'
                f'# TYPE kuberl_trainer_success gauge\nkuberl_trainer_success{{{labels}}} {self.success}\n'
                f'# TYPE kuberl_trainer_eval_return gauge\nkuberl_trainer_eval_return{{{labels}}} {self.eval_return}\n'
                f'# TYPE kuberl_trainer_episode_return gauge\nkuberl_trainer_episode_return{{{labels}}} 21.5\n'
                f'# TYPE kuberl_trainer_steps_per_second gauge\nkuberl_trainer_steps_per_second{{{labels}}} 640.0\n'
                f'# TYPE kuberl_trainer_last_checkpoint_timestamp_seconds gauge\n'
                f'kuberl_trainer_last_checkpoint_timestamp_seconds{{{labels}}} {self.last_checkpoint}\n'
                f'# TYPE kuberl_trainer_checkpoints_skipped gauge\nkuberl_trainer_checkpoints_skipped{{{labels}}} {self.checkpoints_skipped}\n'
                f'# TYPE kuberl_trainer_checkpoint_save_seconds gauge\n'
                f'kuberl_trainer_checkpoint_save_seconds{{{labels}}} {self.checkpoint_save_seconds}\n'
                + ('' if self.resumed_timesteps is None else
                   f'# TYPE kuberl_trainer_resumed_timesteps gauge\nkuberl_trainer_resumed_timesteps{{{labels}}} {self.resumed_timesteps}\n'))


def deep(obj: dict) -> dict:
    return copy.deepcopy(obj)
