"""uvicorn's sans-I/O WebSocket protocol, plus one ASGI extension: many messages in one write.

ASGI sends one WebSocket message per ``websocket.send``, and uvicorn writes each to the socket
at once: a system call per message, which is most of what a streamed chunk costs once the
gateway batches everything else. `airlane serve` runs this protocol instead, and advertises
the ``airlane.websocket.send_many`` extension in the scope: a handler that sees it may send

    {"type": "websocket.send_many", "texts": [b"...", ...]}   # UTF-8 text messages
    {"type": "websocket.send_many", "bytes": [b"...", ...]}   # binary messages

and every message is written with one ``write``. Handlers check the scope, so the app stays
mountable under any ASGI server, where they send message by message.

A second extension, ``airlane.websocket.write_now`` (`WRITE_NOW`), is a plain call rather than
a message: `FrameWriter.write` writes messages at once when the connection takes them without
waiting (accepted, open, not paused by flow control), and otherwise writes nothing and says
so, and the caller sends them through ASGI, which waits. A stream's pump writes from the hub's
call-back through it (`airlane.transports.http.ws_pump`), with no task woken per batch.

Framing: with no extension negotiated, the frames are built here (`frame_messages`: a server
frame is a two-to-ten-byte header and the payload, RFC 6455 section 5.2), which costs about a
tenth of building them through ``websockets``' ``Frame`` objects (3.3 us per 1.2 KB message
on the reference VM). With an extension such as permessage-deflate, the ``websockets``
connection frames them, so the extension applies.

Logging: uvicorn and ``websockets`` each log lines per connection at INFO (``"WebSocket
/path" [accepted]``, ``connection open``, ``connection closed``), an access log that plain
HTTP requests do not get from `airlane serve` (``access_log=False``). Below DEBUG they go to
`CONNECTION_LOGGER`, which passes only warnings and errors: building and writing those records
was about 1,700 bytecodes and two writes to stderr per connection, an eighth of what a
one-chunk WebSocket stream cost the gateway. ``--log-level debug`` shows them again.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import weakref
from collections.abc import Generator, Sequence
from typing import Any, cast

from uvicorn.config import Config
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.http11 import Request
from websockets.protocol import Protocol, State

__all__ = [
    "BINARY",
    "CONNECTION_LOGGER",
    "SEND_MANY",
    "SEND_MANY_TYPE",
    "TEXT",
    "WRITE_NOW",
    "BatchingWebSocketProtocol",
    "FrameWriter",
    "frame_messages",
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

_ERROR_LOGGER = logging.getLogger("uvicorn.error")


class _WarningsOnly(logging.LoggerAdapter[logging.Logger]):
    """A logger that passes only warnings and errors on to the one it wraps.

    An adapter rather than a logger with its own level: uvicorn configures logging with
    ``dictConfig``, which resets the level of every existing logger below its own.
    """

    level = logging.WARNING
    """uvicorn compares this with its TRACE level before tracing a connection."""

    def isEnabledFor(self, level: int) -> bool:
        """Only WARNING and above, and only where the wrapped logger is enabled for them."""
        return level >= logging.WARNING and self.logger.isEnabledFor(level)


CONNECTION_LOGGER = _WarningsOnly(_ERROR_LOGGER)
"""What WebSocket connections log through below DEBUG: uvicorn's error logger, warnings and
errors only."""

_OPEN = State.OPEN
_HEADER_16 = struct.Struct("!BBH").pack
_HEADER_64 = struct.Struct("!BBQ").pack


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


def _inert_parser() -> Generator[None, None, None]:
    """A parser for a connection that is gone: takes whatever comes and does nothing."""
    while True:
        yield


class BatchingWebSocketProtocol(WebSocketsSansIOProtocol):
    """`WebSocketsSansIOProtocol` with the ``airlane.websocket.send_many`` extension, logging
    per connection only at DEBUG."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if not _ERROR_LOGGER.isEnabledFor(logging.DEBUG):
            # uvicorn's "[accepted]" line and websockets' "connection open/closed".
            # uvicorn calls info/error/log on it and reads its level: the adapter has those.
            self.logger = self.conn.logger = cast(logging.Logger, CONNECTION_LOGGER)

    def handle_connect(self, event: Request) -> None:
        """Build the scope as uvicorn does, then advertise the extensions (a refused handshake
        has been answered and has no scope)."""
        super().handle_connect(event)
        if self.response.status_code == 101:
            # A call-back where ASGI's types expect a dict: uvicorn only passes the scope on.
            extensions = cast(dict[str, Any], self.scope["extensions"])
            extensions[SEND_MANY] = {}
            extensions[WRITE_NOW] = FrameWriter(self).write

    def connection_lost(self, exc: Exception | None) -> None:
        """As uvicorn does, then break the reference cycle between websockets' protocol and
        its parser: the parser is a generator whose frame holds the protocol that holds it,
        so without this every connection's protocol, reader, buffers and frames stay in
        memory until a full pass of the collector (under `airlane.server.gcpacer`, up to five
        minutes: the soak's memory climbed by about 1 KB per WebSocket connection until
        then)."""
        super().connection_lost(exc)
        conn = self.conn
        parser, conn.parser = conn.parser, _inert_parser()
        parser.close()

    def upgrade(self, transport: asyncio.Transport, request: Request) -> None:
        """Take over ``transport`` for an upgrade request the HTTP protocol has parsed into
        ``request`` (`airlane.transports.http.http_protocol`), instead of reading it again
        from bytes: what ``connection_made`` and ``data_received`` of the request do."""
        self.connection_made(transport)
        conn = self.conn
        # A server protocol's parser reads the HTTP request, then frames; this one starts at
        # the frames (websockets' Protocol.parse, which ServerProtocol.parse ends with).
        conn.parser.close()
        conn.parser = Protocol.parse(conn)
        next(conn.parser)
        self.handle_connect(request)

    async def send(self, message: Any) -> None:
        """`websocket.send_many` here; every other message as uvicorn handles it."""
        if message["type"] != SEND_MANY_TYPE:
            await super().send(message)
            return
        await self.writable.wait()  # uvicorn's flow control: wait while the buffer is full
        if self.disconnected:
            raise ClientDisconnected()
        if not self.handshake_complete or self.close_sent:
            raise RuntimeError("websocket.send_many needs an accepted, open WebSocket")
        texts = message.get("texts")
        if texts is not None:
            self.write_messages(texts, binary=False)
        else:
            self.write_messages(message.get("bytes", ()), binary=True)

    def write_messages(self, messages: Sequence[bytes], *, binary: bool) -> None:
        """Write ``messages`` (UTF-8 text, or binary) to the transport with one ``write``, on
        an accepted connection: the caller has checked that it may write now."""
        conn = self.conn
        if conn.extensions or conn.state is not _OPEN:
            # An extension (permessage-deflate) transforms each frame, and a closing
            # connection must refuse to send: both are websockets' to handle.
            send = conn.send_binary if binary else conn.send_text
            for message in messages:
                send(message)
            self.transport.write(b"".join(conn.data_to_send()))
            return
        pending = conn.data_to_send()  # empty unless websockets queued a frame (a pong)
        frames = frame_messages(BINARY if binary else TEXT, messages)
        self.transport.write(b"".join((*pending, frames)) if pending else frames)


