"""The identify message (``/ipfs/id/1.0.0``) and the ping protocol's constants.

Identify is how a js-waku node learns what a service node speaks: it opens the stream, the
node writes one length-prefixed ``Identify`` message (its key, addresses, protocols and the
address it sees the peer at) and closes. Ping echoes 32-byte payloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.multiaddr import Multiaddr
from airlane.wire.libp2p.protobuf import BYTES, Writer, fields, text

__all__ = [
    "IDENTIFY_PROTOCOL",
    "IDENTIFY_PUSH_PROTOCOL",
    "PING_PROTOCOL",
    "PING_SIZE",
    "Identify",
]

IDENTIFY_PROTOCOL = "/ipfs/id/1.0.0"
IDENTIFY_PUSH_PROTOCOL = "/ipfs/id/push/1.0.0"
PING_PROTOCOL = "/ipfs/ping/1.0.0"
PING_SIZE = 32
MAX_LISTED = 64
"""Addresses or protocols read from one identify message at most."""


@dataclass(frozen=True, slots=True)
class Identify:
    """What a peer says about itself."""

    public_key: bytes = b""
    listen_addrs: tuple[Multiaddr, ...] = ()
    protocols: tuple[str, ...] = ()
    observed_addr: Multiaddr | None = None
    protocol_version: str = "ipfs/0.1.0"
    agent_version: str = ""

    def encode(self) -> bytes:
        """The ``Identify`` Protobuf."""
        writer = Writer()
        if self.public_key:
            writer.data(1, self.public_key)
        for address in self.listen_addrs:
            writer.data(2, address.to_bytes())
        for protocol in self.protocols:
            writer.string(3, protocol)
        if self.observed_addr is not None:
            writer.data(4, self.observed_addr.to_bytes())
        writer.string(5, self.protocol_version)
        if self.agent_version:
            writer.string(6, self.agent_version)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> Identify:
        """Read the Protobuf; addresses this module cannot read are left out."""
        key = b""
        addresses: list[Multiaddr] = []
        protocols: list[str] = []
        observed: Multiaddr | None = None
        version = agent = ""
        for number, wire_type, value in fields(data):
            if wire_type != BYTES or not isinstance(value, bytes):
                continue
            if number == 1:
                key = value
            elif number in (2, 4):
                try:
                    address = Multiaddr.from_bytes(value)
                except DecodeError:
                    continue
                if number == 4:
                    observed = address
                elif len(addresses) < MAX_LISTED:
                    addresses.append(address)
            elif number == 3 and len(protocols) < MAX_LISTED:
                protocols.append(text(value, "identify protocol"))
            elif number == 5:
                version = text(value, "identify protocolVersion")
            elif number == 6:
                agent = text(value, "identify agentVersion")
        return cls(key, tuple(addresses), tuple(protocols), observed, version, agent)
