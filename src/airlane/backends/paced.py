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
from collections.abc import Callable
from typing import TypedDict, Unpack

from airlane.backends.base import Sink
from airlane.backends.pacing import Pacer
from airlane.core.events import Event

__all__ = ["PacedFeed", "PacedSchedule", "ScheduleArgs"]


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
        "_count",
        "_encode",
        "_event",
        "_interval_ns",
        "_start_ns",
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
        self._count = count
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
        return self.index >= self._count

    def take(self, now_ns: int) -> list[Event]:
        """The next chunk, and after it every chunk already due at ``now_ns`` (at most the
        cap); call only while not `finished`."""
        # The common case, a stream on time, first and in few steps: this runs per chunk.
        index = self.index + 1
        batch = [self._event(self._encode(index, self.due_ns))]
        self.index = index
        self.due_ns = due_ns = self._start_ns + round(index * self._interval_ns)
        if due_ns <= now_ns and index < self._count:
            self._catch_up(batch, now_ns)
        return batch

    def _catch_up(self, batch: list[Event], now_ns: int) -> None:
        """Add the chunks that are due already (the stream is behind), up to the cap."""
        encode, event = self._encode, self._event
        start_ns, interval_ns = self._start_ns, self._interval_ns
        index, due_ns, end, cap = self.index, self.due_ns, self._count, self._cap
        while len(batch) < cap and index < end and due_ns <= now_ns:
            index += 1
            batch.append(event(encode(index, due_ns)))
            due_ns = start_ns + round(index * interval_ns)
        self.index, self.due_ns = index, due_ns


class PacedFeed(PacedSchedule):
    """A `PacedSchedule` pushed into a sink by a `Pacer`'s timer, then ``tail`` (the usage
    and terminal events) with the last chunks.

    The first batch goes out within `run` itself, with no wait; each later one from the
    pacer's call-back, with no task step. The pacer keeps an entry for a stopped feed until
    its millisecond comes; the entry then does nothing.
    """

    __slots__ = ("_call_at", "_done", "_ran", "_sink", "_tail")

    def __init__(self, pacer: Pacer, tail: list[Event], **schedule: Unpack[ScheduleArgs]) -> None:
        super().__init__(**schedule)
        self._call_at = pacer.call_at
        self._tail = tail
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None
        self._ran = False

    async def run(self, sink: Sink) -> None:
        """Feed every batch to ``sink``; see `airlane.backends.base.Feed.run`."""
        if self._ran:
            raise RuntimeError("PacedFeed.run: a feed runs once")
        self._ran = True
        if self.finished:  # no chunks at all
            sink(self._tail)
            return
        self._done = done = asyncio.get_running_loop().create_future()
        self._sink = sink
        self._step()
        try:
            await done
        finally:
            # Stopped, however: a step still filed does nothing. And nothing here keeps the
            # future, whose exception (if any) holds frames that hold this one: no cycle.
            self._sink = self._done = None
            del done

    def _step(self) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            batch = self.take(time.monotonic_ns())
            if self.index < self._count:
                sink(batch)
                self._call_at(self.due_ns, self._step)
                return
            # The end goes with the last chunks: one append and one write fewer.
            batch += self._tail
            sink(batch)
            self._finish(None)
        except Exception as exc:  # the sink refused (the stream ended): stop, and say why
            self._finish(exc)

    def _finish(self, error: Exception | None) -> None:
        self._sink = None
        done = self._done
        if done is not None and not done.done():
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)
