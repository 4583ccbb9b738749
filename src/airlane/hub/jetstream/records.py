"""What the JetStream hub stores, as bytes: event batches, stream metadata, snapshots.

Pure (no I/O): the hub hands these functions bytes it read from JetStream or will write.

Layout on JetStream (names are prefixed by `JetStreamHubConfig.prefix`, ``airlane`` here):

- ``node`` layout: stream ``AIRLANE_LOG``, subject ``airlane.h.<node>.<run>`` per gateway
  process, each message a list of entries of many streams (see "home logs" below), zstd-
  compressed when ``compression = "zstd"`` (a message says which: a zstd frame's magic
  number is never the first byte of a MessagePack array), with the same ``Nats-Msg-Id``
  scheme as the batches below;
- ``stream`` layout: stream ``AIRLANE_EVENTS``, subject ``airlane.s.<key>`` per Airlane
  stream: one message per `Hub.append_many` batch (split when large), MessagePack
  ``[first_seq, [event, ...]]``;
  header ``Nats-Msg-Id`` ``<node>:<run>:<n>``, unique per publish and per process (a node
  restarted under its id has a new run), so a publish retried after a lost acknowledgement is
  stored once and nothing else is ever taken for a duplicate;
- key-value bucket ``AIRLANE_META``, key ``<key>``: the stream's `StreamMeta` (JSON);
- key-value bucket ``AIRLANE_SNAPSHOTS``, key ``<key>``: the folded history below the oldest
  message still kept (MessagePack), written before those messages are purged (in the ``node``
  layout nothing is purged: where a node that loads the stream later starts reading).

``<key>`` is the stream id in URL-safe base64 without padding: stream ids may contain ``.``,
which separates NATS subject tokens, and ``:`` and ``/``, which key-value keys refuse.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import orjson
import zstandard

from airlane.core import Channel, Event, Kind, Lane, OrphanMode, OrphanPolicy, Retention
from airlane.hub.base import HubError

__all__ = [
    "MAX_BATCH_BYTES",
    "CorruptRecord",
    "StreamMeta",
    "compressed",
    "decode_batch",
    "decode_entries",
    "decode_snapshot",
    "encode_batches",
    "encode_created",
    "encode_entry",
    "encode_snapshot",
    "events_of",
    "join_entries",
    "stream_key",
]

COMPRESS_FROM = 1024
"""Home log messages smaller than this are stored as they are (compressing them saves
little and costs a frame header)."""
MAX_PLAIN_BYTES = 64 * 1024 * 1024
"""The most a compressed home log message may expand to; a frame that claims more is
refused rather than allocated."""
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

MAX_BATCH_BYTES = 256 * 1024
"""Largest batch payload; a bigger `append_many` is split (NATS' default max_payload: 1 MiB)."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
# Level 1: OpenAI chunks with log-probabilities come out about 7x smaller, at 0.8 GB/s on
# this project's machines (benchmarks/home_log_compression.py); higher levels cost several
# times the CPU for a little more.
_zstd = zstandard.ZstdCompressor(level=1)
_unzstd = zstandard.ZstdDecompressor()
# Enum members by wire value and back: a dict lookup is a third of what ``Lane(n)`` or
# ``kind.value`` costs, paid per event on every node.
_KINDS = {kind.value: kind for kind in Kind}
_CHANNELS = {channel.value: channel for channel in Channel}
_LANES = {int(lane): lane for lane in Lane}
_KIND_VALUES = {kind: kind.value for kind in Kind}
_CHANNEL_VALUES = {channel: channel.value for channel in Channel}
_LANE_VALUES = {lane: int(lane) for lane in Lane}


class CorruptRecord(HubError, ValueError):
    """Bytes in JetStream that are not a record this hub wrote."""


def stream_key(stream_id: str) -> str:
    """The subject token and key-value key of ``stream_id``."""
    return base64.urlsafe_b64encode(stream_id.encode()).rstrip(b"=").decode()


def stream_id_of(key: str) -> str:
    """The inverse of `stream_key`."""
    try:
        padded = key + "=" * (-len(key) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"not a stream key: {key[:80]!r}") from exc


def _event_fields(event: Event) -> list[Any]:
    return [
        _KIND_VALUES[event.kind],
        event.text,
        event.data,
        _CHANNEL_VALUES[event.channel],
        _LANE_VALUES[event.lane],
        event.tokens,
        event.raw,
    ]


def encode_batches(events: list[Event], first_seq: int) -> list[tuple[int, int, bytes]]:
    """``events`` (to get seqs ``first_seq``, ``first_seq + 1`` ...) as JetStream payloads:
    ``(first_seq, count, payload)`` each, at most `MAX_BATCH_BYTES` unless one event alone is
    bigger (then the broker's own limit decides)."""
    payload = _encoder.encode([first_seq, [_event_fields(event) for event in events]])
    if len(payload) <= MAX_BATCH_BYTES or len(events) == 1:
        return [(first_seq, len(events), payload)]
    # Rare (a batch of large events): halve until each part fits.
    half = len(events) // 2
    return encode_batches(events[:half], first_seq) + encode_batches(
        events[half:], first_seq + half
    )


def decode_batch(payload: bytes, ts_ns: int) -> tuple[int, list[Event]]:
    """A batch payload's first seq and its events, with seqs assigned and ``ts_ns`` set."""
    try:
        first_seq, rows = _decoder.decode(payload)
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"not an event batch: {exc}") from exc
    return int(first_seq), events_of(rows, int(first_seq), ts_ns)


