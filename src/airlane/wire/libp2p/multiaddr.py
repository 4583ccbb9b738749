"""Multiaddrs: the self-describing addresses libp2p peers exchange, as text
(``/ip4/127.0.0.1/tcp/60000/ws/p2p/12D3KooW...``) and as bytes (identify, peer exchange).

Only the protocols a Waku node meets are known (IP, DNS, TCP/UDP, WebSocket, TLS, QUIC,
WebTransport, p2p); an address with any other is a `DecodeError`, so a caller skips it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.identity import PeerId
from airlane.wire.libp2p.varint import decode_uvarint, encode_uvarint

__all__ = ["Multiaddr"]

# name -> (code, size): size in bytes, 0 for a flag, -1 for a varint-length-prefixed value.
_PROTOCOLS = {
    "ip4": (4, 4),
    "tcp": (6, 2),
    "udp": (273, 2),
    "ip6": (41, 16),
    "dns": (53, -1),
    "dns4": (54, -1),
    "dns6": (55, -1),
    "dnsaddr": (56, -1),
    "p2p": (421, -1),
    "tls": (448, 0),
    "quic-v1": (461, 0),
    "webtransport": (465, 0),
    "certhash": (466, -1),
    "ws": (477, 0),
    "wss": (478, 0),
}
_BY_CODE = {code: (name, size) for name, (code, size) in _PROTOCOLS.items()}
_DIGITS = re.compile(r"[0-9]{1,5}")
MAX_ADDRESS = 512
"""The longest binary multiaddr read."""


@dataclass(frozen=True, slots=True)
class Multiaddr:
    """An address as ``(protocol, value)`` parts (value ``""`` for a flag like ``ws``)."""

    parts: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Multiaddr:
        """Read the text form.

        Raises:
            DecodeError: an unknown protocol, a missing or malformed value.
        """
        if not text.startswith("/"):
            raise DecodeError(f"a multiaddr starts with '/': {text[:80]!r}")
        pieces = text[1:].split("/")
        parts: list[tuple[str, str]] = []
        index = 0
        while index < len(pieces):
            name = pieces[index]
            known = _PROTOCOLS.get(name)
            if known is None:
                raise DecodeError(f"unknown multiaddr protocol {name[:40]!r}")
            if known[1] == 0:
                parts.append((name, ""))
                index += 1
                continue
            if index + 1 >= len(pieces) or not pieces[index + 1]:
                raise DecodeError(f"multiaddr protocol {name} without its value")
            value = pieces[index + 1]
            _value_bytes(name, value)  # checks it
            parts.append((name, value))
            index += 2
        return cls(tuple(parts))

    @classmethod
    def of(cls, host: str, port: int, *, ws: bool = False) -> Multiaddr:
        """``/ip4/<host>/tcp/<port>`` (``ip6`` for an IPv6 host), with ``/ws`` if ``ws``."""
        family = "ip6" if ":" in host else "ip4"
        parts: list[tuple[str, str]] = [(family, host), ("tcp", str(port))]
        if ws:
            parts.append(("ws", ""))
        return cls(tuple(parts))

    @classmethod
    def from_bytes(cls, data: bytes) -> Multiaddr:
        """Read the binary form.

        Raises:
            DecodeError: truncated, too long, or an unknown protocol code.
        """
        if len(data) > MAX_ADDRESS:
            raise DecodeError(f"multiaddr of {len(data)} bytes")
        parts: list[tuple[str, str]] = []
        offset = 0
        while offset < len(data):
            head = decode_uvarint(data, offset)
            if head is None:
                raise DecodeError("truncated multiaddr")
            code, offset = head
            known = _BY_CODE.get(code)
            if known is None:
                raise DecodeError(f"unknown multiaddr protocol code {code}")
            name, size = known
            if size < 0:
                length_head = decode_uvarint(data, offset)
                if length_head is None:
                    raise DecodeError("truncated multiaddr")
                size, offset = length_head
            if offset + size > len(data):
                raise DecodeError("truncated multiaddr")
            parts.append((name, _value_text(name, data[offset : offset + size])))
            offset += size
        return cls(tuple(parts))

    def to_bytes(self) -> bytes:
        """The binary form."""
        out = bytearray()
        for name, value in self.parts:
            code, size = _PROTOCOLS[name]
            out += encode_uvarint(code)
            raw = _value_bytes(name, value)
            if size < 0:
                out += encode_uvarint(len(raw))
            out += raw
        return bytes(out)

    def value(self, name: str) -> str | None:
        """The value of the first part named ``name``, if any."""
        for part, value in self.parts:
            if part == name:
                return value
        return None

    def peer_id(self) -> PeerId | None:
        """The ``/p2p/`` part, if any."""
        text = self.value("p2p")
        return PeerId.parse(text) if text is not None else None

    def without_peer(self) -> Multiaddr:
        """The address without its ``/p2p/`` part."""
        return Multiaddr(tuple(part for part in self.parts if part[0] != "p2p"))

    def with_peer(self, peer: PeerId) -> Multiaddr:
        """The address ending in ``/p2p/<peer>``."""
        return Multiaddr((*self.without_peer().parts, ("p2p", str(peer))))

    def __str__(self) -> str:
        return "".join(f"/{name}/{value}" if value else f"/{name}" for name, value in self.parts)


def _value_bytes(name: str, value: str) -> bytes:
    try:
        if name == "ip4":
            return ipaddress.IPv4Address(value).packed
        if name == "ip6":
            return ipaddress.IPv6Address(value).packed
        if name in ("tcp", "udp"):
            if _DIGITS.fullmatch(value) is None or int(value) > 65535:
                raise ValueError(f"port {value[:20]!r}")
            return int(value).to_bytes(2, "big")
        if name == "p2p":
            return PeerId.parse(value).multihash
        if name == "certhash":  # multibase: only base64url ("u"), what libp2p writes
            if not value.startswith("u"):
                raise ValueError("a certhash is base64url multibase ('u...')")
            return base64.urlsafe_b64decode(value[1:] + "=" * (-len(value[1:]) % 4))
        if _PROTOCOLS[name][1] == 0:
            return b""
        return value.encode()
    except (ValueError, binascii.Error) as exc:
        raise DecodeError(f"bad multiaddr value for {name}: {exc}") from None


def _value_text(name: str, raw: bytes) -> str:
    try:
        if name == "ip4":
            return str(ipaddress.IPv4Address(raw))
        if name == "ip6":
            return str(ipaddress.IPv6Address(raw))
        if name in ("tcp", "udp"):
            return str(int.from_bytes(raw, "big"))
        if name == "p2p":
            return str(PeerId.from_bytes(raw))
        if name == "certhash":
            return "u" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return raw.decode() if raw else ""
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"bad multiaddr value for {name}: {exc}") from None
