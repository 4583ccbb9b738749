"""`RequestCycle`: one HTTP/1.1 request and its response, as ASGI ``receive`` and ``send``;
and `BodyWriter`, the ``airlane.http.write_body`` extension's call.

``receive`` hands the application the request body as it arrives, in the pieces the parser
produced (joined when several are waiting), then ``http.disconnect`` once the response is
complete or the client has gone. The connection stops reading while more than
`ServerSettings.body_high_water` bytes wait for an application that does not read, and reads
again when it does. ``Expect: 100-continue`` is answered when the application first asks for
the body, and never when it answers without reading it.

``send`` writes the response head when ``http.response.start`` comes (with ``date``,
``transfer-encoding: chunked`` when the application gave no ``content-length``, and
``connection: close`` when the connection will close), and each body part as it comes: a
``content-length`` body as it is, anything else in chunks. HEAD, 204 and 304 responses
carry no body (what the application sends for them is dropped). Neither call suspends unless
it must: ``send`` waits only while the transport's buffer is over its high-water mark
(`WriteFlow`), so a caller driving it by hand (`airlane.transports.http.send_now`) usually
finishes it in place. After the client has gone, ``send`` drops what it is given.

`BodyWriter.write` is the same write as a plain call, for one chunk of a started chunked
body: it checks one flag the cycle keeps (`RequestCycle.direct`: started, chunked, not
complete, the client there, writes not paused) and writes, or says it did not.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING, Any

from airlane.transports.http.asgi import ASGIApp, Scope
from airlane.transports.http.server.state import log
from airlane.transports.http.server.status import (
    INVALID_HEADER_NAME,
    INVALID_HEADER_VALUE,
    plain_response,
    status_line,
)

if TYPE_CHECKING:
    from airlane.transports.http.http_protocol import HttpProtocol

__all__ = ["BodyWriter", "RequestCycle"]

# How the response body goes out.
_CHUNKED = 1  # transfer-encoding: chunked
_LENGTH = 2  # content-length, as it is
_UNTIL_CLOSE = 3  # HTTP/1.0 without a length: as it is, the end is the connection's close
_NONE = 4  # HEAD, 1xx, 204, 304: no body at all

_NO_BODY_STATUS = frozenset({204, 304})
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_CHUNKED_HEADER = b"transfer-encoding: chunked\r\n"
_CLOSE_HEADER = b"connection: close\r\n"


class RequestCycle:
    """The ASGI side of one request on an `HttpProtocol` connection."""

    __slots__ = (
        "__weakref__",
        "_chunks",
        "_length",
        "_mode",
        "_waiter",
        "buffered",
        "connection",
        "direct",
        "disconnected",
        "keep_alive",
        "more_body",
        "received",
        "request_ended",
        "response_complete",
        "response_started",
        "scope",
        "transport",
        "wants_continue",
    )

    def __init__(
        self,
        connection: HttpProtocol,
        scope: Scope,
        *,
        keep_alive: bool,
        wants_continue: bool,
    ) -> None:
        self.connection = connection
        self.transport = connection.transport
        self.scope = scope
        self.keep_alive = keep_alive
        """The connection stays open after this response (cleared by the request, the
        response, or a shutdown)."""
        self.wants_continue = wants_continue
        """``Expect: 100-continue`` is still to be answered."""
        # The request body: pieces not yet received by the application, and their size.
        self._chunks: list[bytes] = []
        self.buffered = 0
        self.more_body = True
        """The parser has not seen the end of the request yet."""
        self.request_ended = False
        """The application has received the last of the request."""
        self.received = False
        """The application has received some of the body (or its end)."""
        self.disconnected = False
        """The client has gone."""
        self.response_started = False
        self.response_complete = False
        self.direct = False
        """`BodyWriter.write` may write now: a started chunked response that is not
        complete, its client there, writes not paused."""
        self._mode = _CHUNKED
        self._length = 0
        self._waiter: asyncio.Future[None] | None = None

    # -- the connection's side ---------------------------------------------------------------

    def feed(self, body: bytes) -> None:
        """A piece of the request body arrived."""
        self._chunks.append(body)
        self.buffered += len(body)
        self._wake()

    def end_of_request(self) -> None:
        """The parser reached the end of the request."""
        self.more_body = False
        self._wake()

    def lost(self) -> None:
        """The client went away."""
        self.disconnected = True
        self.direct = False
        self._wake()

    def writes_paused(self, paused: bool) -> None:
        """The transport's buffer went over its high-water mark (or back under it)."""
        self.direct = (
            not paused
            and self._mode == _CHUNKED
            and self.response_started
            and not self.response_complete
            and not self.disconnected
        )

    async def run(self, app: ASGIApp) -> None:
        """Run the application for this request; answer for it when it fails (500 if it had
        not started its response, else the connection closes: a response cut short must not
        look whole)."""
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            # Cancelled by the server (shutdown past its grace, or the client long gone).
            if not self.disconnected:
                self._abandon(503, "the server is shutting down")
            raise
        except Exception as exc:
            log.error("%s: the application failed", self._describe(), exc_info=exc)
            self._abandon(500, "Internal Server Error")
        else:
            if not self.response_complete and not self.disconnected:
                what = "completing" if self.response_started else "starting"
                log.error(
                    "%s: the application returned without %s its response", self._describe(), what
                )
                self._abandon(500, "Internal Server Error")

    async def whole_body(self) -> bytes | None:
        """The request's body once all of it has arrived, left for the application to
        receive; None where the client went away first or the application took some of it.
        (For a body the caller knows to be small: it is held here meanwhile.)"""
        while self.more_body and not self.disconnected and not self.received:
            self.connection.body_wanted()
            await self._news()
        if self.disconnected or self.received:
            return None
        return b"".join(self._chunks)

    # -- ASGI --------------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        """The next ``http.request`` part of the body, or ``http.disconnect``."""
        if self.wants_continue:
            self.wants_continue = False
            if not self.response_started and not self.disconnected:
                self.transport.write(_CONTINUE)
        while True:
            if self.disconnected or self.response_complete:
                return {"type": "http.disconnect"}
            if not self.request_ended and (self._chunks or not self.more_body):
                chunks, self._chunks = self._chunks, []
                self.buffered = 0
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self.request_ended = not self.more_body
                self.received = True
                self.connection.body_taken()
                return {"type": "http.request", "body": body, "more_body": self.more_body}
            if not self.request_ended:
                self.connection.body_wanted()
            await self._news()

    async def send(self, message: Any) -> None:
        """Write ``http.response.start`` or an ``http.response.body`` part."""
        flow = self.connection.flow
        if flow.paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if self.response_started:
            if kind != "http.response.body" or self.response_complete:
                raise RuntimeError(f"unexpected ASGI message {kind!r}: the response has been sent")
            self._body(message.get("body", b""), message.get("more_body", False))
        elif kind == "http.response.start":
            self._start(message)
        else:
            raise RuntimeError(f"expected ASGI message 'http.response.start', not {kind!r}")

    # -- the response ------------------------------------------------------------------------

    def _start(self, message: Any) -> None:
        status = message["status"]
        scope = self.scope
        # A request whose body has not all arrived leaves the connection in an unknown state
        # (a 100-continue client may never send it): the connection closes after this.
        close = not self.keep_alive or self.more_body or self.connection.stopping
        parts = [status_line(status), self.connection.date(), self.connection.alt_svc()]
        length: int | None = None
        chunked = named_close = False
        for name, value in message.get("headers") or ():
            if INVALID_HEADER_NAME(name) or INVALID_HEADER_VALUE(value):
                raise RuntimeError(f"invalid response header {name!r}: {value!r}")
            name = name.lower()  # noqa: PLW2901 - written lower-cased
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection" and b"close" in value.lower():
                close = named_close = True
            parts += (name, b": ", value, b"\r\n")
        if scope["method"] == "HEAD" or status < 200 or status in _NO_BODY_STATUS:
            mode = _NONE
        elif chunked:
            mode = _CHUNKED
        elif length is not None:
            mode = _LENGTH
            self._length = length
        elif scope["http_version"] == "1.0":
            mode = _UNTIL_CLOSE  # an HTTP/1.0 client knows no chunks
            close = True
        else:
            mode = _CHUNKED
            parts.append(_CHUNKED_HEADER)
        if close and not named_close:
            parts.append(_CLOSE_HEADER)
        parts.append(b"\r\n")
        self.keep_alive = not close
        self._mode = mode
        self.response_started = True
        self.wants_continue = False
        self.transport.write(b"".join(parts))
        self.direct = mode == _CHUNKED and not self.connection.flow.paused
        if mode in (_CHUNKED, _UNTIL_CLOSE):
            self.connection.streaming()

    def _body(self, body: bytes, more: bool) -> None:
        mode = self._mode
        if mode == _CHUNKED:
            if more:
                if body:
                    self.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
                return
            self.transport.write(
                b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else _LAST_CHUNK
            )
        elif mode == _LENGTH:
            size = len(body)
            if size > self._length:
                raise RuntimeError("the response body is longer than its content-length")
            self._length -= size
            if body:
                self.transport.write(body)
            if more:
                return
            if self._length:
                raise RuntimeError("the response body is shorter than its content-length")
        elif mode == _UNTIL_CLOSE:
            if body:
                self.transport.write(body)
            if more:
                return
        elif more:
            return
        self.response_complete = True
        self.direct = False
        self._wake()
        self.connection.response_complete(self)

    def _abandon(self, status: int, text: str) -> None:
        """The application will not finish this response: answer ``status`` if nothing was
        sent yet, else close the connection (the response is cut short)."""
        if self.response_complete or self.disconnected:
            return
        self.keep_alive = False
        if not self.response_started:
            self.response_started = True
            head_only = self.scope["method"] == "HEAD"
            date = self.connection.date()
            self.transport.write(plain_response(status, text, date, head_only=head_only))
        self.response_complete = True
        self.direct = False
        self._wake()
        self.connection.response_complete(self)

    def _describe(self) -> str:
        scope = self.scope
        client = scope.get("client")
        peer = f" from {client[0]}:{client[1]}" if client else ""
        return f"{scope['method']} {scope['path']}{peer}"

    async def _news(self) -> None:
        """Wait until the connection has news for this request: body, its end, the client
        gone (`_wake`)."""
        waiter = self._waiter = self.connection.loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class BodyWriter:
    """Writes chunks of one response's body straight to the transport (``WRITE_BODY``)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestCycle) -> None:
        # A weak reference: the scope holds this writer, and the cycle holds the scope.
        self._cycle = weakref.ref(cycle)

    def write(self, body: bytes) -> bool:
        """Write ``body`` as the next chunk of a started, chunked, open response whose
        connection takes writes now; False (nothing written) in every other case, where the
        caller sends it as ``http.response.body``, which waits, finishes or drops it."""
        cycle = self._cycle()
        if cycle is None or not cycle.direct or not body:
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True
