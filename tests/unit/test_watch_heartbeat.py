"""The operator's sign of life (handlers.WatchHeartbeat) outlives whatever a watch brings: it must, since
/healthz fails on its silence and the kubelet then restarts the operator for being blind."""
import asyncio

from kuberl.operator.config import WatchBounds
from kuberl.operator.handlers import WatchHeartbeat


class Api:
    """A watch that brings lines no API server sends (a list, an object that is not one), then ends."""

    def __init__(self):
        self.watches = 0

    async def call(self, *args, **kwargs):
        return {'metadata': {'resourceVersion': '7'}}

    async def watch_lines(self, *args, **kwargs):
        self.watches += 1
        for line in (b'', b'[1, 2]', b'{"type": "BOOKMARK", "object": ["not", "an", "object"]}'):
            yield line


def test_a_watch_line_of_the_wrong_shape_does_not_end_the_heartbeat():
    async def run() -> tuple[Api, asyncio.Task]:
        api, heartbeat = Api(), WatchHeartbeat(WatchBounds(1))
        task = asyncio.create_task(heartbeat.run(api, (None,)))
        await asyncio.sleep(2.5)
        return api, task

    async def main():
        api, task = await run()
        done = task.done()
        task.cancel()
        return api, done, (task.exception() if done and not task.cancelled() else None)

    api, done, error = asyncio.run(main())
    assert not done, f'the heartbeat ended: {error!r}'
    assert api.watches >= 2, 'it watched again after the odd lines'
