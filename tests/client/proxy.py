"""A TCP proxy that can cut connections: real dropped connections between a client and a real
gateway, for resume tests.

``cut_after = N`` makes the next proxied connection forward N bytes from the gateway and then
abort both sides, as a network failure would (no FIN, no final chunk). Later connections pass
untouched unless ``cut_after`` is set again.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class TcpProxy:
    """``async with TcpProxy(gateway_url) as proxy:`` then use ``proxy.url``."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.cut_after: int | None = None
        self.connections = 0
        self.cuts = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.wait_closed()

    def sever(self) -> None:
        """Abort every open connection now."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        budget, self.cut_after = self.cut_after, None
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}
        pair = (writer, up_writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, None, pair),
                self._pipe(up_reader, writer, budget, pair),
            )
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            for w in pair:
                w.transport.abort()
                self._writers.discard(w)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        budget: int | None,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        while data := await reader.read(65536):
            if budget is not None and len(data) >= budget:
                writer.write(data[:budget])
                await writer.drain()
                self.cuts += 1
                for w in pair:
                    w.transport.abort()
                return
            if budget is not None:
                budget -= len(data)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
