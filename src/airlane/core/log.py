"""The stream log: one stream's history, its readers' cursors, and its accounting.

Theory of operation
-------------------
A `StreamLog` holds the retained events of one stream in sequence order, a `Folded` state for
the events retention has dropped, the terminal event once there is one, and a `UsageLedger`.
It has no clock and no I/O: every method that needs time takes ``now_ns`` (monotonic ns).

Readers are `Cursor` objects: the last ``seq`` they were given plus a little bookkeeping.
`StreamLog.read` hands a cursor what comes next, at most ``limit`` frames:

1. if the cursor is behind the retained window (or was reset to another epoch), one
   ``snapshot`` event first: the reader *replaces* its state with it. A live reader that only
   fell behind, and missed nothing but text, is caught up with the missing text as plain
   ``delta`` events instead, so a slow reader never receives the same text twice;
2. then the retained events after the cursor. Consecutive ``delta`` events of one channel are
   coalesced into a single delta for a lagging cursor, up to ``max_coalesce_chars`` (unless
   its ``merge_deltas`` is off: a reader that tells copies by seq); control,
   tool-call, message and terminal events are never merged and never dropped, and history
   the reader found when it came is never merged with what came after (``Cursor.live_from``:
   the usage ledger counts the two apart);
3. the terminal event is handed out as a per-reader copy whose ``usage`` is the ledger's
   report, including the tokens delivered to that reader.

An event that goes out alone is the stored object itself, so its per-format encoding cache is
shared by every reader ("encode once").
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import EVENT_OVERHEAD_BYTES, TERMINAL_KINDS, Channel, Event, Kind
from airlane.core.position import Position
from airlane.core.retention import Folded, Retention
from airlane.core.usage import UsageLedger

__all__ = [
    "DEFAULT_MAX_COALESCE_CHARS",
    "Cursor",
    "ResumeOutOfRange",
    "StreamClosed",
    "StreamLog",
    "StreamTooLarge",
    "text_of",
]

DEFAULT_MAX_COALESCE_CHARS = 16384
"""Upper bound on one coalesced delta, so a far-behind reader still gets bounded frames."""

# Module constants, not enum attribute lookups, on the per-event path.
_DELTA = Kind.DELTA
_SNAPSHOT = Kind.SNAPSHOT
_TOOL_CALL = Kind.TOOL_CALL
_USAGE = Kind.USAGE
# Kinds `StreamLog.append_many` has more to do for than assign a seq and store.
_SPECIAL_KINDS = frozenset({Kind.SNAPSHOT, Kind.USAGE, *TERMINAL_KINDS})
_tokens_of = operator.attrgetter("tokens")

# Compact the backing list once this many trimmed slots have piled up at its head.
_COMPACT_AFTER = 1024

# A time no clock reaches: the expiry of a log without a TTL.
_NEVER_NS = 1 << 63


def text_of(events: Iterable[Event]) -> int:
    """The characters of text ``events`` add to a stream: ``delta`` text and tool-call
    arguments (what its ``max_text_chars`` bounds)."""
    chars = 0
    for event in events:
        kind = event.kind
        if kind is _DELTA or kind is _TOOL_CALL:
            chars += len(event.text)
    return chars


class StreamClosed(AirlaneError):
    """Local misuse: an append after the stream's terminal event."""

    code = ErrorCode.STREAM_ENDED


class StreamTooLarge(AirlaneError):
    """An append would take the stream past its text limit (`Retention.max_text_chars`)."""

    code = ErrorCode.STREAM_TOO_LARGE


class ResumeOutOfRange(AirlaneError, ValueError):
    """A client asked to resume after a sequence number the stream has not reached."""

    code = ErrorCode.INVALID_RESUME


