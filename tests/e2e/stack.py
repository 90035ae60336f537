"""The one shared stack of the end-to-end tier, as a user meets it (the `stack` fixture in conftest.py).

- the API stand-in, the CRD applied from manifests/crd.yaml with kubectl;
- the real operator, `kuberl operator` in its own process, standalone;
- the local node (a kubelet stand-in) running created pods as processes, each on its own 127.x address;
- Debian's Prometheus scraping every trainer port (config generated from the chart's PodMonitor, over
  targets that stand in for pod discovery) and the operator (from the chart's ServiceMonitor);
- kubectl with a kubeconfig pointing at the stand-in: the tests act through it.

Started once per session; every scenario uses its own job names. `Scenario` rows become the report table.
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass

import yaml
from kuberl.core import metricnames as m
from kuberl.core import names
from kuberl.local.process import processes_under

from tests.e2e.test_dashboard import (
    CHART,
    HELM,
    PROMETHEUS,
    Prometheus,
    chart_pod_monitor,
    discovered_targets,
    free_port,
    scrape_config,
)
from tests.operator import operatorkit
from tests.operator.operatorkit import Operator
from tests.support.apiserver import StandinServer
from tests.support.jobs import make_job
from tests.support.localnode import LocalNode
from tests.support.rest import Rest
from tests.support.selectors import parse_label_selector

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / 'manifests' / 'crd.yaml'
EXAMPLES = ROOT / 'manifests' / 'examples'
JOBS_DIR = pathlib.Path(__file__).resolve().parent / 'jobs'
NS = 'default'
JOBS = f'/apis/{names.GROUP}/{names.VERSION}/namespaces/{NS}/{names.PLURAL}'
SCRAPE_SECONDS = 1
RESULTS = os.environ.get('KUBERL_E2E_RESULTS')  # where the scenario table is written (JSON lines), if set


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2, explain=None):
    """operatorkit's wait with no default deadline (each comes from the spec's own timeouts, with room for a loaded
    machine), polled half as often: the predicates here run kubectl and read Prometheus."""
    return operatorkit.wait_for(predicate, timeout, what, interval, explain)


def service_monitor_scrape_config(monitor: dict, target: str, service: str) -> dict:
    """prometheus-operator's scrape config for the chart's ServiceMonitor, its one endpoint at `target`."""
    (endpoint,) = monitor['spec']['endpoints']
    meta = monitor['metadata']
    return {
        'job_name': f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        'honor_labels': endpoint.get('honorLabels', False),
        'metrics_path': endpoint.get('path', '/metrics'),
        'scrape_interval': f'{SCRAPE_SECONDS}s',
        'scrape_timeout': f'{SCRAPE_SECONDS}s',
        'static_configs': [{'targets': [target], 'labels': {
            'namespace': meta['namespace'], 'service': service, 'endpoint': endpoint['port']}}],
        'relabel_configs': [{'target_label': 'job', 'replacement': service}],
    }


def chart_service_monitor() -> dict:
    out = subprocess.run([str(HELM), 'template', 'kuberl', str(CHART), '--namespace', 'kuberl-system',
                          '--set', 'monitoring.serviceMonitor.enabled=true'], capture_output=True, text=True, check=True, timeout=60).stdout
    (monitor,) = [d for d in yaml.safe_load_all(out) if d and d['kind'] == 'ServiceMonitor']
    return monitor


SCENARIOS: list[dict] = []  # rows of the report, printed as a table at the end of the run


@dataclass
class Scenario:
    """One row of the report: what a scenario measured."""
    name: str
    started: float
    restarts: int | str = '-'
    lost: int | str = '-'
    notes: str = ''

    def done(self, **fields) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        row = {'scenario': self.name, 'wall_s': round(time.monotonic() - self.started, 1),
               'restarts': self.restarts, 'timesteps_lost': self.lost, 'notes': self.notes}
        SCENARIOS.append(row)
        if RESULTS:
            with open(RESULTS, 'a') as f:
                f.write(json.dumps(row) + '\n')


class PhaseWatch:
    """`kubectl get rltj --watch`, kept running: every phase each job passed through, as a user watching saw them."""

    def __init__(self, kubeconfig: pathlib.Path):
        self.env = {**os.environ, 'KUBECONFIG': str(kubeconfig)}
        self.seen: dict[str, list[str]] = collections.defaultdict(list)
        self.stopped = threading.Event()
        self.established = threading.Event()
        self.process: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._follow, name='kubectl-watch', daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        while not self.stopped.is_set():  # kubectl ends when the server closes the watch: start it again
            # -v=6 logs each request as it completes: the watch GET's "200 OK" says the watch is open
            self.process = subprocess.Popen(
                ['kubectl', 'get', 'rltj', '--watch', '--no-headers', '-v=6',
                 '-o', 'custom-columns=NAME:.metadata.name,PHASE:.status.phase'],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
            threading.Thread(target=self._note_established, args=(self.process.stderr,), daemon=True).start()
            for line in self.process.stdout:
                name, _, phase = line.strip().partition(' ')
                phase = phase.strip()
                if phase and phase != '<none>' and (not self.seen[name] or self.seen[name][-1] != phase):
                    self.seen[name].append(phase)
            self.process.wait()
            self.stopped.wait(0.5)

    def _note_established(self, stderr) -> None:
        for line in stderr:
            if 'watch=true' in line and ' 200 OK' in line:
                self.established.set()

    def wait_established(self, timeout: float) -> None:
        """Until kubectl's watch is open: a job applied before it would be listed in its current
        phase and its earlier ones missed (a loaded CI machine starts kubectl in seconds)."""
        assert self.established.wait(timeout), f'kubectl get rltj --watch not established within {timeout}s'

    def phases(self, name: str) -> list[str]:
        return list(self.seen[name])

    def phases_through(self, name: str, last: str, timeout: float = 30) -> list[str]:
        """The phases seen, once the watch has delivered `last` (it lags the API by kubectl's own pace)."""
        wait_for(lambda: self.seen[name][-1:] == [last], timeout, f'kubectl --watch to show {name} {last}', interval=0.1)
        return self.phases(name)

    def stop(self) -> None:
        self.stopped.set()
        for _ in range(2):  # the one running, then any the loop started meanwhile
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()
                self.process.wait(10)
            self.thread.join(5)


class Stack:
    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.server = StandinServer(workdir=workdir / 'api')
        self.node: LocalNode | None = None
        self.operator: Operator | None = None
        self.prometheus: subprocess.Popen | None = None
        self.prom: Prometheus | None = None
        self._stop = threading.Event()
        self._discovery: threading.Thread | None = None

    # ------------------------------------------------------------ bring-up and tear-down

    def start(self) -> None:
        (self.workdir / 'api').mkdir(parents=True, exist_ok=True)
        self.server.start()
        self.rest = Rest(self.server.url)
        self.kubectl('apply', '-f', str(CRD))
        wait_for(lambda: self.rest.get(JOBS).status == 200, 30, 'the CRD to be served')
        self.node = LocalNode(self.server.url, self.workdir / 'node', image_pull_failure=self.server.store.hooks.image_pull_failure)
        self.node.start()
        self.operator = Operator(self.server, self.workdir).start()
        self._start_prometheus()
        self.watch = PhaseWatch(self.server.kubeconfig)
        self.watch.wait_established(60)

    def _start_prometheus(self) -> None:
        assert PROMETHEUS.exists(), "Debian's prometheus is missing: `make prometheus` installs it"
        assert HELM.exists(), 'helm is missing: `make tools`'
        self.targets = self.workdir / 'trainer-targets.json'
        self.targets.write_text('[]')
        operator_target = f'127.0.0.1:{self.operator.metrics_port}'
        config = {'global': {'scrape_interval': f'{SCRAPE_SECONDS}s'}, 'scrape_configs': [
            scrape_config(chart_pod_monitor(), self.targets),
            service_monitor_scrape_config(chart_service_monitor(), operator_target, 'kuberl'),
        ]}
        (self.workdir / 'prometheus.yml').write_text(yaml.safe_dump(config))
        port = free_port()
        self._prometheus_log = open(self.workdir / 'prometheus.log', 'w')  # noqa: SIM115 - closed at stop()
        self.prometheus = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={self.workdir / 'prometheus.yml'}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
             f'--web.listen-address=127.0.0.1:{port}', '--storage.tsdb.retention.time=1h'],
            stdout=self._prometheus_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.prom = Prometheus(f'http://127.0.0.1:{port}')
        self._discovery = threading.Thread(target=self._discover, name='pod-discovery', daemon=True)
        self._discovery.start()
        wait_for(self._prometheus_ready, 60, 'Prometheus to answer')

    def _prometheus_ready(self) -> bool:
        assert self.prometheus.poll() is None, (self.workdir / 'prometheus.log').read_text()[-2000:]
        try:
            return self.prom.query('up') is not None
        except (OSError, AssertionError):
            return False

    def _discover(self) -> None:
        """Kubernetes' pod discovery for Prometheus: a target per declared port of each running pod."""
        written = None
        while not self._stop.wait(0.5):
            running = [(p, p['status']['podIP']) for p in self.server.store.objects_of('', 'pods')
                       if (p.get('status') or {}).get('phase') == 'Running' and p['status'].get('podIP')
                       and not p['metadata'].get('deletionTimestamp')]
            targets = json.dumps(discovered_targets(running), sort_keys=True)
            if targets != written:
                partial = self.targets.with_suffix('.tmp')
                partial.write_text(targets)
                partial.replace(self.targets)  # atomic: Prometheus never reads half a file
                written = targets

    def stop(self) -> None:
        self._stop.set()
        if getattr(self, 'watch', None) is not None:
            self.watch.stop()
        if self.operator is not None:
            self.operator.stop()
        if self.node is not None:
            self.node.stop()
        if self.prometheus is not None and self.prometheus.poll() is None:
            os.killpg(self.prometheus.pid, signal.SIGTERM)
            try:
                self.prometheus.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.prometheus.pid, signal.SIGKILL)
                self.prometheus.wait(5)
            self._prometheus_log.close()
        self.server.stop()

    # ------------------------------------------------------------ the user's side: kubectl

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, 'KUBECONFIG': str(self.server.kubeconfig)}
        done = subprocess.run(['kubectl', *args], check=False, input=stdin, capture_output=True, text=True, env=env, timeout=60)
        if check:
            assert done.returncode == 0, f'kubectl {" ".join(args)}: {done.stderr}'
        return done

    def apply(self, *documents: dict) -> subprocess.CompletedProcess:
        return self.kubectl('apply', '-f', '-', stdin=yaml.safe_dump_all(documents))

    def get_rltj(self, name: str) -> dict[str, str]:
        """`kubectl get rltj NAME` as a user reads it: column -> value."""
        header, row = self.kubectl('get', 'rltj', name).stdout.strip().splitlines()
        columns = [match.start() for match in re.finditer(r'\S+', header)]
        cells = [row[a:b].strip() for a, b in zip(columns, [*columns[1:], None], strict=True)]
        return dict(zip(header.split(), cells, strict=True))

    # ------------------------------------------------------------ what the cluster holds

    def job(self, name: str) -> dict | None:
        reply = self.rest.get(f'{JOBS}/{name}')
        return reply.body if reply.status == 200 else None

    def status(self, name: str) -> dict:
        return (self.job(name) or {}).get('status') or {}

    def condition(self, name: str, type_: str) -> dict:
        return next((c for c in self.status(name).get('conditions') or [] if c['type'] == type_), {})

    def pods(self, name: str, generation: int | None = None, live: bool = False) -> list[dict]:
        found = [p for p in self.server.store.objects_of('', 'pods') if p['metadata']['labels'].get(names.LABEL_JOB) == name]
        if generation is not None:
            found = [p for p in found if p['metadata']['labels'].get(names.LABEL_RESTART) == str(generation)]
        if live:
            found = [p for p in found if not p['metadata'].get('deletionTimestamp')]
        return sorted(found, key=lambda p: int(p['metadata']['labels'][names.LABEL_RANK]))

    def children(self, name: str) -> list[str]:
        """Every object left that the job owns or labels."""
        left = []
        for plural in ('pods', 'services', 'configmaps', 'persistentvolumeclaims'):
            left += [f'{plural}/{o["metadata"]["name"]}' for o in self.server.store.objects_of('', plural)
                     if (o['metadata'].get('labels') or {}).get(names.LABEL_JOB) == name]
        left += [f'networkpolicies/{o["metadata"]["name"]}' for o in self.server.store.objects_of('networking.k8s.io', 'networkpolicies')
                 if (o['metadata'].get('labels') or {}).get(names.LABEL_JOB) == name]
        return left

    def describe(self, name: str) -> str:
        """What a user would look at when a job is stuck: its status, its pods, rank 0's last words."""
        pods = [(p['metadata']['name'], p['metadata']['labels'].get(names.LABEL_RESTART), (p.get('status') or {}).get('phase'),
                 bool(p['metadata'].get('deletionTimestamp'))) for p in self.pods(name)]
        return f'status: {json.dumps(self.status(name))}\npods: {pods}\npids: {self.pids(name)}\nrank 0 log: {self.pod_logs(name)[-1500:]}'

    def wait_phase(self, name: str, phase: str, timeout: float) -> dict:
        def reached():
            status = self.status(name)
            if status.get('phase') in ('Succeeded', 'Failed') and status['phase'] != phase:
                raise AssertionError(f'{name} ended {status["phase"]}, not {phase}:\n{self.describe(name)}')
            return status if status.get('phase') == phase else None
        return wait_for(reached, timeout, f'{name} to be {phase}', explain=lambda: self.describe(name))

    def pod_root(self, pod: str) -> pathlib.Path:
        return self.node.workdir / 'pods' / NS / pod

    def pids(self, name: str, rank: int | None = None) -> list[int]:
        """Live processes of the job's pods (or one rank's), found through /proc by the pod root they inherit."""
        ranks = [rank] if rank is not None else range(names.MAX_WORKERS)
        found = []
        for r in ranks:
            root = self.pod_root(names.pod_name(name, r))
            if not root.exists():
                if rank is None:
                    break
                continue
            found += processes_under(str(root))
        return sorted(set(found))

    def pod_logs(self, name: str, rank: int = 0) -> str:
        path = self.node.workdir / 'logs' / f'{NS}_{names.pod_name(name, rank)}.log'
        return path.read_text(errors='replace') if path.exists() else ''

    def checkpoint_dir(self, name: str) -> pathlib.Path:
        uid = self.job(name)['metadata']['uid']
        return self.node.workdir / 'claims' / NS / names.pvc_name(name) / names.checkpoint_subdir(name, uid)

    def main_pid(self, name: str, rank: int) -> int:
        """The pod's own process (its container's first process), as the local node started it."""
        pod = names.pod_name(name, rank)
        with self.node.lock:
            found = [e.process.pid for e in self.node.pods.values() if e.pod['metadata']['name'] == pod and e.process is not None
                     and e.process.running and not e.pod['metadata'].get('deletionTimestamp')]
        assert len(found) == 1, f'{pod}: {found}'
        return found[0]

    def checkpoints(self, name: str) -> list[pathlib.Path]:
        """Checkpoint files, oldest first."""
        directory = self.checkpoint_dir(name)
        return sorted(directory.glob('ckpt-*.pt')) if directory.exists() else []

    def progress(self, name: str) -> list[dict]:
        """Rank 0's per-update rows (timesteps, restart generation) from the checkpoint volume."""
        path = self.checkpoint_dir(name) / 'progress.jsonl'
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def resumed(self, name: str) -> list[tuple[str, int]]:
        """Every `resuming from PATH (timesteps N)` rank 0 logged, in order."""
        return [(path, int(steps)) for path, steps in re.findall(r'resuming from (\S+) \(timesteps (\d+)\)', self.pod_logs(name))]

    def rank0_steps(self, name: str) -> int:
        """Rank 0's global step counter, read from its metrics endpoint now."""
        pod = next(p for p in self.pods(name, live=True) if p['metadata']['labels'][names.LABEL_RANK] == '0')
        port = self.job(name)['spec'].get('metrics', {}).get('port', 9090)
        with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=5) as reply:
            page = reply.read().decode()
        return int(float(re.search(rf'^{m.ENV_STEPS_TOTAL}{{[^}}]*}} (\S+)$', page, re.MULTILINE).group(1)))

    def reached_before_restart(self, name: str, read: int = 0) -> int:
        """The furthest timesteps the previous generation reached: rank 0's last words before it resumed (a checkpoint, a
        progress line, a stop), or what was read from its endpoint at the fault, whichever is further."""
        log = self.pod_logs(name)
        before = log[: log.rfind('resuming from')]
        return max([read, *(int(n) for n in re.findall(r'timesteps (\d+)', before))])

    def latest_checkpoint_before_restart(self, name: str) -> str:
        """The last checkpoint rank 0 said it wrote before it resumed."""
        log = self.pod_logs(name)
        return re.findall(r'^checkpoint (\S+) \(timesteps', log[: log.rfind('resuming from')], re.MULTILINE)[-1]

    def steps_per_update(self, name: str) -> int:
        spec = self.job(name)['spec']
        return spec['ppo']['numSteps'] * spec['env']['numEnvs'] * spec['workers'] * (spec.get('procsPerWorker') or 1)

    def hold(self, name: str, generation: int) -> list:
        """Keep that generation's pods Pending (Unschedulable) until `release`."""
        hook = parse_label_selector(f'{names.LABEL_JOB}={name},{names.LABEL_RESTART}={generation}')
        self.server.store.hooks.unschedulable.append(hook)
        return hook

    def release(self, hook: list) -> None:
        self.server.store.hooks.unschedulable.remove(hook)
        self.server.store.reschedule()


def tiny_job(name: str, **spec) -> dict:
    """A small job from tests/e2e/jobs/tiny.yaml; keyword arguments override spec fields (camelCase, dicts merged)."""
    tiny = yaml.safe_load((JOBS_DIR / 'tiny.yaml').read_text())
    # Pods here share one network: rank 0's rendezvous store listens on every address, so each job takes its own port.
    return make_job(name).from_spec(tiny['spec']).with_spec(rendezvous={'port': free_port()}).with_spec(**spec).obj()
