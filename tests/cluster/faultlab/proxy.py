"""A TCP relay between one gateway node and the broker that the lab can cut: a partition.

It runs its own event loop in a thread, so that whatever the driver blocks on (starting a
process, a slow check) never stalls the nodes' broker traffic. Cut, it drops every relayed
connection and refuses new ones (accepted and closed at once, as a firewall that resets would);
healed, it relays again, and the node's NATS client reconnects by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

__all__ = ["Partition"]

CHUNK = 64 * 1024


class Partition:
    """Relays ``127.0.0.1:port`` to the broker's port until `cut`; see the module docstring."""

    def __init__(self, broker_port: int) -> None:
        self.broker_port = broker_port
        self.port = 0
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        """Listen on a free port (`port`) and relay from now on."""
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        """Drop every relayed connection; refuse new ones until `heal`."""
        self._call(self._set_cut(True))

    def heal(self) -> None:
        """Relay again."""
        self._call(self._set_cut(False))

    @property
    def is_cut(self) -> bool:
        return self._cut

    def close(self) -> None:
        """Stop relaying and the thread."""
        if self._server is not None:
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _set_cut(self, cut: bool) -> None:
        self._cut = cut
        if cut:
            for writer in list(self._writers):
                writer.transport.abort()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._set_cut(True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        except OSError:  # the broker is down: the node sees a refused connection
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}
            for w in (writer, up_writer):
                w.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