class Cursor:
    """A reader's position in one stream, and what it has been given so far."""

    __slots__ = (
        "after",
        "delivered_tokens",
        "finished",
        "live_from",
        "merge_deltas",
        "reset",
        "subscriber",
        "text_lengths",
    )

    def __init__(
        self, subscriber: str, after: int = 0, *, reset: bool = False, live_from: int = 0
    ) -> None:
        self.subscriber = subscriber
        """Who reads: the name the usage ledger reports."""
        self.after = after
        """The last ``seq`` handed to this reader."""
        self.live_from = live_from
        """The stream's last seq when this reader came: events up to it are history it
        replays (counted apart, and not as gateway latency), later ones reach it live."""
        self.reset = reset
        """True if the reader must start over with a snapshot (its epoch was stale)."""
        self.delivered_tokens = 0
        """Completion tokens handed to this reader (a snapshot counts as all it carries)."""
        self.finished = False
        """True once the terminal event was handed out."""
        self.merge_deltas = True
        """Whether deltas it is behind on may reach it merged (see the module docstring).
        False for a reader that tells copies by ``seq`` (`Subscription.keep_deltas_apart`)."""
        self.text_lengths: dict[Channel, int] | None = {} if after == 0 and not reset else None
        """Characters of text handed out per channel, when known (not for a cursor that
        resumed mid-stream): what lets `StreamLog.read` catch it up with deltas."""


