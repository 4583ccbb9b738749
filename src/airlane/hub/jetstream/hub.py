"""`JetStreamHub`: streams shared by every gateway node through NATS JetStream, a subject per
stream (``layout = "stream"``; `airlane.hub.jetstream.home.HomeLogHub` extends it with a home
log per process, the default ``node`` layout).

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

The NATS API itself is `airlane.hub.jetstream.store`'s business; a replica's bookkeeping is
`airlane.hub.jetstream.replica`'s.

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
import functools
import heapq
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from airlane.core import (
    Event,
    Folded,
    Kind,
    OrphanPolicy,
    OrphanTracker,
    Position,
    Retention,
    StreamLog,
    StreamTooLarge,
    valid_hub_stream_id,
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
from airlane.hub.jetstream.appends import MAX_QUEUED_EVENTS
from airlane.hub.jetstream.config import JetStreamHubConfig
from airlane.hub.jetstream.presence import (
    MAX_ENTRIES,
    MAX_REPORTED,
    Heartbeat,
    Member,
    NodeTable,
)
from airlane.hub.jetstream.records import (
    CorruptRecord,
    StreamMeta,
    decode_snapshot,
    encode_batches,
    encode_snapshot,
    stream_key,
)
from airlane.hub.jetstream.replica import Replica
from airlane.hub.jetstream.store import Conflict, JetStreamStore, StoredBatch
from airlane.hub.memory import MemoryHub, _short_id, _Stream

__all__ = ["JetStreamHub"]

log = logging.getLogger("airlane.hub.jetstream")

MAX_CONFLICTS = 64
"""Times one append is retried after losing to appends from other nodes, before it fails."""
SLOW_FOLLOW_S = 0.5
"""Reading a stream's history for a new follower slower than this is logged."""
MAX_BATCH_EVENTS = 512
"""Events encoded for one publish at most (a group commit's queue may hold thousands)."""
ANNOUNCE_AFTER_S = 0.02
"""How long a change in a stream's local reader count waits to be announced with others."""
SNAPSHOT_EVERY = 256
"""Newly folded events that make the producer's node store a snapshot and purge JetStream."""
READ_BACK_PASSES = 3
"""Reads one repair makes at most when deliveries keep finding the replica behind."""


