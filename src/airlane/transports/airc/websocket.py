"""AIRC over WebSocket: subprotocol ``airc.v1.2`` on ``/v1/ws``.

The HTTP transport authenticates the handshake and accepts the subprotocol; this handler then
carries AIRC's byte stream in binary messages (a message may hold several frames, or part of
one: the decoder does not care). A text message is refused with close 1003; a protocol error
closes with ``4000 + ErrorCode`` and the reason, after the ``GOAWAY``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airlane.gateway import Gateway
from airlane.security import Principal
from airlane.transports.airc.config import AircServerConfig
from airlane.transports.airc.session import AircSession
from airlane.wire.airc import ErrorCode

__all__ = ["AircWebSocketHandler"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_CLOSE_UNSUPPORTED_DATA = 1003
_MAX_PENDING_WRITES = 64  # writes queued before the pumps pause (bounded memory)


class _WebSocketLink:
    """Buffers the session's writes; one task sends them, joined, one message per turn."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[bytes] = []
        self._ready = asyncio.Event()
        self._close: tuple[int, str] | None = None
        self.session: AircSession | None = None

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._ready.set()
        if len(self._pending) >= _MAX_PENDING_WRITES and self.session is not None:
            self.session.pause_writing()

    def close(self, code: ErrorCode, reason: str) -> None:
        self.close_with(code.ws_close_code, reason)

    def close_with(self, code: int, reason: str) -> None:
        """Close with a WebSocket close code, after what was written."""
        if self._close is None:
            self._close = (code, reason[:120])  # RFC 6455: a reason of at most 123 bytes
            self._ready.set()

    async def run(self) -> None:
        """Send what is written until the session closes the link."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                if self.session is not None:
                    self.session.resume_writing()
                await self._send({"type": "websocket.send", "bytes": data})
            if self._close is not None and not self._pending:
                code, reason = self._close
                await self._send({"type": "websocket.close", "code": code, "reason": reason})
                return


class AircWebSocketHandler:
    """Serves one accepted ``airc.v1.2`` WebSocket; see the module docstring."""

    def __init__(self, gateway: Gateway, config: AircServerConfig | None = None) -> None:
        self.gateway = gateway
        self.config = config or AircServerConfig()

    async def __call__(self, principal: Principal, receive: Receive, send: Send) -> None:
        """Run the session until either side closes."""
        link = _WebSocketLink(send)
        session = AircSession(self.gateway, self.config, link, principal=principal)
        link.session = session
        writer = asyncio.create_task(link.run(), name="airc-ws-writer")
        try:
            # Read until the client disconnects. Once the session has closed the link (its
            # GOAWAY and close frame are on their way), input is dropped while the client
            # completes the closing handshake.
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.disconnect":
                    break
                if kind != "websocket.receive" or session.closed:
                    continue
                data = message.get("bytes")
                if data is None:
                    link.close_with(_CLOSE_UNSUPPORTED_DATA, "AIRC travels in binary messages")
                    session.close(ErrorCode.NO_ERROR, "text message on airc.v1.2")
                    continue
                session.data_received(data)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
            await session.aclose()
