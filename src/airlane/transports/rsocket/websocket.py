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
from airlane.transports.rsocket.resumption import detached_sessions
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

    def adopt(self, session: RSocketSession) -> None:
        """This socket resumed ``session``: hand it what arrives from now on."""
        self.session = session

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
        self.detached = detached_sessions(gateway, self.config)
        """Resumable sessions whose connection dropped (shared with the TCP listener)."""

    async def aclose(self) -> None:
        """Close the detached sessions (at shutdown, before the gateway closes)."""
        await self.detached.aclose()

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
            origin=origin, detached=self.detached,
        )  # fmt: skip
        link.session = session
        try:
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.disconnect":
                    break
                session = link.session or session  # a RESUME hands the socket to another
                if kind != "websocket.receive" or session.closed:
                    continue
                if not session.attached_to(link):
                    continue  # the session resumed on another connection: this one is over
                data = message.get("bytes")
                if data is None:
                    link.close(_CLOSE_UNSUPPORTED_DATA, "RSocket frames travel in binary messages")
                    session.close(message="text message on /v1/rsocket")
                    continue
                session.frame_received(data)
        finally:
            await link.aclose()
            session = link.session or session
            if session.attached_to(link) and not session.detach():
                await session.aclose()
            link.session = None  # the session holds the link: a cycle