class JetStreamHub(MemoryHub):
    """The hub shared by gateway nodes through NATS JetStream. See the module docstring."""

    def __init__(self, config: JetStreamHubConfig | None = None) -> None:
        self.js_config = config or JetStreamHubConfig()
        super().__init__(self.js_config.local)
        self.node = self.js_config.node_id or f"node-{secrets.token_hex(4)}"
        """This node's name among the gateway nodes."""
        self.run = secrets.token_hex(6)
        """This process's run: a node restarted under its id is another member (presence)
        and its message ids never repeat the previous process's."""
        self.member = Member(self.node, self.run)
        self._store = JetStreamStore(self.js_config, self.node)
        self._loading: dict[str, asyncio.Future[Replica]] = {}
        self._producing: set[str] = set()
        self._ending: set[str] = set()  # streams whose producer_lost append is under way
        self._expiring: set[str] = set()  # idle streams whose expired end is under way
        self._storing_snapshots: set[str] = set()  # one at a time per stream (stream layout)
        self._nodes = NodeTable(self.member, time.monotonic(), self.js_config.node_timeout_s)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._presence: asyncio.Task[None] | None = None
        self._publishes = itertools.count()
        self._announcing: dict[str, Replica] = {}
        """Streams whose local reader count changed since the last announcement."""
        self._announcement: asyncio.TimerHandle | None = None
        self._greeting = False
        """A heartbeat for newcomers is on its way."""
        self._started = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create the JetStream stream and buckets if missing, start heartbeats.

        Raises:
            HubUnavailable: NATS cannot be reached.
        """
        if self._started:
            return
        self._store.on_missed = self._on_missed
        await self._store.connect()
        await self._store.listen("hb", self._on_heartbeat)
        await self._store.listen("cancel", self._on_cancel_notice)
        await self._store.listen("deleted", self._on_deleted_notice)
        self._started = True
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
        if self._announcement is not None:
            self._announcement.cancel()  # the goodbye below says it all
            self._announcement = None
        self._announcing.clear()
        await super().aclose()
        if self._started:
            goodbye = Heartbeat(self.node, leaving=True, run=self.run)
            await self._store.tell("hb", goodbye.to_bytes())
        for stream in self._streams.values():
            assert isinstance(stream, Replica)
            self._unfollow(stream)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._store.close()
        self._started = False

    # -- streams ----------------------------------------------------------------------------

    async def create(
        self,
        stream_id: str,
        *,
        retention: Retention | None = None,
        orphan: OrphanPolicy | None = None,
        exist_ok: bool = False,
    ) -> StreamInfo:
        if not valid_hub_stream_id(stream_id):
            raise InvalidStreamId(
                f"invalid stream id {stream_id[:80]!r}: use 1-200 of A-Z a-z 0-9 . _ : / -"
            )
        self._make_room()
        retention = retention or self.config.retention
        incarnation = self._store.incarnation
        epoch = f"{incarnation}{_short_id()}"
        meta = self._placed(
            StreamMeta.make(stream_id, epoch, incarnation, retention, orphan, time.time_ns())
        )
        if not await self._store.create_meta(stream_key(stream_id), meta.to_bytes()):
            if not exist_ok:
                raise StreamExists(f"stream {stream_id!r} already exists")
            return await self.info(stream_id)
        now = time.monotonic()
        stream_log = StreamLog(stream_id, epoch, now_ns=time.monotonic_ns(), retention=retention)
        tracker = OrphanTracker(orphan, now) if orphan is not None else None
        replica = Replica(stream_log, tracker, meta)
        self._streams[stream_id] = replica
        if tracker is not None and tracker.deadline is not None:
            self._schedule(tracker.deadline, stream_id)
        await self._created(replica)
        return self._info(replica)

    def _placed(self, meta: StreamMeta) -> StreamMeta:
        """A new stream's metadata as stored (a layout may say where its events go)."""
        return meta

    async def _created(self, replica: Replica) -> None:
        """A new stream was made here (a layout may tell the other nodes)."""

    async def append_many(self, stream_id: str, events: Sequence[Event]) -> Sequence[Event]:
        replica = await self._replica(stream_id)
        if not events:
            return events
        if any(event.kind is Kind.SNAPSHOT for event in events):
            raise ValueError("snapshot events are made by the log, not appended")
        queue = replica.appends
        while len(queue.events) >= MAX_QUEUED_EVENTS:  # wait for the broker to catch up
            backlog = queue.waiter()
            if backlog is not None:
                with contextlib.suppress(HubError):
                    await backlog
        if queue.ended or replica.log.terminal is not None:
            # Refused, as by the log; but only once what ended it is stored (or not: then
            # that failure is this append's).
            ending = queue.waiter()
            if ending is not None:
                await ending
            raise StreamEnded(f"stream {stream_id!r} has ended; nothing can be appended")
        # Against this node's copy and what this node has on its way to the broker: another
        # node's appends not yet read here may pass the limit by what they had on their way.
        text = replica.log.check_text(events, queue.pending_text)
        taken = queue.put(events, text)
        stored = queue.waiter()
        assert stored is not None
        self._flush_soon(replica)
        await stored
        if taken < len(events):
            raise StreamEnded(f"stream {stream_id!r} has ended; nothing can be appended")
        return events

    def appender(self, stream_id: str) -> Callable[[Sequence[Event]], int] | None:
        # Queues without waiting: the events reach readers once JetStream has stored them,
        # and a failure reaches the producer at its next call.
        replica = self._streams.get(stream_id)
        if not isinstance(replica, Replica):
            return None
        return functools.partial(self._append_queued, replica)

    async def settle(self, stream_id: str, *, backlog: int = 0) -> None:
        replica = self._streams.get(stream_id)
        if not isinstance(replica, Replica):
            return
        queue = replica.appends
        while len(queue.events) > backlog or (backlog == 0 and queue.flushing):
            waiter = queue.waiter()
            if waiter is None:
                break
            with contextlib.suppress(HubError):  # raised below, for every caller alike
                await waiter
        if queue.failure is not None:
            raise queue.failure

    def _append_queued(self, replica: Replica, events: Sequence[Event]) -> int:
        queue = replica.appends
        if queue.failure is not None:
            raise queue.failure
        if queue.ended or replica.log.terminal is not None:
            raise StreamEnded(f"stream {replica.stream_id!r} has ended; nothing can be appended")
        if len(queue.events) + len(events) > MAX_QUEUED_EVENTS:
            raise HubUnavailable(
                f"stream {replica.stream_id!r}: {len(queue.events)} events are waiting for "
                "JetStream to store them"
            )
        text = replica.log.check_text(events, queue.pending_text)
        if queue.put(events, text) < len(events):
            self._flush_soon(replica)
            raise StreamEnded(f"stream {replica.stream_id!r} has ended; nothing can be appended")
        self._flush_soon(replica)
        return len(queue.events)

    def _flush_soon(self, replica: Replica) -> None:
        """Publish what the replica's queue holds, in a task of the hub's (unless one does)."""
        queue = replica.appends
        if not queue.flushing and queue.events:
            queue.flushing = True
            self._spawn(self._flush(replica))

    async def _flush(self, replica: Replica) -> None:
        """Publish the queue's events, everything queued at each turn in one publish, until
        it is empty."""
        await self._drain(replica, self._publish, locked=True)

    async def _drain(
        self,
        replica: Replica,
        write: Callable[[Replica, list[Event]], Coroutine[Any, Any, None]],
        *,
        locked: bool,
    ) -> None:
        """Hand ``write`` what the replica's queue holds, everything queued at each turn at
        once, until it is empty; each batch's waiters learn how it went. ``locked``: under
        the replica's lock (so no catch-up or cancel interleaves)."""
        queue = replica.appends
        try:
            while queue.events:
                async with replica.lock if locked else contextlib.nullcontext():
                    events = queue.take()
                    try:
                        await write(replica, events)
                    except (HubError, StreamTooLarge) as exc:  # refused by the home
                        queue.failed(exc)
                    except BaseException as exc:
                        queue.failed(HubUnavailable(f"the hub stopped before storing: {exc!r}"))
                        raise
                    else:
                        queue.stored()
        finally:
            queue.flushing = False

    async def subscribe(
        self, stream_id: str, *, resume: Position | None = None, subscriber: str | None = None
    ) -> Subscription:
        # Following brings other nodes' appends to this node's readers. The producer's own
        # node need not follow: the producer appends here, and a cancel from elsewhere is read
        # when its notice arrives (or at the producer's next append).
        follow = stream_id not in self._producing
        for _ in range(2):  # a catch-up may drop the replica for a fresh load: then once more
            replica = await self._replica(stream_id)
            if follow:
                await self._follow(replica)
                if (
                    resume is not None
                    and resume.epoch == replica.log.epoch
                    and resume.seq > replica.log.last_seq
                ):
                    await self._refresh(replica)  # the reader saw more on another node
            else:
                await self._refresh(replica)
            if self._streams.get(stream_id) is replica:
                break
        try:
            subscription = await super().subscribe(stream_id, resume=resume, subscriber=subscriber)
        except BaseException:
            if replica.readers == 0:
                self._unfollow(replica)
            raise
        if replica.readers == 1:
            self._announce_readers(replica)
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
        replica.stop_producer()
        # The producer may run on another node: tell it now rather than at its next append.
        await self._store.tell("cancel", stream_id.encode())
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
        await self.cancel(stream_id, "deleted")
        await self._store.forget(replica.key)
        await self._store.tell("deleted", stream_id.encode())
        self._drop(stream_id)

    def on_cancel(self, stream_id: str, callback: Callable[[], object]) -> None:
        super().on_cancel(stream_id, callback)
        replica = self._streams[stream_id]
        assert isinstance(replica, Replica)
        if stream_id not in self._producing and replica.log.terminal is None:
            # This node runs the stream's producer: record it where every node can see it, so
            # a node that starts reading the stream later knows whose death ends it.
            self._producing.add(stream_id)
            self._spawn(self._record_producer(replica))

    # -- replicas ---------------------------------------------------------------------------

    async def _replica(self, stream_id: str) -> Replica:
        """This node's replica of ``stream_id``, loaded from JetStream if it has none."""
        replica = self._streams.get(stream_id)
        if replica is not None:
            assert isinstance(replica, Replica)
            return replica
        if not valid_hub_stream_id(stream_id):
            raise InvalidStreamId(f"invalid stream id {stream_id[:200]!r}")
        loading = self._loading.get(stream_id)
        if loading is not None:  # another request is loading it: share its result
            return await asyncio.shield(loading)
        loading = asyncio.get_running_loop().create_future()
        self._loading[stream_id] = loading
        try:
            loaded = await self._load(stream_id)
        except BaseException as exc:
            loading.set_exception(exc)
            loading.exception()  # retrieved: waiters get it, nobody else should log it
            raise
        finally:
            del self._loading[stream_id]
        loading.set_result(loaded)
        return loaded

    async def _stored_meta(self, stream_id: str) -> StreamMeta:
        """A stream's metadata as stored, checked against this incarnation of the history."""
        stored = await self._store.get_meta(stream_key(stream_id))
        if stored is None:
            raise StreamNotFound(f"no stream {stream_id[:200]!r}")
        try:
            meta = StreamMeta.from_bytes(stored)
        except CorruptRecord as exc:
            raise HubError(f"stream {stream_id!r}: unreadable metadata ({exc})") from None
        if meta.incarnation != self._store.incarnation:
            stream = (
                self.js_config.log_stream
                if self.js_config.layout == "node"
                else self.js_config.events_stream
            )
            raise StreamNotFound(
                f"stream {stream_id[:200]!r}: its history was lost (the JetStream stream "
                f"{stream} was re-created)"
            )
        return meta

    async def _load(self, stream_id: str) -> Replica:
        key = stream_key(stream_id)
        meta = await self._stored_meta(stream_id)
        self._make_room()
        stream_log = StreamLog(
            stream_id, meta.epoch, now_ns=_created_ns(meta), retention=meta.retention_policy()
        )
        after = 0
        snapshot = await self._store.get_snapshot(key)
        if snapshot is not None:
            keep_from, folded = decode_snapshot(snapshot)
            stream_log.restore(Folded.from_event(folded))
            after = keep_from - 1
        replica = Replica(stream_log, None, meta)
        replica.last_js_seq = after
        until = await self._store.last_seq(key)
        await self._store.read_until(key, after, until, self._deliverer(replica))
        _no_token_before_creation(stream_log)
        existing = self._streams.get(stream_id)
        if existing is not None:  # created on this node while this load waited
            assert isinstance(existing, Replica)
            return existing
        self._streams[stream_id] = replica
        return replica

    async def _refresh(self, replica: Replica) -> None:
        """Bring a replica that follows no consumer up to date."""
        if replica.live is None and replica.log.terminal is None:
            await self._locked_catch_up(replica)

    async def _catch_up(self, replica: Replica) -> None:
        """Apply every stored message after the replica's newest: one read when there is
        none, two when there is one (a conflicting append: what another node appended in
        between), and the rest in bulk through an ordered consumer, never a round trip per
        message (a reader arriving on a node that held a long stream's beginning only)."""
        replica.deferred = False  # (whatever was missed is after the newest: read here)
        key = replica.key
        batch = await self._store.next_after(key, replica.last_js_seq)
        if batch is None:
            return
        self._appended += replica.apply(batch)
        until = await self._store.last_seq(key)
        if until > replica.last_js_seq:

            def apply(stored: StoredBatch) -> None:
                self._appended += replica.apply(stored)

            await self._store.read_until(key, replica.last_js_seq, until, apply)

    async def _publish(self, replica: Replica, events: list[Event]) -> None:
        """Store ``events`` in JetStream, then in the replica; the caller holds the lock."""
        stream_log = replica.log
        pending = events
        conflicts = 0
        while pending:
            if stream_log.terminal is not None:
                raise StreamEnded(
                    f"stream {replica.stream_id!r} has ended; nothing can be appended"
                )
            # A slice, not all that is pending: only the first message is published now
            # (the rest is encoded again after it, with the seqs it then gets).
            first = pending[:MAX_BATCH_EVENTS]
            first_seq, count, payload = encode_batches(first, stream_log.next_seq)[0]
            # Unique per publish and kept across its retries (see JetStreamStore.publish).
            # Not the seq alone: two nodes racing for one seq would be each other's duplicate;
            # and the run, because a node restarted under its id counts from 0 again, which
            # JetStream would take for the old process's messages within its duplicate window.
            replica.inflight = msg_id = f"{self.node}:{self.run}:{next(self._publishes)}"
            try:
                js_seq = await self._store.publish(
                    replica.key, payload, msg_id=msg_id, after=replica.last_js_seq
                )
            except Conflict:
                replica.inflight = None
                conflicts += 1
                if conflicts > MAX_CONFLICTS:
                    raise HubError(
                        f"stream {replica.stream_id!r}: {MAX_CONFLICTS} appends from other "
                        "nodes came first; giving up"
                    ) from None
                # What came first may be this very publish, stored by a try whose answer
                # was lost: then it is stored, and publishing it again would store it twice.
                landed = await self._store.next_after(replica.key, replica.last_js_seq)
                if landed is None or landed.msg_id != msg_id:
                    await self._catch_up(replica)
                    continue
                js_seq = landed.js_seq
            finally:
                replica.inflight = None
            if js_seq <= replica.last_js_seq:
                # Conditional on the newest message, a stored append lands after it: an
                # answer naming an older message would acknowledge what was not stored.
                raise HubError(
                    f"stream {replica.stream_id!r}: JetStream acknowledged an append as "
                    f"message {js_seq}, not after {replica.last_js_seq}"
                )
            batch, pending = pending[:count], pending[count:]
            replica.last_js_seq = js_seq
            replica.store(batch, time.monotonic_ns(), js_seq, first_seq)
            # In the replica now: no longer counted as on its way (the text limit counts both).
            replica.appends.stored_part(batch)
            self._appended += count
            if replica.deferred:
                replica.deferred = False
                await self._catch_up(replica)

    async def _follow(self, replica: Replica) -> None:
        """Follow the replica's stream live (unless it does already or has ended): subscribe
        first, then read back what was stored before, so nothing falls in between."""
        async with replica.lock:
            if replica.live is not None or replica.log.terminal is not None:
                return
            started = time.monotonic()
            replica.live = await self._store.follow(replica.key, self._deliverer(replica))
            until = await self._store.last_seq(replica.key)
            await self._store.read_until(
                replica.key, replica.last_js_seq, until, self._deliverer(replica)
            )
            took = time.monotonic() - started
            if took > SLOW_FOLLOW_S:
                log.warning("stream %s: reading its history took %.2f s", replica.stream_id, took)
            if replica.deferred:
                replica.deferred = False
                await self._catch_up(replica)

    def _deliverer(self, replica: Replica) -> Callable[[StoredBatch], None]:
        def deliver(batch: StoredBatch) -> None:
            self._appended += replica.deliver(batch)
            if replica.deferred and not replica.lock.locked():
                # (A holder of the lock reads back what was deferred before it lets go.)
                self._repair(replica)

        return deliver

    def _repair(self, replica: Replica) -> None:
        """Read back what the replica missed, once (a task; deliveries cannot wait)."""
        if not replica.repairing:
            replica.repairing = True
            self._spawn(self._read_back(replica))

    async def _read_back(self, replica: Replica) -> None:
        try:
            # A delivery while the lock is held may defer again (it leaves the read-back to
            # the holder): read again then, a bounded number of times (a gap nothing fills
            # must not keep a task reading).
            for _ in range(READ_BACK_PASSES):
                async with replica.lock:
                    # `deferred` is left for `_catch_up`: the node layout's reads only what
                    # it says.
                    await self._catch_up(replica)
                if not replica.deferred or self._streams.get(replica.stream_id) is not replica:
                    break
        finally:
            replica.repairing = False

    def _on_missed(self) -> None:
        """Live messages may have been lost (a reconnect): every follower reads back."""
        for stream in self._streams.values():
            assert isinstance(stream, Replica)
            if stream.live is not None:
                self._repair(stream)

    def _unfollow(self, replica: Replica) -> None:
        """Stop the replica's consumer (at once: a reader arriving next starts a new one)."""
        consumer, replica.live = replica.live, None
        if consumer is not None:
            self._spawn(consumer.unsubscribe())

    def _release(self, stream: _Stream) -> None:
        super()._release(stream)
        assert isinstance(stream, Replica)
        if stream.readers == 0:
            self._announce_readers(stream)
            self._unfollow(stream)

    def _make_room(self) -> None:
        """Raise `HubFull` if this node holds ``max_streams`` streams (the ``node`` layout
        first lets a mirror nobody needs here go)."""
        if len(self._streams) >= self.config.max_streams:
            raise HubFull(f"the hub holds {self.config.max_streams} streams, its limit")

    def _drop(self, stream_id: str) -> None:
        """Forget a replica here (its readers are released)."""
        stream = self._streams.pop(stream_id, None)
        self._producing.discard(stream_id)
        if isinstance(stream, Replica):
            stream.cancel_callbacks.clear()
            self._unfollow(stream)
            stream.notify()

    # -- producers, orphans and other nodes -------------------------------------------------

    def nodes(self) -> list[dict[str, object]]:
        rows = self._nodes.report(time.monotonic())
        producing = sorted(self._producing)
        rows[0].update(
            producing=len(producing),
            streams=producing[:MAX_REPORTED],
            readers=self.stats().subscribers,
        )
        return rows

    async def _record_producer(self, replica: Replica) -> None:
        meta = replica.meta
        updated = meta.produced_by(self.node, self.run)
        try:
            await self._store.put_meta(replica.key, updated.to_bytes())
            replica.meta = updated
        except HubError as exc:
            log.warning("stream %s: could not record its producer: %s", meta.stream_id, exc)

    def _announce_readers(self, replica: Replica) -> None:
        """Tell the other nodes soon (`ANNOUNCE_AFTER_S`) that this node started or stopped
        reading: one announcement carries every stream whose readers came or went meanwhile,
        so a burst of connections costs the broker and every node a few messages, not one
        each (the orphan policy's grace is seconds, not milliseconds)."""
        self._announcing[replica.stream_id] = replica
        if self._announcement is None:
            self._announcement = asyncio.get_running_loop().call_later(
                ANNOUNCE_AFTER_S, self._announce
            )

    def _announce(self) -> None:
        self._announcement = None
        readers: dict[str, int] = {}
        announcing = self._announcing
        while announcing and len(readers) < MAX_ENTRIES:
            stream_id, replica = announcing.popitem()
            if stream_id not in self._producing:  # the producer's node tells by heartbeat
                readers[stream_id] = replica.readers  # the count now, however it got there
        if announcing:  # the rest go in the next
            self._announcement = asyncio.get_running_loop().call_later(0, self._announce)
        if readers:
            beat = Heartbeat(self.node, readers, partial=True, run=self.run)
            self._spawn(self._store.tell("hb", beat.to_bytes()))

    def pausing(self, seconds: float) -> asyncio.Task[Any] | None:
        """Tell the other processes that this one is about to stop for about ``seconds``:
        they count its silence from the end of that (`presence.MAX_PAUSE_S` at most). The
        task returned ends once the broker has the word (or after `store.TELL_FLUSH_S`):
        the pause should begin only then."""
        if not self._started or seconds <= 0:
            return None
        beat = Heartbeat(self.node, partial=True, run=self.run, pause_s=seconds)
        return self._spawn(self._store.tell("hb", beat.to_bytes(), flushed=True))

    async def _heartbeats(self) -> None:
        while True:
            # Streams that ended (or left) need no watching for their producer any more.
            self._producing = {
                sid
                for sid in self._producing
                if (stream := self._streams.get(sid)) is not None and stream.log.terminal is None
            }
            await self._store.tell("hb", self._full_beat().to_bytes())
            now = time.monotonic()
            dead, changes = self._nodes.expire()
            for node in dead:
                log.warning("node %s stopped sending heartbeats", node)
            self._apply_reader_changes(changes, now)
            self._end_orphaned_producers()
            await asyncio.sleep(self.js_config.heartbeat_s)

    def _full_beat(self) -> Heartbeat:
        """This process's whole state as the others see it: its readers, the streams it
        produces, the logs it follows."""
        return Heartbeat(
            self.node,
            {sid: s.readers for sid, s in self._streams.items() if s.readers},
            sorted(self._producing),
            run=self.run,
            logs=self._followed_logs(),
        )

    async def _greet(self) -> None:
        """A heartbeat now, for a process just heard from for the first time: it knows of
        this one at once (a listing it serves asks every process it knows), not up to
        ``heartbeat_s`` later. Newcomers heard meanwhile share it."""
        try:
            await self._store.tell("hb", self._full_beat().to_bytes())
        finally:
            self._greeting = False

    def _followed_logs(self) -> dict[str, int]:
        """What a heartbeat says of the home logs this process follows (the ``node``
        layout's business)."""
        return {}

    def _on_heartbeat(self, data: bytes) -> None:
        beat = Heartbeat.from_bytes(data)
        if beat is not None:
            now = time.monotonic()
            newcomer = not beat.leaving and beat.member not in self._nodes.last_seen
            self._apply_reader_changes(self._nodes.observe(beat, now), now)
            if newcomer and beat.member != self.member and not self._greeting:
                self._greeting = True
                self._spawn(self._greet())

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

    def _end_orphaned_producers(self) -> None:
        """End the streams (read here) whose producer's node is dead."""
        for stream_id, stream in self._streams.items():
            assert isinstance(stream, Replica)
            if stream.log.terminal is not None:
                continue
            producer = self._nodes.producers.get(stream_id) or _producer_of(stream.meta)
            if (
                producer is not None
                and producer != self.member
                and self._nodes.alive(producer) is False
                and stream_id not in self._ending
            ):
                self._ending.add(stream_id)  # one append at a time, not one per heartbeat
                self._spawn(self._producer_lost(stream, producer))

    async def _producer_lost(self, replica: Replica, producer: Member) -> None:
        error = Event.error(
            f"the gateway node running this stream's producer ({producer.node}) stopped; "
            "the stream ends here",
            code="producer_lost",
        )
        try:
            with contextlib.suppress(StreamEnded):
                async with replica.lock:
                    await self._publish(replica, [error])
        finally:
            self._ending.discard(replica.stream_id)

    def _on_cancel_notice(self, data: bytes) -> None:
        # Read the done event now: it stops this node's producer if the stream is its.
        stream = self._streams.get(data.decode(errors="replace"))
        if isinstance(stream, Replica) and stream.log.terminal is None:
            self._spawn(self._locked_catch_up(stream))

    async def _locked_catch_up(self, replica: Replica) -> None:
        async with replica.lock:
            await self._catch_up(replica)

    def _on_deleted_notice(self, data: bytes) -> None:
        stream_id = data.decode(errors="replace")
        if stream_id in self._streams:
            self._drop(stream_id)

    # -- housekeeping -----------------------------------------------------------------------

    def _expire_orphans(self, now: float) -> None:
        # Cancelling goes through JetStream (asynchronous): a task per orphaned stream.
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
        now_ns = time.monotonic_ns()
        idle_before = now_ns - int(self.config.idle_ttl_s * 1e9)
        for stream_id, stream in list(self._streams.items()):
            assert isinstance(stream, Replica)
            if stream.ended_at is not None and now - stream.ended_at >= ttl:
                self._drop(stream_id)
                if stream.orphan is not None:  # the producer's node cleans JetStream up
                    self._spawn(self._store.forget(stream.key))
                continue
            stream.log.trim(now_ns)
            if self._looks_idle(stream, idle_before):
                self._expiring.add(stream_id)
                self._spawn(self._expire_idle(stream, idle_before))
            folded = stream.log.folded.through_seq - stream.snapshot_through
            if stream.orphan is not None and folded >= SNAPSHOT_EVERY:
                self._spawn(self._store_snapshot(stream))

    def _looks_idle(self, replica: Replica, idle_before: int) -> bool:
        """Whether ``replica`` may be an idle stream as far as this node knows: not ended, no
        reader on any node, no producer, nothing appended or read here since
        ``idle_before`` (`_expire_idle` reads what other nodes appended before deciding)."""
        stream_id = replica.stream_id
        return (
            replica.log.terminal is None
            and not replica.readers
            and max(replica.active_ns, replica.log.newest_ts_ns) < idle_before
            and stream_id not in self._expiring
            and stream_id not in self._producing
            and stream_id not in self._nodes.producers
            and not self._nodes.remote_readers(stream_id)
        )

    async def _expire_idle(self, replica: Replica, idle_before: int) -> None:
        """End an idle stream with ``done("expired")``, as `MemoryHub` does, once its replica
        has read what other nodes appended: any node that holds it may, the first one's end
        is the stream's. Streams no node holds are bounded by JetStream's ``max_age``."""
        try:
            async with replica.lock:
                await self._catch_up(replica)
                newest = replica.log.newest_ts_ns
                if newest >= idle_before or replica.readers or replica.log.terminal is not None:
                    replica.active_ns = max(replica.active_ns, newest)
                    return
                log.info("stream %s idle: ending it", replica.stream_id)
                with contextlib.suppress(StreamEnded):
                    await self._publish(replica, [Event.done("expired")])
        except HubError as exc:
            log.warning("stream %s: could not end it as idle: %s", replica.stream_id, exc)
        finally:
            self._expiring.discard(replica.stream_id)

    async def _store_snapshot(self, replica: Replica) -> None:
        """Store the folded history in the snapshot bucket, then purge it from JetStream.

        One at a time per stream: the sweep asks every second until this one ends, and an
        older snapshot stored after a newer one's purge would leave a gap between them."""
        sid = replica.stream_id
        keep_from = replica.oldest_kept()
        if keep_from is None or sid in self._storing_snapshots:
            return
        self._storing_snapshots.add(sid)
        try:
            through = replica.log.folded.through_seq
            snapshot = replica.log.folded.to_event()
            await self._store.put_snapshot(replica.key, encode_snapshot(snapshot, keep_from))
            await self._store.purge_below(replica.key, keep_from)
            replica.snapshot_through = through
        finally:
            self._storing_snapshots.discard(sid)

    # -- plumbing ---------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the hub owns (cancelled and awaited by `aclose`)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hub task failed: %r", task.exception())


def _created_ns(meta: StreamMeta) -> int:
    """When the stream was created, on this process's monotonic clock (now for a record
    made before creation times were kept)."""
    now_ns = time.monotonic_ns()
    if meta.created_unix_ns is None:
        return now_ns
    return now_ns - max(0, time.time_ns() - meta.created_unix_ns)


def _no_token_before_creation(stream_log: StreamLog) -> None:
    """The creator's clock and the broker's (which stamped a loaded stream's events) disagree
    a little: a time to first token is never negative."""
    ledger = stream_log.ledger
    if ledger.first_token_ns is not None and ledger.first_token_ns < ledger.created_ns:
        ledger.created_ns = ledger.first_token_ns


def _producer_of(meta: StreamMeta) -> Member | None:
    """The member recorded as running the stream's producer, if any."""
    return None if meta.producer is None else Member(meta.producer, meta.producer_run)
