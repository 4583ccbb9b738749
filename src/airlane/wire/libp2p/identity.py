"""libp2p identities: key pairs, the ``PublicKey`` message, peer ids and their text form.

A node's identity is an Ed25519 key pair (what js-libp2p makes by default) or a secp256k1 one
(what nwaku uses, and what a Waku node record needs: its key is the peer's). A peer id is the
multihash of the Protobuf-encoded public key: the key itself (the "identity" hash) when that
encoding is at most 42 bytes, as for Ed25519 and secp256k1 keys, SHA-256 otherwise; its text
form is base58btc (``12D3KooW...`` for Ed25519). Signatures of remote peers are checked for
the four key types libp2p defines (Ed25519, secp256k1, ECDSA P-256, RSA).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import BYTES, VARINT, Writer, fields

__all__ = [
    "ECDSA",
    "ED25519",
    "KEY_TYPES",
    "RSA",
    "SECP256K1",
    "Identity",
    "PeerId",
    "PublicKey",
    "b58decode",
    "b58encode",
]

RSA, ED25519, SECP256K1, ECDSA = 0, 1, 2, 3
"""The ``KeyType`` values of libp2p's key Protobuf."""
_KEY_NAMES = {RSA: "RSA", ED25519: "Ed25519", SECP256K1: "secp256k1", ECDSA: "ECDSA"}
MAX_KEY_BYTES = 2048
"""The largest encoded public key accepted (an RSA-8192 key is about 1,100 bytes)."""
_IDENTITY_HASH_LIMIT = 42
_ALPHABET = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {char: index for index, char in enumerate(_ALPHABET)}


def b58encode(data: bytes) -> str:
    """``data`` in base58btc (Bitcoin's alphabet; leading zero bytes become ``1``)."""
    zeros = len(data) - len(data.lstrip(b"\0"))
    number = int.from_bytes(data, "big")
    out = bytearray()
    while number:
        number, digit = divmod(number, 58)
        out.append(_ALPHABET[digit])
    return (b"1" * zeros + bytes(reversed(out))).decode()


def b58decode(text: str) -> bytes:
    """A base58btc string's bytes; `DecodeError` for a character outside the alphabet."""
    raw = text.encode()
    number = 0
    for char in raw:
        digit = _INDEX.get(char)
        if digit is None:
            raise DecodeError(f"not base58: {text[:60]!r}")
        number = number * 58 + digit
    zeros = len(raw) - len(raw.lstrip(b"1"))
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\0" * zeros + body


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A public key as libp2p encodes it: its type and the type's own encoding of it."""

    key_type: int
    data: bytes

    def encode(self) -> bytes:
        """The ``PublicKey`` Protobuf (both fields always written: the schema says required)."""
        return Writer().varint(1, self.key_type).data(2, self.data).finish()

    @classmethod
    def decode(cls, data: bytes) -> PublicKey:
        """Read a ``PublicKey`` Protobuf.

        Raises:
            DecodeError: malformed, too large, or missing a field.
        """
        if len(data) > MAX_KEY_BYTES:
            raise DecodeError(f"public key of {len(data)} bytes (at most {MAX_KEY_BYTES})")
        key_type: int | None = None
        key_data: bytes | None = None
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == VARINT and isinstance(value, int):
                key_type = value
            elif number == 2 and wire_type == BYTES and isinstance(value, bytes):
                key_data = value
        if key_type is None or key_data is None:
            raise DecodeError("public key without its type or data")
        if key_type not in _KEY_NAMES:
            raise DecodeError(f"unknown public key type {key_type}")
        return cls(key_type, key_data)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's over ``message`` (False for a key the
        cryptography library cannot load, as for a bad signature)."""
        try:
            if self.key_type == ED25519:
                ed25519.Ed25519PublicKey.from_public_bytes(self.data).verify(signature, message)
            elif self.key_type == SECP256K1:
                point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), self.data)
                point.verify(signature, message, ec.ECDSA(hashes.SHA256()))
            else:
                loaded = serialization.load_der_public_key(self.data)
                if self.key_type == ECDSA and isinstance(loaded, ec.EllipticCurvePublicKey):
                    loaded.verify(signature, message, ec.ECDSA(hashes.SHA256()))
                elif self.key_type == RSA and isinstance(loaded, rsa.RSAPublicKey):
                    loaded.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
                else:
                    return False
        except (InvalidSignature, ValueError, UnsupportedAlgorithm, TypeError):
            return False
        return True

    @classmethod
    def from_secp256k1(cls, key: ec.EllipticCurvePublicKey) -> PublicKey:
        """A secp256k1 public key, compressed (33 bytes), as libp2p encodes it."""
        compressed = key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
        )
        return cls(SECP256K1, compressed)

    @property
    def type_name(self) -> str:
        """The key type's name, for messages."""
        return _KEY_NAMES[self.key_type]


