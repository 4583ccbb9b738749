"""`Admission`: new streams' set-up waits while an event loop's timed work is due.

Setting up a stream costs a gateway about 200 us of Python (parsing, routing, the hub, the
first write), and clients that connect together arrive together: a load client opening 500
streams gets them all read in one loop turn, and the loop then runs their 500 set-ups back to
back, 50-100 ms in which no timer fires. Every stream already running waits that long for its
next chunk, so one burst of new connections sets the delivery lag of all the others (a paced
run's first 100 ms held its lag p99; see docs/performance-journal.md, "Connection storms").

An `Admission` per event loop lets a request's set-up start at once unless timed work is due,
that is unless a *deadline source* registered for the loop (the paced producers' `Pacer`)
has a deadline that has passed and not yet been served. Then the request waits, in arrival
order, for a release that runs from a loop timer: after the due timers of the next loop turn,
so the work that is due goes first. Each release lets a batch of waiting set-ups go, sized so
that they take about `SLICE_S` together, or a share of the time since the release before
(`AdmissionConfig.share`, half by default) when that is more: the admission measures how
far apart the released set-ups start (they run one after the other) and divides. Every loop
turn admits at least `MIN_BATCH`. The share is for a gateway past what its core can do on
time, whose loop turns grow to tens of milliseconds: a slice per turn would then give new
streams a few per cent of the core, start them ever more slowly while the running ones are
late anyway, and refuse them once they had waited too long (measured: of 1,000 paced streams
opened at once, up to 14 % refused after waiting 5 s); a share keeps them starting at a known
rate. A loop without deadline sources (no paced stream) admits every request at once: bursts
of new streams then start as fast as before, which is what their time to first chunk needs.

The wait is bounded (`AdmissionConfig`): a gateway with more due work than its core can do
(paced streams past its scale) would otherwise hold new set-ups for seconds, ever longer as
they pile up. A request still waiting after ``max_wait_s`` is refused with `Overloaded`, and
one that arrives while ``max_waiting`` wait already is refused at once; the transports answer
it as "overloaded, retry later" (HTTP 503 with ``Retry-After``, WebSocket close 1013, AIRC
``ERROR overloaded``, gRPC ``UNAVAILABLE``), so that a client or balancer can go elsewhere
instead of waiting on a gateway that cannot serve it soon.

Transports call `admit` first thing for each request or stream (the HTTP app for every
request, AIRC for each GEN_REQ, gRPC for each unary ``Generate``; not a gRPC ``Session``'s
generate, whose requests are handled in order); producers that keep deadlines
(`airlane.backends.pacing.Pacer`) register with `register`. The module imports asyncio and the
standard library only, so either side can use it.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
import weakref
from dataclasses import dataclass
from typing import Protocol

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "MAX_BATCH",
    "MIN_BATCH",
    "SHARE",
    "SLICE_S",
    "Admission",
    "AdmissionConfig",
    "DeadlineSource",
    "Overloaded",
]

SLICE_S = 0.001
"""How long one loop turn's admitted set-ups should take, about (the batch adapts to it)."""
SHARE = 0.5
"""The least share of a busy loop's time that waiting set-ups get, by default
(`AdmissionConfig.share`): a release lets go set-ups worth this much of the time since the
release before, when that is more than `SLICE_S`. Half rather than a quarter: with 500 or
1,000 paced streams opened at once on a saturated core, time to first chunk p99 fell by
29-62 % and the running streams' lag p99 stayed within the noise (docs/http-api.md has the
measurements)."""
MIN_BATCH = 2
"""Set-ups released by one release at least: two, so that their cost can be measured."""
MAX_BATCH = 256
"""Set-ups released by one release at most."""
FIRST_BATCH = 8
"""The batch of a loop's first release, before any turn has been measured."""

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """How long and how many new streams' set-ups may wait (``[admission]`` in the TOML file)."""

    max_wait_s: float = 5.0
    """A request not admitted after waiting this long is refused (`Overloaded`)."""
    max_waiting: int = 10_000
    """Requests that may wait at once; one more is refused at once (0: never wait, refuse
    every request that would)."""
    retry_after_s: int = 1
    """What a refusal tells the client to wait before it tries again (HTTP ``Retry-After``)."""
    share: float = SHARE
    """The least share of a busy loop's time that waiting set-ups get (more than 0, at most
    1): more starts new streams sooner on a gateway past its scale, and leaves the streams
    already running less of the core."""

    def __post_init__(self) -> None:
        if not (self.max_wait_s > 0 and math.isfinite(self.max_wait_s)):
            raise ValueError("admission.max_wait_s must be a positive number of seconds")
        if self.max_waiting < 0:
            raise ValueError("admission.max_waiting must be 0 or more")
        if self.retry_after_s < 0:
            raise ValueError("admission.retry_after_s must be 0 or more")
        if not 0 < self.share <= 1:  # NaN fails this too
            raise ValueError("admission.share must be more than 0 and at most 1")


