"""`WebSocketProtocol`: Airlane's WebSocket connection, on ``websockets``' sans-I/O
`ServerProtocol`, answered through ASGI, plus two extensions that write many messages at once.

**The hand-over.** `HttpProtocol` (`airlane.transports.http.http_protocol`) parses the upgrade
request and calls `upgrade_to_websocket` with it: a ``websockets`` `Request` is made from the
same headers (`airlane.transports.http.server.handshake`), ``ServerProtocol.accept`` checks it
and negotiates permessage-deflate, and the transport goes to this protocol. The request is
never parsed a second time. The `ServerProtocol` is made in the ``OPEN`` state (its documented
``state`` argument), so that it reads frames from the first byte it is given: the handshake
is this server's, and the 101 response ``accept`` built goes out when the application sends
``websocket.accept`` (with the subprotocol it chose). A refusal ``accept`` made (a bad
``Sec-WebSocket-Version``, say) is sent at once instead, and the application never runs.
The application may also refuse the handshake itself with an HTTP response (the ASGI
``websocket.http.response`` extension) or with ``websocket.close`` (403).

**Messages.** Frames are read by the `ServerProtocol` (``receive_data``, ``events_received``),
which enforces `ServerSettings.ws_max_message_bytes` (1009), answers pings and echoes the
peer's Close; what it has to write goes out after each read (``data_to_send``). Messages wait
for the application in a queue; past `ServerSettings.ws_max_queued` the connection stops
reading until the application takes them. ``send`` waits while the transport's buffer is over
its high-water mark. The server pings every `ServerSettings.ws_ping_s` (sooner ahead of a pause
the process sees coming, a full garbage-collector pass: `airlane.runtime.heartbeats`) and
closes (1011) a connection whose Pong does not come within the same time.

**Closing.** Either side's Close ends with ``websocket.disconnect`` (its code and reason) for
the application, and the TCP connection closes once the handshake is done (or
`ServerSettings.ws_close_timeout_s` after ours). A peer closing is normal: a data message
sent on a connection that is closing or gone raises `ClientDisconnected` (an `OSError`,
which the application's writers treat as the end of their socket, and which the server never
logs), and ``websocket.close`` on it does nothing. When the connection is lost, the
application is told (1006) and its task is cancelled if it has not ended
`ServerSettings.disconnect_grace_s` later. On shutdown every open WebSocket gets 1012.

**Writing many messages at once.** ASGI sends one message per ``websocket.send``, and writing
each to the socket at once costs a system call per message, most of what a streamed chunk
costs once the gateway batches everything else. Two scope extensions avoid that:

- ``airlane.websocket.send_many`` (`SEND_MANY`): a handler that sees it may send
  ``{"type": "websocket.send_many", "texts": [b"...", ...]}`` (UTF-8 text messages) or
  ``{"type": "websocket.send_many", "bytes": [b"...", ...]}`` (binary), and every message goes
  out in one ``write``;
- ``airlane.websocket.write_now`` (`WRITE_NOW`): a plain call rather than a message.
  `FrameWriter.write` writes messages at once when the connection takes them without waiting
  (accepted, open, not paused by flow control), and otherwise writes nothing and says so;
  the caller then sends them through ASGI, which waits. A stream's pump writes from the hub's
  call-back through it (`airlane.transports.http.ws_pump`), with no task woken per batch.

Handlers check the scope, so the app stays mountable under any ASGI server, where they send
message by message.

**Framing.** With no extension negotiated, frames are built here (`frame_messages`: a server
frame is a two-to-ten-byte header and the payload, RFC 6455 section 5.2), which costs about a
tenth of building them through ``websockets``' ``Frame`` objects (3.3 us per 1.2 KB message
on the reference VM). With permessage-deflate, the `ServerProtocol` frames them
(``send_text``, ``send_binary``), so the extension applies. Every call into the
`ServerProtocol` is followed by writing what it queued, so nothing it queued (a Pong) is ever
overtaken by frames built here.

**Logging.** Nothing per connection at INFO: ``websockets`` logs "connection closed" and the
like at INFO, and `CONNECTION_LOGGER`, which each `ServerProtocol` is given, passes them on
at DEBUG (with ``--log-level debug``, together with this server's own ``[accepted]`` line).
Warnings and errors pass as they are.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import weakref
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

from websockets.exceptions import InvalidHeaderValue
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.server import ServerProtocol

from airlane.runtime.heartbeats import heartbeats
from airlane.runtime.plain import plain_context
from airlane.transports.http.server.errors import ClientDisconnected
from airlane.transports.http.server.flow import WriteFlow
from airlane.transports.http.server.handshake import (
    handshake_request,
    offered_subprotocols,
    refusal_before_handshake,
)
from airlane.transports.http.server.state import ServerState, cancel_later, log
from airlane.transports.http.server.status import (
    INVALID_HEADER_NAME,
    INVALID_HEADER_VALUE,
    plain_response,
    status_line,
)

__all__ = [
    "BINARY",
    "CONNECTION_LOGGER",
    "SEND_MANY",
    "SEND_MANY_TYPE",
    "TEXT",
    "WRITE_NOW",
    "ClientDisconnected",
    "FrameWriter",
    "WebSocketProtocol",
    "frame_messages",
    "upgrade_to_websocket",
]

SEND_MANY = "airlane.websocket.send_many"
"""The scope extension's name."""
SEND_MANY_TYPE = "websocket.send_many"
"""The ASGI message type it adds."""
WRITE_NOW = "airlane.websocket.write_now"
"""Scope extension: a call-back that writes messages at once if the connection takes them
without waiting; see `FrameWriter.write`."""