class FrameWriter:
    """Writes messages on one WebSocket connection at once, when it can (``WRITE_NOW``)."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: BatchingWebSocketProtocol) -> None:
        # A weak reference: the scope holds this writer, and the protocol holds the scope.
        self._protocol = weakref.ref(protocol)

    def write(self, messages: list[bytes], binary: bool) -> bool:
        """Write ``messages`` (UTF-8 text, or binary if ``binary``), as one ``write``, if the
        connection is accepted, open and not paused by flow control; False, having written
        nothing, in every other case, where the caller sends them through ASGI (which waits,
        or raises for a connection that is gone)."""
        protocol = self._protocol()
        if (
            protocol is None
            or not protocol.handshake_complete
            or protocol.close_sent
            or protocol.disconnected
            or protocol.initial_response is not None
            or not protocol.writable.is_set()
        ):
            return False
        conn = protocol.conn
        if conn.state is not _OPEN:
            return False
        if conn.extensions:
            protocol.write_messages(messages, binary=binary)
            return True
        # `write_messages` without an extension, inlined: this runs for every batch.
        pending = conn.data_to_send()  # empty unless websockets queued a frame (a pong)
        frames = frame_messages(BINARY if binary else TEXT, messages)
        protocol.transport.write(b"".join((*pending, frames)) if pending else frames)
        return True
