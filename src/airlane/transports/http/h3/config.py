"""`Http3Config`: the HTTP/3 listener's settings (``[http3]``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Http3Config"]


@dataclass(frozen=True, slots=True)
class Http3Config:
    """``[http3]``: the HTTP/3 (QUIC) listener beside the HTTP port. The defaults are the seed
    white paper's for mobile clients on weak networks."""

    enabled: bool = True
    """Serve HTTP/3 on UDP (``--http3-port -1`` turns it off too)."""
    port: int | None = None
    """The UDP port (default: the HTTP port's number, which ``Alt-Svc`` then names)."""
    idle_timeout_s: float = 30.0
    """A connection with nothing received for this long is closed."""
    keep_alive_s: float = 15.0
    """A connection sends a PING after this long without sending, so that NAT bindings and the
    peer's idle timer stay alive while a long generation thinks (0: never)."""
    stream_window: int = 1 << 20
    """Flow-control window a request stream starts with (bytes the peer may send ahead)."""
    connection_window: int = 8 << 20
    """Flow-control window of a whole connection."""
    max_streams: int = 128
    """Requests one connection may have open at once (more wait for the peer's credit)."""
    max_buffered_bytes: int = 256 << 10
    """Response bytes a stream may hold unacknowledged before its writer waits: the write
    side's backpressure (a slow or lossy reader slows its own stream, no one else's). Where
    the connection's congestion window is larger, four windows (a loss keeps a round trip of
    sending buffered until its resend arrives), at most 32 MiB."""
    max_connections: int = 10_000
    handshake_timeout_s: float = 10.0
    """A connection whose handshake has not completed this long after its first packet is
    dropped (garbage or spoofed Initials would otherwise hold state for the idle timeout)."""
    max_handshakes: int = 1_000
    """Connections in their handshake at once; new ones beyond are dropped unanswered."""
    retry_above: int = 100
    """With more connections than this in their handshake, a new client must first prove its
    address with a Retry round trip (QUIC's address validation: spoofed floods end there);
    0: always, which costs every client one round trip."""
    session_tickets: int = 10_000
    """TLS session tickets remembered for 0-RTT resumption (each resumes one connection; the
    oldest are forgotten past this many, and a restart forgets all)."""
    """QUIC connections held at once; new ones beyond are refused."""
    congestion_control: str = "airlane-bbr"
    """The senders' congestion controller: ``airlane-bbr`` (`airlane.wire.bbr`: random loss is
    not taken for congestion), or aioquic's ``reno`` / ``cubic``."""
    max_datagram_size: int = 1452
    """Largest UDP payload sent: with ``path_mtu_discovery``, the ceiling (1452 fills a
    1500-byte Ethernet path); without, the size of every datagram (1200, QUIC's guaranteed
    minimum, is the one size every path carries)."""
    path_mtu_discovery: bool = True
    """Send 1200-byte datagrams until the handshake is done, then as large as the route to the
    client allows up to ``max_datagram_size``, back to 1200 when the path drops larger ones
    (`airlane.runtime.quic_mtu`; needs ``congestion_control = "airlane-bbr"``)."""
    socket_buffer_bytes: int = 8 << 20
    """UDP receive and send buffers (bounded by the kernel's ``rmem_max``/``wmem_max``): a
    bandwidth-delay product of a fast, long path must fit, or the kernel drops what the
    controller sent."""

    def __post_init__(self) -> None:
        if self.port is not None and not -1 <= self.port <= 65535:
            raise ValueError(f"[http3] port must be 0 to 65535 (or -1: off), not {self.port}")
        for name in ("idle_timeout_s", "handshake_timeout_s", "max_handshakes", "stream_window",
                     "connection_window", "max_streams", "max_buffered_bytes", "max_connections",
                     "session_tickets", "socket_buffer_bytes"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"[http3] {name} must be above 0")
        if self.retry_above < 0:
            raise ValueError("[http3] retry_above must be 0 (always) or more")
        if self.congestion_control not in ("airlane-bbr", "reno", "cubic"):
            raise ValueError("[http3] congestion_control is airlane-bbr, reno or cubic")
        if not 1200 <= self.max_datagram_size <= 65527:
            raise ValueError("[http3] max_datagram_size must be 1200 to 65527")
        if self.keep_alive_s < 0 or (
            self.keep_alive_s and self.keep_alive_s >= self.idle_timeout_s
        ):
            raise ValueError("[http3] keep_alive_s must be 0 (off) or below idle_timeout_s")
