"""`MemoryHub`: every stream in this process's memory (the embedded default).

Each stream is a `StreamLog` plus a wake-up: the futures of the readers waiting on the live
tail, resolved and dropped by the next append (or batch of appends), so a reader wakes once per
append however many events it carried.
One housekeeping task owned by the hub applies orphan deadlines, time-based retention and the
expiry of ended streams; there is no timer per stream. A stream the hub forgets (deleted, or
expired) gives its retained events to the hub's `Reaper` once its last reader has gone, which
frees them a slice at a time instead of in one loop step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from airlane.core import (
    BadResumeToken,
    Event,
    OrphanPolicy,
    OrphanTracker,
    Position,
    ResumeOutOfRange,
    Retention,
    StreamClosed,
    StreamLog,
    valid_hub_stream_id,
)
from airlane.core.log import Cursor
from airlane.core.scope import split_scope
from airlane.hub.base import (
    Hub,
    HubFull,
    HubStats,
    InvalidResume,
    InvalidStreamId,
    StreamEnded,
    StreamExists,
    StreamInfo,
    StreamNotFound,
    Subscription,
)
from airlane.hub.reaper import Reaper

__all__ = ["MemoryHub", "MemoryHubConfig"]

log = logging.getLogger("airlane.hub")

DEFAULT_MAX_STREAMS = 100_000
DEFAULT_MAX_SUBSCRIBERS = 200_000
DEFAULT_ENDED_TTL_S = 300.0
DEFAULT_IDLE_TTL_S = 3600.0
DEFAULT_TICK_S = 0.25


@dataclass(frozen=True, slots=True)
class MemoryHubConfig:
    """Limits and timers of the in-memory hub."""

    max_streams: int = DEFAULT_MAX_STREAMS
    """Streams held at once; creating one more raises `HubFull`."""
    max_tenant_streams: int = DEFAULT_MAX_STREAMS // 4
    """Streams one named tenant may hold at once (`airlane.core.scope`): no tenant can take
    the whole hub from the others. The default tenant (a gateway without keys is all of it)
    is bound by ``max_streams`` only."""
    generation_share: float = 0.1
    """The share of ``max_streams`` only generations (streams with a producer and an orphan
    policy) may take: named streams, which any client may create without generating, stop at
    the rest, so they cannot refuse everyone's chat completions (a gateway without keys has a
    single tenant, which the per-tenant bound does not split)."""
    max_subscribers: int = DEFAULT_MAX_SUBSCRIBERS
    """Cursors held at once, over all streams."""
    ended_ttl_s: float = DEFAULT_ENDED_TTL_S
    """How long an ended stream stays available for resume and snapshots."""
    idle_ttl_s: float = DEFAULT_IDLE_TTL_S
    """A stream not ended, with no reader and no new event for this long, is ended with
    ``done`` (finish reason ``expired``), then kept ``ended_ttl_s`` like any ended stream."""
    tick_s: float = DEFAULT_TICK_S
    """Housekeeping period: the resolution of orphan deadlines."""
    retention: Retention = field(default_factory=Retention)
    """Default retention for streams created without one."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.generation_share < 1.0:
            raise ValueError("MemoryHubConfig.generation_share must be at least 0 and below 1")


# Epochs and subscriber names must differ, not be secret: a PRNG seeded once from the OS is
# enough, and spares a getrandom() system call per stream and per subscriber.
_ids = random.Random(secrets.randbits(64))


def _short_id() -> str:
    """Eight hex digits, different from the last few billion."""
    return f"{_ids.getrandbits(32):08x}"