def events_of(rows: list[Any], first_seq: int, ts_ns: int) -> list[Event]:
    """Decoded event rows as events, seqs from ``first_seq``, all stored at ``ts_ns``."""
    try:
        # Positional: keyword arguments cost a third more per event.
        return [
            Event(
                _KINDS[kind],
                text,
                data,
                _CHANNELS[channel],
                _LANES[lane],
                tokens,
                raw,
                first_seq + offset,
                ts_ns,
            )
            for offset, (kind, text, data, channel, lane, tokens, raw) in enumerate(rows)
        ]
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptRecord(f"not an event batch: {exc}") from exc


# -- home logs (the "node" layout) ---------------------------------------------------------
#
# A home log message is a MessagePack array of entries, each ``[stream_id, first_seq, body]``:
# ``body`` is the stream's events from ``first_seq`` (rows as in a batch), or, with
# ``first_seq`` 0, the stream's `StreamMeta` bytes (it was created: followers mirror it from
# here). Entries are encoded one by one, so a writer knows each one's size, and joined.


def encode_entry(stream_id: str, first_seq: int, events: list[Event]) -> bytes:
    """One stream's events (seqs from ``first_seq``) as a home log entry."""
    return _encoder.encode([stream_id, first_seq, [_event_fields(event) for event in events]])


def encode_created(stream_id: str, meta: bytes) -> bytes:
    """The entry announcing a new stream."""
    return _encoder.encode([stream_id, 0, meta])


def join_entries(entries: list[bytes]) -> bytes:
    """Encoded entries as one home log message."""
    return _encoder.encode([msgspec.Raw(entry) for entry in entries])


def compressed(message: bytes) -> bytes:
    """A home log message as stored with ``compression = "zstd"`` (small ones as they are)."""
    if len(message) < COMPRESS_FROM:
        return message
    return _zstd.compress(message)


def decode_entries(payload: bytes) -> list[tuple[str, int, Any]]:
    """A home log message's entries, bodies left as decoded rows (or meta bytes); the
    message compressed or not."""
    if payload.startswith(_ZSTD_MAGIC):
        payload = _decompressed(payload)
    try:
        entries = _decoder.decode(payload)
        return [(str(sid), int(first), body) for sid, first, body in entries]
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"not a home log message: {exc}") from exc


