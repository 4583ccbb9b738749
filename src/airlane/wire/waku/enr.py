"""Ethereum Node Records (EIP-778) as Waku uses them (31/WAKU2-ENR): what peer exchange hands
out. A record is the RLP list ``[signature, seq, key, value, ...]`` (keys sorted), signed by
the node's secp256k1 key (the "v4" identity scheme: the signature is ``r || s`` over the
Keccak-256 of ``RLP([seq, key, value, ...])``). Waku's keys: ``multiaddrs`` (each address
behind a 2-byte length, without ``/p2p/``), ``waku2`` (a bit per protocol: relay, store,
filter, light push) and ``rs`` (cluster and shards); ``ip``/``tcp`` as EIP-778 defines them.

The peer a record describes is the libp2p peer of its ``secp256k1`` key, so only a node whose
libp2p identity is a secp256k1 key can make a record that dials to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    Prehashed,
    decode_dss_signature,
    encode_dss_signature,
)

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.identity import SECP256K1, PeerId, PublicKey
from airlane.wire.libp2p.multiaddr import Multiaddr
from airlane.wire.waku.keccak import keccak256

__all__ = ["MAX_RECORD", "Enr", "rlp_decode", "rlp_encode"]

MAX_RECORD = 300
"""EIP-778's bound on an encoded record."""
_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
"""The order of secp256k1's group (signatures are made with a low ``s``, as verifiers ask)."""
RELAY, STORE, FILTER, LIGHTPUSH = 1, 2, 4, 8
"""The bits of ``waku2``."""

Rlp = bytes | list["Rlp"]


def rlp_encode(item: Rlp) -> bytes:
    """Recursive Length Prefix encoding of bytes and lists."""
    if isinstance(item, bytes):
        if len(item) == 1 and item[0] < 0x80:
            return item
        return _length(len(item), 0x80) + item
    payload = b"".join(rlp_encode(part) for part in item)
    return _length(len(payload), 0xC0) + payload


def _length(size: int, offset: int) -> bytes:
    if size <= 55:
        return bytes([offset + size])
    raw = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([offset + 55 + len(raw)]) + raw


def rlp_decode(data: bytes) -> Rlp:
    """Decode one RLP item that spans ``data``; `DecodeError` otherwise."""
    item, end = _item(data, 0, 0)
    if end != len(data):
        raise DecodeError("bytes after the RLP item")
    return item


def _item(data: bytes, offset: int, depth: int) -> tuple[Rlp, int]:
    if depth > 8:
        raise DecodeError("RLP nested too deep")
    if offset >= len(data):
        raise DecodeError("truncated RLP")
    head = data[offset]
    if head < 0x80:
        return data[offset : offset + 1], offset + 1
    is_list = head >= 0xC0
    short = head - (0xC0 if is_list else 0x80)
    start = offset + 1
    if short <= 55:
        size = short
    else:
        width = short - 55
        size = int.from_bytes(data[start : start + width], "big")
        start += width
    end = start + size
    if end > len(data):
        raise DecodeError("truncated RLP")
    if not is_list:
        return data[start:end], end
    parts: list[Rlp] = []
    while start < end:
        part, start = _item(data, start, depth + 1)
        parts.append(part)
    if start != end:
        raise DecodeError("RLP list overruns its length")
    return parts, end


