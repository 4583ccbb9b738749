"""`JetStreamHub`: streams shared by every gateway node through NATS JetStream.

JetStream holds the truth (see `airlane.hub.jetstream.records` for the layout); each node keeps
a **replica** of the streams it touches: the same `StreamLog` and cursors as `MemoryHub` (this
class extends it), fed from JetStream. Readers on a node therefore cost what they cost on the
in-memory hub: fan-out, coalescing, snapshots and the usage ledger are local.

Writing. An append publishes one JetStream message per batch with
``Nats-Expected-Last-Subject-Sequence`` set to the last message the replica holds: JetStream
refuses it if anything was appended elsewhere in between, the replica catches up (direct gets
of what it missed) and the append is retried. Every replica is therefore an exact prefix of
the stream, seqs are 1, 2, 3 ... with no gap whichever node appended, and nothing appended
after a terminal event (a cancel from another node) is ever accepted. The replica applies the
events only once JetStream has acknowledged them: what a reader sees, and what an append
returns, is stored. A publish retried after a lost acknowledgement carries the same
``Nats-Msg-Id`` and is stored once.

Reading. A replica with local readers follows its subject with an ordered push consumer
(messages already applied, such as this node's own appends, are skipped by sequence); a replica
without readers is brought up to date on demand (`info`, `subscribe`, a conflicting append).

Nodes. Heartbeats (`airlane.hub.jetstream.presence`) tell each node which nodes are alive,
which streams they produce and where streams have readers. A stream whose producer's node died
ends with an ``error`` (``code="producer_lost"``), appended by a node that reads it; a cancel
on any node reaches the producer through the stream itself (the ``done`` event) and a control
message. Orphan policies run on the producer's node and count readers on every node.

Retention. A stream's retention folds its history on every replica as in `MemoryHub`; the
producer's node also stores the folded state in a key-value bucket and purges the folded
messages from JetStream, so a replica made later starts from that snapshot. JetStream's own
``max_age`` (`JetStreamHubConfig.history_ttl_s`) bounds what is kept in any case.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from airlane.core import (
    TERMINAL_KINDS,
    Event,
    Folded,
    Kind,
    OrphanPolicy,
    OrphanTracker,
    Retention,
    StreamLog,
    valid_stream_id,
)
from airlane.hub.base import (
    HubError,
    HubFull,
    HubUnavailable,
    InvalidStreamId,
    StreamEnded,
    StreamExists,
    StreamInfo,
    StreamNotFound,
    Subscription,
)
from airlane.hub.jetstream.config import JetStreamHubConfig
from airlane.hub.jetstream.presence import Heartbeat, NodeTable
from airlane.hub.jetstream.records import (
    CorruptRecord,
    StreamMeta,
    decode_batch,
    decode_snapshot,
    encode_batches,
    encode_snapshot,
    stream_key,
)
from airlane.hub.memory import MemoryHub, _short_id, _Stream

__all__ = ["JetStreamHub"]

log = logging.getLogger("airlane.hub.jetstream")

_WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed ``Nats-Expected-Last-Subject-Sequence``."""
_MAX_CONFLICTS = 64
"""Appends retried after conflicting appends from other nodes, before giving up."""
_SNAPSHOT_EVERY = 256
"""Folded events that make the producer's node store a new snapshot and purge JetStream."""
_UNREACHABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
)


class _Replica(_Stream):
    """A stream as this node holds it: `MemoryHub`'s stream plus where it is in JetStream."""

    __slots__ = (
        "boundaries",
        "consumer",
        "deferred",
        "inflight",
        "key",
        "last_js_seq",
        "lock",
        "meta",
        "snapshot_through",
        "subject",
    )

    def __init__(
        self, stream_log: StreamLog, orphan: OrphanTracker | None, meta: StreamMeta, subject: str
    ) -> None:
        super().__init__(stream_log, orphan)
        self.meta = meta
        self.key = stream_key(meta.stream_id)
        self.subject = subject
        self.last_js_seq = 0
        """The JetStream sequence of the newest message applied."""
        self.boundaries: deque[tuple[int, int]] = deque()
        """``(js_seq, first_seq)`` of the messages applied since the last stored snapshot."""
        self.snapshot_through = stream_log.folded.through_seq
        self.consumer: JetStreamContext.PushSubscription | None = None
        self.inflight: str | None = None
        """The message id of this node's publish in progress (its echo is not applied)."""
        self.deferred = False
        """Another node's message arrived during a publish: catch up after it."""
        self.lock = asyncio.Lock()


