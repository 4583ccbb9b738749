"""`H3Request`: one request's ASGI cycle on a QUIC stream.

The connection (`airlane.transports.http.h3.protocol`) hands each request its body as it arrives
(`data`) and tells it when the stream or the connection goes (`gone`); the application reads
with `receive` and answers with `send`. A response's head goes out with its first body (or its
end), and every body is written to the stream at once; when the stream holds more than
``max_buffered_bytes`` that the peer has not acknowledged, `send` waits until the connection
says it has drained (`H3Writer.drained`), so a slow or lossy reader slows its own stream only.
Once the client has gone, what the application sends is dropped, as on the HTTP/1.1 server;
it learns of the departure from ``http.disconnect``.

The request body is buffered as it arrives (QUIC's stream window bounds what a peer may send
ahead), up to ``max_body_bytes`` plus one window: past that the stream is stopped, and the
application, reading on, meets its own body limit.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

__all__ = ["H3Request", "H3Writer"]

# Fields of HTTP/1.1 connections that HTTP/3 forbids in a message (RFC 9114 4.2).
_CONNECTION_FIELDS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)


class H3Writer(Protocol):
    """What a request writes through: its connection."""

    def send_head(self, stream_id: int, headers: list[tuple[bytes, bytes]], end: bool) -> None:
        """Send a response's head (``:status`` first) on ``stream_id``."""

    def send_body(self, stream_id: int, data: bytes, end: bool) -> None:
        """Send response body bytes on ``stream_id``."""

    def drained(self, stream_id: int) -> Awaitable[None] | None:
        """None if ``stream_id`` may take more now; else what to wait on before it does."""

    def stop_reading(self, stream_id: int) -> None:
        """Ask the peer to stop sending on ``stream_id`` (its body is not wanted)."""


class H3Request:
    """One request (see the module docstring)."""

    def __init__(
        self, writer: H3Writer, stream_id: int, scope: dict[str, Any], max_body_bytes: int
    ) -> None:
        self.writer = writer
        self.stream_id = stream_id
        self.scope = scope
        self._max_buffered = max_body_bytes
        self._body: deque[bytes] = deque()
        self._buffered = 0
        self._body_ended = False
        self._body_read = False  # the last ``http.request`` went to the application
        self._arrived = asyncio.Event()
        self._gone = False
        self._status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self.head_sent = False
        """True once the response's head went out."""
        self.finished = False
        """True once the response's end went out."""

    # -- from the connection ----------------------------------------------------------------

    def data(self, data: bytes, ended: bool) -> None:
        """Body bytes arrived (``ended``: the last)."""
        if self._buffered <= self._max_buffered:
            if data:
                self._body.append(data)
                self._buffered += len(data)
            if self._buffered > self._max_buffered and not ended:
                self.writer.stop_reading(self.stream_id)  # enough to trip the app's limit
                ended = True
        self._body_ended = self._body_ended or ended
        self._arrived.set()

    def gone(self) -> None:
        """The peer reset the stream, or the connection closed: the client has gone."""
        self._gone = True
        self._arrived.set()

    # -- ASGI -------------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        """The next ASGI message: the body as it came, then ``http.disconnect`` once the client
        has gone (or the response is done)."""
        while not self._body_read:
            if self._body:
                chunk = self._body.popleft()
                self._buffered -= len(chunk)
                last = self._body_ended and not self._body
                self._body_read = last
                return {"type": "http.request", "body": chunk, "more_body": not last}
            if self._body_ended:
                self._body_read = True
                return {"type": "http.request", "body": b"", "more_body": False}
            if self._gone:
                break
            self._arrived.clear()
            await self._arrived.wait()
        while not (self._gone or self.finished):
            self._arrived.clear()
            await self._arrived.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        """Take the application's ``http.response.start`` and ``http.response.body``."""
        kind = message["type"]
        if self._gone:
            # As the HTTP/1.1 server does: what is sent after the client went is dropped, and
            # the application learns of it from ``http.disconnect``.
            return
        if kind == "http.response.start":
            if self._status is not None:
                raise RuntimeError("http.response.start sent twice")
            self._status = int(message["status"])
            self._headers = [
                (bytes(name).lower(), bytes(value))
                for name, value in message.get("headers", ())
                if bytes(name).lower() not in _CONNECTION_FIELDS
            ]
            return
        if kind != "http.response.body":
            return  # trailers and extensions this server does not offer
        if self._status is None:
            raise RuntimeError("http.response.body before http.response.start")
        if self.finished:
            raise RuntimeError("http.response.body after the response's end")
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if not self.head_sent:
            self.head_sent = True
            head = [(b":status", b"%d" % self._status), *self._headers]
            self.writer.send_head(self.stream_id, head, end=not body and not more)
            if not body and not more:
                self._finish()
                return
        if body or not more:
            self.writer.send_body(self.stream_id, body, end=not more)
        if not more:
            self._finish()
            return
        waiting = self.writer.drained(self.stream_id)
        if waiting is not None:
            await waiting

    def _finish(self) -> None:
        self.finished = True
        self._arrived.set()

    async def run(self, app: Callable[..., Awaitable[None]]) -> None:
        """Run ``app`` on this request; answer 500 for an application that failed before its
        response began, and end the stream of one that returned without ending it."""
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            if self._gone:
                return
            if not self.head_sent:
                self._status, self._headers = 500, [(b"content-type", b"text/plain")]
                await self.send({"type": "http.response.body", "body": b"Internal Server Error"})
                return
            raise
        if not self.finished and not self._gone:
            if not self.head_sent and self._status is None:
                self._status = 500
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