def _decompressed(frame: bytes) -> bytes:
    try:
        size = zstandard.frame_content_size(frame)
        if not 0 <= size <= MAX_PLAIN_BYTES:  # -1: the frame does not say
            raise CorruptRecord(f"a compressed home log message of {size} bytes")
        plain: bytes = _unzstd.decompress(frame)
    except zstandard.ZstdError as exc:
        raise CorruptRecord(f"not a compressed home log message: {exc}") from exc
    return plain


def encode_snapshot(snapshot: Event, js_seq: int) -> bytes:
    """A folded history (a ``snapshot`` event whose seq is the last folded) and the JetStream
    sequence of the oldest message kept after it."""
    return _encoder.encode([js_seq, snapshot.seq, snapshot.tokens, snapshot.data])


def decode_snapshot(payload: bytes) -> tuple[int, Event]:
    """The inverse of `encode_snapshot`."""
    try:
        js_seq, seq, tokens, data = _decoder.decode(payload)
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"not a snapshot: {exc}") from exc
    return int(js_seq), Event(Kind.SNAPSHOT, data=data, lane=Lane.CONTROL, tokens=tokens, seq=seq)


@dataclass(frozen=True, slots=True)
class StreamMeta:
    """What every node must agree on about a stream, stored once when it is created."""

    stream_id: str
    epoch: str
    """The stream's history token (a resume position names it)."""
    incarnation: str
    """The identity of the JetStream stream holding the events when this one was created: if
    that stream is lost and re-created, the history is gone and the hub says so."""
    retention: dict[str, Any] = field(default_factory=dict)
    orphan: dict[str, Any] | None = None
    producer: str | None = None
    """The node running the stream's producer, once one registered (`Hub.on_cancel`)."""
    producer_run: str = ""
    """The run of that node's process (`airlane.hub.jetstream.presence.Member`); empty in
    records made before runs existed."""
    created_unix_ns: int | None = None
    """When the stream was created (wall clock of the node that made it): a node that loads
    the stream later times its usage ledger from it, not from the load."""
    home: str | None = None
    """The home log holding the stream's events (the ``node`` layout), or None: a subject of
    its own."""
    home_after: int = 0
    """The home log's newest message when the stream was made: all its entries come later
    (where a node that did not see its creation starts reading)."""

    def produced_by(self, node: str, run: str) -> StreamMeta:
        """The same metadata, with the producer recorded."""
        return replace(self, producer=node, producer_run=run)

    def to_bytes(self) -> bytes:
        """JSON, so that ``nats kv get`` shows something readable."""
        return orjson.dumps(self)  # its fields, in order (14x faster than via asdict)

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamMeta:
        """Parse `to_bytes` output; `CorruptRecord` otherwise."""
        try:
            fields = orjson.loads(data)
            return cls(**fields)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CorruptRecord(f"not stream metadata: {exc}") from exc

    @classmethod
    def make(
        cls,
        stream_id: str,
        epoch: str,
        incarnation: str,
        retention: Retention,
        orphan: OrphanPolicy | None,
        created_unix_ns: int,
    ) -> StreamMeta:
        """Metadata for a new stream."""
        return cls(
            stream_id,
            epoch,
            incarnation,
            {
                "max_events": retention.max_events,
                "max_bytes": retention.max_bytes,
                "ttl_s": retention.ttl_s,
            },
            None
            if orphan is None
            else {"mode": orphan.mode.value, "grace_s": orphan.grace_s, "keep_s": orphan.keep_s},
            created_unix_ns=created_unix_ns,
        )

    def retention_policy(self) -> Retention:
        """The stream's `Retention`."""
        return Retention(**self.retention)

    def orphan_policy(self) -> OrphanPolicy | None:
        """The stream's `OrphanPolicy`, if it has one."""
        if self.orphan is None:
            return None
        return OrphanPolicy(
            OrphanMode(self.orphan["mode"]), self.orphan["grace_s"], self.orphan["keep_s"]
        )
