"""Which Python Kubernetes client for the operator's own calls (a report, not a test): bursts of
concurrent pod creates against the API stand-in (in its own process), by kubernetes_asyncio on the
event loop, as `kuberl.operator.kubeapi` makes them, and by the sync `kubernetes` client in a thread pool.

    .venv/bin/python -m tests.operator.bench_kubeclient [--burst 16] [--rounds 20]

Prints per client: median and p90 wall time of one burst, and this process's CPU per create (the
operator's own cost; the stand-in's is in its own process).
"""
import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

NS = 'default'


def pod(name: str) -> dict:
    """About the size of a rendered trainer pod: env contract, resources, probes, security context."""
    env = [{'name': f'KUBERL_VAR_{i}', 'value': f'value-{i}-' + 'x' * 20} for i in range(24)]
    return {'apiVersion': 'v1', 'kind': 'Pod',
            'metadata': {'name': name, 'namespace': NS, 'labels': {'kuberl.dev/job': 'bench', 'kuberl.dev/rank': '0'},
                         'annotations': {'kuberl.dev/config-hash': 'a' * 64}},
            'spec': {'restartPolicy': 'Never', 'hostname': name, 'subdomain': 'bench-workers',
                     'securityContext': {'runAsNonRoot': True, 'runAsUser': 65532, 'seccompProfile': {'type': 'RuntimeDefault'}},
                     'containers': [{'name': 'trainer', 'image': 'registry.test/kuberl/trainer:ci', 'env': env,
                                     'command': ['python', '-m', 'kuberl_trainer', '--config', '/etc/kuberl/config.json'],
                                     'resources': {'requests': {'cpu': '1', 'memory': '1Gi'}, 'limits': {'cpu': '1', 'memory': '1Gi'}},
                                     'ports': [{'name': 'metrics', 'containerPort': 9090}],
                                     'securityContext': {'allowPrivilegeEscalation': False, 'capabilities': {'drop': ['ALL']}},
                                     'volumeMounts': [{'name': 'config', 'mountPath': '/etc/kuberl'}]}],
                     'volumes': [{'name': 'config', 'configMap': {'name': 'bench-config'}}]}}


def report(label: str, walls: list[float], cpu: float, creates: int) -> None:
    walls = sorted(walls)
    print(f'{label:<52} burst median {1000 * statistics.median(walls):6.1f} ms, p90 {1000 * walls[int(0.9 * (len(walls) - 1))]:6.1f} ms, '
          f'client CPU {1000 * cpu / creates:5.2f} ms per create')


class AsyncioClient:
    """kuberl.operator.kubeapi as the operator runs it: kubernetes_asyncio's ApiClient on one event loop."""

    label = 'kubernetes_asyncio, event loop'

    def __init__(self, burst: int):
        import kopf
        from kuberl.operator import kubeapi
        from kuberl.operator.metrics import OperatorMetrics

        self.burst, self.loop = burst, asyncio.new_event_loop()
        self.connection = kubeapi.Connection()
        self.api = kubeapi.KubeApi(kopf.OperatorSettings(), logging.getLogger('bench'), OperatorMetrics(), self.connection)

    def create_burst(self, prefix: str) -> None:
        async def burst():
            await asyncio.gather(*(self.api.create(pod(f'{prefix}-{i}')) for i in range(self.burst)))
        self.loop.run_until_complete(burst())

    def close(self) -> None:
        self.loop.run_until_complete(self.connection.close())
        self.loop.close()


class ThreadPoolClient:
    """The sync `kubernetes` client, one thread per concurrent create."""

    def __init__(self, burst: int, typed: bool, threads: int | None = None):
        import kubernetes

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(client_configuration=configuration)
        configuration.connection_pool_maxsize = burst  # one connection per thread, as the event loop gets
        self.client = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.burst, self.typed = burst, typed
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads or burst)
        self.label = f'kubernetes (sync), {"typed" if typed else "generic call_api"}, {threads or burst} threads'

    def create(self, name: str) -> object:
        if self.typed:
            return self.core.create_namespaced_pod(NS, pod(name))
        request = self.client.param_serialize('POST', f'/api/v1/namespaces/{NS}/pods', body=pod(name), auth_settings=['BearerToken'],
                                              header_params={'Content-Type': 'application/json', 'Accept': 'application/json'})
        response = self.client.call_api(*request)
        response.read()
        assert response.status == 201, response.data
        return json.loads(response.data)

    def create_burst(self, prefix: str) -> None:
        list(self.pool.map(self.create, [f'{prefix}-{i}' for i in range(self.burst)]))

    def close(self) -> None:
        self.pool.shutdown()
        self.client.close()


def bench(burst: int, rounds: int) -> None:
    """Round-robin, one burst per client per round: the load of a shared machine falls on all alike."""
    default_executor = min(32, (os.cpu_count() or 1) + 4)  # asyncio.to_thread's pool size
    clients = [AsyncioClient(burst), ThreadPoolClient(burst, typed=False), ThreadPoolClient(burst, typed=True),
               ThreadPoolClient(burst, typed=False, threads=default_executor)]
    walls: dict[int, list[float]] = {i: [] for i in range(len(clients))}
    cpu: dict[int, float] = dict.fromkeys(walls, 0.0)
    for i, client in enumerate(clients):
        client.create_burst(f'warm-{i}')  # login, connections
    for r in range(rounds):
        for i, client in enumerate(clients):
            started, started_cpu = time.perf_counter(), time.process_time()
            client.create_burst(f'c{i}-r{r}')
            walls[i].append(time.perf_counter() - started)
            cpu[i] += time.process_time() - started_cpu
    for i, client in enumerate(clients):
        report(f'{client.label} ({burst} at once)', walls[i], cpu[i], burst * rounds)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--burst', type=int, default=16)
    parser.add_argument('--rounds', type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        standin = subprocess.Popen([sys.executable, '-m', 'tests.support', '--workdir', tmp], stdout=subprocess.PIPE, text=True)
        try:
            line = standin.stdout.readline()
            os.environ['KUBECONFIG'] = re.search(r'KUBECONFIG=(\S+)', line).group(1)
            print(f'{args.burst} concurrent pod creates x {args.rounds} rounds, {os.cpu_count()} cores, stand-in in its own process')
            bench(args.burst, args.rounds)
        finally:
            standin.terminate()
            standin.wait(10)


if __name__ == '__main__':
    main()
