"""`ChannelPort`: a WebRTC data channel seen as an ASGI WebSocket, so the ``/v1/ws`` session
(`airlane.transports.http.websocket.WebSocketSession`) runs on it unchanged.

``receive`` hands out the channel's messages as ``websocket.receive`` (``text`` for a string
message, ``bytes`` for a binary one) and ``websocket.disconnect`` once it closes. At most
``max_queued`` messages wait for the session; a peer that sends more before they are taken
has its channel closed (SCTP gives a receiver no way to slow the sender down). A message over
``max_message`` bytes is answered with an ``error`` (``body_too_large``) and the channel
closed: aiortc reassembles what the peer sends whole, so the bound is checked on delivery.

``send`` writes ``websocket.send`` messages. On a reliable channel it waits while the channel
buffers more than ``high_water`` bytes, so a slow peer holds back its pumps rather than
filling the gateway's memory; on a ``lossy`` one (the unreliable real-time channel) a message
that finds that much buffered is dropped instead, and ``on_drop`` told (it counts them):
late presence is worthless. A
message larger than the peer takes (its SDP ``max-message-size``) is replaced by an ``error``
(``event_too_large``) and the channel closed, so the client resumes elsewhere instead of
missing it silently. A message for a closed channel raises `ChannelGone` (an `OSError`,
which the session's pumps treat as the end of their socket).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from airlane.core.errors import ErrorCode

__all__ = ["ChannelGone", "ChannelPort"]

log = logging.getLogger("airlane.webrtc")

_msgpack = msgspec.msgpack.Encoder()


class ChannelGone(ConnectionResetError):
    """The data channel is closed."""


class ChannelPort:
    """See the module docstring."""

    def __init__(
        self,
        channel: Any,
        *,
        max_queued: int,
        high_water: int,
        max_message: int = 262_144,
        binary: bool = False,
        lossy: bool = False,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.channel = channel
        self.max_queued = max_queued
        self.high_water = high_water
        self.max_message = max_message
        self.binary = binary
        self.lossy = lossy
        self.overflowed = False
        self._on_drop = on_drop
        self._incoming: deque[str | bytes] = deque()
        self._arrived = asyncio.Event()
        self._closed = False
        self._drained = asyncio.Event()
        self._drained.set()
        channel.bufferedAmountLowThreshold = high_water // 2
        channel.on("message", self._on_message)
        channel.on("close", self._on_close)
        channel.on("bufferedamountlow", self._drained.set)

    @property
    def closed(self) -> bool:
        """Whether the channel has closed."""
        return self._closed

    def _on_message(self, data: str | bytes) -> None:
        if self._closed:
            return
        size = len(data) if isinstance(data, bytes) else len(data.encode())
        if size > self.max_message:
            self._refuse(
                ErrorCode.BODY_TOO_LARGE,
                f"a message of {size} bytes; a channel takes at most {self.max_message}",
            )
            return
        if len(self._incoming) >= self.max_queued:
            self.overflowed = True
            log.warning(
                "webrtc: channel %r sent more than %d messages ahead; closed",
                self.channel.label,
                self.max_queued,
            )
            self._shut()
            return
        self._incoming.append(data)
        self._arrived.set()

    def _refuse(self, code: ErrorCode, message: str) -> None:
        """Tell the peer why, then close the channel."""
        log.info("webrtc: channel %r closed: %s", self.channel.label, message)
        error = {"op": "error", "code": code.value, "message": message}
        frame: str | bytes = _msgpack.encode(error) if self.binary else orjson.dumps(error).decode()
        if self.channel.readyState == "open":
            self.channel.send(frame)
        self.overflowed = True
        self._shut()

    def _shut(self) -> None:
        self.channel.close()
        self._on_close()

    def _on_close(self) -> None:
        self._closed = True
        self._arrived.set()
        self._drained.set()

    async def receive(self) -> dict[str, Any]:
        """The next ASGI WebSocket message."""
        while not self._incoming and not self._closed:
            self._arrived.clear()
            await self._arrived.wait()
        if self._incoming:
            data = self._incoming.popleft()
            if isinstance(data, str):
                return {"type": "websocket.receive", "text": data}
            return {"type": "websocket.receive", "bytes": data}
        return {"type": "websocket.disconnect", "code": 1008 if self.overflowed else 1000}

    async def send(self, message: Any) -> None:
        """Write an ASGI WebSocket message to the channel."""
        kind = message["type"]
        if kind == "websocket.send":
            data = message.get("text")
            if data is None:
                data = message.get("bytes")
            await self._write(data)
        elif kind == "websocket.send_many":
            for data in message.get("texts") or message.get("bytes") or ():
                await self._write(data.decode() if "texts" in message else data)
        elif kind == "websocket.close" and not self._closed:
            self._shut()
        # websocket.accept: the channel is open already.

    async def _write(self, data: str | bytes) -> None:
        if self.lossy:
            if not self._closed and self.channel.bufferedAmount > self.high_water:
                if self._on_drop is not None:
                    self._on_drop()
                return
        else:
            while not self._closed and self.channel.bufferedAmount > self.high_water:
                self._drained.clear()
                await self._drained.wait()
        if self._closed or self.channel.readyState != "open":
            raise ChannelGone("the data channel is closed")
        try:
            self.channel.send(data)
        except ValueError as exc:  # aiortc: more than the peer's max-message-size
            self._refuse(
                ErrorCode.EVENT_TOO_LARGE,
                f"{exc}: read this stream over /v1/ws or SSE from the last id seen",
            )
            raise ChannelGone("the peer cannot take a message this large") from None
