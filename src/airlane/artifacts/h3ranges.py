"""Byte ranges over HTTP/3: the pull's data plane on QUIC, for lossy links.

Over TCP each pull worker holds its own connection (`ranges.RangeConnection`), and a lost
packet stalls everything behind it on that connection. Over HTTP/3 the workers share one QUIC
connection (`H3Ranges`), each range on a stream of its own: a loss delays only the range it hit,
the congestion controller (`airlane.wire.bbr`) does not take random loss for congestion, and
the connection survives a change of the client's address.

The pull's workers are threads that read exact-size pieces (`Body.read_into`); the QUIC
connection lives on the event loop. `H3RangeConnection` gives a worker the same interface as
`RangeConnection` and crosses over to the loop for each request and each batch of body bytes
(everything queued so far, so a crossing costs one per arrival burst, not per packet). A lost
connection is an `OSError` to the worker (retried, as over TCP), and the next request opens a
new connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from airlane.artifacts.errors import ArtifactError
from airlane.artifacts.ranges import ShortBody
from airlane.client.errors import ClientError
from airlane.client.h3 import H3Client, H3Response

__all__ = ["H3RangeConnection", "H3Ranges"]

T = TypeVar("T")


class H3Ranges:
    """One HTTP/3 connection to the host of ``base_url`` (UDP, on its port), shared by a
    pull's workers; reopened when lost. Made and closed on the event loop."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        *,
        cafile: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ArtifactError(f"{base_url!r} is not an http:// or https:// URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.headers = [(name.lower(), value) for name, value in (headers or {}).items()]
        self.timeout_s = timeout_s
        self.cafile = cafile
        """The CA to verify the gateway's certificate with; None trusts any (the pull still
        checks every chunk's hash, and the manifest's signature when given a key)."""
        self.connections = 0
        """QUIC connections opened (more than one: a connection was lost and reopened)."""
        self._client: H3Client | None = None
        self._opening = asyncio.Lock()
        self._loop = asyncio.get_running_loop()

    async def get(self, target: str, byte_range: tuple[int, int] | None = None) -> H3Response:
        """GET ``target`` (a path), for bytes ``[start, end)`` when ``byte_range`` is given;
        `ConnectionError` when the connection is lost."""
        headers = list(self.headers)
        if byte_range is not None:
            headers.append(("range", f"bytes={byte_range[0]}-{byte_range[1] - 1}"))
        client = await self._connected()
        try:
            async with asyncio.timeout(self.timeout_s):
                return await client.request("GET", target, headers=headers)
        except (ClientError, TimeoutError) as exc:
            raise ConnectionError(f"HTTP/3 to {self.host}:{self.port}: {exc}") from None

    async def _connected(self) -> H3Client:
        async with self._opening:
            if self._client is not None and self._client.lost:
                await self._client.aclose()
                self._client = None
            if self._client is None:
                try:
                    self._client = await H3Client.connect(
                        self.host,
                        self.port,
                        verify=self.cafile is not None,
                        cafile=self.cafile,
                        timeout_s=self.timeout_s,
                    )
                except ClientError as exc:
                    raise ConnectionError(str(exc)) from None
                self.connections += 1
            return self._client

    def stop(self, response: H3Response) -> None:
        """Stop reading ``response`` (its bytes are not wanted any more)."""
        if self._client is not None:
            self._client.stop(response)

    def connection(self) -> H3RangeConnection:
        """A worker thread's handle (the interface of `RangeConnection`)."""
        return H3RangeConnection(self, self._loop)

    async def aclose(self) -> None:
        """Close the connection."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


class H3RangeConnection:
    """`RangeConnection`'s interface for one worker thread, over the shared `H3Ranges`."""

    def __init__(self, ranges: H3Ranges, loop: asyncio.AbstractEventLoop) -> None:
        self._ranges = ranges
        self._loop = loop
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self._reading: H3Response | None = None

    def get(
        self, target: str, byte_range: tuple[int, int] | None = None
    ) -> tuple[int, dict[str, str], H3Body]:
        """GET ``target`` for bytes ``[start, end)``: status, headers, body."""
        self.close()
        response = self._call(self._ranges.get(target, byte_range))
        self._reading = response
        return response.status, dict(response.headers), H3Body(self, response)

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for it here (bounded by the timeout)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        with self._lock:
            self._pending.add(future)
        try:
            return future.result(self._ranges.timeout_s)
        except concurrent.futures.CancelledError:
            raise ConnectionAbortedError("the pull is stopping") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {self._ranges.timeout_s} s") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def close(self) -> None:
        """Stop the response being read, if any (the connection is shared and stays)."""
        response, self._reading = self._reading, None
        if response is not None and not response.over:
            self._loop.call_soon_threadsafe(self._ranges.stop, response)

    def abort(self) -> None:
        """From any thread: make a blocked `get` or read end now."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()


class H3Body:
    """A response body read in exact-size pieces, from a worker thread."""

    def __init__(self, connection: H3RangeConnection, response: H3Response) -> None:
        self._connection = connection
        self._response = response
        self._held = memoryview(b"")

    def read_into(self, buffer: memoryview) -> None:
        """Fill ``buffer`` completely; `ShortBody` if the body ends first."""
        filled = 0
        while filled < len(buffer):
            if not self._held:
                more = self._connection._call(self._next())
                if not more:
                    raise ShortBody(f"the body ended {len(buffer) - filled} bytes short")
                self._held = memoryview(more)
            take = min(len(self._held), len(buffer) - filled)
            buffer[filled : filled + take] = self._held[:take]
            self._held = self._held[take:]
            filled += take

    def drain(self) -> None:
        """Read what is left."""
        self._held = memoryview(b"")
        while self._connection._call(self._next()):
            pass

    async def _next(self) -> bytes:
        """The body bytes that have arrived (waiting for some), b"" at its end; a lost stream
        or connection is a `ConnectionError`."""
        try:
            return await self._response.receive()
        except ClientError as exc:
            raise ConnectionError(str(exc)) from None
