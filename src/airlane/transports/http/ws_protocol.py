"""uvicorn's sans-I/O WebSocket protocol, plus one ASGI extension: many messages in one write.

ASGI sends one WebSocket message per ``websocket.send``, and uvicorn writes each to the socket
at once: a system call per message, which is most of what a streamed chunk costs once the
gateway batches everything else. `airlane serve` runs this protocol instead, and advertises
the ``airlane.websocket.send_many`` extension in the scope: a handler that sees it may send

    {"type": "websocket.send_many", "texts": [b"...", ...]}   # UTF-8 text messages
    {"type": "websocket.send_many", "bytes": [b"...", ...]}   # binary messages

and every message is framed by the same ``websockets`` connection (so negotiated extensions
such as permessage-deflate apply) and written with one ``write``. Handlers check the scope,
so the app stays mountable under any ASGI server, where they send message by message.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

__all__ = ["SEND_MANY", "SEND_MANY_TYPE", "BatchingWebSocketProtocol"]

SEND_MANY = "airlane.websocket.send_many"
"""The scope extension's name."""
SEND_MANY_TYPE = "websocket.send_many"
"""The ASGI message type it adds."""


class BatchingWebSocketProtocol(WebSocketsSansIOProtocol):
    """`WebSocketsSansIOProtocol` with the ``airlane.websocket.send_many`` extension."""

    def handle_connect(self, event: Request) -> None:
        """Build the scope as uvicorn does, then advertise the extension."""
        super().handle_connect(event)
        self.scope["extensions"][SEND_MANY] = {}

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
            for text in texts:
                self.conn.send_text(text)
        else:
            for data in message.get("bytes", ()):
                self.conn.send_binary(data)
        self.transport.write(b"".join(self.conn.data_to_send()))
