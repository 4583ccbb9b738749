"""RSocket over WebSocket: ``/v1/rsocket`` on the HTTP port, one frame per binary message.

The HTTP transport checks the handshake (origin, and credentials when it carries any: a bearer
header or ``?ticket=``) and hands the accepted socket here with the principal, if any; SETUP's
authentication metadata may name one instead. A text message closes the socket with 1003.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, cast

from airlane.gateway import Gateway, PeerIdentity, Principal
from airlane.runtime.eager import start_eagerly
from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.transports.rsocket.session import RSocketSession

__all__ = ["RSOCKET_WS_PATH", "RSocketWebSocketHandler"]

RSOCKET_WS_PATH = "/v1/rsocket"
"""Where RSocket over WebSocket is served."""

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_CLOSE_NORMAL = 1000
_CLOSE_UNSUPPORTED_DATA = 1003


class _WebSocketLink:
    """Sends the session's frames as binary messages, in order. An ASGI ``send`` suspends
    only for flow control: it is driven in place, and while it is suspended later frames
    wait in order (and the session's senders pause), so what is buffered stays bounded by the
    client's credit."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[Message] = []
        self._busy: asyncio.Task[None] | None = None
        self._closing = False
        self._broken = False
        self.session: RSocketSession | None = None

    def write(self, data: bytes) -> None:
        if not self._broken and not self._closing:
            self._pending.append({"type": "websocket.send", "bytes": data})
            self._flush()

    def close(self, code: int = _CLOSE_NORMAL, reason: str = "") -> None:
        if not self._closing:
            self._closing = True
            self._pending.append({"type": "websocket.close", "code": code, "reason": reason})
            self._flush()

    async def aclose(self) -> None:
        """Wait for a suspended send (briefly)."""
        if self._busy is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._busy, 5.0)

    def _flush(self) -> None:
        while self._busy is None and not self._broken and self._pending:
            message = self._pending.pop(0)
            try:
                self._busy = start_eagerly(cast(Coroutine[Any, Any, None], self._send(message)))
            except Exception:  # the client is gone
                self._broken = True
                self._pending.clear()
                return
            if self._busy is not None:
                if self.session is not None:
                    self.session.pause_writing()
                self._busy.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._busy = None
        if task.cancelled() or task.exception() is not None:
            self._broken = True
            self._pending.clear()
            return
        if self.session is not None:
            self.session.resume_writing()
        self._flush()


class RSocketWebSocketHandler:
    """Serves accepted ``/v1/rsocket`` WebSockets; see the module docstring."""

    def __init__(self, gateway: Gateway, config: RSocketServerConfig | None = None) -> None:
        self.gateway = gateway
        self.config = config or RSocketServerConfig()

    async def __call__(
        self,
        principal: Principal | None,
        peer: PeerIdentity | None,
        origin: str | None,
        receive: Receive,
        send: Send,
    ) -> None:
        """Run the session until either side closes."""
        link = _WebSocketLink(send)
        session = RSocketSession(
            self.gateway, self.config, link, framed=False, principal=principal, peer=peer,
            origin=origin,
        )  # fmt: skip
        link.session = session
        try:
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.disconnect":
                    break
                if kind != "websocket.receive" or session.closed:
                    continue
                data = message.get("bytes")
                if data is None:
                    link.close(_CLOSE_UNSUPPORTED_DATA, "RSocket frames travel in binary messages")
                    session.close(message="text message on /v1/rsocket")
                    continue
                session.frame_received(data)
        finally:
            await link.aclose()
            await session.aclose()
            link.session = None  # the session holds the link: a cycle