class _Stream:
    __slots__ = (
        "active_ns",
        "cancel_callbacks",
        "ended_at",
        "listeners",
        "log",
        "orphan",
        "readers",
        "waiters",
    )

    def __init__(self, log: StreamLog, orphan: OrphanTracker | None) -> None:
        self.log = log
        self.orphan = orphan
        # One future per waiting reader, resolved and dropped by the next append: an append
        # nobody waits for costs nothing here (the common case under load). A future each,
        # not one shared: a reader whose wait is cancelled must not cancel the others'.
        self.waiters: list[asyncio.Future[None]] = []
        self.cancel_callbacks: list[Callable[[], object]] = []
        # Readers that write synchronously (Subscription.listen): called on every append.
        self.listeners: list[Callable[[], object]] = []
        self.ended_at: float | None = None
        self.active_ns = log.ledger.created_ns  # the last append, or reader leaving
        self.readers = 0

    def notify(self) -> None:
        waiters = self.waiters
        if waiters:
            self.waiters = []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        if self.listeners:
            # A copy: a listener that finishes its reader removes itself.
            for listener in tuple(self.listeners):
                try:
                    listener()
                except Exception:
                    log.exception("a listener of stream %s failed", self.log.stream_id)

    def waiter(self) -> asyncio.Future[None]:
        """A future resolved by the next append (or end, deletion, hub shutdown). The reader
        awaits it directly, not through a coroutine: one frame fewer per wait."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        return waiter

    def forget(self, waiter: asyncio.Future[None]) -> None:
        """Drop the future of a cancelled wait. Not left behind for the next append to find:
        an idle stream's reader is interrupted once per heartbeat, and the list must stay
        bounded."""
        with contextlib.suppress(ValueError):
            self.waiters.remove(waiter)


class _MemorySubscription(Subscription):
    def __init__(self, hub: MemoryHub, stream: _Stream, cursor: Cursor) -> None:
        self.stream_id = stream.log.stream_id
        self.subscriber = cursor.subscriber
        self._hub = hub
        self._stream = stream
        self._log = stream.log  # the stream's log never changes; one lookup less per poll
        self._cursor = cursor
        self._closed = False
        self._listener: Callable[[], object] | None = None

    @property
    def position(self) -> Position:
        return self._stream.log.position(self._cursor)

    @property
    def finished(self) -> bool:
        return self._cursor.finished

    @property
    def exhausted(self) -> bool:
        log = self._stream.log
        return self._cursor.finished or (log.terminal is not None and not log.pending(self._cursor))

    def keep_deltas_apart(self) -> None:
        self._cursor.merge_deltas = False

    def poll(self, limit: int = 64) -> list[Event]:
        stream_log, cursor = self._log, self._cursor
        if self._closed or not stream_log.pending(cursor):
            return []  # without a read: a reader that keeps up polls an empty tail often
        events = stream_log.read(cursor, limit)
        self._hub._delivered += len(events)
        return events

    async def next_batch(self, limit: int = 64) -> list[Event]:
        stream = self._stream
        stream_log = stream.log
        cursor = self._cursor
        hub = self._hub
        while not self._closed:
            if stream_log.pending(cursor):
                events = stream_log.read(cursor, limit)
                hub._delivered += len(events)
                return events
            # Nothing pending: over if the terminal event was handed out (or the stream
            # ended before this reader's position), or the stream or hub is going away.
            if (
                cursor.finished
                or stream_log.terminal is not None
                or hub._closing
                or hub._streams.get(self.stream_id) is not stream
            ):
                break
            waiter = stream.waiter()
            try:
                await waiter
            except asyncio.CancelledError:
                stream.forget(waiter)
                raise
        return []

    @property
    def over(self) -> bool:
        stream_log, hub = self._log, self._hub
        if self._closed or hub._closing or hub._streams.get(self.stream_id) is not self._stream:
            return True
        return self._cursor.finished or (
            stream_log.terminal is not None and not stream_log.pending(self._cursor)
        )

    def listen(self, callback: Callable[[], object] | None) -> bool:
        listeners = self._stream.listeners
        if self._listener is not None:
            with contextlib.suppress(ValueError):
                listeners.remove(self._listener)
        self._listener = callback
        if callback is not None:
            listeners.append(callback)
        return True

    @property
    def live_from(self) -> int:
        return self._cursor.live_from

    def mark_written(self, events: list[Event], now_ns: int) -> None:
        self._log.record_write(events, now_ns, self._cursor.live_from)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.listen(None)
        self._hub._release(self._stream)


class MemoryHub(Hub):
    """The in-memory hub. See the module docstring."""

    def __init__(self, config: MemoryHubConfig | None = None) -> None:
        self.config = config or MemoryHubConfig()
        self._streams: dict[str, _Stream] = {}
        self._tenant_streams: dict[str | None, int] = {}  # streams held per tenant scope
        self._subscribers = 0
        self._appended = 0
        self._delivered = 0
        self._closing = False
        self._deadlines: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._housekeeper: asyncio.Task[None] | None = None
        self._reaper = Reaper()

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._housekeeper is None:
            self._housekeeper = asyncio.create_task(self._housekeep(), name="hub-housekeeping")

    async def aclose(self) -> None:
        self._closing = True
        if self._housekeeper is not None:
            self._housekeeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeper
            self._housekeeper = None
        for stream in self._streams.values():
            stream.notify()
        self._reaper.close()

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
        existing = self._streams.get(stream_id)
        if existing is not None:
            if not exist_ok:
                raise StreamExists(f"stream {stream_id!r} already exists")
            return self._info(existing)
        if len(self._streams) >= self.config.max_streams:
            raise HubFull(f"the hub holds {self.config.max_streams} streams, its limit")
        named_limit = self.config.max_streams - int(
            self.config.max_streams * self.config.generation_share
        )
        if orphan is None and len(self._streams) >= named_limit:
            raise HubFull(
                f"the hub holds {len(self._streams)} streams; the rest of its "
                f"{self.config.max_streams} are kept for generations"
            )
        tenant = split_scope(stream_id)[0]
        held = self._tenant_streams.get(tenant, 0)
        if tenant is not None and held >= self.config.max_tenant_streams:
            limit = self.config.max_tenant_streams
            raise HubFull(f"this tenant holds {limit} streams, its limit in this hub")
        now = time.monotonic()
        stream_log = StreamLog(
            stream_id,
            _short_id(),
            now_ns=time.monotonic_ns(),
            retention=retention or self.config.retention,
        )
        tracker = OrphanTracker(orphan, now) if orphan is not None else None
        stream = _Stream(stream_log, tracker)
        self._streams[stream_id] = stream
        self._tenant_streams[tenant] = held + 1
        if tracker is not None and tracker.deadline is not None:
            self._schedule(tracker.deadline, stream_id)
        return self._info(stream)

    async def append(self, stream_id: str, event: Event) -> Event:
        await self.append_many(stream_id, (event,))
        return event

    async def append_many(self, stream_id: str, events: Sequence[Event]) -> Sequence[Event]:
        self._append_now(stream_id, events)
        return events

    def appender(self, stream_id: str) -> Callable[[Sequence[Event]], int] | None:
        return functools.partial(self._append_now, stream_id)

    def _append_now(self, stream_id: str, events: Sequence[Event]) -> int:
        # `append_many` and the appender: one lookup, one clock read, one retention check
        # and one wake-up per batch, in one frame, since a producer calls this per batch.
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotFound(f"no stream {stream_id[:200]!r}")
        stream_log = stream.log
        before = stream_log.next_seq
        stream_log.check_text(events)
        stream.active_ns = now_ns = time.monotonic_ns()
        try:
            stream_log.append_many(events, now_ns)
        except StreamClosed as exc:
            raise StreamEnded(str(exc)) from None
        finally:
            appended = stream_log.next_seq - before
            if appended:
                self._appended += appended
                if stream_log.terminal is not None:
                    stream.ended_at = time.monotonic()
                    stream.cancel_callbacks.clear()
                stream.notify()
        return 0  # stored: nothing waits

    async def subscribe(
        self, stream_id: str, *, resume: Position | None = None, subscriber: str | None = None
    ) -> Subscription:
        stream = self._get(stream_id)
        if self._subscribers >= self.config.max_subscribers:
            raise HubFull(f"the hub holds {self.config.max_subscribers} subscribers, its limit")
        try:
            cursor = stream.log.cursor(subscriber or f"sub-{_short_id()}", resume)
        except (ResumeOutOfRange, BadResumeToken) as exc:
            raise InvalidResume(str(exc)) from None
        self._subscribers += 1
        stream.readers += 1
        if stream.orphan is not None:
            stream.orphan.subscribe()
        return _MemorySubscription(self, stream, cursor)

    async def cancel(self, stream_id: str, finish_reason: str = "cancelled") -> bool:
        stream = self._get(stream_id)
        return self._cancel(stream, finish_reason)

    async def info(self, stream_id: str) -> StreamInfo:
        return self._info(self._get(stream_id))

    def stream_ids(self) -> list[str]:
        return list(self._streams)

    async def snapshot(self, stream_id: str) -> Event:
        return self._get(stream_id).log.snapshot()

    async def delete(self, stream_id: str) -> None:
        stream = self._get(stream_id)
        self._cancel(stream, "deleted")
        self._remove(stream_id)
        stream.notify()
        self._forget(stream)

    def on_cancel(self, stream_id: str, callback: Callable[[], object]) -> None:
        stream = self._get(stream_id)
        if stream.log.terminal is None:
            stream.cancel_callbacks.append(callback)

    def stats(self) -> HubStats:
        return HubStats(
            streams=len(self._streams),
            subscribers=self._subscribers,
            events_appended=self._appended,
            events_delivered=self._delivered,
            retained_bytes=sum(s.log.retained_bytes for s in self._streams.values()),
        )

    # -- internals --------------------------------------------------------------------------

    def _get(self, stream_id: str) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            if not valid_hub_stream_id(stream_id):  # a malformed id is the caller's mistake
                raise InvalidStreamId(f"invalid stream id {stream_id[:200]!r}")
            raise StreamNotFound(f"no stream {stream_id[:200]!r}")
        return stream

    def _info(self, stream: _Stream) -> StreamInfo:
        stream_log = stream.log
        terminal = stream_log.terminal
        finish = None
        if terminal is not None and terminal.data is not None:
            finish = terminal.data.get("finish_reason", terminal.kind.value)
        return StreamInfo(
            stream_id=stream_log.stream_id,
            epoch=stream_log.epoch,
            last_seq=stream_log.last_seq,
            first_retained_seq=stream_log.first_retained_seq,
            ended=terminal is not None,
            finish_reason=finish,
            subscribers=stream.readers,
            retained_events=stream_log.retained,
            retained_bytes=stream_log.retained_bytes,
            usage=stream_log.ledger.report(),
        )

    def _cancel(self, stream: _Stream, finish_reason: str) -> bool:
        ended = stream.log.cancel(time.monotonic_ns(), finish_reason)
        if ended is None:
            return False
        stream.ended_at = time.monotonic()
        callbacks, stream.cancel_callbacks = stream.cancel_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("cancel callback for %s failed", stream.log.stream_id)
        stream.notify()
        return True

    def _remove(self, stream_id: str) -> _Stream:
        """Take a stream out of the hub (and out of its tenant's count)."""
        stream = self._streams.pop(stream_id)
        tenant = split_scope(stream_id)[0]
        left = self._tenant_streams[tenant] - 1
        if left:
            self._tenant_streams[tenant] = left
        else:
            del self._tenant_streams[tenant]
        return stream

    def _release(self, stream: _Stream) -> None:
        self._subscribers -= 1
        stream.readers -= 1
        stream.active_ns = time.monotonic_ns()
        if self._streams.get(stream.log.stream_id) is not stream:  # forgotten meanwhile
            self._forget(stream)
            return
        if stream.orphan is None:
            return
        deadline = stream.orphan.unsubscribe(time.monotonic())
        if deadline is not None and stream.log.terminal is None:
            self._schedule(deadline, stream.log.stream_id)

    def _forget(self, stream: _Stream) -> None:
        """Free a stream no longer in the hub once nobody reads it (its last reader's release
        calls this again), through the reaper: a large history freed at once stalls the loop."""
        if stream.readers == 0:
            self._reaper.discard(*stream.log.release())

    def _schedule(self, deadline: float, stream_id: str) -> None:
        heapq.heappush(self._deadlines, (deadline, next(self._order), stream_id))

    async def _housekeep(self) -> None:
        tick = self.config.tick_s
        sweeps = 0
        while True:
            await asyncio.sleep(tick)
            self._expire_orphans(time.monotonic())
            sweeps += 1
            # The full sweep costs O(streams): run it about once a second.
            if sweeps * tick >= 1.0:
                sweeps = 0
                self._sweep(time.monotonic())

    def _expire_orphans(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, stream_id = heapq.heappop(self._deadlines)
            stream = self._streams.get(stream_id)
            # Entries are not removed when a subscriber returns; re-check the live tracker.
            if stream is not None and stream.orphan is not None and stream.orphan.expired(now):
                log.info("stream %s orphaned: cancelling", stream_id)
                self._cancel(stream, "cancelled")

    def _sweep(self, now: float) -> None:
        now_ns = time.monotonic_ns()
        expired = [
            sid
            for sid, stream in self._streams.items()
            if stream.ended_at is not None and now - stream.ended_at >= self.config.ended_ttl_s
        ]
        for stream_id in expired:
            stream = self._remove(stream_id)
            stream.notify()
            self._forget(stream)
        idle_before = now_ns - int(self.config.idle_ttl_s * 1e9)
        for stream in self._streams.values():
            stream.log.trim(now_ns)
            if stream.ended_at is None and not stream.readers and stream.active_ns < idle_before:
                log.info("stream %s idle: ending it", stream.log.stream_id)
                self._cancel(stream, "expired")
