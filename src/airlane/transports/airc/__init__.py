"""The AIRC transport: `AircSession` bound to the gateway, over TCP (`AircTcpServer`) and
over WebSocket (`AircWebSocketHandler`, subprotocol ``airc.v1.2`` on ``/v1/ws``)."""

from airlane.transports.airc.config import AIRC_SUBPROTOCOL, AircServerConfig
from airlane.transports.airc.session import AircSession, Link, RtcSignalling
from airlane.transports.airc.tcp import AircTcpServer
from airlane.transports.airc.websocket import AircWebSocketHandler

__all__ = [
    "AIRC_SUBPROTOCOL",
    "AircServerConfig",
    "AircSession",
    "AircTcpServer",
    "AircWebSocketHandler",
    "Link",
    "RtcSignalling",
]
