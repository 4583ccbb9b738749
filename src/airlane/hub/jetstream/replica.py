"""`Replica`: one node's copy of a stream held in JetStream.

A replica is `MemoryHub`'s stream (a `StreamLog`, its readers' wake-ups, its orphan tracker)
plus where it stands in JetStream: the sequence of the newest message applied, the messages
since the last stored snapshot, and this node's publish in progress. Messages are applied in
JetStream order, each exactly once, whether they arrive from this node's own publish, from an
ordered consumer or from a catch-up read; events a snapshot already covers are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from nats.aio.subscription import Subscription

from airlane.core import Event, OrphanTracker, StreamLog
from airlane.hub.jetstream.appends import AppendQueue
from airlane.hub.jetstream.records import (
    CorruptRecord,
    StreamMeta,
    decode_batch,
    events_of,
    stream_key,
)
from airlane.hub.jetstream.store import StoredBatch
from airlane.hub.memory import _Stream

__all__ = ["Replica"]

log = logging.getLogger("airlane.hub.jetstream")


class Replica(_Stream):
    """A stream as this node holds it. See the module docstring."""

    __slots__ = (
        "anchor_bytes",
        "appends",
        "boundaries",
        "deferred",
        "home",
        "inflight",
        "key",
        "last_js_seq",
        "live",
        "lock",
        "meta",
        "repairing",
        "snapshot_from",
        "snapshot_through",
    )

    def __init__(
        self, stream_log: StreamLog, orphan: OrphanTracker | None, meta: StreamMeta
    ) -> None:
        super().__init__(stream_log, orphan)
        self.meta = meta
        self.key = stream_key(meta.stream_id)
        self.last_js_seq = 0
        """The JetStream sequence of the newest message applied."""
        self.boundaries: deque[tuple[int, int]] = deque()
        """``(js_seq, first_seq)`` of the messages applied since the last stored snapshot."""
        self.snapshot_through = stream_log.folded.through_seq
        """The last seq the stored snapshot covers."""
        self.snapshot_from = 0
        """The JetStream sequence a load reads from after the stored snapshot (0: none)."""
        self.anchor_bytes = 0
        """Bytes its home process had written to its home log when a load's starting point
        was last moved (creation, snapshot, rewrite): how much log the stream holds back."""
        self.live: Subscription | None = None
        """The live subscription following the stream, while it has readers here."""
        self.inflight: str | None = None
        """The message id of this node's publish in progress (its echo is not applied)."""
        self.deferred = False
        """A message arrived that could not be applied yet: read back what follows."""
        self.repairing = False
        """A read-back is scheduled."""
        self.lock = asyncio.Lock()
        """Held while publishing or catching up, so messages are applied in order."""
        self.appends = AppendQueue()
        """This node's appends waiting for the next publish."""
        self.home = meta.home
        """The home log holding the stream's events (the ``node`` layout), else None."""

    @property
    def stream_id(self) -> str:
        """The stream's id."""
        return self.meta.stream_id

    def deliver(self, batch: StoredBatch) -> int:
        """A message as it was appended (or read back); returns how many events it added.

        One this replica cannot apply yet (another node's, during this node's own publish;
        one that does not follow the newest applied, because one was missed) sets `deferred`:
        the hub then reads back what follows the newest applied.
        """
        if self.inflight is not None:
            if batch.msg_id != self.inflight:
                self.deferred = True  # another node's: read after this node's publish lands
            return 0
        prev = batch.prev
        if prev is not None and prev != self.last_js_seq < batch.js_seq:
            self.deferred = True  # one in between was missed (or is still being read back)
            return 0
        return self.apply(batch)

    def apply(self, batch: StoredBatch) -> int:
        """Apply one stored message (what the replica holds already is skipped); returns how
        many events it added."""
        if batch.js_seq <= self.last_js_seq:
            return 0
        self.last_js_seq = batch.js_seq
        try:
            first_seq, events = decode_batch(batch.payload, batch.ts_ns)
        except CorruptRecord as exc:
            log.error("stream %s: skipping message %d: %s", self.stream_id, batch.js_seq, exc)
            return 0
        stream_log = self.log
        events = [event for event in events if event.seq >= stream_log.next_seq]
        if not events:
            return 0
        if events[0].seq != stream_log.next_seq:
            # Conditional publishes chain every message to the one before: this is a bug.
            log.error(
                "stream %s: message %d starts at seq %d; the replica expected %d",
                self.stream_id,
                batch.js_seq,
                events[0].seq,
                stream_log.next_seq,
            )
            return 0
        if self.store(events, batch.ts_ns, batch.js_seq, first_seq):
            # Ended by another node (a cancel, say): stop this node's producer, if it has one.
            self.stop_producer()
        return len(events)

    def apply_rows(self, first_seq: int, rows: list[Any], ts_ns: int, js_seq: int) -> int:
        """Apply a home log entry's events (the ``node`` layout) found in message ``js_seq``;
        returns how many were added. Seqs the replica holds already are skipped; an entry
        past the next seq (one was missed, or the history is still being read) sets
        `deferred` and is left for the read-back."""
        stream_log = self.log
        skip = stream_log.next_seq - first_seq
        if skip < 0:
            self.deferred = True
            return 0
        if skip >= len(rows):
            return 0
        try:
            events = events_of(rows[skip:], first_seq + skip, ts_ns)
        except CorruptRecord as exc:
            log.error("stream %s: skipping an entry of message %d: %s", self.stream_id, js_seq, exc)
            return 0
        self.last_js_seq = max(self.last_js_seq, js_seq)
        if self.store(events, ts_ns, js_seq, first_seq + skip):
            self.stop_producer()
        return len(events)

    def store(self, events: list[Event], ts_ns: int, js_seq: int, first_seq: int) -> bool:
        """Append events JetStream has stored to the log and wake the readers; True if they
        ended the stream."""
        stream_log = self.log
        try:
            stream_log.append_many(events, ts_ns)
        except Exception:  # the log refused (after a terminal): JetStream is the truth
            log.exception("stream %s: the replica refused stored events", self.stream_id)
        if self.orphan is not None:
            # Only the node that stores snapshots (the stream's creator) needs the message
            # boundaries, and `oldest_kept` trims them there; elsewhere they would only grow.
            self.boundaries.append((js_seq, first_seq))
        ended = stream_log.terminal is not None and self.ended_at is None
        if ended:
            self.ended_at = time.monotonic()
        self.notify()
        return ended

    def stop_producer(self) -> None:
        """Run the cancel callbacks (once): the stream has ended other than by its producer."""
        callbacks, self.cancel_callbacks = self.cancel_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("cancel callback for %s failed", self.stream_id)

    def oldest_kept(self) -> int | None:
        """The JetStream sequence of the message holding the first seq not folded: older
        messages can be purged once the folded state is stored."""
        through = self.log.folded.through_seq
        boundaries = self.boundaries
        while len(boundaries) > 1 and boundaries[1][1] <= through + 1:
            boundaries.popleft()
        return boundaries[0][0] if boundaries else None