def _mono_ns(wall: datetime | None) -> int:
    """A JetStream timestamp (wall clock) as this process's monotonic clock."""
    if wall is None:
        return time.monotonic_ns()
    age_ns = time.time_ns() - int(wall.timestamp() * 1e9)
    return time.monotonic_ns() - max(0, age_ns)


class JetStreamHub(MemoryHub):
    """The hub shared by gateway nodes through NATS JetStream. See the module docstring."""

    def __init__(self, config: JetStreamHubConfig | None = None) -> None:
        self.js_config = config or JetStreamHubConfig()
        super().__init__(self.js_config.local)
        self.node = self.js_config.node_id or f"node-{secrets.token_hex(4)}"
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._meta: KeyValue | None = None
        self._snapshots: KeyValue | None = None
        self._incarnation = ""
        self._loading: dict[str, asyncio.Future[_Replica]] = {}
        self._producing: set[str] = set()
        self._nodes = NodeTable(self.node, time.monotonic(), self.js_config.node_timeout_s)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._presence: asyncio.Task[None] | None = None
        self._subscriptions: list[Any] = []
        self._publishes = itertools.count()

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create the JetStream stream and buckets if missing, start heartbeats."""
        if self._nc is not None:
            return
        cfg = self.js_config
        try:
            self._nc = await nats.connect(
                list(cfg.servers),
                name=f"airlane-{self.node}",
                connect_timeout=cfg.request_timeout_s,
                reconnect_time_wait=0.25,
                max_reconnect_attempts=-1,
                allow_reconnect=True,
                error_cb=self._on_nats_error,
            )
        except (OSError, *_UNREACHABLE) as exc:
            raise HubUnavailable(f"cannot reach NATS at {', '.join(cfg.servers)}: {exc}") from exc
        self._js = self._nc.jetstream(timeout=cfg.request_timeout_s)
        await self._ensure_storage()
        prefix = cfg.prefix
        self._subscriptions = [
            await self._nc.subscribe(f"{prefix}.ctl.hb", cb=self._on_heartbeat),
            await self._nc.subscribe(f"{prefix}.ctl.cancel", cb=self._on_cancel_notice),
            await self._nc.subscribe(f"{prefix}.ctl.deleted", cb=self._on_deleted_notice),
        ]
        self._nodes.started = time.monotonic()
        await super().start()
        self._presence = asyncio.create_task(self._heartbeats(), name="hub-presence")

    async def aclose(self) -> None:
        """Stop heartbeats and consumers, say goodbye to the other nodes, disconnect."""
        if self._presence is not None:
            self._presence.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._presence
            self._presence = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await super().aclose()
        nc = self._nc
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await nc.publish(
                    f"{self.js_config.prefix}.ctl.hb",
                    Heartbeat(self.node, leaving=True).to_bytes(),
                )
            for stream in self._streams.values():
                if isinstance(stream, _Replica) and stream.consumer is not None:
                    with contextlib.suppress(Exception):
                        await stream.consumer.unsubscribe()
                    stream.consumer = None
            with contextlib.suppress(Exception):
                await nc.drain()
        self._nc = None

    async def _ensure_storage(self) -> None:
        cfg = self.js_config
        js = self._jetstream()
        storage = api.StorageType.FILE if cfg.storage == "file" else api.StorageType.MEMORY
        try:
            info = await js.stream_info(cfg.events_stream)
        except nats.js.errors.NotFoundError:
            info = await js.add_stream(
                name=cfg.events_stream,
                subjects=[f"{cfg.prefix}.s.>"],
                storage=storage,
                num_replicas=cfg.replicas,
                max_age=cfg.history_ttl_s,
                duplicate_window=120.0,
                discard=api.DiscardPolicy.OLD,
                allow_direct=True,
                description="Airlane stream events (one subject per stream)",
            )
        # The stream's creation time identifies this incarnation of the history: if the
        # stream is lost and made again, streams recorded against the old one are gone.
        created = getattr(info, "created", None)
        self._incarnation = hashlib.sha256(str(created).encode()).hexdigest()[:4]
        self._meta = await self._bucket(cfg.meta_bucket, storage)
        self._snapshots = await self._bucket(cfg.snapshot_bucket, storage)

    async def _bucket(self, name: str, storage: api.StorageType) -> KeyValue:
        js = self._jetstream()
        try:
            return await js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_key_value(
                bucket=name,
                history=1,
                ttl=self.js_config.history_ttl_s,
                storage=storage,
                replicas=self.js_config.replicas,
            )

    # -- streams ----------------------------------------------------------------------------

    async def create(
        self,
        stream_id: str,
        *,
        retention: Retention | None = None,
        orphan: OrphanPolicy | None = None,
        exist_ok: bool = False,
    ) -> StreamInfo:
        if not valid_stream_id(stream_id):
            raise InvalidStreamId(
                f"invalid stream id {stream_id[:80]!r}: use 1-200 of A-Z a-z 0-9 . _ : / -"
            )
        if len(self._streams) >= self.config.max_streams:
            raise HubFull(f"the hub holds {self.config.max_streams} streams, its limit")
        retention = retention or self.config.retention
        epoch = f"{self._incarnation}{_short_id()}"
        meta = StreamMeta.make(stream_id, epoch, self._incarnation, retention, orphan)
        key = stream_key(stream_id)
        try:
            await self._request(self._kv_meta().create(key, meta.to_bytes()))
        except nats.js.errors.KeyWrongLastSequenceError:
            if not exist_ok:
                raise StreamExists(f"stream {stream_id!r} already exists") from None
            return await self.info(stream_id)
        now = time.monotonic()
        stream_log = StreamLog(stream_id, epoch, now_ns=time.monotonic_ns(), retention=retention)
        tracker = OrphanTracker(orphan, now) if orphan is not None else None
        replica = _Replica(stream_log, tracker, meta, self._subject(key))
        self._streams[stream_id] = replica
        if tracker is not None and tracker.deadline is not None:
            self._schedule(tracker.deadline, stream_id)
        return self._info(replica)

    async def append_many(self, stream_id: str, events: Sequence[Event]) -> Sequence[Event]:
        replica = await self._replica(stream_id)
        if not events:
            return events
        if any(event.kind is Kind.SNAPSHOT for event in events):
            raise ValueError("snapshot events are made by the log, not appended")
        # What follows a terminal event is refused, as by the log: publish up to it only.
        accepted = list(events)
        for index, event in enumerate(accepted):
            if event.kind in TERMINAL_KINDS:
                accepted = accepted[: index + 1]
                break
        async with replica.lock:
            await self._publish(replica, accepted)
        if len(accepted) < len(events):
            raise StreamEnded(f"stream {stream_id!r} has ended; nothing can be appended")
        return events

    async def subscribe(
        self, stream_id: str, *, resume: Any = None, subscriber: str | None = None
    ) -> Subscription:
        replica = await self._replica(stream_id)
        await self._refresh(replica)
        subscription = await super().subscribe(stream_id, resume=resume, subscriber=subscriber)
        if replica.readers == 1:
            self._announce_readers(replica)
            if replica.consumer is None and replica.log.terminal is None:
                await self._follow(replica)
        return subscription

    async def cancel(self, stream_id: str, finish_reason: str = "cancelled") -> bool:
        replica = await self._replica(stream_id)
        await self._refresh(replica)
        if replica.log.terminal is not None:
            return False
        try:
            async with replica.lock:
                await self._publish(replica, [Event.done(finish_reason)])
        except StreamEnded:
            return False
        # The producer may run on another node: tell it now rather than at its next append.
        await self._notify("cancel", stream_id)
        return True

    async def info(self, stream_id: str) -> StreamInfo:
        replica = await self._replica(stream_id)
        await self._refresh(replica)
        return self._info(replica)

    async def snapshot(self, stream_id: str) -> Event:
        replica = await self._replica(stream_id)
        await self._refresh(replica)
        return replica.log.snapshot()

    async def delete(self, stream_id: str) -> None:
        replica = await self._replica(stream_id)
        with contextlib.suppress(StreamEnded):
            await self.cancel(stream_id, "deleted")
        await self._forget_everywhere(replica)
        await self._notify("deleted", stream_id)
        self._drop(stream_id)

    def on_cancel(self, stream_id: str, callback: Callable[[], object]) -> None:
        super().on_cancel(stream_id, callback)
        replica = self._streams[stream_id]
        assert isinstance(replica, _Replica)
        if stream_id not in self._producing and replica.log.terminal is None:
            # This node runs the stream's producer: record it where every node can see it, so
            # a node that starts reading the stream later knows whom to watch.
            self._producing.add(stream_id)
            self._spawn(self._record_producer(replica))

    # -- replicas ---------------------------------------------------------------------------

    def _subject(self, key: str) -> str:
        return f"{self.js_config.prefix}.s.{key}"

    async def _replica(self, stream_id: str) -> _Replica:
        """This node's replica of ``stream_id``, loaded from JetStream if it has none."""
        replica = self._streams.get(stream_id)
        if replica is not None:
            assert isinstance(replica, _Replica)
            return replica
        if not valid_stream_id(stream_id):
            raise InvalidStreamId(f"invalid stream id {stream_id[:200]!r}")
        loading = self._loading.get(stream_id)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[stream_id] = loading
            try:
                loaded = await self._load(stream_id)
            except BaseException as exc:
                loading.set_exception(exc)
                # Retrieved here so an unawaited future does not log it a second time.
                loading.exception()
                raise
            finally:
                del self._loading[stream_id]
            loading.set_result(loaded)
            return loaded
        return await asyncio.shield(loading)

    async def _load(self, stream_id: str) -> _Replica:
        key = stream_key(stream_id)
        try:
            entry = await self._request(self._kv_meta().get(key))
        except nats.js.errors.KeyNotFoundError:
            raise StreamNotFound(f"no stream {stream_id[:200]!r}") from None
        if entry.value is None:
            raise StreamNotFound(f"no stream {stream_id[:200]!r}")
        try:
            meta = StreamMeta.from_bytes(entry.value)
        except CorruptRecord as exc:
            raise HubError(f"stream {stream_id!r}: unreadable metadata ({exc})") from None
        if meta.incarnation != self._incarnation:
            raise StreamNotFound(
                f"stream {stream_id[:200]!r}: its history was lost (the JetStream stream "
                f"{self.js_config.events_stream} was re-created)"
            )
        if len(self._streams) >= self.config.max_streams:
            raise HubFull(f"the hub holds {self.config.max_streams} streams, its limit")
        stream_log = StreamLog(
            stream_id, meta.epoch, now_ns=time.monotonic_ns(), retention=meta.retention_policy()
        )
        start = 1
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            snap = await self._request(self._kv_snapshots().get(key))
            if snap.value:
                start, snapshot = decode_snapshot(snap.value)
                stream_log.restore(Folded.from_event(snapshot))
        replica = _Replica(stream_log, None, meta, self._subject(key))
        replica.snapshot_through = stream_log.folded.through_seq
        await self._catch_up(replica, start)
        existing = self._streams.get(stream_id)
        if existing is not None:  # created here while this load waited
            assert isinstance(existing, _Replica)
            return existing
        self._streams[stream_id] = replica
        if stream_log.terminal is not None:
            replica.ended_at = time.monotonic()
        return replica

    async def _refresh(self, replica: _Replica) -> None:
        """Bring a replica that follows no consumer up to date."""
        if replica.consumer is None and replica.log.terminal is None:
            async with replica.lock:
                await self._catch_up(replica)

    async def _catch_up(self, replica: _Replica, start: int | None = None) -> None:
        """Apply every message after the replica's newest, fetched one by one."""
        js = self._jetstream()
        seq = max(start or 0, replica.last_js_seq + 1)
        while True:
            try:
                msg = await self._request(
                    js.get_msg(self.js_config.events_stream, seq, replica.subject, next=True)
                )
            except nats.js.errors.NotFoundError:
                return
            assert msg.seq is not None and msg.data is not None
            self._apply(replica, msg.seq, msg.data, _mono_ns(msg.time))
            seq = msg.seq + 1

    def _apply(self, replica: _Replica, js_seq: int, payload: bytes, ts_ns: int) -> None:
        """Apply one stored batch (skipping what the replica already holds)."""
        if js_seq <= replica.last_js_seq:
            return
        try:
            first_seq, events = decode_batch(payload, ts_ns)
        except CorruptRecord as exc:
            log.error("stream %s: skipping message %d: %s", replica.meta.stream_id, js_seq, exc)
            replica.last_js_seq = js_seq
            return
        stream_log = replica.log
        events = [event for event in events if event.seq >= stream_log.next_seq]
        replica.last_js_seq = js_seq
        if not events:
            return
        if events[0].seq != stream_log.next_seq:
            log.error(
                "stream %s: message %d starts at seq %d, the replica expects %d",
                replica.meta.stream_id,
                js_seq,
                events[0].seq,
                stream_log.next_seq,
            )
            return
        self._store(replica, events, ts_ns, js_seq, first_seq)

    def _store(
        self, replica: _Replica, events: list[Event], ts_ns: int, js_seq: int, first_seq: int
    ) -> None:
        """Append stored events to the replica's log and wake its readers."""
        stream_log = replica.log
        try:
            stream_log.append_many(events, ts_ns)
        except Exception:  # the log refused (after a terminal): JetStream is the truth
            log.exception("stream %s: replica refused stored events", replica.meta.stream_id)
        self._appended += len(events)
        replica.boundaries.append((js_seq, first_seq))
        if stream_log.terminal is not None and replica.ended_at is None:
            replica.ended_at = time.monotonic()
            callbacks, replica.cancel_callbacks = replica.cancel_callbacks, []
            if events[-1].kind is Kind.DONE and callbacks:
                # Cancelled on another node: stop this node's producer.
                for callback in callbacks:
                    try:
                        callback()
                    except Exception:
                        log.exception("cancel callback for %s failed", replica.meta.stream_id)
            self._producing.discard(replica.meta.stream_id)
        replica.notify()

    async def _publish(self, replica: _Replica, events: list[Event]) -> None:
        """Store ``events`` in JetStream, then in the replica; the caller holds the lock."""
        js = self._jetstream()
        stream_log = replica.log
        stream_id = replica.meta.stream_id
        pending = events
        conflicts = 0
        while pending:
            if stream_log.terminal is not None:
                raise StreamEnded(f"stream {stream_id!r} has ended; nothing can be appended")
            first_seq, count, payload = encode_batches(pending, stream_log.next_seq)[0]
            # Unique per publish, kept across its retries: a retry whose first try was stored
            # gets that try's acknowledgement. (Not the seq alone: two nodes racing for one
            # seq would then be "duplicates" of each other.)
            msg_id = f"{self.node}:{next(self._publishes)}"
            headers = {
                "Nats-Msg-Id": msg_id,
                "Nats-Expected-Last-Subject-Sequence": str(replica.last_js_seq),
                "Airlane-Seq": str(first_seq),
            }
            replica.inflight = msg_id
            try:
                ack = await self._with_retries(
                    lambda p=payload, h=headers: js.publish(  # type: ignore[misc]
                        replica.subject, p, headers=h, stream=self.js_config.events_stream
                    )
                )
            except nats.js.errors.APIError as exc:
                if exc.err_code != _WRONG_LAST_SEQUENCE or conflicts >= _MAX_CONFLICTS:
                    raise HubError(f"JetStream refused an append to {stream_id!r}: {exc}") from exc
                conflicts += 1
                replica.inflight = None
                await self._catch_up(replica)
                continue
            finally:
                replica.inflight = None
            batch, pending = pending[:count], pending[count:]
            if ack.seq > replica.last_js_seq:
                now = time.monotonic_ns()
                replica.last_js_seq = ack.seq
                self._store(replica, batch, now, ack.seq, first_seq)
            if replica.deferred:
                replica.deferred = False
                await self._catch_up(replica)

    async def _with_retries(self, call: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run a JetStream request, retrying while the broker is unreachable (bounded)."""
        deadline = time.monotonic() + self.js_config.unavailable_after_s
        delay = 0.05
        while True:
            try:
                return await call()
            except _UNREACHABLE as exc:
                if time.monotonic() + delay > deadline:
                    raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _request(self, call: Coroutine[Any, Any, Any]) -> Any:
        """One JetStream request; unreachable becomes `HubUnavailable` at once."""
        try:
            return await call
        except _UNREACHABLE as exc:
            raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc

    # -- following a stream -----------------------------------------------------------------

    async def _follow(self, replica: _Replica) -> None:
        """Start an ordered consumer feeding the replica (it has local readers)."""
        js = self._jetstream()

        async def deliver(msg: Msg) -> None:
            self._on_message(replica, msg)

        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=replica.last_js_seq + 1,
        )
        try:
            replica.consumer = await js.subscribe(
                replica.subject,
                stream=self.js_config.events_stream,
                cb=deliver,
                ordered_consumer=True,
                config=config,
                idle_heartbeat=2.0,
            )
        except _UNREACHABLE as exc:
            raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc
        # Anything stored between the last catch-up and the consumer's start is delivered by
        # the consumer itself (it starts after the replica's newest message).

    def _on_message(self, replica: _Replica, msg: Msg) -> None:
        headers = msg.headers or {}
        if replica.inflight is not None:
            if headers.get("Nats-Msg-Id") != replica.inflight:
                replica.deferred = True  # another node's: fetched after this node's publish
            return
        meta = msg.metadata
        self._apply(replica, meta.sequence.stream, msg.data, _mono_ns(meta.timestamp))

    async def _unfollow(self, replica: _Replica) -> None:
        consumer, replica.consumer = replica.consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.unsubscribe()

    def _release(self, stream: _Stream) -> None:
        super()._release(stream)
        assert isinstance(stream, _Replica)
        if stream.readers == 0:
            self._announce_readers(stream)
            if stream.consumer is not None:
                self._spawn(self._unfollow(stream))

    # -- producers, orphans and other nodes -------------------------------------------------

    async def _record_producer(self, replica: _Replica) -> None:
        meta = replica.meta
        updated = StreamMeta(
            meta.stream_id, meta.epoch, meta.incarnation, meta.retention, meta.orphan, self.node
        )
        try:
            await self._request(self._kv_meta().put(replica.key, updated.to_bytes()))
            replica.meta = updated
        except (HubError, nats.js.errors.Error) as exc:
            log.warning("stream %s: could not record its producer: %s", meta.stream_id, exc)

    def _announce_readers(self, replica: _Replica) -> None:
        """Tell the other nodes at once that this node started or stopped reading."""
        if replica.meta.stream_id in self._producing:
            return
        beat = Heartbeat(self.node, {replica.meta.stream_id: replica.readers}, partial=True)
        self._spawn(self._publish_control("hb", beat.to_bytes()))

    async def _heartbeats(self) -> None:
        cfg = self.js_config
        while True:
            beat = Heartbeat(
                self.node,
                {sid: s.readers for sid, s in self._streams.items() if s.readers},
                sorted(self._producing),
            )
            await self._publish_control("hb", beat.to_bytes())
            now = time.monotonic()
            dead, changes = self._nodes.expire(now)
            for node in dead:
                log.warning("node %s stopped sending heartbeats", node)
            self._apply_reader_changes(changes, now)
            self._end_orphaned_producers(now)
            await asyncio.sleep(cfg.heartbeat_s)

    async def _on_heartbeat(self, msg: Msg) -> None:
        beat = Heartbeat.from_bytes(msg.data)
        if beat is None:
            return
        now = time.monotonic()
        self._apply_reader_changes(self._nodes.observe(beat, now), now)

    def _apply_reader_changes(self, changes: list[tuple[str, int, int]], now: float) -> None:
        """Readers on other nodes count for the orphan policy of streams produced here."""
        for stream_id, before, after in changes:
            stream = self._streams.get(stream_id)
            if stream is None or stream.orphan is None:
                continue
            if before == 0 and after > 0:
                stream.orphan.subscribe()
            elif before > 0 and after == 0:
                deadline = stream.orphan.unsubscribe(now)
                if deadline is not None and stream.log.terminal is None:
                    self._schedule(deadline, stream_id)

    def _end_orphaned_producers(self, now: float) -> None:
        """End the streams (read here) whose producer's node is dead."""
        for stream_id, stream in self._streams.items():
            if not isinstance(stream, _Replica) or stream.log.terminal is not None:
                continue
            producer = self._nodes.producers.get(stream_id) or stream.meta.producer
            if producer is None or producer == self.node:
                continue
            if self._nodes.alive(producer, now) is False:
                self._spawn(self._producer_lost(stream, producer))

    async def _producer_lost(self, replica: _Replica, node: str) -> None:
        error = Event.error(
            f"the gateway node running this stream's producer ({node}) stopped; "
            "the stream ends here",
            code="producer_lost",
        )
        with contextlib.suppress(StreamEnded):
            async with replica.lock:
                await self._publish(replica, [error])

    async def _on_cancel_notice(self, msg: Msg) -> None:
        stream = self._streams.get(msg.data.decode(errors="replace"))
        if isinstance(stream, _Replica) and stream.log.terminal is None:
            self._spawn(self._refresh_now(stream))

    async def _refresh_now(self, replica: _Replica) -> None:
        async with replica.lock:
            await self._catch_up(replica)

    async def _on_deleted_notice(self, msg: Msg) -> None:
        stream_id = msg.data.decode(errors="replace")
        if stream_id in self._streams:
            self._drop(stream_id)

    def _drop(self, stream_id: str) -> None:
        """Forget a replica here (its readers are released)."""
        stream = self._streams.pop(stream_id, None)
        self._producing.discard(stream_id)
        if isinstance(stream, _Replica):
            stream.cancel_callbacks.clear()
            if stream.consumer is not None:
                self._spawn(self._unfollow(stream))
            stream.notify()

    async def _forget_everywhere(self, replica: _Replica) -> None:
        """Remove a stream's events, snapshot and metadata from JetStream."""
        js = self._jetstream()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._request(self._kv_meta().delete(replica.key))
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self._request(self._kv_snapshots().delete(replica.key))
        await self._request(js.purge_stream(self.js_config.events_stream, subject=replica.subject))

    async def _notify(self, what: str, stream_id: str) -> None:
        await self._publish_control(what, stream_id.encode())

    async def _publish_control(self, what: str, payload: bytes) -> None:
        nc = self._nc
        if nc is None or nc.is_closed:
            return
        with contextlib.suppress(*_UNREACHABLE):
            await nc.publish(f"{self.js_config.prefix}.ctl.{what}", payload)

    # -- housekeeping -----------------------------------------------------------------------

    def _expire_orphans(self, now: float) -> None:
        # Cancelling goes through JetStream (asynchronous), so it is a task per stream.
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, stream_id = heapq.heappop(self._deadlines)
            stream = self._streams.get(stream_id)
            if stream is not None and stream.orphan is not None and stream.orphan.expired(now):
                log.info("stream %s orphaned: cancelling", stream_id)
                self._spawn(self._cancel_quietly(stream_id))

    async def _cancel_quietly(self, stream_id: str) -> None:
        with contextlib.suppress(HubError):
            await self.cancel(stream_id)

    def _sweep(self, now: float) -> None:
        ttl = self.config.ended_ttl_s
        for stream_id, stream in list(self._streams.items()):
            assert isinstance(stream, _Replica)
            if stream.ended_at is not None and now - stream.ended_at >= ttl:
                self._drop(stream_id)
                if stream.orphan is not None:  # the producer's node cleans JetStream up
                    self._spawn(self._forget_everywhere(stream))
                continue
            stream.log.trim(time.monotonic_ns())
            if (
                stream.orphan is not None
                and stream.log.folded.through_seq - stream.snapshot_through >= _SNAPSHOT_EVERY
            ):
                self._spawn(self._store_snapshot(stream))

    async def _store_snapshot(self, replica: _Replica) -> None:
        """Store the folded history in the snapshot bucket, then purge it from JetStream."""
        folded = replica.log.folded
        through = folded.through_seq
        boundaries = replica.boundaries
        # The oldest message to keep is the one holding seq through + 1.
        while len(boundaries) > 1 and boundaries[1][1] <= through + 1:
            boundaries.popleft()
        if not boundaries:
            return
        keep_js = boundaries[0][0]
        snapshot = folded.to_event()
        await self._request(
            self._kv_snapshots().put(replica.key, encode_snapshot(snapshot, keep_js))
        )
        await self._request(
            self._jetstream().purge_stream(
                self.js_config.events_stream, seq=keep_js, subject=replica.subject
            )
        )
        replica.snapshot_through = through

    # -- plumbing ---------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task the hub owns (cancelled and awaited by `aclose`)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hub task failed: %r", task.exception())

    async def _on_nats_error(self, exc: Exception) -> None:
        log.debug("NATS: %r", exc)

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise HubUnavailable("the JetStream hub is not started")
        return self._js

    def _kv_meta(self) -> KeyValue:
        if self._meta is None:
            raise HubUnavailable("the JetStream hub is not started")
        return self._meta

    def _kv_snapshots(self) -> KeyValue:
        if self._snapshots is None:
            raise HubUnavailable("the JetStream hub is not started")
        return self._snapshots
