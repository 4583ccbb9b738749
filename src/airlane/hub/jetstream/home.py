"""`HomeLogHub`: the JetStream hub with a home log per gateway process (``layout = "node"``).

Why. In the ``stream`` layout every appended batch is one broker message on the stream's own
subject; at token pace a batch is one chunk, and the broker then spends as much CPU per chunk
as a whole gateway does. Here each gateway process (a member: node id and run) writes the
streams it created into one subject, its **home log**, and everything its producers appended
while one publish was in flight goes out together in the next: with hundreds of paced streams
one broker message carries tens of them, and every other node reads them with one
subscription.

Order. Every publish to a home log is conditional on the log's newest message
(``Nats-Expected-Last-Subject-Sequence``), so a log is one total order whoever writes it, and a
stream's entries in it are contiguous: each starts at the stream's next seq. The home process
writes its streams. Another node's append (a cancel, an event log append, an idle stream's end)
is forwarded to the home process, which stores it with its own and answers once it is stored;
a home that cannot answer (nobody serves its subject, it does not answer in time, or presence
says it died) is written directly, after reading its log to the end, conditional as always:
a home that was only paused loses its next publish to that write and reads it first.

Reading. Every node follows the home logs of the other members (one plain subscription each
to JetStream's republished copies, demultiplexed here; `airlane.hub.jetstream.follower`) and
mirrors the streams created in them from their creation entry, which carries the metadata: a
reader on any node finds the stream there, complete, without a read. A stream created before
this node followed its home log is read from the log once (from its snapshot's message, or
from its creation time). A gap in a followed log (a reconnect, a slow consumer) shows in the
republished previous-sequence header and is read back. With ``mirror = "read"`` (the workers
of ``airlane serve --workers``, which hand a stream's readers to its home process) a node
follows a log only once it loads one of its streams, and holds only what it loaded; `owner`
then reads a stream's record to say where it lives.

Trimming. A stream's messages cannot be purged alone (they share a subject with others), so
each process purges its home log below the oldest message still needed, every
``trim_every_s``: the first message of every stream it holds (its creation, or the position
its stored snapshot reads on from; an ended stream is held ``ended_ttl_s``), and the position
every live follower reports in its heartbeats. The floor of one round is applied the next, so
a node that read a snapshot just before it moved on still finds the messages after it. A node
that was taken for gone and returns may find its position purged (its read-back meets a
message whose condition names a newer one than it applied): it checks the streams it holds of
that log against their records. JetStream's ``max_age`` bounds whatever is left (the logs of
processes that are gone).

The rest (presence, orphans, cancel notices, idle expiry, snapshots in the key-value bucket)
is `JetStreamHub`'s.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from airlane.core import Event, Folded, StreamInfo, StreamLog, StreamTooLarge
from airlane.hub.base import (
    EventTooLarge,
    HubError,
    HubUnavailable,
    StreamEnded,
    StreamNotFound,
)
from airlane.hub.jetstream.config import JetStreamHubConfig
from airlane.hub.jetstream.follower import LogFollower
from airlane.hub.jetstream.hub import (
    MAX_BATCH_EVENTS,
    MAX_CONFLICTS,
    JetStreamHub,
    _created_ns,
    _no_token_before_creation,
)
from airlane.hub.jetstream.presence import Heartbeat, Member
from airlane.hub.jetstream.records import (
    MAX_BATCH_BYTES,
    CorruptRecord,
    StreamMeta,
    compressed,
    decode_entries,
    decode_snapshot,
    encode_created,
    encode_entry,
    encode_snapshot,
    events_of,
    join_entries,
    stream_key,
)
from airlane.hub.jetstream.replica import Replica
from airlane.hub.jetstream.schedule import PublishSchedule
from airlane.hub.jetstream.store import Conflict, StoredBatch

__all__ = ["HomeLogHub"]

log = logging.getLogger("airlane.hub.jetstream")

MIRROR_SHARE = 0.9
"""Share of ``max_streams`` up to which streams created elsewhere are mirrored here; past it
they are loaded when a reader asks (room is left for this node's own streams)."""
MAX_FORWARDS = 1024
"""Appends forwarded by other nodes being stored here at once; past it they are refused
(``busy``) and the asking node's append fails as unavailable."""
RELOAD_RETRY_S = 2.0
"""How long a replica that misses folded events waits before its snapshot is looked at again
(it could not be read, or the replica was kept for a producer here)."""
MAX_DELETED = 4096
"""Deleted stream ids a node remembers so as not to mirror them again."""
REACH_S = 1.0
"""How long to wait for a followed log's live message before reading it back."""
MAX_MESSAGE_BYTES = 960 * 1024
"""A home log message at most (less where the server's ``max_payload`` is smaller). One
publish is in flight per home log, so under load what a message carries bounds the log's
throughput: a backlog goes out in as few round trips as the server allows."""
RESYNC_PAUSE_S = 1.0
"""Pause before a failed read-back of a followed log is tried again."""
REWRITE_FACTOR = 4
"""How many times its retained bytes a stream may hold back before it is rewritten (what a
rewrite costs stays a fraction of the traffic that makes it worth it)."""
REWRITE_ROUND_BYTES = 32 * 1024 * 1024
"""Retained bytes rewritten per trim round at most (the rest wait for the next rounds)."""

MAX_LISTED = 1000
"""Streams one process lists for another at most (``mirror = "read"``'s listings)."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
_listing_decoder = msgspec.msgpack.Decoder(list[tuple[int, StreamInfo]])


class HomeLogHub(JetStreamHub):
    """The JetStream hub in the ``node`` layout. See the module docstring."""

    def __init__(self, config: JetStreamHubConfig | None = None) -> None:
        super().__init__(replace(config or JetStreamHubConfig(), layout="node"))
        self.home = self._store.log_subject(self.node, self.run)
        """This process's home log."""
        self._written = 0
        """The newest message of the home log applied here."""
        self._home_lock = asyncio.Lock()
        """Held while publishing to the home log or reading it back."""
        self._dirty: dict[str, Replica] = {}
        """Own streams with appends queued since their last publish."""
        self._sending: dict[str, tuple[Replica, list[Event]]] = {}
        """Own streams' appends taken for publishing, not yet all stored."""
        self._creates: list[tuple[bytes, asyncio.Future[None]]] = []
        """Creation entries waiting for the next publish."""
        self._writing = False
        self._last_publish = -1e9
        """When the writer's last publish began (loop time)."""
        self._publish_schedule = PublishSchedule(
            self.js_config.linger_ms / 1000, self.js_config.busy_linger_ms / 1000
        )
        """How long the writer waits between publishes, from the flow of appends."""
        self._message_bytes = MAX_BATCH_BYTES
        """The most a message carries (set from the server's limit at start)."""
        self._followers: dict[str, LogFollower] = {}
        self._pending: dict[str, Replica] = {}
        """Streams whose history is being read (live entries reach them meanwhile)."""
        self._forwards = 0
        self._reread: set[str] = set()
        """Streams whose metadata was read again after their home died."""
        self._deleted: dict[str, None] = {}
        """Streams deleted lately (at most `MAX_DELETED`, oldest first): a read-back that
        meets their creation entry again does not bring them back as mirrors."""
        self._gone: set[str] = set()
        """Streams whose missing events are no longer in JetStream (logged once)."""
        self._watched: dict[str, bool] = {}
        """Message ids of this node's direct writes under way: True once one is seen in
        the log (a try whose answer was lost but which was stored)."""
        self._read_by: dict[Member, int] = {}
        """How far each member following this process's home log has applied it (from
        its heartbeats; dropped once it leaves or dies)."""
        self._trimmed = 1
        """The home log holds nothing older than this (purged by this process)."""
        self._trim_floor: int | None = None
        """The floor of the last trim round, applied at the next."""
        self._next_trim = 0.0
        self._trimming = False
        self._log_bytes = 0
        """Bytes this process has written to its home log (the measure of what a stream's
        starting point holds back)."""
        self._rewrite_wanted: dict[str, Replica] = {}
        """Own streams to be written again at the log's head, from the next message on."""
        self._rewrites: dict[str, _Rewrite] = {}
        """Own streams whose retained events are being written again (their new appends
        wait, so the rewritten history and what follows are contiguous)."""
        self._snapshotting: set[str] = set()
        """Streams whose snapshot record is being stored (one store at a time each)."""
        self._rewritten_count = 0

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        await super().start()
        # Room for the headers and the array around the entries.
        self._message_bytes = min(MAX_MESSAGE_BYTES, max(4096, self._store.max_payload - 8192))
        await self._store.serve(self._forward_subject(self.home), self._on_forward)
        await self._store.serve(self._position_subject(self.home), self._on_position)
        await self._store.serve(self._list_subject(self.home), self._on_list)
        await self._store.listen(self._wrote_notice(self.home), self._on_wrote)

    async def aclose(self) -> None:
        await super().aclose()
        closed = HubUnavailable("the hub closed")
        for follower in self._followers.values():
            follower.fail(closed)
        self._followers.clear()
        self._fail_creates(len(self._creates), closed)
        for sid, (replica, _) in list(self._sending.items()):
            del self._sending[sid]
            replica.appends.failed(closed)
        for replica in self._dirty.values():
            replica.appends.failed(closed)
        self._dirty.clear()

    # -- writing ----------------------------------------------------------------------------

    def _placed(self, meta: StreamMeta) -> StreamMeta:
        return replace(meta, home=self.home, home_after=self._written)

    async def _created(self, replica: Replica) -> None:
        # The creation entry lets every follower mirror the stream from its first event.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        replica.anchor_bytes = self._log_bytes
        self._creates.append((encode_created(replica.stream_id, replica.meta.to_bytes()), future))
        self._wake_writer()
        try:
            await future
        except BaseException:
            self._streams.pop(replica.stream_id, None)
            with contextlib.suppress(HubError):
                await self._store.forget(replica.key)
            raise

    async def _publish(self, replica: Replica, events: list[Event]) -> None:
        # Cancels, producer_lost and expiry ends go the way of any append: to the home
        # process's next publish (forwarded if it is another's).
        queue = replica.appends
        if replica.log.terminal is None and queue.ended:
            ending = queue.waiter()  # a terminal event is on its way: what it does decides
            if ending is not None:
                with contextlib.suppress(HubError):
                    await ending
        if replica.log.terminal is not None or queue.ended:
            raise StreamEnded(f"stream {replica.stream_id!r} has ended; nothing can be appended")
        taken = queue.put(events)
        stored = queue.waiter()
        self._flush_soon(replica)
        if stored is not None:
            await stored
        if taken < len(events):
            raise StreamEnded(f"stream {replica.stream_id!r} has ended; nothing can be appended")

    def _flush_soon(self, replica: Replica) -> None:
        queue = replica.appends
        if not queue.events:
            return
        if replica.home == self.home:
            queue.flushing = True
            self._dirty[replica.stream_id] = replica
            self._wake_writer()
        elif not queue.flushing:
            queue.flushing = True
            self._spawn(self._forward_queue(replica))

    def _wake_writer(self) -> None:
        if not self._writing:
            self._writing = True
            self._spawn(self._write())

    async def _write(self) -> None:
        """Publish to the home log until nothing is queued: one message at a time, each
        carrying everything queued when it was made (bounded by `MAX_MESSAGE_BYTES`).

        While appends keep coming, publishes begin at most every ``linger_ms`` at a light
        flow, up to every ``busy_linger_ms`` at a busy one (`PublishSchedule`): what arrives
        meanwhile (a paced stream's next chunks, other streams' chunks) waits for the next
        message. A broker message costs about the same whatever it carries, so fewer,
        fuller ones cost less CPU everywhere (the broker, this process, every follower), for
        at most that much latency; an append after a quiet moment goes out at once (a
        stream's first token waits for nothing)."""
        schedule = self._publish_schedule
        loop = asyncio.get_running_loop()
        try:
            while (
                self._dirty
                or self._sending
                or self._creates
                or self._rewrites
                or self._rewrite_wanted
            ):
                wait = self._last_publish + schedule.linger_s - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                schedule.took(self._take_dirty(), time.monotonic())
                async with self._home_lock:
                    began = self._last_publish = loop.time()
                    await self._publish_home()
                    schedule.published(loop.time() - began)
        finally:
            self._writing = False

    def _take_dirty(self) -> int:
        """Move what the streams queued into `_sending`, for the next message; how many
        events that is."""
        taken = 0
        for sid, replica in list(self._dirty.items()):
            if sid in self._sending:
                continue  # its previous appends are still going out
            del self._dirty[sid]
            events = replica.appends.take()
            if events:
                self._sending[sid] = (replica, events)
                taken += len(events)
            else:
                self._settled(replica)
        return taken

    def _settled(self, replica: Replica) -> None:
        sid = replica.stream_id
        if sid in self._sending or sid in self._dirty:
            return
        queue = replica.appends
        if queue.events:
            self._dirty[sid] = replica
        else:
            queue.flushing = False

    async def _publish_home(self) -> None:
        conflicts = 0
        attempts: dict[str, _Message] = {}
        while True:
            parts, message = self._encode()
            if not parts:
                return
            msg_id = f"{self.node}:{self.run}:{next(self._publishes)}"
            attempts[msg_id] = message
            payload = join_entries(parts)
            if self.js_config.compression == "zstd":
                payload = compressed(payload)
            try:
                js_seq = await self._store.publish_on(
                    self.js_config.log_stream,
                    self.home,
                    payload,
                    msg_id=msg_id,
                    after=self._written,
                )
            except Conflict:
                # Another node wrote here (it took this process for dead): read it, then
                # encode again with the seqs that leaves.
                conflicts += 1
                if conflicts > MAX_CONFLICTS:
                    self._fail_message(message, HubError("the home log kept changing"))
                    return
                try:
                    if await self._read_home(attempts):
                        return  # an earlier try was stored after all (its answer was lost)
                except HubError as exc:
                    self._fail_message(message, exc)
                    return
                continue
            except HubError as exc:
                self._fail_message(message, exc)
                return
            except BaseException as exc:
                stopped = HubUnavailable(f"the hub stopped before storing: {exc!r}")
                self._fail_message(message, stopped)
                raise
            if js_seq <= self._written:
                self._fail_message(
                    message,
                    HubError(
                        f"JetStream acknowledged a publish as message {js_seq}, "
                        f"not after {self._written}"
                    ),
                )
                return
            self._written = js_seq
            self._log_bytes += len(payload)
            self._stored(js_seq, message)
            return

    def _encode(self) -> tuple[list[bytes], _Message]:
        """The next message's entries and what they carry: creations first, then the
        rewritten history of streams being moved forward, then a slice of each stream being
        sent (bounded by `MAX_MESSAGE_BYTES`)."""
        limit = self._message_bytes
        parts: list[bytes] = []
        size = 0
        message = _Message()
        for entry, _ in self._creates:
            if parts and size + len(entry) > limit:
                break
            parts.append(entry)
            size += len(entry)
            message.creates += 1
        self._start_rewrites()
        unfinished: set[str] = set()  # their new appends wait for the whole rewrite
        for sid, rewrite in self._rewrites.items():
            if not parts or size < limit:
                entry, count = _entry_within(sid, rewrite.events, rewrite.events[0].seq, limit)
                if not parts or size + len(entry) <= limit:
                    parts.append(entry)
                    size += len(entry)
                    message.rewrites.append((rewrite, count))
                    if count == len(rewrite.events):
                        continue
            unfinished.add(sid)
        for sid, (replica, events) in list(self._sending.items()):
            if parts and size >= limit:
                break
            if sid in unfinished:
                continue
            if replica.log.terminal is not None:  # ended by another node's write
                del self._sending[sid]
                replica.appends.failed(
                    StreamEnded(f"stream {sid!r} has ended; nothing can be appended")
                )
                self._settled(replica)
                continue
            first = replica.log.next_seq
            entry, count = _entry_within(sid, events, first, limit)
            if parts and size + len(entry) > limit:
                break
            parts.append(entry)
            size += len(entry)
            message.plan.append((replica, count, first))
        return parts, message

    def _stored(self, js_seq: int, message: _Message) -> None:
        now_ns = time.monotonic_ns()
        taken, self._creates = self._creates[: message.creates], self._creates[message.creates :]
        for _, future in taken:
            if not future.done():
                future.set_result(None)
        for rewrite, count in message.rewrites:
            self._rewritten(rewrite, count, js_seq)
        sending = self._sending
        for replica, count, first in message.plan:
            sid = replica.stream_id
            _, events = sending[sid]
            replica.last_js_seq = js_seq
            self._appended += count
            if count < len(events):
                replica.store(events[:count], now_ns, js_seq, first)
                replica.appends.stored_part(events[:count])
                sending[sid] = (replica, events[count:])
            else:  # all of them (no copy)
                replica.store(events, now_ns, js_seq, first)
                del sending[sid]
                replica.appends.stored()
                self._settled(replica)

    def _fail_message(self, message: _Message, exc: HubError) -> None:
        """A message was not stored: its creations fail, and its streams' appends (what
        follows them cannot be stored past the gap)."""
        self._fail_creates(message.creates, exc)
        self._abandon_rewrites()
        for replica, _, _ in message.plan:
            self._sending.pop(replica.stream_id, None)
            replica.appends.failed(exc)
            self._settled(replica)

    def _fail_creates(self, count: int, exc: HubError) -> None:
        taken, self._creates = self._creates[:count], self._creates[count:]
        for _, future in taken:
            if not future.done():
                future.set_exception(exc)

    async def _read_home(self, attempts: dict[str, _Message] | None = None) -> bool:
        """Apply what other nodes wrote to the home log since this process's newest message
        (the caller holds `_home_lock`). A message that is one of this process's
        ``attempts`` (a publish whose answer was lost, tried again and refused) is taken as
        stored; True if one was."""
        last = await self._store.newest_after(self.js_config.log_stream, self.home, self._written)
        found = False

        def deliver(batch: StoredBatch) -> None:
            nonlocal found
            attempt = None if attempts is None or found else attempts.get(batch.msg_id or "")
            if attempt is not None:
                found = True
                self._stored(batch.js_seq, attempt)
            else:
                self._apply_message(self.home, batch)

        if last > self._written:
            # Another's entry between a rewrite's parts and the snapshot naming them would
            # break the history a load reads from there: rewrites start again later.
            self._abandon_rewrites()
            await self._store.read_until_on(
                self.js_config.log_stream, self.home, self._written, last, deliver
            )
            self._written = last
        return found

    # -- moving a stream's starting point forward ----------------------------------------------

    def _want_rewrites(self) -> None:
        """Pick the live streams that hold too much of the home log back for rewriting,
        within `REWRITE_ROUND_BYTES`. A long-lived stream would otherwise keep every other
        stream's messages since its creation: its retained events are written again at the
        log's head (``rewrite_after_mb``) and the log behind them can be trimmed."""
        after = int(self.js_config.rewrite_after_mb * 1e6)
        if not after:
            return
        budget = REWRITE_ROUND_BYTES
        for sid, stream in self._streams.items():
            assert isinstance(stream, Replica)
            if (
                stream.home != self.home
                or stream.log.terminal is not None
                or sid in self._rewrites
                or sid in self._rewrite_wanted
                or sid in self._snapshotting
            ):
                continue
            retained = stream.log.retained_bytes
            held_back = self._log_bytes - stream.anchor_bytes
            if held_back > max(after, REWRITE_FACTOR * retained):
                self._rewrite_wanted[sid] = stream
                budget -= retained
                if budget <= 0:
                    break
        if self._rewrite_wanted:
            self._wake_writer()

    def _start_rewrites(self) -> None:
        """Take the wanted streams' history as it is now (nothing is being published: the
        writer calls this between publishes)."""
        for sid, replica in self._rewrite_wanted.items():
            if (
                replica.log.terminal is not None
                or self._streams.get(sid) is not replica
                or sid in self._snapshotting
            ):
                continue
            folded = replica.log.folded.to_event()
            events = replica.log.retained_events()
            if events:
                self._rewrites[sid] = _Rewrite(replica, folded, events)
            else:  # all folded: the snapshot alone, read on from the next message
                self._snapshotting.add(sid)
                self._spawn(self._put_snapshot(replica, folded, self._written + 1))
        self._rewrite_wanted.clear()

    def _rewritten(self, rewrite: _Rewrite, count: int, js_seq: int) -> None:
        """``count`` more of a rewrite's events are stored, in message ``js_seq``; once all
        are, the snapshot record says to read from its first message on."""
        replica = rewrite.replica
        sid = replica.stream_id
        if self._rewrites.get(sid) is not rewrite:
            return  # abandoned (an earlier try's answer, found late)
        rewrite.boundaries.append((js_seq, rewrite.events[0].seq))
        del rewrite.events[:count]
        if rewrite.events:
            return
        del self._rewrites[sid]
        self._rewritten_count += 1
        log.debug("stream %s: rewritten from message %d", sid, rewrite.boundaries[0][0])
        replica.boundaries = deque(rewrite.boundaries)  # the messages now holding its events
        self._snapshotting.add(sid)
        self._spawn(self._put_snapshot(replica, rewrite.folded, rewrite.boundaries[0][0]))

    def _abandon_rewrites(self) -> None:
        self._rewrites.clear()
        self._rewrite_wanted.clear()

    async def _put_snapshot(self, replica: Replica, folded: Event, keep_from: int) -> None:
        """Store a stream's snapshot record: its folded state and the home log message a
        load reads on from (the caller put the stream in `_snapshotting`)."""
        sid = replica.stream_id
        try:
            if self._streams.get(sid) is not replica:
                return  # dropped meanwhile: no record to bring back
            await self._store.put_snapshot(replica.key, encode_snapshot(folded, keep_from))
            replica.snapshot_through = folded.seq
            replica.snapshot_from = keep_from  # the log before it may be trimmed
            replica.anchor_bytes = self._log_bytes
        except HubError as exc:
            log.warning("stream %s: could not store its snapshot: %s", sid, exc)
        finally:
            self._snapshotting.discard(sid)

    # -- processes ---------------------------------------------------------------------------

    @property
    def process(self) -> str | None:
        return self._process_of(self.home)

    async def owner(self, stream_id: str) -> str | None:
        stream = self._streams.get(stream_id)
        if isinstance(stream, Replica):
            home = stream.home
            if stream.log.terminal is not None:
                return None  # nothing more will be made: it is all here already
        elif self.js_config.mirror == "read":
            try:  # not held here, as most others' streams: its record says where it lives
                home = (await self._stored_meta(stream_id)).home
            except HubError:  # (no such stream, or no broker: either is answered here)
                return None
        else:
            return None
        if home is None or home == self.home or not self._maybe_alive(home):
            return None
        return self._process_of(home)

    async def stream_infos(
        self, prefix: str, limit: int, accept: Callable[[str], bool] = lambda _: True
    ) -> list[StreamInfo]:
        held = await super().stream_infos(prefix, limit, accept)
        if self.js_config.mirror != "read":
            return held  # every other process's streams are held here already
        # The others hold their own streams: ask each live one (twice the limit, as some
        # may not be accepted here), then merge newest first.
        dated: dict[str, tuple[int, StreamInfo]] = {}
        for info in held:
            replica = self._streams.get(info.stream_id)
            created = replica.meta.created_unix_ns if isinstance(replica, Replica) else None
            dated[info.stream_id] = (created or 0, info)
        request = _encoder.encode([prefix, min(2 * limit, MAX_LISTED)])
        homes = [
            self._store.log_subject(member.node, member.run)
            for member in list(self._nodes.last_seen)
            if member != self.member and self._nodes.alive(member) is not False
        ]
        answers = await asyncio.gather(
            *(self._store.ask(self._list_subject(home), request, self.js_config.request_timeout_s)
              for home in homes),
            return_exceptions=True,
        )  # fmt: skip
        for home, answer in zip(homes, answers, strict=True):
            if isinstance(answer, BaseException) or answer is None:
                log.debug("%s did not list its streams: %r", home, answer)
                continue
            try:
                rows = _listing_decoder.decode(answer)
            except msgspec.DecodeError as exc:
                log.warning("%s listed its streams unreadably: %s", home, exc)
                continue
            for created, info in rows:
                if info.stream_id not in dated and accept(info.stream_id):
                    dated[info.stream_id] = (created, info)
        newest = sorted(dated.values(), key=lambda row: row[0], reverse=True)
        return [info for _, info in newest[:limit]]

    async def _on_list(self, data: bytes) -> bytes:
        """This process's own streams whose ids start with a prefix, newest first, with
        their creation times (for another process's `stream_infos`)."""
        try:
            prefix, limit = _decoder.decode(data)
            prefix, limit = str(prefix), min(int(limit), MAX_LISTED)
        except (msgspec.DecodeError, TypeError, ValueError):
            return _encoder.encode([])
        rows: list[tuple[int, StreamInfo]] = []
        for stream in reversed(list(self._streams.values())):
            if len(rows) >= limit:
                break
            assert isinstance(stream, Replica)
            if stream.home == self.home and stream.stream_id.startswith(prefix):
                rows.append((stream.meta.created_unix_ns or 0, self._info(stream)))
        return _encoder.encode(rows)

    def _list_subject(self, home: str) -> str:
        """Where ``home``'s process lists its streams."""
        return f"{self.js_config.prefix}.ls.{self._process_of(home)}"

    # -- appends to other processes' streams ------------------------------------------------

    def _process_of(self, home: str) -> str:
        """``<node>.<run>`` of a home log's subject (``<prefix>.h.<node>.<run>``)."""
        return home[len(self.js_config.prefix) + 3 :]

    def _forward_subject(self, home: str) -> str:
        """Where ``home``'s process takes appends to its streams."""
        return f"{self.js_config.prefix}.fwd.{self._process_of(home)}"

    def _position_subject(self, home: str) -> str:
        """Where ``home``'s process says its log's newest message."""
        return f"{self.js_config.prefix}.pos.{self._process_of(home)}"

    def _wrote_notice(self, home: str) -> str:
        """The control message telling ``home``'s process that another wrote its log."""
        return f"wrote.{self._process_of(home)}"

    def _on_wrote(self, _: bytes) -> None:
        # Another node wrote this process's log (it took it for gone): read it now, so
        # readers here see it without waiting for this process's next publish.
        self._spawn(self._locked_read_home())

    async def _locked_read_home(self) -> None:
        async with self._home_lock:
            with contextlib.suppress(HubError):
                await self._read_home()

    async def _on_position(self, _: bytes) -> bytes:
        return b"%d" % self._written

    def _maybe_alive(self, home: str) -> bool:
        """Whether the process writing the home log ``home`` may be alive (not known dead)."""
        member = _member_of(home)
        return member is None or self._nodes.alive(member) is not False

    async def _newest(self, home: str, after: int) -> int:
        """The newest message of another process's home log (at least ``after``): asked of
        that process, which writes it (a small answer); read from JetStream where it does
        not answer (a direct get that may carry a whole message back)."""
        if self._maybe_alive(home):
            try:
                answer = await self._store.ask(
                    self._position_subject(home), b"", self.js_config.request_timeout_s
                )
            except HubUnavailable:
                answer = None
            if answer is not None and answer.isdigit():
                return max(after, int(answer))
        return await self._store.newest_after(self.js_config.log_stream, home, after)

    async def _forward_queue(self, replica: Replica) -> None:
        """Send a stream's queued appends to its home, a batch at a time, until none is
        left (the stream's one writer here)."""
        await self._drain(replica, self._write_remote, locked=False)

    async def _write_remote(self, replica: Replica, events: list[Event]) -> None:
        """Store ``events`` in another process's stream: through that process, or directly
        where it cannot answer. Returns once this node's replica shows them."""
        home = replica.home
        assert home is not None
        if self._maybe_alive(home):
            # A request carries what one message may (the home stores it in its next one):
            # a backlog goes as several, one after another, in order.
            while events:
                # Seqs are the home's: 0 here.
                request, count = _entry_within(replica.stream_id, events, 0, self._message_bytes)
                if not await self._forward(replica, home, events[:count], request):
                    break  # the home is gone: the rest is written directly
                replica.appends.stored_part(events[:count])
                events = events[count:]
            else:
                return
        await self._write_direct(replica, events)

    async def _forward(
        self, replica: Replica, home: str, events: list[Event], request: bytes
    ) -> bool:
        """Ask ``home`` to store ``events`` (``request``); True once this node's replica
        shows them, False if nobody serves the home's subject (it is gone)."""
        self._store.check_size(request)
        # No answer in time raises: the home may have stored it, and a direct write then
        # would store it twice. Only "nobody serves that subject" (it is gone) falls
        # through to the direct write.
        answer = await self._store.ask(
            self._forward_subject(home), request, self.js_config.request_timeout_s
        )
        if answer is None:
            return False
        status, value, first = _forward_answer(answer)
        if status == "ok":
            _numbered(events, first)  # the seqs the home gave them
            await self._reach(await self._follower(home), int(value))
            return True
        if status == "ended":
            raise StreamEnded(str(value))
        if status == "missing":
            raise StreamNotFound(str(value))
        if status == "busy":
            raise HubUnavailable(str(value))
        if status == "too_large":
            raise StreamTooLarge(str(value))
        if status == "event_too_large":
            raise EventTooLarge(str(value))
        raise HubError(str(value))

    async def _write_direct(self, replica: Replica, events: list[Event]) -> None:
        """Publish to the stream's home log, conditional on its newest message, once this
        node has applied everything up to it."""
        home = replica.home
        assert home is not None
        follower = await self._follower(home)
        tries: dict[str, int] = {}  # message id -> the first seq it gave the events
        try:
            await self._write_direct_tries(replica, events, follower, tries)
        finally:
            for msg_id in tries:
                self._watched.pop(msg_id, None)

    async def _write_direct_tries(
        self,
        replica: Replica,
        events: list[Event],
        follower: LogFollower,
        tries: dict[str, int],
    ) -> None:
        """`_write_direct`'s tries, each recorded in ``tries`` (its caller forgets them)."""
        home = follower.subject
        stream = self.js_config.log_stream
        for _ in range(MAX_CONFLICTS + 1):
            last = await self._store.last_seq_on(stream, home)
            await self._reach(follower, last)
            for msg_id, first in tries.items():
                if self._watched.get(msg_id):  # an earlier try was stored (its answer lost)
                    _numbered(events, first)
                    return
            if replica.deferred:
                replica.deferred = False
                await self._read_for(replica, last)
            if replica.log.terminal is not None:
                raise StreamEnded(
                    f"stream {replica.stream_id!r} has ended; nothing can be appended"
                )
            first = replica.log.next_seq
            entry = encode_entry(replica.stream_id, first, events)
            msg_id = f"{self.node}:{self.run}:{next(self._publishes)}"
            tries[msg_id] = first
            self._watched[msg_id] = False
            try:
                js_seq = await self._store.publish_on(
                    stream, home, join_entries([entry]), msg_id=msg_id, after=last
                )
            except Conflict:
                continue
            _numbered(events, first)
            await self._store.tell(self._wrote_notice(home), b"")
            await self._reach(follower, js_seq)
            return
        raise HubError(
            f"stream {replica.stream_id!r}: {MAX_CONFLICTS} writes to its home log came "
            "first; giving up"
        )

    async def _on_forward(self, data: bytes) -> bytes:
        """Store another node's append to one of this process's streams; the answer says
        how (``ok`` with the message it is in, or why not)."""
        if self._forwards >= MAX_FORWARDS:
            return _encoder.encode(["busy", f"{self.node} is storing {MAX_FORWARDS} appends"])
        self._forwards += 1
        try:
            try:
                stream_id, _, rows = _decoder.decode(data)
                events = events_of(rows, 0, 0)
                replica = await self._replica(str(stream_id))
                if replica.home != self.home:
                    return _encoder.encode(["error", f"{self.node} is not its home"])
                await self.append_many(replica.stream_id, events)
                if replica.log.terminal is not None:
                    replica.stop_producer()  # ended from elsewhere (a cancel): stop it here
                return _encoder.encode(["ok", replica.last_js_seq, events[0].seq if events else 0])
            except StreamEnded as exc:
                return _encoder.encode(["ended", str(exc)])
            except StreamNotFound as exc:
                return _encoder.encode(["missing", str(exc)])
            except StreamTooLarge as exc:
                return _encoder.encode(["too_large", str(exc)])
            except EventTooLarge as exc:
                return _encoder.encode(["event_too_large", str(exc)])
            except (HubError, ValueError, TypeError, msgspec.DecodeError) as exc:
                return _encoder.encode(["error", str(exc)])
            except Exception as exc:  # a bug: the asking node gets an answer, not a timeout
                log.exception("a forwarded append to %s failed", self.node)
                return _encoder.encode(["error", f"{self.node}: internal error ({exc!r:.200})"])
        finally:
            self._forwards -= 1

    # -- reading ----------------------------------------------------------------------------

    def _apply_message(self, home: str, batch: StoredBatch) -> None:
        """Apply one home log message's entries to the replicas held here."""
        if self._watched and batch.msg_id in self._watched:
            self._watched[batch.msg_id] = True
        try:
            entries = decode_entries(batch.payload)
        except CorruptRecord as exc:
            log.error("home log %s: skipping message %d: %s", home, batch.js_seq, exc)
            return
        streams = self._streams
        for stream_id, first, body in entries:
            stream = streams.get(stream_id)
            replica = stream if stream is not None else self._pending.get(stream_id)
            if first == 0:
                if replica is None:
                    self._mirror(stream_id, body, home, batch.js_seq)
                continue
            if not isinstance(replica, Replica) or replica.home != home:
                continue
            self._appended += replica.apply_rows(first, body, batch.ts_ns, batch.js_seq)
            if (
                replica.deferred
                and stream is not None
                and home != self.home
                and stream_id not in self._gone
            ):
                self._repair(replica)

    def _mirror(self, stream_id: str, body: Any, home: str, js_seq: int) -> None:
        """Hold a stream created in a followed log from its first entry on."""
        if (
            self.js_config.mirror != "all"
            or home == self.home
            or stream_id in self._deleted
            or len(self._streams) >= self.config.max_streams * MIRROR_SHARE
        ):
            return
        try:
            meta = StreamMeta.from_bytes(bytes(body))
        except (CorruptRecord, TypeError) as exc:
            log.error("home log %s: a creation entry for %r: %s", home, stream_id[:80], exc)
            return
        if meta.home != home or meta.incarnation != self._store.incarnation:
            return
        stream_log = StreamLog(
            stream_id, meta.epoch, now_ns=_created_ns(meta), retention=meta.retention_policy()
        )
        replica = Replica(stream_log, None, meta)
        replica.last_js_seq = js_seq
        self._streams[stream_id] = replica

    def _on_log_message(self, follower: LogFollower, batch: StoredBatch) -> None:
        position = follower.position
        if follower.syncing or position is None:
            follower.hold(batch)
            return
        if batch.js_seq <= position:
            return
        if batch.prev is not None and batch.prev != position:
            follower.hold(batch)  # one in between was missed: read it back first
            self._start_sync(follower)
            return
        self._apply_message(follower.subject, batch)
        follower.advanced(batch.js_seq)

    def _follow_log(self, subject: str) -> LogFollower:
        """Start following ``subject``: from its newest message on, and whatever reached the
        subscription before the newest was known."""
        follower = LogFollower(subject, _member_of(subject))
        self._followers[subject] = follower
        for stream in self._streams.values():
            assert isinstance(stream, Replica)
            if stream.home == subject and stream.log.terminal is None:
                stream.deferred = True  # held from an earlier follow: read what it missed
                self._repair(stream)
        self._start_sync(follower)
        return follower

    async def _follower(self, subject: str) -> LogFollower:
        """The follower of ``subject``, once it knows its position in the log."""
        follower = self._followers.get(subject) or self._follow_log(subject)
        while follower.position is None:
            known = follower.reached(0)
            if known is None:
                break
            try:
                await asyncio.wait_for(known, self.js_config.unavailable_after_s)
            except TimeoutError as exc:
                raise HubUnavailable(f"cannot read the home log {subject}") from exc
        return follower

    async def _reach(self, follower: LogFollower, target: int) -> None:
        """Wait until ``follower`` has applied message ``target``. Live messages are read
        back only when none arrives for `REACH_S` (a lost one with nothing after it); a slow
        but moving follower is waited for, up to ``unavailable_after_s``."""
        reached = follower.reached(target)
        if reached is None:
            return
        deadline = time.monotonic() + self.js_config.unavailable_after_s
        position = follower.position
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(reached), REACH_S)
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    reached.cancel()
                    raise HubUnavailable(
                        f"the home log {follower.subject} did not arrive"
                    ) from None
                if follower.position == position:
                    self._start_sync(follower)  # nothing moves: one was lost, read it back
                position = follower.position

    def _start_sync(self, follower: LogFollower) -> None:
        if not follower.syncing:
            follower.syncing = True
            self._spawn(self._sync(follower))

    async def _sync(self, follower: LogFollower) -> None:
        """Subscribe if not yet, read the log from the follower's position to its end, then
        apply what was held meanwhile, until no gap is left."""
        stream = self.js_config.log_stream
        subject = follower.subject
        try:
            while True:
                try:
                    if follower.subscription is None:
                        follower.subscription = await self._store.follow_log(
                            subject, functools.partial(self._on_log_message, follower)
                        )
                    # What was dropped before this question is at most its answer: read
                    # below; what is dropped after it sets the flag again.
                    follower.overflowed = False
                    last = await self._store.last_seq_on(stream, subject)
                    if follower.position is None:
                        follower.advanced(follower.start(last))
                    elif last > follower.position:
                        await self._read_on(follower, last)
                except HubError as exc:
                    log.warning("home log %s: cannot read it back: %s", subject, exc)
                    await asyncio.sleep(RESYNC_PAUSE_S)
                    continue
                if self._replay_held(follower):
                    return
        finally:
            follower.syncing = False

    async def _read_on(self, follower: LogFollower, last: int) -> None:
        """Read and apply ``follower``'s log from its position to ``last``, noticing where
        the home trimmed messages this node never applied."""
        assert follower.position is not None
        applied = follower.position
        trimmed = False

        def apply(batch: StoredBatch) -> None:
            nonlocal applied, trimmed
            if batch.prev is not None and batch.prev > applied:
                trimmed = True
            applied = batch.js_seq
            self._apply_message(follower.subject, batch)

        await self._store.read_until_on(
            self.js_config.log_stream, follower.subject, follower.position, last, apply
        )
        follower.advanced(last)
        if trimmed:
            self._lost_history(follower.subject)

    def _lost_history(self, home: str) -> None:
        """Messages of ``home`` that this node never applied were trimmed (it was taken for
        gone meanwhile): the streams of that log held here may lack events or their end.
        Each is checked against its record."""
        log.warning(
            "home log %s was trimmed past what this node had read (taken for gone?): "
            "checking the streams of it held here",
            home,
        )
        for stream in list(self._streams.values()):
            assert isinstance(stream, Replica)
            if stream.home == home and stream.log.terminal is None:
                self._spawn(self._recheck(stream))

    async def _recheck(self, replica: Replica) -> None:
        """A stream whose record is gone (it ended long ago, or was deleted) is dropped; one
        nobody uses here is dropped too (a reader loads it whole); the others read back
        what is left to read."""
        stream_id = replica.stream_id
        try:
            await self._stored_meta(stream_id)
        except StreamNotFound:
            if self._streams.get(stream_id) is replica:
                self._drop(stream_id)
            return
        except HubError as exc:
            log.warning("stream %s: cannot read its record: %s", stream_id, exc)
            return
        if replica.readers or stream_id in self._producing:
            replica.deferred = True
            self._repair(replica)
        elif self._streams.get(stream_id) is replica:
            self._drop(stream_id)

    def _replay_held(self, follower: LogFollower) -> bool:
        """Apply the held messages that follow the position; False if a gap (or dropped
        messages) needs another read."""
        if follower.overflowed:
            follower.held.clear()
            return False
        held = follower.take_held()
        for index, batch in enumerate(held):
            position = follower.position
            assert position is not None
            if batch.js_seq <= position:
                continue
            if batch.prev is not None and batch.prev != position:
                follower.held = held[index:]
                return False
            self._apply_message(follower.subject, batch)
            follower.advanced(batch.js_seq)
        return True

    async def _read_for(self, replica: Replica, until: int) -> None:
        """Read one stream's entries in its home log from where it is known complete up to
        ``until``."""
        home = replica.home
        assert home is not None
        stream_id = replica.stream_id

        def apply(batch: StoredBatch) -> None:
            try:
                entries = decode_entries(batch.payload)
            except CorruptRecord:
                return
            for sid, first, body in entries:
                if sid == stream_id and first:
                    self._appended += replica.apply_rows(first, body, batch.ts_ns, batch.js_seq)

        await self._store.read_until_on(
            self.js_config.log_stream, home, replica.last_js_seq, until, apply
        )
        if not replica.deferred:
            replica.last_js_seq = max(replica.last_js_seq, until)

    async def _read_missing(self, replica: Replica, follower: LogFollower) -> None:
        """Read back what ``replica`` missed (it met an entry past its next seq) until it
        has it. Events the home log no longer holds because the stream's snapshot folded
        them (this node was cut off meanwhile) are in that snapshot: the replica is dropped
        for a fresh load (`_reload_folded`). Entries that are gone otherwise (older than
        ``history_ttl_s``) leave it where it is: said once in the log, never waited for."""
        while replica.deferred:
            replica.deferred = False
            before = replica.log.next_seq
            assert follower.position is not None
            await self._read_for(replica, follower.position)
            if replica.deferred and replica.log.next_seq == before:
                replica.deferred = False
                reloaded = await self._reload_folded(replica)
                if reloaded is None:  # not known yet, or kept while produced here
                    self._spawn(self._repair_after(replica, RELOAD_RETRY_S))
                    return
                if reloaded:
                    return
                replica.last_js_seq = follower.position  # (nothing before it will come)
                if replica.stream_id not in self._gone:
                    self._gone.add(replica.stream_id)
                    log.error(
                        "stream %s: its events from seq %d are no longer in JetStream "
                        "(older than history_ttl_s?); this node serves what it holds",
                        replica.stream_id,
                        before,
                    )
                return

    async def _repair_after(self, replica: Replica, delay_s: float) -> None:
        """Read back what ``replica`` misses again after ``delay_s``, however quiet its
        stream (the entry that showed the gap may have been its last)."""
        await asyncio.sleep(delay_s)
        if self._streams.get(replica.stream_id) is replica:
            replica.deferred = True
            self._repair(replica)

    async def _reload_folded(self, replica: Replica) -> bool | None:
        """Drop ``replica`` if the stream's stored snapshot folded events it lacks: True if
        it was dropped, False if the snapshot does not hold them, None if that is not known
        (the snapshot could not be read) or the replica must stay (this node produces the
        stream, or has appends of it on their way: they are bound to this replica).

        Its readers end without the stream's end, as when a node restarts: each resumes
        where it stood (SSE's Last-Event-ID, the client's resume token) on a replica loaded
        afresh, which hands it the snapshot and then the events after it."""
        stream_id = replica.stream_id
        try:
            snapshot = await self._store.get_snapshot(replica.key)
        except HubError as exc:
            log.warning("stream %s: cannot read its snapshot: %s", stream_id, exc)
            return None
        if snapshot is None:
            return False
        try:
            _, folded = decode_snapshot(snapshot)
        except CorruptRecord:
            return False
        if folded.seq < replica.log.next_seq:
            return False
        appends = replica.appends
        if (
            self._streams.get(stream_id) is not replica
            or stream_id in self._producing
            or appends.events
            or appends.flushing
        ):
            return None
        log.warning(
            "stream %s: its events %d..%d were folded into its snapshot while this node "
            "was cut off: its readers here resume on the stream loaded again",
            stream_id,
            replica.log.next_seq,
            folded.seq,
        )
        self._drop(stream_id)
        return True

    async def _catch_up(self, replica: Replica) -> None:
        home = replica.home
        if home is None:
            return
        if home == self.home:
            async with self._home_lock:
                await self._read_home()
            return
        follower = await self._follower(home)
        position = follower.position
        assert position is not None
        last = await self._newest(home, position)
        await self._reach(follower, last)
        await self._read_missing(replica, follower)

    async def _refresh(self, replica: Replica) -> None:
        # This process writes its own streams: only another node's write, made because this
        # process did not answer, can be missing, and that comes with a cancel notice or at
        # the next publish (a conflict). Others' streams: read what the follower has not.
        if replica.home != self.home and replica.log.terminal is None:
            await self._locked_catch_up(replica)

    async def _follow(self, replica: Replica) -> None:
        # A new reader needs no read: the stream's home log is followed live (whatever was
        # stored before this call arrives, in order, after what the replica holds). Only a
        # replica that missed something reads it back now.
        home = replica.home
        if home is None or home == self.home or replica.log.terminal is not None:
            return
        await self._follower(home)
        if replica.deferred:
            await self._locked_catch_up(replica)

    def _unfollow(self, replica: Replica) -> None:
        pass  # logs are followed per member, not per stream

    def _on_missed(self) -> None:
        for follower in self._followers.values():
            if follower.position is not None:
                self._start_sync(follower)
        # Cut off, this process may have been taken for gone and its log written by others
        # (their notices were lost with the connection).
        self._spawn(self._locked_read_home())

    async def _load(self, stream_id: str) -> Replica:
        meta = await self._stored_meta(stream_id)
        home = meta.home
        if home is None:
            raise HubError(
                f"stream {stream_id!r} was stored by a hub with layout 'stream'; "
                "this one reads layout 'node'"
            )
        self._make_room()
        if home == self.home:
            return await self._load_from(meta, None)
        follower = await self._follower(home)
        follower.loads += 1  # (not let go as idle while this reads)
        try:
            return await self._load_from(meta, follower)
        finally:
            follower.loads -= 1

    async def _load_from(self, meta: StreamMeta, follower: LogFollower | None) -> Replica:
        """Load a stream of this process's log (``follower`` None) or of the one followed."""
        stream_id = meta.stream_id
        key = stream_key(stream_id)
        home = meta.home
        assert home is not None
        if follower is not None:
            # Its creation may be on its way here (made a moment ago): take it from the log
            # as followed, rather than reading the log for it.
            assert follower.position is not None
            await self._reach(follower, await self._newest(home, follower.position))
            mirrored = self._streams.get(stream_id)
            if isinstance(mirrored, Replica):
                return mirrored
        stream_log = StreamLog(
            stream_id, meta.epoch, now_ns=_created_ns(meta), retention=meta.retention_policy()
        )
        after = meta.home_after
        snapshot = await self._store.get_snapshot(key)
        if snapshot is not None:
            keep_from, folded = decode_snapshot(snapshot)
            stream_log.restore(Folded.from_event(folded))
            after = keep_from - 1
        replica = Replica(stream_log, None, meta)
        replica.last_js_seq = after
        if follower is None:
            until = await self._store.last_seq_on(self.js_config.log_stream, home)
        else:
            assert follower.position is not None
            until = follower.position
        self._pending[stream_id] = replica  # live entries reach it while its history is read
        try:
            await self._read_for(replica, until)
            if follower is not None:
                await self._read_missing(replica, follower)
        finally:
            del self._pending[stream_id]
        _no_token_before_creation(stream_log)
        existing = self._streams.get(stream_id)
        if existing is not None:  # created or mirrored here while this load read
            assert isinstance(existing, Replica)
            return existing
        self._streams[stream_id] = replica
        return replica

    # -- members ----------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, object]]:
        rows = super().nodes()
        schedule, now = self._publish_schedule, time.monotonic()
        rows[0]["home_log"] = {
            "subject": self.home,
            "newest": self._written,
            "trimmed_below": self._trimmed,
            "bytes_written": self._log_bytes,
            "streams_rewritten": self._rewritten_count,
            "events_per_s": round(schedule.flow_at(now)),
            "wait_ms": round(schedule.linger_at(now) * 1000, 1),
            "publish_ms": round(schedule.publish_s * 1000, 1),
        }
        return rows

    def _followed_logs(self) -> dict[str, int]:
        return {
            self._process_of(subject): follower.position
            for subject, follower in self._followers.items()
            if follower.position is not None
        }

    def _on_heartbeat(self, data: bytes) -> None:
        super()._on_heartbeat(data)
        beat = Heartbeat.from_bytes(data)
        if beat is None or beat.member == self.member:
            return
        if beat.leaving:
            self._read_by.pop(beat.member, None)
            return
        if not beat.partial:
            position = beat.logs.get(self._process_of(self.home))
            if position is None:
                self._read_by.pop(beat.member, None)
            else:
                self._read_by[beat.member] = position
        subject = self._store.log_subject(beat.node, beat.run)
        if subject not in self._followers and self.js_config.mirror == "all":
            self._follow_log(subject)  # mirror what it creates from now on

    def _end_orphaned_producers(self) -> None:
        super()._end_orphaned_producers()
        # A stream mirrored from its creation entry does not know its producer (recorded
        # after): once its home is dead, read the record, so the next round can end it.
        producers = self._nodes.producers
        for stream_id, stream in self._streams.items():
            assert isinstance(stream, Replica)
            if (
                stream.log.terminal is None
                and stream.meta.producer is None
                and stream_id not in producers
                and stream_id not in self._reread
                and stream.home is not None
                and stream.home != self.home
            ):
                member = _member_of(stream.home)
                if member is not None and self._nodes.alive(member) is False:
                    self._reread.add(stream_id)
                    self._spawn(self._reread_meta(stream))

    async def _reread_meta(self, replica: Replica) -> None:
        try:
            replica.meta = await self._stored_meta(replica.stream_id)
        except HubError as exc:
            self._reread.discard(replica.stream_id)  # tried again next round
            log.warning("stream %s: cannot read its record: %s", replica.stream_id, exc)

    def _make_room(self) -> None:
        # A mirror nobody reads, produces or appends to here goes (it is loaded again when
        # a reader asks); this process's own streams stay: it writes them.
        if len(self._streams) >= self.config.max_streams:
            for stream_id, stream in self._streams.items():
                assert isinstance(stream, Replica)
                if (
                    stream.home != self.home
                    and not stream.readers
                    and not stream.cancel_callbacks
                    and stream_id not in self._producing
                    and not stream.appends.flushing
                    and not stream.lock.locked()
                ):
                    self._drop(stream_id)
                    break
        super()._make_room()

    def _looks_idle(self, replica: Replica, idle_before: int) -> bool:
        # Its home ends an idle stream (it hears every node's readers); the others would
        # each forward the same end. A stream whose home is dead may be ended by any node.
        home = replica.home
        if home is not None and home != self.home and self._maybe_alive(home):
            return False
        return super()._looks_idle(replica, idle_before)

    def _on_deleted_notice(self, data: bytes) -> None:
        self._deleted[data.decode(errors="replace")] = None
        if len(self._deleted) > MAX_DELETED:
            del self._deleted[next(iter(self._deleted))]
        super()._on_deleted_notice(data)

    def _drop(self, stream_id: str) -> None:
        super()._drop(stream_id)
        self._reread.discard(stream_id)
        self._gone.discard(stream_id)
        self._rewrites.pop(stream_id, None)
        self._rewrite_wanted.pop(stream_id, None)

    def _sweep(self, now: float) -> None:
        super()._sweep(now)
        every = self.js_config.trim_every_s
        if every and now >= self._next_trim and not self._trimming:
            self._next_trim = now + every
            self._want_rewrites()
            floor = self._needed_from()
            previous, self._trim_floor = self._trim_floor, floor
            if previous is not None and min(previous, floor) > self._trimmed:
                self._trimming = True
                self._spawn(self._trim(min(previous, floor)))
        # A dead member's log needs no following once every stream it held has ended here;
        # with mirror = "read", neither does a live one's (it is followed again when one of
        # its streams is loaded).
        idle = self.js_config.mirror == "read"
        dead = {
            subject
            for subject, follower in self._followers.items()
            if (follower.member is not None and self._nodes.alive(follower.member) is False)
            or (idle and not follower.waiters and not follower.syncing and not follower.loads)
        }
        if not dead:
            return
        for stream in (*self._streams.values(), *self._pending.values()):
            assert isinstance(stream, Replica)
            if stream.home in dead and stream.log.terminal is None:
                dead.discard(stream.home)
        for subject in dead:
            follower = self._followers.pop(subject)
            follower.fail(HubUnavailable(f"{subject} is no longer followed"))
            if follower.subscription is not None:
                self._spawn(follower.subscription.unsubscribe())

    def _needed_from(self) -> int:
        """The oldest message of the home log still needed: by a stream held here (from
        its creation entry, or from where its stored snapshot reads on), by a live member
        following the log (past what it applied), and the newest message in any case
        (the next publish is conditional on it)."""
        floor = self._written
        for stream in self._streams.values():
            assert isinstance(stream, Replica)
            if stream.home == self.home:
                floor = min(floor, stream.snapshot_from or stream.meta.home_after + 1)
        for member, position in list(self._read_by.items()):
            if self._nodes.alive(member) is False:
                del self._read_by[member]  # gone: if it returns, it checks what it holds
            else:
                floor = min(floor, position + 1)
        return floor

    async def _trim(self, below: int) -> None:
        try:
            await self._store.purge_on(self.js_config.log_stream, self.home, below)
            self._trimmed = below
        except HubError as exc:
            log.warning("home log %s: could not trim it: %s", self.home, exc)
        finally:
            self._trimming = False

    async def _store_snapshot(self, replica: Replica) -> None:
        # Stored for nodes that load the stream later; the log before it is trimmed later.
        sid = replica.stream_id
        if sid in self._snapshotting or sid in self._rewrites:
            return
        keep_from = replica.oldest_kept()
        if keep_from is None:
            return
        self._snapshotting.add(sid)
        await self._put_snapshot(replica, replica.log.folded.to_event(), keep_from)