TEXT = 0x81
"""First header byte of a final text frame (FIN bit + opcode 1)."""
BINARY = 0x82
"""First header byte of a final binary frame (FIN bit + opcode 2)."""

MAX_DENIAL_BYTES = 65536
"""Largest body of an HTTP response refusing a handshake (``websocket.http.response``)."""


class _InfoAtDebug(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Passes INFO records on at DEBUG, everything else as it is."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        """Log ``msg``, INFO demoted to DEBUG."""
        if level == logging.INFO:
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)


CONNECTION_LOGGER = _InfoAtDebug(logging.getLogger("airlane.http.websocket"), {})
"""The logger each connection's `ServerProtocol` writes through: its per-connection INFO lines
("connection closed", "connection rejected") at DEBUG, warnings and errors as they are."""

# Shared by every connection: it keeps no state of its own, only the parameters offered.
_DEFLATE = ServerPerMessageDeflateFactory(
    server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5}
)

_HEADER_16 = struct.Struct("!BBH").pack
_HEADER_64 = struct.Struct("!BBQ").pack
_TEXT, _BINARY, _CONT = Opcode.TEXT, Opcode.BINARY, Opcode.CONT
_PONG, _CLOSE = Opcode.PONG, Opcode.CLOSE
_SEND_EOF = b""  # websockets' marker in data_to_send(): close the TCP connection


def _header(first_byte: int, size: int) -> bytes:
    if size < 126:
        return bytes((first_byte, size))
    if size < 65536:
        return _HEADER_16(first_byte, 126, size)
    return _HEADER_64(first_byte, 127, size)


def frame_messages(first_byte: int, messages: Sequence[bytes]) -> bytes:
    """``messages`` as consecutive unmasked, unfragmented frames (what a server sends), with
    ``first_byte`` (`TEXT` or `BINARY`) opening each header; byte for byte what ``websockets``
    writes for them when no extension is in use."""
    if len(messages) == 1:  # a paced stream's every write: no list to build
        message = messages[0]
        return _header(first_byte, len(message)) + message
    parts: list[bytes] = []
    append = parts.append
    for message in messages:
        append(_header(first_byte, len(message)))
        append(message)
    return b"".join(parts)


def upgrade_to_websocket(
    state: ServerState,
    transport: asyncio.Transport,
    scope: dict[str, Any],
    *,
    method: str,
    http_version: str,
    rest: bytes,
    reading: bool,
) -> None:
    """Take over ``transport`` for the WebSocket upgrade request parsed into ``scope``
    (``rest``: the bytes that followed it; ``reading``: whether the transport reads now):
    refuse it with the response ``websockets`` would give, or start a `WebSocketProtocol`
    and its application."""
    settings = state.settings
    date = state.date.line
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    refusal = refusal_before_handshake(method, http_version, headers)
    if refusal is None:
        try:
            request = handshake_request(scope["raw_path"], scope["query_string"], headers)
        except InvalidHeaderValue:
            refusal = (400, "invalid header value", b"")
    if refusal is not None:
        status, text, extra = refusal
        transport.write(plain_response(status, f"{text}\n", date, extra=extra))
        transport.close()
        return
    conn = ServerProtocol(
        extensions=[_DEFLATE] if settings.ws_compression else None,
        # The handshake is this server's: frames start at the first byte the protocol gets.
        state=State.OPEN,
        max_size=settings.ws_max_message_bytes,
        logger=CONNECTION_LOGGER,
    )
    response = conn.accept(request)  # checks the request and negotiates the extensions
    if response.status_code != 101:
        transport.write(response.serialize())  # websockets' refusal, with connection: close
        transport.close()
        return
    scope["type"] = "websocket"
    scope["scheme"] = "ws" if scope["scheme"] == "http" else "wss"
    del scope["method"]
    scope["subprotocols"] = offered_subprotocols(headers)
    protocol = WebSocketProtocol(state, transport, scope, conn, response)
    scope["extensions"] = {
        **scope.get("extensions", {}),  # the connection's, such as its TLS peer
        "websocket.http.response": {},
        SEND_MANY: {},
        WRITE_NOW: FrameWriter(protocol).write,
    }
    transport.set_protocol(protocol)
    protocol.start(rest, reading=reading)


class WebSocketProtocol(asyncio.Protocol):
    """One WebSocket connection (see the module docstring)."""

    # Slots: thousands of these live at once, and a dict each (over 30 attributes, not
    # sharing its keys) would be 1.5 KB more per connection and one more object for the
    # garbage collector to walk.
    __slots__ = (
        "__weakref__",
        "_answered",
        "_close_timer",
        "_denial",
        "_denial_body",
        "_denial_size",
        "_fragments",
        "_fragments_text",
        "_goodbye",
        "_messages",
        "_ping_payload",
        "_ping_sent",
        "_ping_timer",
        "_pong_timer",
        "_read_paused",
        "_response",
        "_rest",
        "_tasks",
        "_waiter",
        "accepted",
        "conn",
        "direct",
        "flow",
        "loop",
        "lost",
        "open",
        "plain",
        "scope",
        "settings",
        "state",
        "transport",
    )

    def __init__(
        self,
        state: ServerState,
        transport: asyncio.Transport,
        scope: dict[str, Any],
        conn: ServerProtocol,
        response: Response,
    ) -> None:
        self.state = state
        self.loop = state.loop
        self.settings = state.settings
        self.transport = transport
        self.scope = scope
        self.conn = conn
        self.flow = WriteFlow()
        # With no extension the frames are built here (`frame_messages`).
        self.plain = not response.headers.get("Sec-WebSocket-Extensions")
        self.accepted = False
        """The application accepted the handshake (and the 101 response went out)."""
        self.open = False
        """Accepted, and neither side has begun to close; the connection is there."""
        self.direct = False
        """`FrameWriter.write` may write now: open, and writes not paused."""
        self.lost = False
        self._response: Response | None = response  # the 101, until websocket.accept
        self._answered = False  # accepted, or refused with an HTTP response
        self._denial: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self._denial_body: list[bytes] = []
        self._denial_size = 0
        self._rest = b""  # what came before the application accepted
        self._read_paused = False
        self._messages: deque[dict[str, Any]] = deque([{"type": "websocket.connect"}])
        self._waiter: asyncio.Future[None] | None = None
        self._goodbye: dict[str, Any] | None = None  # the websocket.disconnect, once queued
        self._fragments: list[bytes] | None = None
        self._fragments_text = False
        self._ping_timer: asyncio.TimerHandle | None = None
        self._pong_timer: asyncio.TimerHandle | None = None
        self._ping_payload: bytes | None = None
        self._ping_sent = 0.0  # loop time of the last Ping
        self._close_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        """Messages received and not yet read by the application."""
        return len(self._messages)

    @property
    def reading(self) -> bool:
        """Whether the connection reads now (not before the handshake is accepted, nor while
        `queued` is at `ServerSettings.ws_max_queued`)."""
        return not self._read_paused

    def start(self, rest: bytes, *, reading: bool) -> None:
        """Run the application; read nothing more until it has accepted."""
        self._rest = rest
        self._read_paused = not reading
        self._pause_reading()
        self.state.connections.add(self)
        self.state.start_task(self._run(), self._tasks)

    # -- asyncio.Protocol --------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self.accepted:
            self._rest += data  # at most one read: reading was paused at the hand-over
            return
        conn = self.conn
        try:
            conn.receive_data(data)
        except EOFError:
            return  # the stream has ended already
        for event in conn.events_received():
            self._on_frame(event)  # type: ignore[arg-type]  # frames only: the handshake was ours
        self._flush()
        if conn.parser_exc is not None:
            self._protocol_failed()

    def eof_received(self) -> bool | None:
        # The peer closed its side without a closing handshake (or after it): nothing more
        # comes. The ServerProtocol is not told: it would only fail the connection (1006) and
        # say to close it, which returning None does.
        self._went(1006, "")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._went(1006, "")
        self.flow.resume()  # a sender waiting for the buffer to drain must see the loss
        self._stop_pings()
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        self.state.connections.discard(self)
        _release(self.conn)
        cancel_later(self.loop, self._tasks, self.settings.disconnect_grace_s)

    def pause_writing(self) -> None:
        self.flow.pause()
        self.direct = False

    def resume_writing(self) -> None:
        self.flow.resume()
        self.direct = self.open

    # -- the server's side -------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close with 1012 (an open connection), or refuse a handshake not answered yet."""
        if self.open:
            self._close(1012, "the server is shutting down")
        elif not self._answered and self._denial is None and not self.lost:
            self._refuse(503, "the server is shutting down")

    def abort(self) -> None:
        """Drop the TCP connection now (what is left in its buffer is not sent)."""
        self.transport.abort()

    # -- ASGI --------------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        """``websocket.connect``, then each message, then ``websocket.disconnect`` (again
        on every later call)."""
        while True:
            messages = self._messages
            if messages:
                message = messages.popleft()
                if not messages and self._read_paused and self.accepted:
                    self._resume_reading()
                return message
            if self._goodbye is not None:
                return dict(self._goodbye)
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def send(self, message: Any) -> None:
        """``websocket.accept``, ``.send``, ``.send_many``, ``.close`` or a refusal's
        ``websocket.http.response.start`` and ``.body``."""
        flow = self.flow
        if flow.paused and not self.lost:
            await flow.drain()
        kind = message["type"]
        if self.accepted:
            if kind == "websocket.send":
                if not self.open:
                    raise ClientDisconnected("the WebSocket is closing")
                data = message.get("bytes")
                if data is not None:
                    self._write_one(BINARY, data)
                else:
                    self._write_one(TEXT, message["text"].encode())
            elif kind == SEND_MANY_TYPE:
                if not self.open:
                    raise ClientDisconnected("the WebSocket is closing")
                texts = message.get("texts")
                if texts is not None:
                    self.write_messages(texts, binary=False)
                else:
                    self.write_messages(message.get("bytes", ()), binary=True)
            elif kind == "websocket.close":
                if self.open:  # else the close has begun already: nothing to do
                    self._close(message.get("code", 1000), message.get("reason") or "")
            else:
                raise RuntimeError(f"unexpected ASGI message {kind!r} on an open WebSocket")
        elif self._denial is not None:
            if kind != "websocket.http.response.body":
                raise RuntimeError(f"expected 'websocket.http.response.body', not {kind!r}")
            self._deny_body(message.get("body", b""), message.get("more_body", False))
        elif self.lost or self._answered:
            raise ClientDisconnected("the WebSocket connection is gone")
        elif kind == "websocket.accept":
            self._accept(message)
        elif kind == "websocket.close":
            self._refuse(403, "")  # ASGI: a close before the handshake is a 403
        elif kind == "websocket.http.response.start":
            self._deny_start(message)
        else:
            raise RuntimeError(f"expected 'websocket.accept', not {kind!r}")

    def write_messages(self, messages: Sequence[bytes], *, binary: bool) -> None:
        """Write ``messages`` (UTF-8 text, or binary) with one ``write``, on an open
        connection: the caller has checked that it may write now."""
        if self.plain:
            self.transport.write(frame_messages(BINARY if binary else TEXT, messages))
            return
        # An extension (permessage-deflate) transforms each frame: websockets frames them.
        send = self.conn.send_binary if binary else self.conn.send_text
        for message in messages:
            send(message)
        self._flush()

    # -- the handshake -----------------------------------------------------------------------

    def _accept(self, message: Any) -> None:
        response = self._response
        assert response is not None
        self._response = None
        headers = response.headers
        subprotocol = message.get("subprotocol")
        if subprotocol:
            headers["Sec-WebSocket-Protocol"] = subprotocol
        for name, value in message.get("headers") or ():
            headers[name.decode("latin-1")] = value.decode("latin-1")
        self.transport.write(response.serialize())
        self.accepted = self.open = self._answered = True
        self.direct = not self.flow.paused
        if log.isEnabledFor(logging.DEBUG):
            log.debug('%s - "WebSocket %s" [accepted]', self._peer(), self.scope["path"])
        self._start_pings()
        rest, self._rest = self._rest, b""
        if rest:
            self.data_received(rest)
        if not self._messages:
            self._resume_reading()

    def _refuse(self, status: int, text: str) -> None:
        """Answer the handshake with an HTTP error and close."""
        self._answered = True
        self._response = None
        self.transport.write(plain_response(status, text, self.state.date.line))
        self.transport.close()
        self._went(1006, "")

    def _deny_start(self, message: Any) -> None:
        status = message["status"]
        status_line(status)  # a bad status is the application's error, raised here
        headers = list(message.get("headers") or ())
        for name, value in headers:
            if INVALID_HEADER_NAME(name) or INVALID_HEADER_VALUE(value):
                raise RuntimeError(f"invalid response header {name!r}: {value!r}")
        self._denial = (status, headers)
        self._response = None

    def _deny_body(self, body: bytes, more: bool) -> None:
        self._denial_size += len(body)
        if self._denial_size > MAX_DENIAL_BYTES:
            raise RuntimeError(f"a handshake's refusal is over {MAX_DENIAL_BYTES} bytes")
        self._denial_body.append(body)
        if more:
            return
        assert self._denial is not None
        status, headers = self._denial
        body = b"".join(self._denial_body)
        self._denial_body = []
        names = {name.lower() for name, _ in headers}
        parts = [status_line(status), self.state.date.line]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if b"content-length" not in names:
            parts.append(b"content-length: %d\r\n" % len(body))
        if b"connection" not in names:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        self._answered = True
        self._denial = None
        self.transport.write(b"".join(parts))
        self.transport.close()
        self._went(1006, "")

    # -- reading -----------------------------------------------------------------------------

    def _on_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is _TEXT or opcode is _BINARY:
            if frame.fin:
                self._message(opcode is _TEXT, frame.data)
            else:
                self._fragments = [bytes(frame.data)]
                self._fragments_text = opcode is _TEXT
        elif opcode is _CONT:
            if self._fragments is not None:
                self._fragments.append(bytes(frame.data))
                if frame.fin:
                    data = b"".join(self._fragments)
                    self._fragments = None
                    self._message(self._fragments_text, data)
        elif opcode is _PONG:
            self._on_pong(frame.data)
        elif opcode is _CLOSE:
            close = self.conn.close_rcvd
            if close is not None:
                self._went(close.code, close.reason)
        # PING: the ServerProtocol has queued the Pong; `_flush` writes it.

    def _message(self, text: bool, data: Any) -> None:
        if not self.open:
            return  # the application has begun to close: what comes now is dropped
        if text:
            try:
                message: dict[str, Any] = {
                    "type": "websocket.receive",
                    "text": bytes(data).decode(),
                }
            except UnicodeDecodeError:
                self.conn.fail(1007, "invalid UTF-8 in a text message")
                self._went(1007, "invalid UTF-8 in a text message")
                return
        else:
            message = {"type": "websocket.receive", "bytes": bytes(data)}
        messages = self._messages
        messages.append(message)
        self._wake()
        if len(messages) >= self.settings.ws_max_queued:
            self._pause_reading()

    def _protocol_failed(self) -> None:
        """The ServerProtocol failed the connection (a protocol error, a message over the
        size limit, invalid UTF-8): it has queued its Close, and the application is told."""
        sent = self.conn.close_sent
        if sent is not None:
            self._went(sent.code, sent.reason)
        else:
            self._went(1006, "")

    # -- writing -----------------------------------------------------------------------------

    def _write_one(self, first_byte: int, data: bytes) -> None:
        if self.plain:
            self.transport.write(_header(first_byte, len(data)) + data)
            return
        if first_byte == BINARY:
            self.conn.send_binary(data)
        else:
            self.conn.send_text(data)
        self._flush()

    def _flush(self) -> None:
        """Write what the ServerProtocol queued; close the TCP connection when it says so."""
        writes = self.conn.data_to_send()
        if not writes:
            return
        eof = writes[-1] == _SEND_EOF
        if eof:
            writes.pop()
        if writes and not self.lost:
            self.transport.write(writes[0] if len(writes) == 1 else b"".join(writes))
        if eof:
            self.transport.close()
            self._drop_later()  # a peer that reads nothing more would hold it open

    # -- closing -----------------------------------------------------------------------------

    def _close(self, code: int, reason: str) -> None:
        """Begin the closing handshake (our Close frame), tell the application, and give the
        peer `ServerSettings.ws_close_timeout_s` to answer."""
        encoded = reason.encode()
        if len(encoded) > 123:  # RFC 6455 5.5: a control frame's payload is at most 125 bytes
            reason = encoded[:123].decode(errors="ignore")
        self.conn.send_close(code, reason)  # an invalid code is the application's error
        self._closing()
        self._flush()
        self._went(code, reason)
        self._drop_later()
        if self._read_paused and not self.lost:
            self._resume_reading()  # for the peer's Close

    def _drop_later(self) -> None:
        """Drop the TCP connection `ServerSettings.ws_close_timeout_s` from now unless it has
        closed by then (the peer did not answer our Close, or does not read what is left)."""
        if self._close_timer is None and not self.lost:
            self._close_timer = self.loop.call_later(
                self.settings.ws_close_timeout_s, self.transport.abort
            )

    def _closing(self) -> None:
        self.open = False
        self.direct = False
        self._stop_pings()

    def _went(self, code: int, reason: str) -> None:
        """The connection is closing or gone: queue ``websocket.disconnect`` (once)."""
        self._closing()
        if self._goodbye is not None:
            return
        goodbye = self._goodbye = {"type": "websocket.disconnect", "code": code, "reason": reason}
        self._messages.append(dict(goodbye))
        self._wake()

    async def _run(self) -> None:
        try:
            await self.state.app(self.scope, self.receive, self.send)
        except ClientDisconnected:
            log.debug("WebSocket %s: the client went away", self.scope["path"])
            self._ended(1000, "")
        except asyncio.CancelledError:
            self._ended(1012, "the server is shutting down", status=503)
            raise
        except Exception as exc:
            log.error(
                "WebSocket %s from %s: the application failed",
                self.scope["path"],
                self._peer(),
                exc_info=exc,
            )
            self._ended(1011, "internal error", status=500)
        else:
            self._ended(1000, "")

    def _ended(self, code: int, reason: str, *, status: int = 403) -> None:
        """The application has ended: answer a handshake it left open (403, or 500 if it
        failed), close an open connection with ``code``."""
        if self.lost:
            return
        if not self._answered:
            if self._denial is None:
                self._refuse(status, "")
            else:
                self.transport.close()  # a refusal's response cut short
        elif self.open:
            self._close(code, reason)
        elif self._close_timer is None:
            self.transport.close()  # closed by the peer or a failure: nothing to wait for

    # -- keepalive ---------------------------------------------------------------------------

    def _start_pings(self, since: float | None = None) -> None:
        """Arm the next Ping: a period after ``since`` (the last Ping's loop time), or after
        now. From the last Ping, not from its Pong: a Pong held up (by the client, or by a
        pause of this process) must not push every later Ping back."""
        period = self.settings.ws_ping_s
        if period:
            if since is None:
                self._ping_timer = self.loop.call_later(period, self._ping, context=plain_context())
            else:
                self._ping_timer = self.loop.call_at(
                    since + period, self._ping, context=plain_context()
                )
            heartbeats(self.loop).add(self)

    def beat_before(self, deadline: float) -> bool:
        """Ping now if the next ping would fall due before ``deadline`` (loop time;
        `airlane.runtime.heartbeats`); not while a ping awaits its Pong."""
        timer = self._ping_timer
        if timer is None or timer.when() > deadline:
            return False
        timer.cancel()
        self._ping()
        return True

    def _ping(self) -> None:
        self._ping_timer = None
        heartbeats(self.loop).discard(self)  # back with the Pong (`_start_pings`)
        if not self.open:
            return
        payload = self._ping_payload = struct.pack("!I", random.getrandbits(32))
        self._ping_sent = self.loop.time()
        self.conn.send_ping(payload)
        self._flush()
        period = self.settings.ws_ping_s
        assert period is not None
        self._pong_timer = self.loop.call_later(period, self._pong_missing, context=plain_context())

    def _on_pong(self, data: Any) -> None:
        if self._ping_payload is None or bytes(data) != self._ping_payload:
            return  # unsolicited, or an answer to an older ping
        self._ping_payload = None
        if self._pong_timer is not None:
            self._pong_timer.cancel()
            self._pong_timer = None
        self._start_pings(self._ping_sent)

    def _pong_missing(self) -> None:
        self._pong_timer = None
        if not self.open:
            return
        log.debug(
            "WebSocket %s from %s: no pong in time, closing", self.scope["path"], self._peer()
        )
        self.conn.fail(1011, "keepalive ping timeout")
        self._went(1011, "keepalive ping timeout")
        self._flush()

    def _stop_pings(self) -> None:
        heartbeats(self.loop).discard(self)
        if self._ping_timer is not None:
            self._ping_timer.cancel()
            self._ping_timer = None
        if self._pong_timer is not None:
            self._pong_timer.cancel()
            self._pong_timer = None
        self._ping_payload = None

    # -- helpers -----------------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self._read_paused and not self.lost:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and not self.lost:
            self._read_paused = False
            self.transport.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _peer(self) -> str:
        client = self.scope.get("client")
        return f"{client[0]}:{client[1]}" if client else "?"


class FrameWriter:
    """Writes messages on one WebSocket connection at once, when it can (``WRITE_NOW``)."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketProtocol) -> None:
        # A weak reference: the scope holds this writer, and the protocol holds the scope.
        self._protocol = weakref.ref(protocol)

    def write(self, messages: list[bytes], binary: bool) -> bool:
        """Write ``messages`` (UTF-8 text, or binary if ``binary``), as one ``write``, if the
        connection is accepted, open and not paused by flow control; False, having written
        nothing, in every other case, where the caller sends them through ASGI (which waits,
        or raises `ClientDisconnected` for a connection that is closing or gone)."""
        protocol = self._protocol()
        if protocol is None or not protocol.direct:
            return False
        if protocol.plain:
            protocol.transport.write(frame_messages(BINARY if binary else TEXT, messages))
        else:
            protocol.write_messages(messages, binary=binary)
        return True


def _inert_parser() -> Generator[None, None, None]:
    """A parser for a connection that is gone: takes whatever comes and does nothing."""
    while True:
        yield


def _release(conn: ServerProtocol) -> None:
    """Break the reference cycles between a finished `ServerProtocol` and its parser.

    The parser is a generator whose frame holds the protocol that holds it, and so does the
    traceback of the error that stopped it (``parser_exc``, a protocol error or an oversize
    message), so without this every connection's protocol, reader, buffers and frames stay in
    memory until a full pass of the collector (under `airlane.server.gcpacer`, up to five
    minutes apart: the soak's memory climbed by about 1 KB per WebSocket connection until
    then). It is the one place this server touches an attribute ``websockets`` does not
    document (``parser``); where a version has none, nothing is done and the collector frees
    the cycle as before.
    """
    parser = getattr(conn, "parser", None)
    if isinstance(parser, Generator):
        conn.parser = _inert_parser()  # type: ignore[attr-defined,unused-ignore]
        parser.close()
    error: BaseException | None = conn.parser_exc
    for _ in range(8):  # the error and what it was raised from, a short chain
        if error is None:
            break
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
