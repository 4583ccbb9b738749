"""AIRC over WebSocket: subprotocol ``airc.v1.2`` on ``/v1/ws``.

The HTTP transport authenticates the handshake and accepts the subprotocol; this handler then
carries AIRC's byte stream in binary messages (a message may hold several frames, or part of
one: the decoder does not care). A text message is refused with close 1003; a protocol error
closes with ``4000 +`` the GOAWAY code and the reason, after the ``GOAWAY``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, cast

from airlane.gateway import Gateway, PeerIdentity, Principal
from airlane.runtime.eager import start_eagerly
from airlane.runtime.socket_lanes import LaneMarker
from airlane.transports.airc.config import AircServerConfig
from airlane.transports.airc.session import AircSession, RtcSignalling
from airlane.wire.airc import ErrorCode as GoAwayCode

__all__ = ["AircWebSocketHandler"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_CLOSE_UNSUPPORTED_DATA = 1003


class _WebSocketLink:
    """Sends the session's writes as binary messages, in order, in the writer's own turn.

    An ASGI ``send`` only suspends for flow control, so it is driven in place
    (`airlane.runtime.eager.start_eagerly`): no task switch per write. When it does suspend, later
    writes are joined and wait for it (and the session's pumps pause), so the order holds and
    what is buffered stays bounded by the send windows.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[bytes] = []
        self._busy: asyncio.Task[None] | None = None
        self._close: tuple[int, str] | None = None
        self._close_sent = False
        self._broken = False
        self.session: AircSession | None = None

    def write(self, data: bytes) -> None:
        if not self._broken:
            self._pending.append(data)
            self._flush()

    def close(self, code: GoAwayCode, reason: str) -> None:
        self.close_with(code.ws_close_code, reason)

    def close_with(self, code: int, reason: str) -> None:
        """Close with a WebSocket close code, after what was written."""
        if self._close is None:
            self._close = (code, reason[:120])  # RFC 6455: a reason of at most 123 bytes
            self._flush()

    async def aclose(self) -> None:
        """Wait for a suspended send (briefly), then stop."""
        busy = self._busy
        if busy is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(busy, 5.0)

    def _flush(self) -> None:
        while self._busy is None and not self._broken:
            if self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                message: Message = {"type": "websocket.send", "bytes": data}
            elif self._close is not None and not self._close_sent:
                self._close_sent = True
                code, reason = self._close
                message = {"type": "websocket.close", "code": code, "reason": reason}
            else:
                return
            try:
                self._busy = start_eagerly(cast(Coroutine[Any, Any, None], self._send(message)))
            except Exception:  # the client is gone (the server raises ClientDisconnected)
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


class AircWebSocketHandler:
    """Serves one accepted ``airc.v1.2`` WebSocket; see the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        config: AircServerConfig | None = None,
        *,
        rtc: RtcSignalling | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config or AircServerConfig()
        self.rtc = rtc
        """WebRTC signalling for ``RTC_*`` messages (the HTTP app's peers), if any."""

    async def __call__(
        self,
        principal: Principal,
        peer: PeerIdentity | None,
        origin: str | None,
        receive: Receive,
        send: Send,
        mark_lane: LaneMarker | None = None,
    ) -> None:
        """Run the session until either side closes: ``peer`` is the TLS client identity,
        ``origin`` the client's address (an ``AUTH`` inside the session is guarded and
        audited by it, as over TCP), ``mark_lane`` marks the socket under the WebSocket when
        the client sends ``SET_LANE``."""
        link = _WebSocketLink(send)
        session = AircSession(
            self.gateway,
            self.config,
            link,
            principal=principal,
            peer=peer,
            origin=origin,
            rtc=self.rtc,
            mark_lane=mark_lane,
        )
        link.session = session
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
                    session.close(GoAwayCode.NO_ERROR, "text message on airc.v1.2")
                    continue
                session.data_received(data)
        finally:
            await link.aclose()
            await session.aclose()
            link.session = None  # the session holds the link: a cycle the collector would free
