"""`Pacer`: one timer per millisecond of due times for every paced producer of an event loop.

A paced stream sleeps until each event's due time. With a timer per sleep, N streams cost N
timer handles and N heap operations in the loop and, since the loop's clock has millisecond
resolution, often a second sleep for the sub-millisecond remainder. The pacer files each
sleeper under the whole millisecond its deadline rounds up to and arms one loop timer per
millisecond that has sleepers: when it fires, every sleeper filed there is due (on
`time.monotonic_ns`, never early) and is woken at once. A sleeper costs a future and a list
append; no heap of tuples, no re-arming. A call-back filed with `Pacer.call_at` costs only the
append: it is called where a sleeper would be woken (a `airlane.backends.base.Feed`'s next
step), with no task to resume.

A pacer is its loop's deadline source for `airlane.runtime.admission`: while one of its milliseconds
is due and not yet served, new streams' set-up waits, so that a burst of new connections does
not hold the chunks of the streams already running.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from airlane.runtime.admission import Admission
from airlane.runtime.eager import yield_to_loop

__all__ = ["Pacer"]


class Pacer:
    """Wakes sleepers at their deadlines (CLOCK_MONOTONIC ns), one loop timer per millisecond.

    Sleepers are woken in millisecond order, and within a millisecond first come, first
    woken. A pacer belongs to the loop it was made on; its owner (a backend) makes a new one
    if it finds itself on another loop (`for_loop`). A sleeper whose task is cancelled leaves
    its entry behind until its millisecond comes, so the pacer holds at most one entry per
    sleep begun within the longest pending deadline.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # What to call (a sleeper's wake-up or a call-back) by the whole millisecond (of
        # CLOCK_MONOTONIC) its deadline rounds up to; a key is here exactly while its loop
        # timer is armed.
        self._due: dict[int, list[Callable[[], object]]] = {}
        Admission.for_loop(loop).register(self)

    @classmethod
    def for_loop(cls, pacer: Pacer | None) -> Pacer:
        """``pacer`` if it belongs to the running loop, else a new pacer for it."""
        loop = asyncio.get_running_loop()
        return pacer if pacer is not None and pacer._loop is loop else cls(loop)

    @property
    def sleepers(self) -> int:
        """Entries waiting, sleepers and call-backs (cancelled sleepers included until their
        millisecond comes)."""
        return sum(map(len, self._due.values()))

    def overdue(self, now_ns: int) -> bool:
        """True if sleepers filed under a millisecond at or before ``now_ns`` wait still
        (their timer has not fired yet): `airlane.runtime.admission`'s test for due work."""
        # A dozen or two keys (one per millisecond of the longest pending sleep): min is cheap.
        return bool(self._due) and min(self._due) * 1_000_000 <= now_ns

    async def sleep_until(self, deadline_ns: int) -> None:
        """Return once ``time.monotonic_ns()`` has reached ``deadline_ns``; a deadline already
        past still yields to the loop once, so a producer that is behind cannot starve the
        others."""
        if time.monotonic_ns() >= deadline_ns:
            await yield_to_loop()
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self.call_at(deadline_ns, functools.partial(_wake, waiter))
        await waiter

    def call_at(self, deadline_ns: int, callback: Callable[[], object]) -> None:
        """Call ``callback()`` once ``time.monotonic_ns()`` has reached ``deadline_ns``, from
        the pacer's timer; a deadline already past, on the loop's next turn. There is no
        handle to cancel it with: a call-back that may no longer be wanted checks that
        itself. It must not raise (what it raises goes to the loop's exception handler)."""
        due_ms = -(-deadline_ns // 1_000_000)
        due = self._due.get(due_ms)
        if due is None:
            self._due[due_ms] = [callback]
            self._arm(due_ms)
        else:
            due.append(callback)

    def _arm(self, due_ms: int) -> None:
        # The loop's clock (uvloop: libuv's) counts whole milliseconds of CLOCK_MONOTONIC, so a
        # timer set for a fraction of a millisecond would fire early, find nothing due and
        # re-arm, spinning until the deadline (measured: 17 fires per chunk at 100 paced
        # streams). Set for a whole millisecond it fires once (rarely twice), at most about a
        # millisecond late.
        self._loop.call_at(due_ms / 1e3, self._fire, due_ms)

    def _fire(self, due_ms: int) -> None:
        if time.monotonic_ns() < due_ms * 1_000_000:
            # The loop's timers may fire up to a millisecond early: never an early wake-up.
            self._arm(due_ms)
            return
        for callback in self._due.pop(due_ms):
            try:
                callback()
            except Exception as exc:  # one bad call-back must not cost the others their turn
                self._loop.call_exception_handler(
                    {"message": "pacer call-back failed", "exception": exc}
                )


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # a cancelled sleeper's entry
        waiter.set_result(None)
