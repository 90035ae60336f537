"""A kubelet stand-in: runs the pods bound to its node as local processes and reports them through the API.

It is an honest API client (watch, GET, PATCH /status, DELETE) of whatever server it is pointed at.
Process running, the downward API, `$(VAR)` expansion and the sandbox come from `kuberl.local.process`
(shared with `kuberl run`); cluster DNS follows `kuberl.local.runner`'s rules, fed from the API's Services
and pods. Each pod gets its own 127.x.y.z address, written to status.podIP before its container starts;
that address stands in for the pod's network namespace, so an env value of 0.0.0.0 ("every address of
this pod") becomes the pod's IP (two pods binding 0.0.0.0:9090 do not collide in a cluster either).
What it cannot emulate: a process that binds the wildcard itself (torch's TCPStore on MASTER_PORT) holds
that port on every address, so concurrent jobs on one machine need distinct `spec.rendezvous.port`s.

Test hooks (deterministic start-up failures): `Store.hooks.unschedulable` (the scheduler's part, in the
API server), `Store.hooks.image_pull_failure` (read here: ErrImagePull, then ImagePullBackOff),
`Store.evict` (DisruptionTarget, then graceful deletion), `LocalNode.lose()` (the node stops reporting:
its processes die, its pods stay terminating until force-deleted).
"""
import contextlib
import hashlib
import http.server
import ipaddress
import json
import logging
import os
import pathlib
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Self

from kuberl.local import process as local_process
from kuberl.local import runner, sandbox

from tests.support.ports import worker_slice
from tests.support.rest import Rest
from tests.support.selectors import LabelRequirement, labels_match
from tests.support.store import timestamp

logger = logging.getLogger('kuberl.standin.node')
LOOP_SECONDS = 0.1


class NameNotResolvable(Exception):
    """A cluster DNS name in the pod's env has no record yet: the pod waits, as its lookups would."""


@dataclass
class RunningPod:
    pod: dict
    ip: str
    process: local_process.PodProcess | None = None
    restarts: int = 0
    pull_failed: bool = False
    stopping: bool = False
    finished: bool = False
    confirmed: bool = False
    last_state: dict | None = None
    reported: str = ''


