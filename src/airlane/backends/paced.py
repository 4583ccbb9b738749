"""Paced streams: chunk ``i`` due at ``start + i * interval``, pulled or pushed.

`PacedSchedule` says which chunks are due: each batch is the next chunk plus every later one
whose due time has already passed (at most a cap), so a stream that has fallen behind (the
gateway is overloaded) releases its due chunks together, one append and one write for all of
them, and overload degrades into larger writes rather than a backlog that grows without end.
Each due time is computed once, after the chunk before it is made, and is that chunk's
timestamp.

`PacedFeed` is the schedule as a `airlane.backends.base.Feed`: the shared `Pacer` calls its
next step when the next batch falls due, and the step hands the batch to the sink. Both run
per chunk on the paced benchmark path, so the common case (one chunk, on time) is kept to a
few attribute reads and calls. The
synthetic backend's ``_paced`` generator walks the same schedule for hubs that cannot take a
feed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TypedDict, Unpack

from airlane.backends.base import Sink
from airlane.backends.pacing import Pacer
from airlane.core.events import Event

__all__ = ["PacedFeed", "PacedSchedule", "ScheduleArgs", "TimedFeed"]


class ScheduleArgs(TypedDict):
    """A `PacedSchedule`'s arguments (a `PacedFeed` takes the same), as keywords."""

    start_ns: int
    interval_ns: float
    count: int
    cap: int
    encode: Callable[[int, int], bytes]
    event: Callable[[bytes], Event]


class PacedSchedule:
    """Which of ``count`` chunks are due, every ``interval_ns`` from ``start_ns``.

    Chunk ``index`` (1-based) is ``event(encode(index, due_ns))``: its bytes with its number
    and due time, then its event (two plain calls rather than one composed function: a
    frame less per chunk). The first chunk is due at ``start_ns``.
    """

    __slots__ = (
        "_cap",
        "_encode",
        "_event",
        "_interval_ns",
        "_start_ns",
        "count",
        "due_ns",
        "index",
    )

    def __init__(
        self,
        start_ns: int,
        interval_ns: float,
        count: int,
        cap: int,
        *,
        encode: Callable[[int, int], bytes],
        event: Callable[[bytes], Event],
    ) -> None:
        self._start_ns = start_ns
        self._interval_ns = interval_ns
        self.count = count
        """How many chunks in all."""
        self._cap = max(1, cap)
        self._encode = encode
        self._event = event
        self.index = 0
        """Chunks made so far."""
        self.due_ns = start_ns
        """When the next chunk is due (CLOCK_MONOTONIC ns)."""

    @property
    def finished(self) -> bool:
        """True once every chunk has been made."""
        return self.index >= self.count

    def take(self, now_ns: int) -> list[Event]:
        """The next chunk, and after it every chunk already due at ``now_ns`` (at most the
        cap); call only while not `finished`."""
        # The common case, a stream on time, first and in few steps: this runs per chunk.
        index = self.index + 1
        batch = [self._event(self._encode(index, self.due_ns))]
        self.index = index
        self.due_ns = due_ns = self._start_ns + round(index * self._interval_ns)
        if due_ns <= now_ns and index < self.count:
            self._catch_up(batch, now_ns)
        return batch

    def _catch_up(self, batch: list[Event], now_ns: int) -> None:
        """Add the chunks that are due already (the stream is behind), up to the cap."""
        encode, event = self._encode, self._event
        start_ns, interval_ns = self._start_ns, self._interval_ns
        index, due_ns, end, cap = self.index, self.due_ns, self.count, self._cap
        while len(batch) < cap and index < end and due_ns <= now_ns:
            index += 1
            batch.append(event(encode(index, due_ns)))
            due_ns = start_ns + round(index * interval_ns)
        self.index, self.due_ns = index, due_ns