class StreamLog:
    """The history of one stream; see the module docstring."""

    __slots__ = (
        "_events",
        "_expires_ns",
        "_head",
        "_last_delta_seq",
        "_max_bytes",
        "_max_events",
        "_retained_bytes",
        "_retention",
        "_text_chars",
        "_ttl_ns",
        "epoch",
        "folded",
        "ledger",
        "max_coalesce_chars",
        "next_seq",
        "stream_id",
        "terminal",
    )

    def __init__(
        self,
        stream_id: str,
        epoch: str,
        *,
        now_ns: int,
        retention: Retention | None = None,
        max_coalesce_chars: int = DEFAULT_MAX_COALESCE_CHARS,
    ) -> None:
        self.stream_id = stream_id
        self.epoch = epoch
        self._retention = retention or Retention()
        # The limits as append checks them: plain ints, the TTL already in nanoseconds.
        self._max_events = self._retention.max_events
        self._max_bytes = self._retention.max_bytes
        ttl_s = self._retention.ttl_s
        self._ttl_ns = None if ttl_s is None else int(ttl_s * 1e9)
        # When the oldest retained event outlives the TTL: append compares the clock with it
        # instead of looking the event up. 0 (trim at once, which sets it) until the first
        # `trim`; never without a TTL.
        self._expires_ns = _NEVER_NS if self._ttl_ns is None else 0
        self.max_coalesce_chars = max_coalesce_chars
        self.folded = Folded()
        self.ledger = UsageLedger(created_ns=now_ns)
        self.terminal: Event | None = None
        self.next_seq = 1
        # Retained events live in _events[_head:]; trimming advances _head, and the list is
        # compacted in bulk, so both append and trim are amortised O(1).
        self._events: list[Event] = []
        self._head = 0
        self._retained_bytes = 0
        # Text characters appended over the stream's life, folded or not (`check_text`).
        self._text_chars = 0
        # The seq of the newest delta: a reader past it has nothing to coalesce.
        self._last_delta_seq = 0

    # -- writing ----------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The newest sequence number; 0 for an empty stream."""
        return self.next_seq - 1

    @property
    def first_retained_seq(self) -> int:
        """The oldest sequence number still held as an event."""
        return self.folded.through_seq + 1

    @property
    def retained(self) -> int:
        """How many events are held."""
        return len(self._events) - self._head

    @property
    def retained_bytes(self) -> int:
        """Bytes held, as counted by `Event.size`."""
        return self._retained_bytes

    @property
    def retention(self) -> Retention:
        """The limits on this stream's history (fixed when the log is made)."""
        return self._retention

    @property
    def newest_ts_ns(self) -> int:
        """When the newest event was appended (the newest is never folded); the log's
        creation for an empty one."""
        if len(self._events) > self._head:
            return self._events[-1].ts_ns
        return self.ledger.created_ns

    @property
    def text_chars(self) -> int:
        """Characters of text (deltas, tool-call arguments) appended so far, folded or not."""
        return self._text_chars

    def check_text(self, events: Iterable[Event], pending: int = 0) -> int:
        """`StreamTooLarge` if appending ``events`` would take the stream past its text limit,
        counting ``pending`` characters already on their way to the store (a hub that stores
        elsewhere: appends queued or being published); else the text ``events`` add.

        Hubs call this before they store a batch, never `append_many` itself: a replica must
        take whatever its store holds, and the limit is a refusal to a writer, not to history.
        """
        room = self._retention.max_text_chars - self._text_chars - pending
        adding = text_of(events)
        # Events without text always fit (a stream at its limit can still be ended; and a
        # count of what is on its way may briefly include text the replica has just taken).
        if adding and adding > room:
            limit = self._retention.max_text_chars
            held = self._text_chars + pending
            raise StreamTooLarge(
                f"stream {self.stream_id!r} holds {held} characters of text; "
                f"{adding} more would pass its limit of {limit} ([retention] max_text_chars): "
                "start a new stream"
            )
        return adding

    def append(self, event: Event, now_ns: int) -> Event:
        """Assign ``event`` the next ``seq``, store it, apply retention, and return it.

        A terminal event gets the ledger's report as its ``usage``. Raises `StreamClosed` after
        a terminal event; ``snapshot`` events are produced by the log, never appended.
        """
        self.append_many((event,), now_ns)
        return event

    def append_many(self, events: Iterable[Event], now_ns: int) -> None:
        """`append` each of ``events`` in order, all accepted at ``now_ns``.

        The same as calling `append` for each, but retention is applied once, after the last
        one (the retained window is the same: it is always the newest events that fit). If an
        event is refused, the ones before it stay appended.
        """
        store = self._events.append
        first_seq = seq = self.next_seq
        terminal = self.terminal
        last_delta = self._last_delta_seq
        text_bytes = 0
        text_chars = 0  # of deltas and tool calls: what folding keeps
        tokens = 0  # completion tokens not yet handed to the ledger
        try:
            # The common kinds (delta, message) take one membership test and no branch.
            for event in events:
                if terminal is not None:
                    raise StreamClosed(
                        f"stream {self.stream_id!r} has ended; nothing can be appended"
                    )
                kind = event.kind
                if kind in _SPECIAL_KINDS:
                    tokens = self._append_special(event, kind, tokens, now_ns)
                    terminal = self.terminal
                elif kind is _DELTA:
                    last_delta = seq
                    text_chars += len(event.text)
                elif kind is _TOOL_CALL:
                    text_chars += len(event.text)
                event.seq = seq
                event.ts_ns = now_ns
                seq += 1
                tokens += event.tokens
                store(event)
                # Event.size, inlined (a property call per event costs more than the sum).
                raw = event.raw
                text_bytes += len(event.text) + event.held
                if raw is not None:
                    text_bytes += len(raw)
        finally:
            self.next_seq = seq
            self._last_delta_seq = last_delta
            self._text_chars += text_chars
            if tokens:
                self.ledger.on_append(tokens, now_ns)
            self._retained_bytes += text_bytes + EVENT_OVERHEAD_BYTES * (seq - first_seq)
            # Whether `trim` may have something to fold, inlined: this runs per append.
            retained = len(self._events) - self._head
            if retained > 1 and (
                retained > self._max_events
                or self._retained_bytes > self._max_bytes
                or now_ns > self._expires_ns
            ):
                self.trim(now_ns)

    def _append_special(self, event: Event, kind: Kind, tokens: int, now_ns: int) -> int:
        """The bookkeeping of a usage or terminal event (refusing a snapshot); returns the
        completion tokens still to hand to the ledger (``event``'s own are added later)."""
        if kind is _SNAPSHOT:
            raise ValueError("snapshot events are made by the log, not appended")
        ledger = self.ledger
        if kind is _USAGE:
            if event.data:
                ledger.on_append(tokens, now_ns)
                ledger.on_backend_usage(
                    int(event.data.get("prompt_tokens", 0)),
                    int(event.data.get("completion_tokens", 0)),
                )
                return 0
            return tokens
        # A terminal event: its usage report covers everything, its own tokens included.
        ledger.on_append(tokens + event.tokens, now_ns)
        data = dict(event.data or {})
        routing = data.pop("routing", None)
        if isinstance(routing, dict):
            ledger.routing = routing  # a backend's routing decision joins the ledger
        data["usage"] = ledger.report()
        event.data = data
        self.terminal = event
        return -event.tokens  # already counted; the caller adds them back

    def cancel(self, now_ns: int, finish_reason: str = "cancelled") -> Event | None:
        """End the stream with ``done(finish_reason)``; None if it had already ended."""
        if self.terminal is not None:
            return None
        return self.append(Event.done(finish_reason), now_ns)

    def trim(self, now_ns: int) -> int:
        """Fold the oldest events while a retention limit is exceeded; return how many."""
        ttl_ns = self._ttl_ns
        oldest_allowed = None if ttl_ns is None else now_ns - ttl_ns
        trimmed = 0
        # The newest event is always kept: it anchors the tail a reader resumes into.
        while self.retained > 1:
            oldest = self._events[self._head]
            too_old = oldest_allowed is not None and oldest.ts_ns < oldest_allowed
            if not (
                too_old
                or self.retained > self._max_events
                or self._retained_bytes > self._max_bytes
            ):
                break
            self.folded.fold(oldest)
            self._retained_bytes -= oldest.size
            self._head += 1
            trimmed += 1
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._events):
            del self._events[: self._head]
            self._head = 0
        if ttl_ns is not None and self.retained:
            self._expires_ns = self._events[self._head].ts_ns + ttl_ns
        return trimmed

    def restore(self, folded: Folded) -> None:
        """Start this empty log after ``folded``: a replica whose source already folded its
        older history (the next event appended gets ``folded.through_seq + 1``)."""
        if self.next_seq != 1 or self._events:
            raise ValueError("only an empty log can be restored from a snapshot")
        self.folded = folded
        self.next_seq = folded.through_seq + 1
        self._text_chars = folded.text_chars
        if folded.tokens:
            self.ledger.on_append(folded.tokens, self.ledger.created_ns)

    # -- reading ----------------------------------------------------------------------------

    def cursor(self, subscriber: str, resume: Position | None = None) -> Cursor:
        """A cursor for a new reader, from the start or resuming after ``resume``.

        A position from another epoch starts over with a snapshot flagged ``reset``, so the
        client learns it must replace its state rather than silently missing events. A
        position beyond the end of this epoch raises `ResumeOutOfRange`.
        """
        live_from = self.last_seq
        if resume is None:
            return Cursor(subscriber, live_from=live_from)
        if resume.epoch != self.epoch:
            return Cursor(subscriber, 0, reset=True, live_from=live_from)
        if resume.seq > self.last_seq:
            raise ResumeOutOfRange(
                f"stream {self.stream_id!r} has no event {resume.seq} yet (last is {self.last_seq})"
            )
        return Cursor(subscriber, resume.seq, live_from=live_from)

    def pending(self, cursor: Cursor) -> bool:
        """True if `read` would return something for ``cursor``."""
        # next_seq, not the last_seq property: this runs on every poll of a live tail.
        return cursor.reset or (not cursor.finished and cursor.after < self.next_seq - 1)

    def position(self, cursor: Cursor) -> Position:
        """``cursor``'s position as a resume token."""
        return Position(self.epoch, cursor.after)

    def read(self, cursor: Cursor, limit: int = 64, *, coalesce: bool = True) -> list[Event]:
        """Hand ``cursor`` up to ``limit`` frames that follow its position, and advance it."""
        out: list[Event] = []
        folded_through = self.folded.through_seq
        if cursor.reset or cursor.after < folded_through:
            out.extend(self._catch_up(cursor))
        index = self._head + (cursor.after - folded_through)
        events = self._events
        end = len(events)
        if not out and self._last_delta_seq <= cursor.after:
            # No delta ahead of the cursor, so nothing to coalesce: the frames are a slice of
            # the log (the common case for message streams, where a per-event loop would
            # cost more than everything else on the read path).
            stop = min(end, index + limit)
            if stop > index and (self.terminal is None or stop < end):
                out = events[index:stop]
                before, cursor.after = cursor.after, out[-1].seq
                tokens = sum(map(_tokens_of, out))
                if tokens:
                    cursor.delivered_tokens += tokens
                    self._account(cursor, before, out, tokens)
                return out
        lengths = cursor.text_lengths
        if index == end - 1 and not out and limit > 0:
            # The live tail: one new event, what a reader that keeps up finds on almost every
            # read of a token stream. The loop below would give the same, at twice the cost.
            return [self._read_one(cursor, events[index], lengths)]
        tokens = 0
        before = cursor.after
        terminal: Event | None = None
        # One pass, bookkeeping summed per read rather than per event: this is the hot path.
        while index < end and len(out) < limit:
            event = events[index]
            kind = event.kind
            if kind is _DELTA:
                if coalesce and cursor.merge_deltas:
                    event, index = self._coalesce(index, end, cursor.live_from)
                else:
                    index += 1
                if lengths is not None:
                    lengths[event.channel] = lengths.get(event.channel, 0) + len(event.text)
            else:
                index += 1
                if kind in TERMINAL_KINDS:
                    terminal = event
            tokens += event.tokens
            out.append(event)
        if out:
            cursor.after = out[-1].seq
        if tokens:
            cursor.delivered_tokens += tokens
            self._account(cursor, before, out, tokens)
        if terminal is not None:
            cursor.finished = True
            out[-1] = self._terminal_for(cursor, terminal)
        return out

    def _read_one(self, cursor: Cursor, event: Event, lengths: dict[Channel, int] | None) -> Event:
        """`read` of the one event after ``cursor`` (a lone delta has nothing to merge)."""
        kind = event.kind
        if kind is _DELTA and lengths is not None:
            lengths[event.channel] = lengths.get(event.channel, 0) + len(event.text)
        before, cursor.after = cursor.after, event.seq
        tokens = event.tokens
        if tokens:
            cursor.delivered_tokens += tokens
            if before >= cursor.live_from:
                self.ledger.on_delivered(cursor.subscriber, tokens)
            else:
                self._account(cursor, before, [event], tokens)
        if kind in TERMINAL_KINDS:
            cursor.finished = True
            return self._terminal_for(cursor, event)
        return event

    def _coalesce(self, index: int, end: int, live_from: int) -> tuple[Event, int]:
        """Merge the run of same-channel deltas starting at ``index``; return it and the next
        index. A run of one is returned as the stored event itself (shared encode cache).

        A run never crosses ``live_from``, the reader's last seq of history: a merged delta
        carries its first event's ``ts_ns`` and its last event's ``seq``, so history merged
        with what came live would be counted as live, its age as the gateway's latency."""
        events = self._events
        first = events[index]
        if first.seq <= live_from:  # seqs are consecutive: the history ends at this index
            end = min(end, index + live_from - first.seq + 1)
        stop = index + 1
        chars = len(first.text)
        while stop < end:
            nxt = events[stop]
            if nxt.kind is not Kind.DELTA or nxt.channel is not first.channel:
                break
            chars += len(nxt.text)
            if chars > self.max_coalesce_chars:
                break
            stop += 1
        if stop == index + 1:
            return first, stop
        run = events[index:stop]
        merged = first.replace(
            text="".join(e.text for e in run),
            tokens=sum(e.tokens for e in run),
            seq=run[-1].seq,
        )
        return merged, stop

    def _catch_up(self, cursor: Cursor) -> list[Event]:
        """Bring a cursor that is behind the retained window up to the folded state."""
        folded = self.folded
        lengths = cursor.text_lengths
        text_only = (
            not cursor.reset and lengths is not None and folded.last_other_seq <= cursor.after
        )
        missing: list[Channel] = []
        if lengths is not None and text_only:
            missing = [ch for ch, n in folded.lengths.items() if n > lengths.get(ch, 0)]
        if lengths is not None and text_only and len(missing) <= 1:
            # Only text of one channel was folded since the cursor: send what it lacks as one
            # delta (two would share a seq, and a resume between them would lose the second).
            events = [
                Event(
                    Kind.DELTA,
                    text=folded.text(channel)[lengths.get(channel, 0) :],
                    channel=channel,
                    seq=folded.through_seq,
                )
                for channel in missing
            ]
        else:
            events = [folded.to_event(reset=cursor.reset)]
        gained = folded.tokens - cursor.delivered_tokens
        if gained > 0:
            if folded.through_seq <= cursor.live_from:  # history the reader asked for again
                self.ledger.on_replayed(cursor.subscriber, gained)
            else:
                self.ledger.on_delivered(cursor.subscriber, gained)
        cursor.delivered_tokens = folded.tokens
        cursor.reset = False
        cursor.after = folded.through_seq
        cursor.text_lengths = dict(folded.lengths)
        return events

    def _account(self, cursor: Cursor, before: int, out: list[Event], tokens: int) -> None:
        """Count ``tokens`` handed to ``cursor`` in ``out`` (read after seq ``before``):
        delivered live, or replayed where they were history when the reader came."""
        live_from = cursor.live_from
        if before >= live_from:
            self.ledger.on_delivered(cursor.subscriber, tokens)
            return
        if cursor.after <= live_from:
            replayed = tokens
        else:
            replayed = sum(e.tokens for e in out if e.seq <= live_from)
        if replayed:
            self.ledger.on_replayed(cursor.subscriber, replayed)
        if tokens > replayed:
            self.ledger.on_delivered(cursor.subscriber, tokens - replayed)

    def _terminal_for(self, cursor: Cursor, event: Event) -> Event:
        usage: dict[str, Any] = self.ledger.report()
        usage["subscriber"] = cursor.subscriber
        usage["subscriber_tokens"] = cursor.delivered_tokens
        return event.replace(data={**(event.data or {}), "usage": usage})

    def release(self) -> tuple[list[Event], int]:
        """Give up the retained events, for a log nobody will read again (its stream is
        forgotten): ``(events, their bytes)``; the log is left empty. The caller frees them as
        it sees fit (the memory hub spreads the work over time: `airlane.hub.reaper`)."""
        # The list as it is: its folded head (before _head) is garbage too, freed with it.
        events, size = self._events, self._retained_bytes
        self._events, self._head, self._retained_bytes = [], 0, 0
        return events, size

    # -- whole-stream views -----------------------------------------------------------------

    def retained_events(self) -> list[Event]:
        """The events held, oldest first (a copy of the list; the events themselves are
        shared)."""
        return self._events[self._head :]

    def snapshot(self) -> Event:
        """Everything so far (folded state plus retained events) as one ``snapshot`` event."""
        retained = self._events[self._head :]
        state = self.folded.extended(retained)
        event = state.to_event()
        event.seq = self.last_seq
        return event

    def record_write(self, events: list[Event], now_ns: int, live_from: int = 0) -> None:
        """A transport wrote ``events`` to a socket at ``now_ns``: record the added latency
        of those that reached the reader live (seq after ``live_from``, the stream's last seq
        when it came); history it replays is counted as replayed events, not as latency."""
        if not events:
            return
        first, last = events[0], events[-1]
        # Events appended together share their ts_ns, and a log's ts_ns never decreases, so a
        # batch whose ends agree is one latency, recorded once with its count.
        if first.ts_ns == last.ts_ns and first.seq > live_from and first.kind is not _SNAPSHOT:
            self.ledger.gateway_latency.observe_n(now_ns - first.ts_ns, len(events))
            return
        replayed = [e for e in events if e.seq <= live_from or e.kind is _SNAPSHOT]
        if replayed:
            self.ledger.replayed_events += len(replayed)
        self.ledger.gateway_latency.observe_many(
            [now_ns - e.ts_ns for e in events if e.seq > live_from and e.kind is not _SNAPSHOT]
        )