@dataclass
class LocalNode:
    """Start with `start()` (or as a context manager); `stop()` kills every process it started."""
    api_url: str
    workdir: pathlib.Path
    name: str = 'local-node'
    image_pull_failure: list[list[LabelRequirement]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rest = Rest(self.api_url)
        self.workdir = pathlib.Path(self.workdir)
        self.pods: dict[str, RunningPod] = {}
        self.seen: dict[str, dict] = {}
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.lost = False
        self.threads: list[threading.Thread] = []
        self.output = None
        digest = int.from_bytes(hashlib.sha256(str(self.workdir.resolve()).encode()).digest()[:2], 'big')
        # the second octet from this pytest-xdist worker's own slice (ports.worker_slice): two workers' nodes never
        # share addresses, where the digest alone gave two e2e workers' stacks the same 127.92.40.x (9090 taken)
        low, high = worker_slice(1, 255)
        self._ip_base = (127 << 24) | ((low + digest % (high - low)) << 16) | ((digest >> 8) % 200 << 8)
        self._next_ip = 2

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ lifecycle of the node

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.output = open(self.workdir / 'containers.log', 'a', buffering=1)  # noqa: SIM115 — lives as long as the node
        node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': self.name, 'labels': {'kubernetes.io/hostname': self.name}}}
        created = self.rest.post('/api/v1/nodes', node)
        if created.status not in (201, 409):
            raise RuntimeError(f'node registration failed: {created.body}')
        self.log_server = _log_server(self.workdir / 'logs')
        threading.Thread(target=self.log_server.serve_forever, name=f'{self.name}-logs', daemon=True).start()
        self._report_node('True', 'KubeletReady', 'kubelet is posting ready status')
        for target in (self._watch_pods, self._loop):
            thread = threading.Thread(target=target, name=f'{self.name}-{target.__name__}', daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        """Stop the node: every process it started is killed and waited for, and the Node object goes."""
        self._kill_everything()
        self.log_server.shutdown()
        self.log_server.server_close()
        if not self.lost:
            with contextlib.suppress(OSError):
                self.rest.delete(f'/api/v1/nodes/{self.name}')
        if self.output:
            self.output.close()

    def _kill_everything(self) -> None:
        """Stop the node's threads, then kill and reap every process it started."""
        self.stopped.set()
        for thread in self.threads:
            thread.join(5)
        with self.lock:
            for entry in self.pods.values():
                if entry.process is not None:
                    entry.process.kill()
                    entry.process.wait(5)

    def lose(self) -> None:
        """The node drops off the network: its processes die, and nothing it runs is reported again."""
        self.lost = True
        self._report_node('Unknown', 'NodeStatusUnknown', 'Kubelet stopped posting node status.')
        self._kill_everything()

    def pids(self) -> list[int]:
        with self.lock:
            return [e.process.pid for e in self.pods.values() if e.process is not None and e.process.pid and e.process.running]

    def _report_node(self, ready: str, reason: str, message: str) -> None:
        status = {'status': {'conditions': [{'type': 'Ready', 'status': ready, 'reason': reason, 'message': message,
                                             'lastHeartbeatTime': timestamp(), 'lastTransitionTime': timestamp()}],
                             'daemonEndpoints': {'kubeletEndpoint': {'Port': self.log_server.server_port}},
                             'addresses': [{'type': 'InternalIP', 'address': '127.0.0.1'}, {'type': 'Hostname', 'address': self.name}],
                             'allocatable': {'cpu': str(os.cpu_count() or 1), 'memory': '8Gi', 'pods': '110'},
                             'capacity': {'cpu': str(os.cpu_count() or 1), 'memory': '8Gi', 'pods': '110'}}}
        self.rest.patch(f'/api/v1/nodes/{self.name}/status', status)

    # ------------------------------------------------------------ watching the API

    def _watch_pods(self) -> None:
        selector = urllib.parse.quote(f'spec.nodeName={self.name}')
        while not self.stopped.is_set():
            listing = self.rest.get(f'/api/v1/pods?fieldSelector={selector}')
            if listing.status != 200:
                time.sleep(0.2)
                continue
            with self.lock:
                self.seen = {p['metadata']['uid']: p for p in listing.body['items']}
            version = listing.body['metadata']['resourceVersion']
            url = f'{self.api_url}/api/v1/pods?watch=true&fieldSelector={selector}&resourceVersion={version}&timeoutSeconds=30&allowWatchBookmarks=true'
            try:
                with urllib.request.urlopen(url, timeout=40) as stream:
                    for line in stream:
                        if self.stopped.is_set():
                            return
                        event = json.loads(line)
                        if event['type'] == 'ERROR':
                            break
                        if event['type'] == 'BOOKMARK':
                            continue  # bookmarks wake this thread so stop() never waits long
                        pod = event['object']
                        with self.lock:
                            if event['type'] == 'DELETED':
                                self.seen.pop(pod['metadata']['uid'], None)
                            else:
                                self.seen[pod['metadata']['uid']] = pod
            except (OSError, ValueError):
                time.sleep(0.2)

    # ------------------------------------------------------------ the sync loop

    def _loop(self) -> None:
        while not self.stopped.wait(LOOP_SECONDS):
            with self.lock:
                seen = dict(self.seen)
                for uid, pod in seen.items():
                    try:
                        self._sync(uid, pod)
                    except Exception:  # one bad pod must not stop the node; the log says why
                        logger.exception('local node failed to sync pod %s', pod['metadata']['name'])
                for uid in [uid for uid in self.pods if uid not in seen]:  # force-deleted: kill what is left
                    entry = self.pods.pop(uid)
                    if entry.process is not None:
                        entry.process.kill()

    def _sync(self, uid: str, pod: dict) -> None:
        entry = self.pods.get(uid)
        if entry is None:
            entry = RunningPod(pod, self._allocate_ip())
            self.pods[uid] = entry
        entry.pod = pod
        if pod['metadata'].get('deletionTimestamp'):
            self._stop_pod(entry)
            return
        if entry.finished:
            return
        if entry.process is None:
            self._start_pod(entry)
            return
        code = entry.process.poll()
        if code is None:
            self._report(entry, 'Running', {'running': {'startedAt': _iso(entry.process.started_at)}}, ready=True)
            return
        state = self._terminated(entry, code)
        policy = pod['spec'].get('restartPolicy', 'Always')
        if policy == 'Always' or (policy == 'OnFailure' and code != 0):
            entry.restarts += 1
            entry.last_state = state
            self._report(entry, 'Running', {'waiting': {'reason': 'CrashLoopBackOff'}})
            entry.process = None
            return
        entry.finished = True
        self._report(entry, 'Succeeded' if code == 0 else 'Failed', state)

    def _allocate_ip(self) -> str:
        address = str(ipaddress.IPv4Address(self._ip_base + self._next_ip))
        self._next_ip = self._next_ip + 1 if self._next_ip < 250 else 2
        return address

    def _start_pod(self, entry: RunningPod) -> None:
        pod = entry.pod
        if any(labels_match(s, pod['metadata'].get('labels')) for s in self.image_pull_failure):
            image = sandbox.trainer_container(pod).get('image', '')
            reason = 'ImagePullBackOff' if entry.pull_failed else 'ErrImagePull'
            entry.pull_failed = True
            self._report(entry, 'Pending', {'waiting': {'reason': reason, 'message': f'Back-off pulling image "{image}"'}})
            return
        namespace, name = pod['metadata']['namespace'], pod['metadata']['name']
        self._report(entry, 'Pending', {'waiting': {'reason': 'ContainerCreating'}})
        (self.workdir / 'logs').mkdir(exist_ok=True)
        try:
            configmaps = self._configmaps(pod)
            entry.process = local_process.start_pod(
                in_own_network_namespace(pod, entry.ip), entry.ip, str(self.workdir / 'pods' / namespace / name), configmaps,
                lambda claim: self._claim_dir(namespace, claim),
                self._resolver(namespace), prefix=f'[{name}]', out=self.output,
                log_path=str(self.workdir / 'logs' / f'{namespace}_{name}.log'))
        except NameNotResolvable:
            return
        except sandbox.LocalRunError as error:
            self._report(entry, 'Pending', {'waiting': {'reason': 'CreateContainerConfigError', 'message': str(error)}})
            return
        self._report(entry, 'Running', {'running': {'startedAt': _iso(entry.process.started_at)}}, ready=True)

    def _stop_pod(self, entry: RunningPod) -> None:
        """Graceful deletion: SIGTERM, SIGKILL when the grace period ends, then confirm to the API."""
        pod = entry.pod
        if entry.process is not None and not entry.stopping:
            entry.stopping = True
            entry.process.terminate(float(pod['metadata'].get('deletionGracePeriodSeconds', 30)))
        if entry.process is not None and entry.process.poll() is None:
            return
        if entry.process is not None and not entry.finished:
            entry.finished = True
            code = entry.process.poll()
            self._report(entry, 'Succeeded' if code == 0 else 'Failed', self._terminated(entry, code))
        if not entry.confirmed:
            namespace, name = pod['metadata']['namespace'], pod['metadata']['name']
            self.rest.delete(f'/api/v1/namespaces/{namespace}/pods/{name}',
                             {'gracePeriodSeconds': 0, 'preconditions': {'uid': pod['metadata']['uid']}})
            entry.confirmed = True

    @staticmethod
    def _terminated(entry: RunningPod, code: int) -> dict:
        message = entry.process.termination_message() or ''
        reason = 'Completed' if code == 0 else ('StartError' if entry.process.start_error else 'Error')
        return {'terminated': {'exitCode': code, 'reason': reason, 'message': message,
                               'startedAt': _iso(entry.process.started_at), 'finishedAt': _iso(entry.process.finished_at or time.time())}}

    def _report(self, entry: RunningPod, phase: str, state: dict, ready: bool = False) -> None:
        pod = entry.pod
        container = sandbox.trainer_container(pod)
        status = {
            'phase': phase, 'podIP': entry.ip, 'podIPs': [{'ip': entry.ip}], 'hostIP': '127.0.0.1',
            'startTime': pod.get('status', {}).get('startTime') or timestamp(),
            'conditions': [c for c in pod.get('status', {}).get('conditions') or [] if c['type'] in ('PodScheduled', 'DisruptionTarget')] + [
                {'type': 'Initialized', 'status': 'True'},
                {'type': 'ContainersReady', 'status': 'True' if ready else 'False'},
                {'type': 'Ready', 'status': 'True' if ready else 'False'},
            ],
            'containerStatuses': [{
                'name': container['name'], 'image': container.get('image', ''), 'imageID': '', 'ready': ready,
                'started': 'running' in state, 'restartCount': entry.restarts, 'state': state,
                **({'lastState': entry.last_state} if entry.last_state else {}),
            }],
        }
        fingerprint = json.dumps([phase, state, ready, entry.restarts], sort_keys=True)
        if fingerprint == entry.reported:
            return  # the kubelet writes status on change only
        namespace, name = pod['metadata']['namespace'], pod['metadata']['name']
        reply = self.rest.patch(f'/api/v1/namespaces/{namespace}/pods/{name}/status', {'status': status})
        if reply.status == 200:
            entry.reported = fingerprint
            entry.pod = reply.body

    # ------------------------------------------------------------ volumes and DNS

    def _configmaps(self, pod: dict) -> dict[str, dict[str, str]]:
        wanted = set()
        for volume in pod['spec'].get('volumes') or []:
            if 'configMap' in volume:
                wanted.add(volume['configMap']['name'])
        for container in pod['spec'].get('containers') or []:
            wanted |= {s['configMapRef']['name'] for s in container.get('envFrom') or [] if 'configMapRef' in s}
            wanted |= {e['valueFrom']['configMapKeyRef']['name'] for e in container.get('env') or []
                       if 'configMapKeyRef' in (e.get('valueFrom') or {})}
        found = {}
        for name in wanted:
            reply = self.rest.get(f'/api/v1/namespaces/{pod["metadata"]["namespace"]}/configmaps/{name}')
            if reply.status == 200:
                found[name] = dict(reply.body.get('data') or {})
        return found

    def _claim_dir(self, namespace: str, claim: str) -> str:
        if self.rest.get(f'/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}').status != 200:
            raise sandbox.LocalRunError(f'persistentvolumeclaim "{claim}" not found')
        path = self.workdir / 'claims' / namespace / claim
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _resolver(self, namespace: str):
        services = self.rest.get(f'/api/v1/namespaces/{namespace}/services').body['items']
        pods = self.rest.get(f'/api/v1/namespaces/{namespace}/pods').body['items']
        with self.lock:
            addresses = {e.pod['metadata']['uid']: e.ip for e in self.pods.values()}
        dns_pods = [runner.DNSPod(p, p.get('status', {}).get('podIP') or addresses.get(p['metadata']['uid'], ''),
                                    _ready(p)) for p in pods if not p['metadata'].get('deletionTimestamp')]
        records = runner.dns_records(services, [p for p in dns_pods if p.ip])

        def resolve(name: str) -> str:
            address = runner.resolve(name, records, namespace)
            if address is None:
                raise NameNotResolvable(name)
            return address
        return resolve


def _in_own_network(pod: dict, ip: str) -> dict:
    """The pod as its own network namespace would see it: binding 0.0.0.0 means binding the pod's address."""
    pod = json.loads(json.dumps(pod))
    for container in pod['spec'].get('containers') or []:
        for env in container.get('env') or []:
            if env.get('value') == '0.0.0.0':
                env['value'] = ip
    return pod


def _log_server(directory: pathlib.Path) -> http.server.ThreadingHTTPServer:
    """The kubelet's containerLogs endpoint, which the API server proxies `kubectl logs` to."""
    class Logs(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            parts = url.path.strip('/').split('/')
            path = directory / f'{parts[1]}_{parts[2]}.log' if len(parts) == 4 and parts[0] == 'containerLogs' else None
            if path is None or not path.exists():
                self.send_error(400, f'container "{parts[-1]}" in pod "{parts[-2]}" is waiting to start: ContainerCreating')
                return
            lines = path.read_text(errors='replace').splitlines(keepends=True)
            tail = urllib.parse.parse_qs(url.query).get('tailLines')
            body = ''.join(lines[-int(tail[0]):] if tail else lines).encode()
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass  # the test output is not the place for access logs

    return http.server.ThreadingHTTPServer(('127.0.0.1', 0), Logs)


def in_own_network_namespace(pod: dict, ip: str) -> dict:
    """Pods here share the host's network, so the wildcard a pod binds (0.0.0.0 in an env value) becomes its own IP, as its namespace makes it."""
    containers = [{**c, 'env': [{**e, 'value': ip} if e.get('value') == '0.0.0.0' else e for e in c.get('env') or []]}
                  for c in pod['spec'].get('containers') or []]
    return {**pod, 'spec': {**pod['spec'], 'containers': containers}}


def _ready(pod: dict) -> bool:
    return any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in pod.get('status', {}).get('conditions') or [])


def _iso(moment: float) -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(moment))