class Overloaded(AirlaneError):
    """A new stream was refused: its set-up waited too long, or too many waited already;
    ``retry_after_s`` is the configured hint."""

    code = ErrorCode.OVERLOADED

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class DeadlineSource(Protocol):
    """Something that keeps deadlines on a loop: a paced producer's pacer."""

    def overdue(self, now_ns: int) -> bool:
        """True if a deadline at or before ``now_ns`` (CLOCK_MONOTONIC) is still unserved."""
        ...  # pragma: no cover - a protocol


class Admission:
    """The admission of new streams on one event loop; get it with `for_loop`.

    Holds no reference to its loop (the loop's registry is weak; while requests wait, its one
    loop timer does), and only weak references to its deadline sources. A waiting request is
    one future in a deque of at most ``config.max_waiting``, each for at most
    ``config.max_wait_s``; one loop timer serves them all.
    """

    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        """The bounds on waiting; `configure` replaces them."""
        self._sources: weakref.WeakSet[DeadlineSource] = weakref.WeakSet()
        # (when it began to wait, on the loop's clock; its future), in arrival order: the
        # oldest waiters are always at the front, which is what the wait bound checks.
        self._waiting: collections.deque[tuple[float, asyncio.Future[None]]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._batch = FIRST_BATCH
        # When the first and the last set-up of the latest release started, and how many did.
        self._first_start_ns = self._last_start_ns = 0
        self._started = 0
        # When the latest release ran, while requests wait (0 once none is left): the time
        # from one release to the next is a loop turn, set-ups included.
        self._released_ns = 0
        self.deferred = 0
        """Requests that have had to wait, since the loop started (for tests and metrics)."""
        self.refused = 0
        """Requests refused with `Overloaded`, since the loop started."""

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop | None = None) -> Admission:
        """The admission of ``loop`` (default: the running loop), made on first use."""
        if loop is None:
            loop = asyncio.get_running_loop()
        admission = _BY_LOOP.get(loop)
        if admission is None:
            admission = _BY_LOOP[loop] = cls()
        return admission

    def configure(self, config: AdmissionConfig) -> None:
        """Apply new bounds; requests already waiting keep their place."""
        self.config = config

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
        requests wait already (first come, first admitted). Raises `Overloaded` when
        ``config.max_waiting`` wait already, or once this request has waited
        ``config.max_wait_s`` without its turn coming."""
        if not self._waiting and not self.due():
            return
        if len(self._waiting) >= self.config.max_waiting:
            self.refused += 1
            raise self._overloaded(f"{len(self._waiting)} new streams wait to be set up already")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.append((loop.time(), waiter))
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

    def _fit_batch(self, turn_s: float) -> None:
        started, self._started = self._started, 0
        if started >= 2:
            each_s = (self._last_start_ns - self._first_start_ns) / (started - 1) / 1e9
            budget_s = max(SLICE_S, self.config.share * turn_s)
            fitted = int(budget_s / each_s) if each_s > 0 else MAX_BATCH
            self._batch = max(MIN_BATCH, min(fitted, 2 * self._batch, MAX_BATCH))

    def _release(self) -> None:
        self._timer = None
        now_ns = time.monotonic_ns()
        turn_s = (now_ns - self._released_ns) / 1e9 if self._released_ns else 0.0
        self._fit_batch(turn_s)
        released = 0
        waiting = self._waiting
        while waiting and released < self._batch:
            waiter = waiting.popleft()[1]
            if not waiter.done():
                waiter.set_result(None)
                released += 1
        if waiting:
            loop = asyncio.get_running_loop()
            self._refuse_expired(loop.time())
            if waiting:
                self._released_ns = now_ns
                self._arm(loop)
                return
        self._released_ns = 0  # the next wait starts afresh, not from this release

    def _refuse_expired(self, now: float) -> None:
        """Refuse the waiters (the oldest, at the front) that have waited past the bound."""
        waiting, max_wait_s = self._waiting, self.config.max_wait_s
        while waiting and now - waiting[0][0] >= max_wait_s:
            waiter = waiting.popleft()[1]
            if not waiter.done():
                self.refused += 1
                waiter.set_exception(self._overloaded(f"waited {max_wait_s:g} s to be set up"))

    def _overloaded(self, why: str) -> Overloaded:
        retry_after_s = self.config.retry_after_s
        return Overloaded(
            f"the gateway is overloaded: {why}; retry in {retry_after_s} s or elsewhere",
            retry_after_s,
        )
