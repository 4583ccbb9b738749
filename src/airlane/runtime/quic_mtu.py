"""How large a QUIC connection's datagrams are: 1,200 bytes (what every QUIC path carries)
until the handshake is done, then as large as the route to the peer allows, up to a ceiling,
and back to 1,200 when the path shows it carries less.

Three sources, none of them a probe of aioquic's (it has no way to send a padded probe that is
not resent as ordinary data when lost):

- the **route**: the kernel's path MTU towards the peer (the device's MTU, or a smaller one a
  router reported with ICMP), read from a connected UDP socket (`route_limit`), less the IP and
  UDP headers;
- **"too big"**: the sending socket sets Don't Fragment and asks the kernel to refuse what
  exceeds the known path MTU (`forbid_fragments`), so a router's ICMP report turns the next
  larger send into ``EMSGSIZE``; the connection then reads the route again (`on_too_big`);
- **a black hole**: a path that drops larger packets without a word (its ICMP filtered). While
  no datagram above 1,200 bytes has been acknowledged, `BLACK_HOLE_LOSSES` of them lost bring
  the size back to 1,200 for good (`DatagramSize.lost`); once one was acknowledged the path is
  known to carry them (aioquic hands a controller the acknowledged packets of an ACK frame
  before the lost ones, so random loss alone does not look like a black hole).

`DatagramSize` is the bookkeeping, without I/O; `airlane.runtime.quic_protocol.QuicProtocol`
applies it to aioquic's connection.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = [
    "BLACK_HOLE_LOSSES",
    "FLOOR",
    "DatagramSize",
    "forbid_fragments",
    "route_limit",
]

FLOOR = 1200
"""The datagram size every QUIC path must carry (RFC 9000 section 14)."""
BLACK_HOLE_LOSSES = 3
"""Datagrams above `FLOOR` lost, none acknowledged yet, that mean a black hole."""

# linux/in.h and linux/in6.h: Python's socket module leaves them out.
_IP_MTU_DISCOVER, _IP_PMTUDISC_DO, _IP_MTU = 10, 2, 14
_IPV6_MTU_DISCOVER, _IPV6_PMTUDISC_DO, _IPV6_MTU = 23, 2, 24
_HEADERS = {socket.AF_INET: 20 + 8, socket.AF_INET6: 40 + 8}


def forbid_fragments(sock: socket.socket) -> bool:
    """Set Don't Fragment on ``sock``'s datagrams, and have the kernel refuse (``EMSGSIZE``)
    one larger than the path MTU it knows rather than fragment it; False where it cannot."""
    options = [(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)]
    if sock.family == socket.AF_INET6:
        options.append((socket.IPPROTO_IPV6, _IPV6_MTU_DISCOVER, _IPV6_PMTUDISC_DO))
    done = False
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
            done = True
        except OSError:  # not Linux, or not this family
            continue
    return done


def route_limit(addr: Any) -> int | None:
    """The largest UDP payload the route to ``addr`` (a socket address) carries, by the
    kernel's path MTU; None where the kernel does not tell."""
    host = str(addr[0])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            forbid_fragments(probe)
            probe.connect(addr[:2] if family == socket.AF_INET else addr)
            if family == socket.AF_INET6:
                mtu = probe.getsockopt(socket.IPPROTO_IPV6, _IPV6_MTU)
            else:
                mtu = probe.getsockopt(socket.IPPROTO_IP, _IP_MTU)
    except OSError:
        return None
    headers = _HEADERS[family]
    if host.startswith("::ffff:"):  # an IPv4 peer of a dual-stack socket
        headers = _HEADERS[socket.AF_INET]
    return int(mtu) - headers


class DatagramSize:
    """One connection's datagram size (see the module docstring)."""

    __slots__ = ("ceiling", "confirmed", "fell_back", "lost_large", "size")

    def __init__(self, ceiling: int) -> None:
        if ceiling < FLOOR:
            raise ValueError(f"a ceiling of at least {FLOOR} bytes")
        self.ceiling = ceiling
        self.size = FLOOR
        """The size to send at now."""
        self.confirmed = False
        """A datagram above `FLOOR` was acknowledged: the path carries them."""
        self.fell_back = False
        """A black hole was found: `FLOOR` for the rest of the connection."""
        self.lost_large = 0

    def route(self, limit: int | None) -> int:
        """Take the route's limit (`route_limit`): the new size."""
        if not self.fell_back and limit is not None:
            self.size = max(FLOOR, min(self.ceiling, limit))
        return self.size

    def acked(self, sent_bytes: int) -> None:
        """A packet of ``sent_bytes`` was acknowledged. (Small ones say nothing: through a
        black hole the connection's PINGs still arrive.)"""
        if sent_bytes > FLOOR:
            self.confirmed = True

    def lost(self, sent_bytes: int) -> bool:
        """A packet of ``sent_bytes`` was declared lost; True when that makes it a black hole
        (the size is then `FLOOR`)."""
        if sent_bytes <= FLOOR or self.confirmed or self.fell_back:
            return False
        self.lost_large += 1
        if self.lost_large < BLACK_HOLE_LOSSES:
            return False
        self.fell_back = True
        self.size = FLOOR
        return True
