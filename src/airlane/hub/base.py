"""The hub contract: where streams live while they are produced and read.

Every transport talks to a `Hub`; every hub implementation (the in-memory `MemoryHub`, the
JetStream hub of a later release) passes one contract test suite (``tests/hub/contract.py``).

Exceptions (`airlane.core.errors`: each carries its code, no wire knowledge)::

    HubError                 base of everything a hub raises on purpose (hub_error)
    ├── StreamNotFound       no stream by that id (stream_not_found)
    ├── StreamExists         create() without exist_ok on an existing id (stream_exists)
    ├── StreamEnded          append() after the terminal event (stream_ended)
    ├── HubFull              a configured bound on streams or subscribers (hub_full)
    ├── HubUnavailable       the shared store does not answer (hub_unavailable)
    ├── InvalidResume        a resume position the stream cannot honour (invalid_resume)
    └── InvalidStreamId      not a valid stream id (invalid_stream_id; also a ValueError)
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from airlane.core import Event, OrphanPolicy, Position, Retention
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.info import StreamInfo

__all__ = [
    "EventTooLarge",
    "Hub",
    "HubError",
    "HubFull",
    "HubStats",
    "HubUnavailable",
    "InvalidResume",
    "InvalidStreamId",
    "StreamEnded",
    "StreamExists",
    "StreamInfo",
    "StreamNotFound",
    "Subscription",
]


class HubError(AirlaneError):
    """Base class of the hub's own errors."""

    code = ErrorCode.HUB_ERROR


class StreamNotFound(HubError):
    """No stream has that id (or it has expired)."""

    code = ErrorCode.STREAM_NOT_FOUND


class StreamExists(HubError):
    """A stream with that id already exists."""

    code = ErrorCode.STREAM_EXISTS


class StreamEnded(HubError):
    """The stream has ended; nothing more can be appended."""

    code = ErrorCode.STREAM_ENDED


class HubFull(HubError):
    """A configured limit on streams or subscribers was reached."""

    code = ErrorCode.HUB_FULL


class EventTooLarge(HubError):
    """What was appended cannot be stored: more than the store takes in one message (a
    JetStream hub's broker, its ``max_payload``). Trying again does not help."""

    code = ErrorCode.EVENT_TOO_LARGE


class HubUnavailable(HubError):
    """The store behind the hub (JetStream) did not answer within the configured time."""

    code = ErrorCode.HUB_UNAVAILABLE


class InvalidResume(HubError):
    """The resume position is beyond the end of the stream."""

    code = ErrorCode.INVALID_RESUME


class InvalidStreamId(HubError, ValueError):
    """The id does not match ``[A-Za-z0-9._:/-]{1,200}``."""

    code = ErrorCode.INVALID_STREAM_ID


@dataclass(slots=True)
class HubStats:
    """Counters for ``/metrics``."""

    streams: int = 0
    subscribers: int = 0
    events_appended: int = 0
    events_delivered: int = 0
    retained_bytes: int = 0


