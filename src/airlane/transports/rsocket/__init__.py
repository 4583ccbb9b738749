"""The RSocket transport: RSocket 1.0 over TCP (a listener of its own) and over WebSocket
(``/v1/rsocket`` on the HTTP port), bound to the gateway by routes
(`airlane.transports.rsocket.routes`); the protocol itself is `airlane.wire.rsocket`."""

from __future__ import annotations

from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.transports.rsocket.session import RSocketSession
from airlane.transports.rsocket.tcp import RSocketTcpServer
from airlane.transports.rsocket.websocket import RSOCKET_WS_PATH, RSocketWebSocketHandler

__all__ = [
    "RSOCKET_WS_PATH",
    "RSocketServerConfig",
    "RSocketSession",
    "RSocketTcpServer",
    "RSocketWebSocketHandler",
]