@dataclass(slots=True)
class _Rewrite:
    """A stream's retained events being written again at its home log's head."""

    replica: Replica
    folded: Event
    """Its folded state when the events were taken (the snapshot stored at the end)."""
    events: list[Event]
    """The events not yet written."""
    boundaries: list[tuple[int, int]] = field(default_factory=list)
    """``(message, first seq)`` of each part written."""


@dataclass(slots=True)
class _Message:
    """What one home log message carries, for when it is stored (or is not)."""

    plan: list[tuple[Replica, int, int]] = field(default_factory=list)
    """``(replica, count, first seq)`` of each stream's new events."""
    creates: int = 0
    """Creation entries, from the head of the queue."""
    rewrites: list[tuple[_Rewrite, int]] = field(default_factory=list)
    """Rewrites and how many of their events."""


def _entry_within(stream_id: str, events: list[Event], first: int, limit: int) -> tuple[bytes, int]:
    """The entry of as many of ``events`` (at most `MAX_BATCH_EVENTS`) as fit in ``limit``
    bytes, and how many that is (at least one)."""
    if len(events) <= MAX_BATCH_EVENTS:
        entry = encode_entry(stream_id, first, events)
        if len(entry) <= limit:
            return entry, len(events)  # what nearly always happens: encoded once, uncounted
    count = 0
    size = 0
    for event in events[:MAX_BATCH_EVENTS]:  # counted first: encoding twice costs more
        size += event.size
        if count and size > limit:
            break
        count += 1
    entry = encode_entry(stream_id, first, events[:count])
    while len(entry) > limit and count > 1:
        count //= 2
        entry = encode_entry(stream_id, first, events[:count])
    return entry, count


def _forward_answer(answer: bytes) -> tuple[str, Any, int]:
    """``(status, value, first seq)`` of a home's answer to a forwarded append."""
    try:
        status, value, *rest = _decoder.decode(answer)
        return str(status), value, int(rest[0]) if rest else 0
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        return "error", f"an unreadable answer from the stream's home: {exc}", 0


def _numbered(events: list[Event], first_seq: int) -> None:
    """Give events stored through another process the seqs they got there (the caller's
    answer names them)."""
    for offset, event in enumerate(events):
        event.seq = first_seq + offset


def _member_of(subject: str) -> Member | None:
    """The member writing the home log ``subject`` (``<prefix>.h.<node>.<run>``)."""
    parts = subject.split(".")
    if len(parts) != 4:
        return None
    token, run = parts[2], parts[3]
    try:
        node = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return Member(node, run)
