"""Stand-in latency: `python -m tests.support.bench` (requests must not slow down as a test goes on)."""
import statistics
import time

from tests.support.apiserver import StandinServer
from tests.support.rest import Rest

PODS = '/api/v1/namespaces/default/pods'


def pod(index: int) -> dict:
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': f'p{index}', 'labels': {'shard': str(index % 10)}},
            'spec': {'containers': [{'name': 'main', 'image': 'busybox:1'}]}}


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main(count: int = 2000) -> None:
    with StandinServer() as server:
        rest = Rest(server.url)
        creates = [timed(lambda i=i: rest.post(PODS, pod(i))) for i in range(count)]
        patches = [timed(lambda i=i: rest.patch(f'{PODS}/p{i}/status', {'status': {'phase': 'Running'}})) for i in range(300)]
        gets = [timed(lambda i=i: rest.get(f'{PODS}/p{i}')) for i in range(300)]
        listing = timed(lambda: rest.get(f'{PODS}?labelSelector=shard%3D3'))
        print(f'create: first 100 {statistics.mean(creates[:100]):.2f} ms, last 100 {statistics.mean(creates[-100:]):.2f} ms '
              f'({count} pods); status patch {statistics.mean(patches):.2f} ms; get {statistics.mean(gets):.2f} ms; '
              f'list {count} pods by label {listing:.1f} ms; requests kept {len(server.handler._requests)}')


if __name__ == '__main__':
    main()