class Subscription(abc.ABC):
    """One reader's cursor on one stream, with a live tail. Close it when done."""

    stream_id: str
    subscriber: str

    @property
    @abc.abstractmethod
    def position(self) -> Position:
        """The last event handed out, as a resume position."""

    @property
    @abc.abstractmethod
    def finished(self) -> bool:
        """True once the terminal event has been handed out."""

    @property
    @abc.abstractmethod
    def exhausted(self) -> bool:
        """True if the stream has ended and nothing is left for this reader (it resumed at
        the very end, or has been handed the terminal event)."""

    @abc.abstractmethod
    def poll(self, limit: int = 64) -> list[Event]:
        """What is ready now, without waiting (possibly nothing)."""

    @abc.abstractmethod
    async def next_batch(self, limit: int = 64) -> list[Event]:
        """Wait for and return the next frames; an empty list means the stream is over for
        this reader (terminal delivered, subscription closed, or hub shut down)."""

    @property
    def over(self) -> bool:
        """True once `next_batch` would return ``[]``: nothing more will come to this reader
        (it was handed the terminal event, or the subscription, stream or hub is closed)."""
        return self.exhausted

    def listen(self, callback: Callable[[], object] | None) -> bool:
        """Call ``callback`` synchronously, from the task that appends, whenever this reader
        may have something new to `poll` or may be `over`; None stops it.

        For writers that can write without waiting (`airlane.transports.http.sse_pump.SSEPump`):
        events go out inside the append's own loop turn, with no task switch per batch. A
        callback must not block or raise. Returns False if this hub cannot call back; the
        caller then waits with `next_batch`.
        """
        return False

    @abc.abstractmethod
    def keep_deltas_apart(self) -> None:
        """Hand this reader every delta as it was appended, each with its own ``seq``, never
        several merged into one (which a lagging reader otherwise gets, carrying the last of
        their seqs). For a reader whose consumers tell copies by ``seq``: after a resume from
        an earlier position, a merged delta would repeat text they had. (History folded
        away behind the reader still comes as a snapshot.)"""

    @property
    def live_from(self) -> int:
        """The stream's last seq when this reader came: events up to it are history replayed
        to it (a resume, a late join), later ones reach it live. Only live deliveries are the
        gateway's latency (`mark_written`, the HTTP delivery lag metric). 0 where a hub cannot
        tell: everything counts as live."""
        return 0

    @abc.abstractmethod
    def mark_written(self, events: list[Event], now_ns: int) -> None:
        """Tell the ledger that ``events`` reached the socket at ``now_ns``: the latency of
        those that reached it live, and how many it replayed from history."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Remove the cursor; the stream's orphan policy may apply. Idempotent."""

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Hub(abc.ABC):
    """Streams: append, read from a cursor with a live tail, cancel, close, retention."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Start background work (retention and orphan timers)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop background work and release every subscriber."""

    @abc.abstractmethod
    async def create(
        self,
        stream_id: str,
        *,
        retention: Retention | None = None,
        orphan: OrphanPolicy | None = None,
        exist_ok: bool = False,
    ) -> StreamInfo:
        """Create a stream. ``orphan`` (for streams with a producer) enables the orphan
        policy; named streams without one live until they are closed or expire."""

    @abc.abstractmethod
    async def append(self, stream_id: str, event: Event) -> Event:
        """Append ``event`` (its ``seq`` and ``ts_ns`` are assigned) and wake readers."""

    async def append_many(self, stream_id: str, events: Sequence[Event]) -> Sequence[Event]:
        """`append` each of ``events`` in order and return them (with ``seq`` and ``ts_ns``).

        Producers hand over what they have ready in one call, so a hub can do its per-append
        work (lookup, clock read, retention, wake-up) once per batch. Readers see the same
        events as after one `append` per event. If one is refused (`StreamEnded` after a
        terminal event), those before it stay appended.
        """
        for event in events:
            await self.append(stream_id, event)
        return events

    def appender(self, stream_id: str) -> Callable[[Sequence[Event]], int] | None:
        """A synchronous `append_many` for ``stream_id``'s producer, or None (the default)
        where an append must wait (a hub that stores elsewhere, JetStream's publish and its
        acknowledgement).

        The function appends and wakes the readers before it returns, or, on a hub that
        stores elsewhere, queues the events for storing (readers see them once stored); it
        returns how many of the stream's events now wait to be stored (0 where it stores
        before it returns) and raises what `append_many` raises (`StreamNotFound`,
        `StreamEnded`; on a queueing hub also a failure to store what it queued before,
        such as `HubUnavailable`, and `HubUnavailable` for events past the queue's bound).
        A producer that pushes (`airlane.backends.base.Feed`) appends through it from loop
        call-backs, with no task, and holds back (`Feed.pause`, then `settle` with a
        backlog) when the count grows. A producer calls `settle` when it has appended its
        last events.
        """
        return None

    async def settle(self, stream_id: str, *, backlog: int = 0) -> None:
        """Return once at most ``backlog`` events appended to ``stream_id`` through
        `appender` still wait to be stored; raise what storing them raised (`StreamEnded`,
        `HubUnavailable`, `HubError`). A producer awaits it with a bound between batches
        (backpressure: it appends no faster than the store takes) and with 0 after its last
        batch: only then is everything it appended stored. At once where `appender` stores
        before it returns (the memory hub)."""
        return None

    @abc.abstractmethod
    async def subscribe(
        self, stream_id: str, *, resume: Position | None = None, subscriber: str | None = None
    ) -> Subscription:
        """A new cursor, from the start or after ``resume``."""

    @abc.abstractmethod
    async def cancel(self, stream_id: str, finish_reason: str = "cancelled") -> bool:
        """End the stream with ``done(finish_reason)`` and stop its producer; False if it had
        already ended."""

    @abc.abstractmethod
    async def info(self, stream_id: str) -> StreamInfo:
        """The stream's status."""

    def nodes(self) -> list[dict[str, object]]:
        """The gateway nodes sharing this hub, as this one knows them (see
        `airlane.hub.jetstream.presence.NodeTable.report`); a hub of one process: none."""
        return []

    @property
    def process(self) -> str | None:
        """This process's name among the processes sharing the hub, as `owner` names
        them (None: a hub of one process)."""
        return None

    async def owner(self, stream_id: str) -> str | None:
        """The process that produces ``stream_id`` and holds it first hand, where that is
        another live process of this hub; else None (this one, none, or unknown).
        Processes that can pass connections to each other (``airlane serve --workers``)
        send a stream's readers there: each event is then served where it was made."""
        return None

    async def stream_infos(
        self, prefix: str, limit: int, accept: Callable[[str], bool] = lambda _: True
    ) -> list[StreamInfo]:
        """The streams whose ids start with ``prefix`` and that ``accept`` takes, newest
        first, at most ``limit``: those held here (a node of a cluster: those it holds or
        follows). A hub whose processes hold only what they are asked for
        (``mirror = "read"``) asks the others for theirs too."""
        infos: list[StreamInfo] = []
        for stream_id in reversed(self.stream_ids()):
            if len(infos) >= limit:
                break
            if stream_id.startswith(prefix) and accept(stream_id):
                try:
                    infos.append(await self.info(stream_id))
                except HubError:  # gone meanwhile
                    continue
        return infos

    @abc.abstractmethod
    def stream_ids(self) -> list[str]:
        """The streams this hub holds here, oldest first (a node of a cluster: those it holds
        or follows, not every stream of the cluster)."""

    @abc.abstractmethod
    async def snapshot(self, stream_id: str) -> Event:
        """Everything so far as one ``snapshot`` event."""

    @abc.abstractmethod
    async def delete(self, stream_id: str) -> None:
        """Forget the stream (ending it first); readers are released."""

    @abc.abstractmethod
    def on_cancel(self, stream_id: str, callback: Callable[[], object]) -> None:
        """Call ``callback`` once when the stream is cancelled (by a client or by its orphan
        policy); producers use it to stop work promptly."""

    @abc.abstractmethod
    def stats(self) -> HubStats:
        """Current counters."""

    def pausing(self, seconds: float) -> Awaitable[object] | None:
        """This process is about to stop for about ``seconds`` (a full garbage-collector
        pass). A hub shared with other processes tells them, so that they do not take the
        silence for its death, and returns what to await before pausing (until the word is
        out); a hub of one process has nobody to tell (this default: None)."""
        del seconds
        return None
