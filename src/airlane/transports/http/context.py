"""What every HTTP handler is given: the gateway, the configuration and the metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airlane.gateway import Gateway, PeerIdentity, Principal
from airlane.runtime.lane_flows import LaneFlows
from airlane.runtime.socket_lanes import LaneMarker, LanesConfig
from airlane.transports.http.asgi import Receive, Request, Send
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.http_protocol import WRITE_BODY
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.sse_pump import SSEPump
from airlane.transports.http.webrtc.config import WebRtcConfig

if TYPE_CHECKING:
    from airlane.transports.http.webrtc.peer import WebRtcPeers

__all__ = ["AppContext", "WebSocketEndpoint", "WebSocketHandler"]

WebSocketHandler = Callable[
    [Principal, PeerIdentity | None, str | None, Receive, Send, LaneMarker | None],
    Awaitable[None],
]
"""Serves an accepted ``/v1/ws`` socket whose subprotocol another transport speaks (AIRC):
called with the authenticated principal after the handshake, the TLS client identity, the
client's address (for the failed-login guard and the audit log of logins inside the
protocol), and what marks the connection's socket with a lane, where it has one; it owns the
socket."""

WebSocketEndpoint = Callable[
    [Principal | None, PeerIdentity | None, str | None, Receive, Send], Awaitable[None]
]
"""Serves an accepted WebSocket on a path of its own whose protocol authenticates inside
(RSocket's SETUP): called after the handshake with the principal its credentials named (None
when it carried none), the TLS client identity and the client's address; it owns the socket."""


@dataclass(slots=True)
class AppContext:
    """Shared state of one HTTP application."""

    gateway: Gateway
    config: HttpConfig
    metrics: HttpMetrics
    subprotocols: Mapping[str, WebSocketHandler] = field(default_factory=dict)
    """Extra ``/v1/ws`` subprotocols and their handlers, given by the composition root (a
    transport never imports another)."""
    webrtc: WebRtcConfig = field(default_factory=WebRtcConfig)
    """The WebRTC peer's ICE servers and bounds (``[webrtc]``)."""
    lanes: LanesConfig = field(default_factory=LanesConfig)
    """How a connection that declares its lane is marked (``[lanes]``)."""
    lane_flows: LaneFlows | None = None
    """The shaping classifier's flow map, where the composition root gave one."""
    peers: WebRtcPeers | None = None
    """The WebRTC peer connections, made on the first signalling request."""

    def webrtc_peers(self) -> WebRtcPeers:
        """The WebRTC peer connections (made now if this is the first call)."""
        if self.peers is None:
            from airlane.transports.http.webrtc.peer import WebRtcPeers

            self.peers = WebRtcPeers(self, self.webrtc)
        return self.peers

    def sse_pump(self, request: Request, receive: Receive, send: Send) -> SSEPump:
        """An SSE response for ``request`` with this app's heartbeat, batching, metrics and
        the compression negotiated for the client."""
        return SSEPump(
            send,
            receive,
            ping_s=self.config.sse_ping_s,
            batch_limit=self.config.batch_limit,
            metrics=self.metrics,
            compression=request.compression(),
            write_body=request.extension(WRITE_BODY),
        )
