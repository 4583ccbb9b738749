"""WebRTC data channels: the ``/v1/ws`` session protocol peer to peer, signalled over HTTP.

See `airlane.transports.http.webrtc.peer` (the peer connections and their channels),
`airlane.transports.http.webrtc.signalling` (the endpoints) and docs/webrtc.md. aiortc, the
``webrtc`` extra, is imported on the first offer only.
"""

from __future__ import annotations

from airlane.transports.http.webrtc.config import WebRtcConfig
from airlane.transports.http.webrtc.peer import CHANNEL_LABELS, WebRtcPeer, WebRtcPeers
from airlane.transports.http.webrtc.port import ChannelGone, ChannelPort
from airlane.transports.http.webrtc.turn import turn_credentials

__all__ = [
    "CHANNEL_LABELS",
    "ChannelGone",
    "ChannelPort",
    "WebRtcConfig",
    "WebRtcPeer",
    "WebRtcPeers",
    "turn_credentials",
]
