"""A fault-injecting TCP proxy to put between a client (the operator) and the API stand-in.

Faults a real network gives, which a clean close does not:

- `partition()`: every flow goes silent, open ones and new ones, with no FIN and no RST. Bytes
  either way are swallowed; the client's sockets stay ESTABLISHED, as when the API host dies or
  a middlebox drops the flow's state (a half-open connection). New connections are accepted and
  then ignored: the client's connect succeeds and its request is never answered.
- `heal()`: new connections flow again. Flows opened before stay silent for good: the middlebox
  that forgot them drops their packets still, and only a client-side timeout ends them.
- `down()`: the API host is down and says so: every flow is reset (RST), open ones and new ones,
  until `up()`.

`flows` and `silenced` count what happened, so a test can tell its fault actually bit.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Self


class FaultProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.port: int | None = None
        self.flows = 0  # connections accepted
        self.silenced = 0  # flows a partition made silent
        self._partitioned = False
        self._down = False
        self._live: set[_Flow] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}'

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, name='fault-proxy', daemon=True)
        self._thread.start()
        self._ready.wait(60)  # returns once it listens
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def partition(self) -> None:
        """Every flow, open or new, goes silent without a FIN or RST (see the module docstring)."""
        def cut() -> None:
            self._partitioned = True
            for flow in self._live:
                if not flow.silent:
                    flow.silent = True
                    self.silenced += 1
        self._call(cut)

    def down(self) -> None:
        """Every flow, open or new, is reset, until `up()`."""
        def reset() -> None:
            self._down = True
            for flow in list(self._live):
                flow.reset()
        self._call(reset)

    def up(self) -> None:
        self._call(lambda: setattr(self, '_down', False))

    def heal(self) -> None:
        """New flows pass again; those a partition silenced stay silent."""
        self._call(lambda: setattr(self, '_partitioned', False))

    def _call(self, fn) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        done.wait(60)  # returns once the proxy's loop has run it: a partition is in force when partition() returns

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, '127.0.0.1', 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            for flow in list(self._live):
                flow.close()
            self._server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.flows += 1
        flow = _Flow(client_writer)
        self._live.add(flow)
        try:
            if self._down:
                flow.reset()
                return
            if self._partitioned:  # accepted, then never answered: the request goes nowhere
                flow.silent = True
                self.silenced += 1
                await _drain_forever(client_reader)
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            flow.upstream = upstream_writer
            await asyncio.gather(_pump(client_reader, upstream_writer, flow), _pump(upstream_reader, client_writer, flow))
        finally:
            if not flow.silent:  # a silent flow is never closed by the proxy: that is the fault
                flow.close()
                self._live.discard(flow)


class _Flow:
    def __init__(self, client: asyncio.StreamWriter):
        self.client, self.upstream, self.silent = client, None, False

    def reset(self) -> None:
        """Close with an RST (SO_LINGER 0), as a host that lost the connection answers."""
        sock = self.client.get_extra_info('socket')
        with contextlib.suppress(OSError):
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        self.close()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: _Flow) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            if flow.silent:
                continue  # swallowed: neither delivered nor refused
            writer.write(data)
            await writer.drain()
    if flow.silent:
        await asyncio.Event().wait()  # a peer's FIN is swallowed too: the other side never hears of it
    with contextlib.suppress(Exception):
        writer.write_eof()


async def _drain_forever(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(65536):
            pass
    await asyncio.Event().wait()
