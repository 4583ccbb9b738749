"""Airlane's QUIC congestion control, registered with aioquic as ``airlane-bbr``.

`airlane.wire.bbr.Bbr` is the controller (sans-I/O); this adapts it to aioquic's
`QuicCongestionControl` interface through aioquic's public ``register_congestion_control``, so
that a `QuicConfiguration` with ``congestion_control_algorithm="airlane-bbr"`` uses it. The HTTP/3
listener and `airlane.client.h3.H3Client` both do: a transfer is only as fast as its sender's
controller, and each side sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aioquic.quic.congestion.base import QuicCongestionControl, register_congestion_control
from aioquic.quic.packet_builder import QuicSentPacket

from airlane.runtime.quic_mtu import DatagramSize
from airlane.wire.bbr import Bbr

__all__ = ["ALGORITHM", "AirlaneBbr"]

ALGORITHM = "airlane-bbr"
"""The name aioquic knows it by (``QuicConfiguration.congestion_control_algorithm``)."""


class AirlaneBbr(QuicCongestionControl):
    """`Bbr` behind aioquic's interface. Packets are named by identity: aioquic keeps each
    sent packet's object until it is acknowledged, lost or dropped, and so does `Bbr`."""

    def __init__(self, *, max_datagram_size: int) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self._bbr = Bbr(max_datagram_size)
        self.congestion_window = self._bbr.window
        self.sizes: DatagramSize | None = None
        """The connection's datagram size, told what is acknowledged and lost (set by
        `airlane.runtime.quic_protocol.QuicProtocol`)."""
        self.on_black_hole: Callable[[], None] | None = None
        """Called when the losses show a path that drops larger datagrams."""

    def on_packet_sent(self, *, packet: QuicSentPacket) -> None:
        self.bytes_in_flight += packet.sent_bytes
        self._bbr.on_sent(id(packet), packet.sent_bytes, packet.sent_time or 0.0)

    def on_packet_acked(self, *, now: float, packet: QuicSentPacket) -> None:
        self.bytes_in_flight -= packet.sent_bytes
        self._bbr.on_acked(id(packet), now)
        self.congestion_window = self._bbr.window
        if self.sizes is not None:
            self.sizes.acked(packet.sent_bytes)

    def on_packets_expired(self, *, packets: Iterable[QuicSentPacket]) -> None:
        for packet in packets:
            self.bytes_in_flight -= packet.sent_bytes
            self._bbr.forget(id(packet))

    def on_packets_lost(self, *, now: float, packets: Iterable[QuicSentPacket]) -> None:
        black_hole = False
        for packet in packets:
            self.bytes_in_flight -= packet.sent_bytes
            self._bbr.on_lost(id(packet), now)
            if self.sizes is not None:
                black_hole |= self.sizes.lost(packet.sent_bytes)
        self.congestion_window = self._bbr.window
        if black_hole and self.on_black_hole is not None:
            self.on_black_hole()

    def on_persistent_congestion(self) -> None:
        self._bbr.on_persistent_congestion(0.0)
        self.congestion_window = self._bbr.window

    def on_rtt_measurement(self, *, now: float, rtt: float) -> None:
        self._bbr.on_rtt(rtt, now)
        self.congestion_window = self._bbr.window

    def get_log_data(self) -> dict[str, Any]:
        data = super().get_log_data()
        bbr = self._bbr
        data.update(mode=bbr.mode.value, bandwidth=bbr.bandwidth, min_rtt=bbr.min_rtt)
        return data


register_congestion_control(ALGORITHM, AirlaneBbr)
