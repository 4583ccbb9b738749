"""``[webrtc]``: the data-channel peer's ICE servers and bounds."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WebRtcConfig"]


@dataclass(frozen=True, slots=True)
class WebRtcConfig:
    """How the gateway's WebRTC peer connects (``[webrtc]``, docs/webrtc.md)."""

    stun: tuple[str, ...] = ()
    """STUN servers (``stun:host:3478``) the gateway gathers server-reflexive candidates
    with, and hands to clients; none: host candidates only."""
    turn: tuple[str, ...] = ()
    """TURN servers (``turn:host:3478?transport=udp``, ``turns:host:5349?transport=tcp``)
    for relayed candidates, the fallback when no direct path works."""
    turn_secret: str | None = None
    """The TURN server's shared secret (coturn's ``static-auth-secret``): credentials are
    minted per session with it (the TURN REST API's time-limited HMAC scheme)."""
    turn_ttl_s: int = 3600
    """How long minted TURN credentials are valid."""
    max_peers: int = 256
    """Peer connections at once; an offer past that is refused (503)."""
    ice_timeout_s: float = 15.0
    """A peer connection that is not connected this long after its answer is closed."""
    max_sdp_bytes: int = 65_536
    """Largest offer (and trickled candidate fragment) taken."""
    max_candidates: int = 64
    """Remote candidates one peer connection takes (trickled and in the offer)."""
    max_channels: int = 16
    """Data channels one peer connection is served on at once; one more is closed as it
    opens. (Each holds a session with its own queue: without it a peer could open thousands.)"""
    max_queued: int = 256
    """Messages from a channel waiting for the gateway; a peer that sends faster is closed."""
    send_high_water: int = 1 << 20
    """Bytes a channel may buffer before the gateway waits to send more (a reliable channel)
    or drops what it would send (the real-time channel, ``airlane.rt``)."""
    max_message_bytes: int = 262_144
    """Largest message a channel takes from a peer (aiortc advertises 256 KiB in its SDP)."""

    def __post_init__(self) -> None:
        for name in (
            "max_peers",
            "max_sdp_bytes",
            "max_candidates",
            "max_channels",
            "max_queued",
            "max_message_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"[webrtc] {name} must be at least 1")
        if not self.ice_timeout_s > 0 or self.turn_ttl_s < 1:
            raise ValueError("[webrtc] ice_timeout_s and turn_ttl_s must be above 0")
        if self.turn and not self.turn_secret:
            raise ValueError("[webrtc] turn servers need turn_secret (coturn static-auth-secret)")
