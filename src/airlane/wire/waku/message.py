"""The ``WakuMessage`` (14/WAKU2-MESSAGE), its deterministic hash, content topics and the
relay sharding rules (51/WAKU2-RELAY-SHARDING) that map a content topic to a pubsub topic.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import BYTES, VARINT, Writer, fields, text, zigzag_decode

__all__ = [
    "MAX_CONTENT_TOPIC",
    "ContentTopic",
    "PayloadTooLarge",
    "WakuMessage",
    "auto_shard",
    "parse_shard_topic",
    "shard_topic",
]

_NUMBER = re.compile(r"0|[1-9][0-9]{0,5}")
MAX_CONTENT_TOPIC = 256
"""The longest content topic accepted."""


class PayloadTooLarge(DecodeError):
    """A message's payload is over the limit the decoder was given."""


@dataclass(frozen=True, slots=True)
class WakuMessage:
    """One message on the Waku network."""

    payload: bytes
    content_topic: str
    timestamp: int | None = None
    """Nanoseconds since the Unix epoch, as the sender says."""
    meta: bytes | None = None
    ephemeral: bool = False
    """Not to be stored."""
    version: int | None = None
    rate_limit_proof: bytes | None = None
    """An RLN proof (encoded), when the sender gave one."""

    def encode(self) -> bytes:
        """The Protobuf, fields in the schema's order."""
        writer = Writer()
        if self.payload:
            writer.data(1, self.payload)
        if self.content_topic:
            writer.string(2, self.content_topic)
        if self.version is not None:
            writer.varint(3, self.version)
        if self.timestamp is not None:
            writer.sint64(10, self.timestamp)
        if self.meta is not None:
            writer.data(11, self.meta)
        if self.rate_limit_proof is not None:
            writer.data(21, self.rate_limit_proof)
        if self.ephemeral:
            writer.varint(31, 1)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes, *, max_payload: int) -> WakuMessage:
        """Read the Protobuf.

        Raises:
            PayloadTooLarge: a payload over ``max_payload``.
            DecodeError: malformed, a content topic that is missing or over
                `MAX_CONTENT_TOPIC`, a ``meta`` over 64 bytes.
        """
        payload = b""
        topic = ""
        timestamp: int | None = None
        meta: bytes | None = None
        ephemeral = False
        version: int | None = None
        proof: bytes | None = None
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES and isinstance(value, bytes):
                if len(value) > max_payload:
                    raise PayloadTooLarge(f"payload of {len(value)} bytes (at most {max_payload})")
                payload = value
            elif number == 2 and wire_type == BYTES:
                topic = text(value, "content topic")
            elif number == 3 and wire_type == VARINT and isinstance(value, int):
                version = value & 0xFFFFFFFF
            elif number == 10 and wire_type == VARINT and isinstance(value, int):
                timestamp = zigzag_decode(value)
            elif number == 11 and wire_type == BYTES and isinstance(value, bytes):
                if len(value) > 64:
                    raise DecodeError(f"meta of {len(value)} bytes (at most 64)")
                meta = value
            elif number == 21 and wire_type == BYTES and isinstance(value, bytes):
                proof = value
            elif number == 31 and wire_type == VARINT:
                ephemeral = bool(value)
        if not topic:
            raise DecodeError("a Waku message needs a content topic")
        if len(topic) > MAX_CONTENT_TOPIC:
            raise DecodeError(f"content topic of {len(topic)} characters")
        return cls(payload, topic, timestamp, meta, ephemeral, version, proof)

    def hash(self, pubsub_topic: str) -> bytes:
        """The deterministic message hash: SHA-256 over the pubsub topic, payload, content
        topic, meta and the timestamp as 8 big-endian bytes (absent parts left out)."""
        digest = hashlib.sha256(pubsub_topic.encode())
        digest.update(self.payload)
        digest.update(self.content_topic.encode())
        if self.meta is not None:
            digest.update(self.meta)
        if self.timestamp:
            digest.update(self.timestamp.to_bytes(8, "big", signed=True))
        return digest.digest()


@dataclass(frozen=True, slots=True)
class ContentTopic:
    """``/{application}/{version}/{name}/{encoding}``, optionally behind a generation
    (``/0/...``)."""

    application: str
    version: str
    name: str
    encoding: str
    generation: int = 0

    @classmethod
    def parse(cls, topic: str) -> ContentTopic:
        """Read a content topic; `DecodeError` naming what is wrong."""
        parts = topic.split("/")
        if len(parts) == 6 and parts[0] == "":
            if parts[1] != "0":
                raise DecodeError(f"content topic generation {parts[1][:8]!r} is not supported")
            parts = parts[1:]
            parts[0] = ""
        if len(parts) != 5 or parts[0] != "" or not all(parts[1:]):
            raise DecodeError(
                f"a content topic is /application/version/name/encoding, not {topic[:80]!r}"
            )
        return cls(parts[1], parts[2], parts[3], parts[4])

    def __str__(self) -> str:
        return f"/{self.application}/{self.version}/{self.name}/{self.encoding}"


def shard_topic(cluster_id: int, shard: int) -> str:
    """The pubsub topic of a shard: ``/waku/2/rs/<cluster>/<shard>``."""
    return f"/waku/2/rs/{cluster_id}/{shard}"


def parse_shard_topic(topic: str) -> tuple[int, int]:
    """``(cluster_id, shard)`` of a shard's pubsub topic; `DecodeError` for any other."""
    parts = topic.split("/")
    if len(parts) != 6 or parts[:4] != ["", "waku", "2", "rs"]:
        raise DecodeError(f"not a sharded pubsub topic: {topic[:80]!r}")
    # Canonical digits only: the topic's text goes into message hashes.
    if _NUMBER.fullmatch(parts[4]) is None or _NUMBER.fullmatch(parts[5]) is None:
        raise DecodeError(f"not a sharded pubsub topic: {topic[:80]!r}")
    cluster, shard = int(parts[4]), int(parts[5])
    if not (cluster < 1 << 16 and shard < 1 << 16):
        raise DecodeError(f"cluster or shard out of range in {topic[:80]!r}")
    return cluster, shard


def auto_shard(content_topic: str, shards_in_cluster: int) -> int:
    """The shard autosharding assigns a content topic: the last 8 bytes of
    SHA-256(application + version), big-endian, modulo the cluster's shard count."""
    parsed = ContentTopic.parse(content_topic)
    digest = hashlib.sha256((parsed.application + parsed.version).encode()).digest()
    return int.from_bytes(digest[-8:], "big") % shards_in_cluster