@dataclass(frozen=True, slots=True)
class PeerId:
    """A peer's id: the multihash of its encoded public key."""

    multihash: bytes

    @classmethod
    def from_public_key(cls, key: PublicKey) -> PeerId:
        """The id of the peer holding ``key``."""
        encoded = key.encode()
        if len(encoded) <= _IDENTITY_HASH_LIMIT:
            return cls(b"\x00" + bytes([len(encoded)]) + encoded)
        return cls(b"\x12\x20" + hashlib.sha256(encoded).digest())

    @classmethod
    def parse(cls, text: str) -> PeerId:
        """A peer id in its base58btc text form.

        Raises:
            DecodeError: not base58, or not an identity or SHA-256 multihash.
        """
        return cls.from_bytes(b58decode(text))

    @classmethod
    def from_bytes(cls, multihash: bytes) -> PeerId:
        """A peer id from its multihash bytes (as multiaddrs and Protobufs carry it)."""
        if len(multihash) >= 2 and multihash[0] == 0x00 and multihash[1] == len(multihash) - 2:
            return cls(multihash)
        if len(multihash) == 34 and multihash[:2] == b"\x12\x20":
            return cls(multihash)
        raise DecodeError("a peer id is an identity or SHA-256 multihash")

    def public_key(self) -> PublicKey | None:
        """The key an identity-hash peer id holds; None for a hashed one."""
        if self.multihash[0] != 0x00:
            return None
        return PublicKey.decode(self.multihash[2:])

    def matches(self, key: PublicKey) -> bool:
        """Whether ``key`` is this peer's."""
        return PeerId.from_public_key(key) == self

    def __str__(self) -> str:
        return b58encode(self.multihash)


_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
"""The order of secp256k1's group: libp2p's verifiers take only signatures with a low ``s``."""
KEY_TYPES = {"ed25519": ED25519, "secp256k1": SECP256K1}
"""The key types an identity is made with, by name."""


class Identity:
    """This node's key pair: Ed25519 or secp256k1."""

    __slots__ = ("_private", "peer_id", "public_key")

    def __init__(
        self, private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | None = None
    ) -> None:
        self._private = private or ed25519.Ed25519PrivateKey.generate()
        if isinstance(self._private, ed25519.Ed25519PrivateKey):
            raw = self._private.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
            self.public_key = PublicKey(ED25519, raw)
        else:
            if not isinstance(self._private.curve, ec.SECP256K1):
                raise ValueError("an identity's elliptic curve key must be secp256k1")
            self.public_key = PublicKey.from_secp256k1(self._private.public_key())
        """The public half, as libp2p encodes it."""
        self.peer_id = PeerId.from_public_key(self.public_key)
        """This node's peer id."""

    @classmethod
    def generate(cls, key_type: str = "ed25519") -> Identity:
        """A new identity of ``key_type`` (``ed25519`` or ``secp256k1``)."""
        if key_type == "secp256k1":
            return cls(ec.generate_private_key(ec.SECP256K1()))
        if key_type == "ed25519":
            return cls()
        raise ValueError(f"key type {key_type!r}: ed25519 or secp256k1")

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """The identity whose Ed25519 private key is the 32-byte ``seed``."""
        return cls(ed25519.Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_bytes(cls, data: bytes) -> Identity:
        """An identity as `to_bytes` wrote it (libp2p's ``PrivateKey`` message), or a bare
        32-byte Ed25519 seed.

        Raises:
            DecodeError: neither.
        """
        if len(data) == 32:
            return cls.from_seed(data)
        key_type: int | None = None
        key_data = b""
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == VARINT and isinstance(value, int):
                key_type = value
            elif number == 2 and wire_type == BYTES and isinstance(value, bytes):
                key_data = value
        try:
            if key_type == ED25519 and len(key_data) in (32, 64):
                return cls.from_seed(key_data[:32])
            if key_type == SECP256K1 and len(key_data) == 32:
                scalar = int.from_bytes(key_data, "big")
                return cls(ec.derive_private_key(scalar, ec.SECP256K1()))
        except ValueError:
            pass
        raise DecodeError("not a libp2p private key (Ed25519 or secp256k1)")

    def to_bytes(self) -> bytes:
        """The private key as libp2p's ``PrivateKey`` message, to store."""
        private = self._private
        if isinstance(private, ed25519.Ed25519PrivateKey):
            seed = private.private_bytes(
                serialization.Encoding.Raw,
                serialization.PrivateFormat.Raw,
                serialization.NoEncryption(),
            )
            return Writer().varint(1, ED25519).data(2, seed + self.public_key.data).finish()
        scalar = private.private_numbers().private_value.to_bytes(32, "big")
        return Writer().varint(1, SECP256K1).data(2, scalar).finish()

    @property
    def secp256k1(self) -> ec.EllipticCurvePrivateKey | None:
        """The private key, when it is a secp256k1 one (node records are signed with it)."""
        return None if isinstance(self._private, ed25519.Ed25519PrivateKey) else self._private

    def sign(self, message: bytes) -> bytes:
        """A signature over ``message``: Ed25519, or ECDSA over SHA-256 in DER with a low
        ``s`` (secp256k1, as libp2p signs with it)."""
        private = self._private
        if isinstance(private, ed25519.Ed25519PrivateKey):
            return private.sign(message)
        r, s = decode_dss_signature(private.sign(message, ec.ECDSA(hashes.SHA256())))
        return encode_dss_signature(r, min(s, _ORDER - s))
