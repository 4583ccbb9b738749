"""`airlane.runtime.quic_mtu`: the datagram size's bookkeeping, and the kernel's answers about
routes on real sockets."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from airlane.runtime.quic_mtu import (
    BLACK_HOLE_LOSSES,
    FLOOR,
    DatagramSize,
    forbid_fragments,
    route_limit,
)


def test_the_size_starts_at_the_floor_and_takes_the_route_up_to_the_ceiling() -> None:
    sizes = DatagramSize(1452)
    assert sizes.size == FLOOR
    assert sizes.route(65_508) == 1452  # loopback: the ceiling
    assert sizes.route(1272) == 1272  # a 1300-byte route
    assert sizes.route(900) == FLOOR  # never below what QUIC needs
    assert sizes.route(None) == FLOOR  # the kernel said nothing: as it was
    with pytest.raises(ValueError):
        DatagramSize(1000)


def test_larger_datagrams_lost_before_any_is_acknowledged_mean_a_black_hole() -> None:
    sizes = DatagramSize(1452)
    sizes.route(1472)
    for _ in range(BLACK_HOLE_LOSSES - 1):
        assert not sizes.lost(1452)
    sizes.acked(60)  # a small packet (a PING) arriving says nothing about large ones
    assert not sizes.lost(1200)  # nor does a small one lost
    assert sizes.lost(1452)
    assert sizes.size == FLOOR and sizes.fell_back
    assert sizes.route(1472) == FLOOR  # for the rest of the connection
    assert not sizes.lost(1452)  # said once


def test_once_a_larger_datagram_is_acknowledged_losses_are_only_losses() -> None:
    sizes = DatagramSize(1452)
    sizes.route(1472)
    sizes.acked(1452)
    assert not any(sizes.lost(1452) for _ in range(50))
    assert sizes.size == 1452


@pytest.mark.parametrize(
    ("host", "family"), [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)]
)
def test_the_route_limit_is_the_devices_mtu_less_the_headers(host: str, family: int) -> None:
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            pytest.skip(f"no {host} here")
        assert forbid_fragments(sock)
        limit = route_limit(sock.getsockname())
    mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    if family == socket.AF_INET:  # an IPv4 packet is at most 65,535 bytes, whatever the device
        assert limit == min(mtu, 65_535) - 28
    else:
        assert limit == mtu - 48