def _uint(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""


@dataclass(frozen=True, slots=True)
class Enr:
    """A signed node record: its sequence number and key-value pairs."""

    seq: int
    pairs: tuple[tuple[bytes, bytes], ...]
    signature: bytes = b""

    @classmethod
    def make(
        cls,
        key: ec.EllipticCurvePrivateKey,
        *,
        seq: int,
        multiaddrs: tuple[Multiaddr, ...] = (),
        ip: str | None = None,
        tcp: int | None = None,
        protocols: int = RELAY | STORE | FILTER | LIGHTPUSH,
        cluster: int | None = None,
        shards: tuple[int, ...] = (),
    ) -> Enr:
        """A record for the node holding ``key`` (a secp256k1 private key), signed."""
        compressed = PublicKey.from_secp256k1(key.public_key()).data
        pairs: dict[bytes, bytes] = {b"id": b"v4", b"secp256k1": compressed}
        if ip is not None:
            pairs[b"ip"] = bytes(int(part) for part in ip.split("."))
        if tcp is not None:
            pairs[b"tcp"] = _uint(tcp)
        if multiaddrs:
            packed = bytearray()
            for address in multiaddrs:
                raw = address.without_peer().to_bytes()
                packed += len(raw).to_bytes(2, "big") + raw
            pairs[b"multiaddrs"] = bytes(packed)
        pairs[b"waku2"] = bytes([protocols])
        if cluster is not None:
            rs = cluster.to_bytes(2, "big") + bytes([len(shards)])
            pairs[b"rs"] = rs + b"".join(shard.to_bytes(2, "big") for shard in shards)
        ordered = tuple(sorted(pairs.items()))
        digest = keccak256(rlp_encode(_content(seq, ordered)))
        der = key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        r, s = decode_dss_signature(der)
        s = min(s, _ORDER - s)
        return cls(seq, ordered, r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def encode(self) -> bytes:
        """The record's RLP bytes (what peer exchange carries)."""
        return rlp_encode([self.signature, *_content(self.seq, self.pairs)])

    @classmethod
    def decode(cls, data: bytes) -> Enr:
        """Read and verify a record.

        Raises:
            DecodeError: malformed, over `MAX_RECORD` bytes, not "v4", or a bad signature.
        """
        if len(data) > MAX_RECORD:
            raise DecodeError(f"a node record of {len(data)} bytes (at most {MAX_RECORD})")
        items = rlp_decode(data)
        if not isinstance(items, list) or len(items) < 2 or len(items) % 2:
            raise DecodeError("a node record is a list of signature, seq and pairs")
        if not all(isinstance(item, bytes) for item in items):
            raise DecodeError("a node record holds byte strings only")
        signature, seq, *rest = (item for item in items if isinstance(item, bytes))
        pairs = tuple(zip(rest[::2], rest[1::2], strict=True))
        record = cls(int.from_bytes(seq, "big"), pairs, signature)
        if record.value(b"id") != b"v4":
            raise DecodeError("only the v4 identity scheme is known")
        if not record.verify():
            raise DecodeError("the node record's signature is bad")
        return record

    def value(self, key: bytes) -> bytes | None:
        """The value of ``key``, if present."""
        for name, value in self.pairs:
            if name == key:
                return value
        return None

    def public_key(self) -> PublicKey:
        """The node's secp256k1 key, as libp2p encodes it.

        Raises:
            DecodeError: the record has none.
        """
        compressed = self.value(b"secp256k1")
        if compressed is None or len(compressed) != 33:
            raise DecodeError("a node record without its secp256k1 key")
        return PublicKey(SECP256K1, compressed)

    def verify(self) -> bool:
        """Whether the signature is the record's key's, over its content."""
        try:
            point = ec.EllipticCurvePublicKey.from_encoded_point(
                ec.SECP256K1(), self.public_key().data
            )
        except (DecodeError, ValueError):
            return False
        if len(self.signature) != 64:
            return False
        r = int.from_bytes(self.signature[:32], "big")
        s = int.from_bytes(self.signature[32:], "big")
        digest = keccak256(rlp_encode(_content(self.seq, self.pairs)))
        try:
            point.verify(encode_dss_signature(r, s), digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        except (InvalidSignature, ValueError):
            return False
        return True

    def peer_id(self) -> PeerId:
        """The libp2p peer the record describes."""
        return PeerId.from_public_key(self.public_key())

    def multiaddrs(self) -> list[Multiaddr]:
        """The ``multiaddrs`` field's addresses (those this module can read)."""
        packed = self.value(b"multiaddrs") or b""
        addresses = []
        offset = 0
        while offset + 2 <= len(packed):
            size = int.from_bytes(packed[offset : offset + 2], "big")
            raw = packed[offset + 2 : offset + 2 + size]
            offset += 2 + size
            try:
                addresses.append(Multiaddr.from_bytes(raw))
            except DecodeError:
                continue
        return addresses


def _content(seq: int, pairs: tuple[tuple[bytes, bytes], ...]) -> list[Rlp]:
    content: list[Rlp] = [_uint(seq)]
    for key, value in pairs:
        content += [key, value]
    return content
