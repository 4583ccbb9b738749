"""`WakuBridge`: Waku messages as events of Airlane streams, and back.

A content topic ``/app/1/chat/proto`` is the stream ``waku/app/1/chat/proto`` (the prefix is
`WakuConfig.stream_prefix`). A message that arrives over Waku (light push, relay) is appended
there as a ``message`` event, as the MQTT bridge does: ``payload`` when the payload is compact
JSON (what ``JSON.stringify`` writes), else ``payload_base64``; beside it the Waku facts
needed to give the identical message back: ``content_topic``, ``timestamp`` (ns),
``meta_base64``, ``ephemeral``, the ``pubsub_topic`` it came on and its ``hash`` (hex). SSE,
WebSocket and gRPC readers of the stream see those events. Waku peers see every event of the
stream as a Waku message: the original for one that came from Waku; for a ``message``
published over Airlane's API, its ``payload`` as JSON; for any other event, the event in
Airlane's native JSON. Such a message's timestamp is when the log took the event (to the
millisecond, as js-waku keeps it), fixed the first time it is made.

The store protocol reads the same stream (`history`), so history and resume come from one
place: what the stream retains is what the store has. A content topic routed to an event log
(``[[waku.logs]]``, `airlane.transports.waku.logs`) is kept there instead, both ways.
Ephemeral messages reach readers and filter subscribers but are left out of store answers.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from airlane.core import Event, Kind, Position, valid_stream_id
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Principal, Subscription, principal_named
from airlane.transports.waku.config import WakuConfig
from airlane.transports.waku.errors import WAKU_STATUS
from airlane.transports.waku.logs import LogTopics, message_from_record, record_from_message
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_to_json
from airlane.wire.waku import ContentTopic, Status, WakuMessage, auto_shard, shard_topic
from airlane.wire.waku.message import parse_shard_topic

if TYPE_CHECKING:
    from airlane.gateway import Gateway

__all__ = ["Refused", "StoredEntry", "WakuBridge"]

log = logging.getLogger("airlane.waku")

_CACHE = "waku.message"
HISTORY_LIMIT = 100_000
"""Events read for one store query at most (a stream's retention bounds it first)."""
HISTORY_READ_S = 10.0
HISTORY_CACHE_ENTRIES = 100_000
"""Entries of histories kept for the next store page, in all (the oldest history goes)."""


class Refused(Exception):
    """A request the node answers with a Waku status code and reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """A message of a stream as the store sees it."""

    message: WakuMessage
    pubsub_topic: str
    hash: bytes


class WakuBridge:
    """Content topics to streams and back, through the gateway as one principal."""

    def __init__(self, gateway: Gateway, config: WakuConfig) -> None:
        self.gateway = gateway
        self.config = config
        spec = principal_named(config.principal)
        self.principal = Principal(spec.name, spec.roles, spec.tenant, via="waku")
        self._prefix = config.stream_prefix
        self._history: OrderedDict[tuple[object, ...], list[StoredEntry]] = OrderedDict()
        self.logs = LogTopics(
            gateway, self.principal, {route.content_topic: route.log for route in config.logs}
        )
        """The content topics kept in event logs (``[[waku.logs]]``)."""

    # -- naming -----------------------------------------------------------------------------

    def stream_for(self, content_topic: str) -> str:
        """The stream of a content topic.

        Raises:
            Refused: not a content topic, or one no stream id can name.
        """
        try:
            ContentTopic.parse(content_topic)
        except DecodeError as exc:
            raise Refused(Status.BAD_REQUEST, str(exc)) from None
        stream_id = self._prefix + content_topic
        if not valid_stream_id(stream_id):
            raise Refused(
                Status.BAD_REQUEST,
                f"content topic {content_topic[:80]!r} has characters a stream id cannot hold "
                "(A-Z a-z 0-9 . _ : / -)",
            )
        return stream_id

    def content_topic_of(self, stream_id: str) -> str | None:
        """The content topic a stream carries, if it is one of the node's."""
        if not stream_id.startswith(self._prefix + "/"):
            return None
        return stream_id[len(self._prefix) :]

    def pubsub_for(self, content_topic: str, pubsub_topic: str | None) -> str:
        """The pubsub topic a request means: the one it names (checked), else the content
        topic's shard by autosharding.

        Raises:
            Refused: another cluster, a shard this node does not serve, an RLN-only shard.
        """
        config = self.config
        if pubsub_topic:
            try:
                cluster, shard = parse_shard_topic(pubsub_topic)
            except DecodeError as exc:
                raise Refused(Status.UNSUPPORTED_PUBSUB_TOPIC, str(exc)) from None
            if cluster != config.cluster_id:
                raise Refused(
                    Status.UNSUPPORTED_PUBSUB_TOPIC,
                    f"this node serves cluster {config.cluster_id}, not {cluster}",
                )
        else:
            try:
                shard = auto_shard(content_topic, config.shards_in_cluster)
            except DecodeError as exc:
                raise Refused(Status.BAD_REQUEST, str(exc)) from None
        if shard not in config.shards:
            raise Refused(
                Status.UNSUPPORTED_PUBSUB_TOPIC,
                f"this node does not serve shard {shard} (it serves {list(config.shards)})",
            )
        return shard_topic(config.cluster_id, shard)

    def check_rln(self, pubsub_topic: str) -> None:
        """Refuse a message for an RLN-only shard: proofs cannot be verified here."""
        _, shard = parse_shard_topic(pubsub_topic)
        if shard in self.config.rln_shards:
            raise Refused(
                Status.SERVICE_UNAVAILABLE,
                f"shard {shard} takes only RLN-proven messages and this node cannot verify "
                "RLN proofs",
            )

    # -- into Airlane -----------------------------------------------------------------------

    async def publish(self, message: WakuMessage, pubsub_topic: str) -> bytes:
        """Append a message from Waku to its content topic's stream; its hash.

        Raises:
            Refused: a bad topic, or the gateway refused (the reason is the gateway's).
        """
        self.check_rln(pubsub_topic)
        digest = message.hash(pubsub_topic)
        log = self.logs.log_for(message.content_topic)
        if log is not None:
            try:
                await self.logs.append(log, record_from_message(message, pubsub_topic, digest))
            except AirlaneError as exc:
                raise Refused(WAKU_STATUS[exc.code], f"{exc.code}: {exc}") from None
            return digest
        stream_id = self.stream_for(message.content_topic)
        data: dict[str, Any] = {"content_topic": message.content_topic}
        data.update(_payload_fields(message.payload))
        data["pubsub_topic"] = pubsub_topic
        data["hash"] = digest.hex()
        if message.timestamp is not None:
            data["timestamp"] = message.timestamp
        if message.meta is not None:
            data["meta_base64"] = base64.b64encode(message.meta).decode()
        if message.ephemeral:
            data["ephemeral"] = True
        event = Event(Kind.MESSAGE, data=data)
        try:
            await self.gateway.publish(self.principal, stream_id, event)
        except AirlaneError as exc:
            raise Refused(WAKU_STATUS[exc.code], f"{exc.code}: {exc}") from None
        return digest

    # -- out of Airlane ---------------------------------------------------------------------

    def to_waku(self, event: Event, content_topic: str) -> WakuMessage | None:
        """The Waku message an event of a content topic's stream is (None for the stream's
        bookkeeping: snapshots)."""
        if event.kind is Kind.SNAPSHOT:
            return None
        cached = event.cached(_CACHE)
        if cached is not None:
            return WakuMessage.decode(cached, max_payload=1 << 30)
        message = _from_event(event, content_topic)
        event.cache(_CACHE, message.encode())
        return message

    async def subscribe_live(
        self, content_topic: str, *, from_start: bool = False, after: Position | None = None
    ) -> Subscription:
        """A reader of the content topic's stream from its current end, from its first event,
        or after ``after`` (a position of another epoch starts over at the stream's first
        event); the stream is created if needed.

        Raises:
            AirlaneError: the gateway refused (not allowed, the hub is down...).
        """
        stream_id = self.stream_for(content_topic)
        gateway = self.gateway
        await gateway.create_named(self.principal, stream_id, exist_ok=True)
        if after is not None:
            return await gateway.subscribe(self.principal, stream_id, resume=after)
        if from_start:
            return await gateway.subscribe(self.principal, stream_id)
        info = await gateway.info(self.principal, stream_id)
        return await gateway.subscribe(
            self.principal, stream_id, resume=Position(info.epoch, info.last_seq)
        )

    async def history(
        self, content_topic: str, pubsub_topic: str, accept: Callable[[StoredEntry], bool]
    ) -> list[StoredEntry]:
        """The stored (not ephemeral) messages of a content topic's stream (or log) that
        ``accept`` takes, oldest first. What was read is kept while the stream does not change
        (`HISTORY_CACHE_ENTRIES`), so paging through a store answer reads the history once.

        Raises:
            Refused: the gateway refused, or reading took over `HISTORY_READ_S`.
        """
        return [
            entry for entry in await self._entries(content_topic, pubsub_topic) if accept(entry)
        ]

    async def _entries(self, content_topic: str, pubsub_topic: str) -> list[StoredEntry]:
        log = self.logs.log_for(content_topic)
        stream_id = ""
        info = None
        try:
            if log is not None:
                state: tuple[object, ...] = ("log", await self.logs.next_seq(log))
            else:
                stream_id = self.stream_for(content_topic)
                try:
                    info = await self.gateway.info(self.principal, stream_id)
                except AirlaneError as exc:
                    if exc.code is ErrorCode.STREAM_NOT_FOUND:
                        return []
                    raise
                state = (info.epoch, info.last_seq)
        except AirlaneError as exc:
            raise Refused(WAKU_STATUS[exc.code], f"{exc.code}: {exc}") from None
        key = (content_topic, pubsub_topic, *state)
        cache = self._history
        cached = cache.get(key)
        if cached is not None:
            cache.move_to_end(key)
            return cached
        if log is not None:
            entries = await self._read_log(log, content_topic, pubsub_topic)
        else:
            assert info is not None
            entries = await self._read_stream(stream_id, info.last_seq, content_topic, pubsub_topic)
        cache[key] = entries
        while sum(len(held) for held in cache.values()) > HISTORY_CACHE_ENTRIES and len(cache) > 1:
            cache.popitem(last=False)
        return entries

    async def _read_stream(
        self, stream_id: str, last_seq: int, content_topic: str, pubsub_topic: str
    ) -> list[StoredEntry]:
        entries: list[StoredEntry] = []
        if last_seq == 0:
            return entries
        try:
            subscription = await self.gateway.subscribe(self.principal, stream_id)
        except AirlaneError as exc:
            raise Refused(WAKU_STATUS[exc.code], f"{exc.code}: {exc}") from None
        try:
            read = 0
            deadline = time.monotonic() + HISTORY_READ_S
            while subscription.position.seq < last_seq and read < HISTORY_LIMIT:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Refused(Status.SERVICE_UNAVAILABLE, "reading the history took too long")
                try:
                    async with asyncio.timeout(remaining):
                        batch = await subscription.next_batch(512)
                except TimeoutError:
                    raise Refused(
                        Status.SERVICE_UNAVAILABLE, "reading the history took too long"
                    ) from None
                if not batch:
                    break
                read += len(batch)
                for event in batch:
                    entry = self._entry(event, content_topic, pubsub_topic)
                    if entry is not None:
                        entries.append(entry)
        finally:
            await subscription.aclose()
        return entries

    async def _read_log(self, log: str, content_topic: str, pubsub_topic: str) -> list[StoredEntry]:
        try:
            records = await self.logs.history(log)
        except AirlaneError as exc:
            raise Refused(WAKU_STATUS[exc.code], f"{exc.code}: {exc}") from None
        entries = []
        for record in records:
            if record.headers.get("waku-ephemeral") == "true":
                continue
            message = message_from_record(record, content_topic)
            topic = record.headers.get("waku-pubsub-topic", pubsub_topic)
            entries.append(StoredEntry(message, topic, message.hash(topic)))
        return entries

    def _entry(self, event: Event, content_topic: str, pubsub_topic: str) -> StoredEntry | None:
        data = event.data or {}
        if data.get("ephemeral") is True:
            return None
        message = self.to_waku(event, content_topic)
        if message is None:
            return None
        pubsub = data.get("pubsub_topic") if "hash" in data else None
        topic = pubsub if isinstance(pubsub, str) else pubsub_topic
        return StoredEntry(message, topic, message.hash(topic))


def _payload_fields(payload: bytes) -> dict[str, Any]:
    """``payload`` for compact JSON that encodes back to the same bytes (so the message and
    its hash can be rebuilt exactly), ``payload_base64`` otherwise."""
    if payload[:1] in (b"{", b"[", b'"') or payload[:1].isdigit():
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError:
            pass
        else:
            if orjson.dumps(value) == payload:
                return {"payload": value}
    return {"payload_base64": base64.b64encode(payload).decode()}


def _from_event(event: Event, content_topic: str) -> WakuMessage:
    data = event.data or {}
    if event.kind is not Kind.MESSAGE:
        return WakuMessage(event_to_json(event), content_topic, timestamp=_wall_ms_ns(event))
    if event.raw is not None:
        return WakuMessage(event.raw, content_topic, timestamp=_wall_ms_ns(event))
    encoded = data.get("payload_base64")
    if isinstance(encoded, str):
        try:
            payload = base64.b64decode(encoded, validate=True)
        except ValueError:
            payload = encoded.encode()
    else:
        payload = orjson.dumps(data.get("payload"))
    if "hash" not in data:  # published through Airlane: a new Waku message
        return WakuMessage(payload, content_topic, timestamp=_wall_ms_ns(event))
    meta = data.get("meta_base64")
    timestamp = data.get("timestamp")
    return WakuMessage(
        payload,
        str(data.get("content_topic", content_topic)),
        timestamp=timestamp if isinstance(timestamp, int) else None,
        meta=base64.b64decode(meta) if isinstance(meta, str) else None,
        ephemeral=data.get("ephemeral") is True,
    )


def _wall_ms_ns(event: Event) -> int:
    """When the log took ``event``, on the wall clock, in ns rounded down to the ms."""
    age_ns = max(0, time.monotonic_ns() - event.ts_ns) if event.ts_ns else 0
    wall = time.time_ns() - age_ns
    return wall - wall % 1_000_000
