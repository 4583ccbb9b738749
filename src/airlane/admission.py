"""`Admission`: new streams' set-up waits while an event loop's timed work is due.

Setting up a stream costs a gateway about 200 us of Python (parsing, routing, the hub, the
first write), and clients that connect together arrive together: a load client opening 500
streams gets them all read in one loop turn, and the loop then runs their 500 set-ups back to
back, 50-100 ms in which no timer fires. Every stream already running waits that long for its
next chunk, so one burst of new connections sets the delivery lag of all the others (a paced
run's first 100 ms held its lag p99; see docs/performance.md).

An `Admission` per event loop lets a request's set-up start at once unless timed work is due,
that is unless a *deadline source* registered for the loop (the paced producers' `Pacer`)
has a deadline that has passed and not yet been served. Then the request waits, in arrival
order, for a release that runs from a loop timer: after the due timers of the next loop turn,
so the work that is due goes first. Each release lets a batch of waiting set-ups go, sized so
that they take about `SLICE_S` together: the admission measures how far apart the released
set-ups start (they run one after the other) and divides. Set-ups are never refused, only
ordered: every loop turn admits at least `MIN_BATCH`. A loop without deadline sources (no
paced stream) admits every request at once: bursts of new streams then start as fast as
before, which is what their time to first chunk needs.

Transports call `admit` first thing for each request or stream (the HTTP app for every
request, AIRC for each GEN_REQ, gRPC for each unary ``Generate``; not a gRPC ``Session``'s
generate, whose requests are handled in order); producers that keep deadlines
(`airlane.backends.pacing.Pacer`) register with `register`. The module imports asyncio and the
standard library only, so either side can use it.
"""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from typing import Protocol

__all__ = ["MAX_BATCH", "MIN_BATCH", "SLICE_S", "Admission", "DeadlineSource"]

SLICE_S = 0.001
"""How long one loop turn's admitted set-ups should take, about (the batch adapts to it)."""
MIN_BATCH = 2
"""Set-ups released by one release at least: two, so that their cost can be measured."""
MAX_BATCH = 256
"""Set-ups released by one release at most."""
FIRST_BATCH = 8
"""The batch of a loop's first release, before any turn has been measured."""

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = (
    weakref.WeakKeyDictionary()
)


class DeadlineSource(Protocol):
    """Something that keeps deadlines on a loop: a paced producer's pacer."""

    def overdue(self, now_ns: int) -> bool:
        """True if a deadline at or before ``now_ns`` (CLOCK_MONOTONIC) is still unserved."""
        ...  # pragma: no cover - a protocol


class Admission:
    """The admission of new streams on one event loop; get it with `for_loop`.

    Holds no reference to its loop (the loop's registry is weak; while requests wait, its one
    loop timer does), and only weak references to its deadline sources. A waiting request is
    one future in a deque, and each belongs to an open connection, so the process's
    descriptor limit bounds them; one loop timer serves them all.
    """

    def __init__(self) -> None:
        self._sources: weakref.WeakSet[DeadlineSource] = weakref.WeakSet()
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._batch = FIRST_BATCH
        # When the first and the last set-up of the latest release started, and how many did.
        self._first_start_ns = self._last_start_ns = 0
        self._started = 0
        self.deferred = 0
        """Requests that have had to wait, since the loop started (for tests and metrics)."""

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop | None = None) -> Admission:
        """The admission of ``loop`` (default: the running loop), made on first use."""
        if loop is None:
            loop = asyncio.get_running_loop()
        admission = _BY_LOOP.get(loop)
        if admission is None:
            admission = _BY_LOOP[loop] = cls()
        return admission

    @property
    def waiting(self) -> int:
        """Requests waiting to be admitted (cancelled ones included until their turn)."""
        return len(self._waiting)

    @property
    def batch(self) -> int:
        """How many waiting requests the next release lets go."""
        return self._batch

    def register(self, source: DeadlineSource) -> None:
        """Make new streams wait while ``source`` has work due (held weakly)."""
        self._sources.add(source)

    def due(self, now_ns: int | None = None) -> bool:
        """True if a registered source has a deadline at or before ``now_ns`` unserved."""
        if not self._sources:
            return False
        if now_ns is None:
            now_ns = time.monotonic_ns()
        return any(source.overdue(now_ns) for source in self._sources)

    async def admit(self) -> None:
        """Return when a new stream may be set up: at once unless timed work is due or other
        requests wait already (first come, first admitted)."""
        if not self._waiting and not self.due():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.append(waiter)
        self.deferred += 1
        if self._timer is None:
            self._arm(loop)
        await waiter  # a cancelled waiter stays in the deque until a release skips it
        # Released set-ups run one after another: the gaps between their starts are their cost.
        now_ns = time.monotonic_ns()
        if not self._started:
            self._first_start_ns = now_ns
        self._last_start_ns = now_ns
        self._started += 1

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        # A timer due now fires in the next loop turn's timer phase, after the timers that
        # were due before it (the pacer's): the due work goes first, then the set-ups.
        self._timer = loop.call_later(0, self._release)

    def _fit_batch(self) -> None:
        started, self._started = self._started, 0
        if started >= 2:
            each_s = (self._last_start_ns - self._first_start_ns) / (started - 1) / 1e9
            fitted = int(SLICE_S / each_s) if each_s > 0 else MAX_BATCH
            self._batch = max(MIN_BATCH, min(fitted, 2 * self._batch, MAX_BATCH))

    def _release(self) -> None:
        self._timer = None
        self._fit_batch()
        released = 0
        waiting = self._waiting
        while waiting and released < self._batch:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                released += 1
        if waiting:
            self._arm(asyncio.get_running_loop())