class _Pushed:
    """What the feeds here share: `run`, which starts the feed and waits for its end,
    `pause` and `resume`, and `_finish`. A subclass defines `_start`, the first step, taken
    within `run`, and `_step`, which the pacer calls through `_due`."""

    __slots__ = ("_done", "_owed", "_paused", "_ran", "_sink")

    def __init__(self) -> None:
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None
        self._ran = False
        self._paused = False
        self._owed = False
        """A step fell due while paused: `resume` takes it."""

    def pause(self) -> None:
        """Take no step until `resume`; see `airlane.backends.base.Feed.pause`."""
        self._paused = True

    def resume(self) -> None:
        """Take the step that fell due meanwhile, if one did; then on as filed."""
        self._paused = False
        if self._owed:
            self._owed = False
            self._step()

    def _due(self) -> None:
        """The pacer's call-back: a step, unless paused (then `resume` takes it)."""
        if self._paused:
            self._owed = True
        else:
            self._step()

    def _step(self) -> None:
        raise NotImplementedError

    async def run(self, sink: Sink) -> None:
        """Feed every batch to ``sink``; see `airlane.backends.base.Feed.run`."""
        if self._ran:
            raise RuntimeError(f"{type(self).__name__}.run: a feed runs once")
        self._ran = True
        self._done = done = asyncio.get_running_loop().create_future()
        self._sink = sink
        self._start()
        try:
            await done
        finally:
            # Stopped, however: a step still filed does nothing. And nothing here keeps the
            # future, whose exception (if any) holds frames that hold this one: no cycle.
            self._sink = self._done = None
            del done

    def _start(self) -> None:
        raise NotImplementedError

    def _finish(self, error: Exception | None) -> None:
        self._sink = None
        done = self._done
        if done is not None and not done.done():
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)


class PacedFeed(_Pushed):
    """A `PacedSchedule` pushed into a sink by a `Pacer`'s timer, then ``tail`` (the usage
    and terminal events) with the last chunks.

    The first batch goes out within `run` itself, with no wait; each later one from the
    pacer's call-back, with no task step. The pacer keeps an entry for a stopped feed until
    its millisecond comes; the entry then does nothing.
    """

    __slots__ = ("_call_at", "_schedule", "_tail")

    def __init__(self, pacer: Pacer, tail: list[Event], **schedule: Unpack[ScheduleArgs]) -> None:
        super().__init__()
        self._call_at = pacer.call_at
        self._schedule = PacedSchedule(**schedule)
        self._tail = tail

    def _start(self) -> None:
        if self._schedule.finished:  # no chunks at all
            self._put_last([])
        else:
            self._step()

    def _step(self) -> None:
        sink = self._sink
        if sink is None:
            return
        schedule = self._schedule
        try:
            batch = schedule.take(time.monotonic_ns())
            if schedule.index < schedule.count:
                sink(batch)
                self._call_at(schedule.due_ns, self._due)
                return
        except Exception as exc:  # the sink refused (the stream ended): stop, and say why
            self._finish(exc)
            return
        self._put_last(batch)

    def _put_last(self, batch: list[Event]) -> None:
        # The end goes with the last chunks: one append and one write fewer.
        assert self._sink is not None
        try:
            self._sink(batch + self._tail)
        except Exception as exc:
            self._finish(exc)
            return
        self._finish(None)


class TimedFeed(_Pushed):
    """Events that each come with their own due time (``(due_ns, event)`` pairs, in order,
    on CLOCK_MONOTONIC), pushed into a sink by a `Pacer`: each step hands over every event
    already due (at most ``cap``) and files the next step for the next one's time. The
    synthetic backend's text streams (`airlane.backends.synthetic.SyntheticScript`), fed.
    """

    __slots__ = ("_call_at", "_cap", "_items", "_next")

    def __init__(self, pacer: Pacer, items: Iterator[tuple[int, Event]], cap: int) -> None:
        super().__init__()
        self._call_at = pacer.call_at
        self._items = items
        self._cap = max(1, cap)
        self._next: tuple[int, Event] | None = None

    def _start(self) -> None:
        try:
            self._next = next(self._items, None)
        except Exception as exc:
            self._finish(exc)
            return
        if self._next is None:
            self._finish(None)
        elif self._next[0] <= time.monotonic_ns():
            self._step()
        else:
            self._call_at(self._next[0], self._due)

    def _step(self) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            now_ns, items, cap = time.monotonic_ns(), self._items, self._cap
            item = self._next
            batch: list[Event] = []
            while item is not None and item[0] <= now_ns and len(batch) < cap:
                batch.append(item[1])
                item = next(items, None)
            self._next = item
            if batch:
                sink(batch)
            if item is None:
                self._finish(None)
            else:
                self._call_at(item[0], self._due)
        except Exception as exc:  # the sink refused (the stream ended): stop, and say why
            self._finish(exc)
