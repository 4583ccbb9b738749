"""Running a coroutine's first steps in place, before any task switch.

`start_eagerly` runs a coroutine until it first waits, in the caller's own loop turn, and
hands the rest to a task only if it does wait. The task runs the coroutine itself, through a
thin wrapper (`_Started`) whose first step hands the task what the coroutine is waiting for,
so that the task waits for it exactly as if it had taken that first step; every later step is
the coroutine's own ``send``, with no extra frame per resumption (a Python driver coroutine,
the first version, cost 42 bytecodes per wake-up of a paced producer). Python 3.12's eager
task factory does this for every task; here it is used where it matters:

- the gateway starts a producer this way, so that a stream's first batch is made while its
  request is being set up rather than after every other request of the same loop turn, and
  its pacing clock starts then too (`airlane.gateway.Gateway.generate`);
- the SSE pump drives an ASGI ``send`` this way (`airlane.transports.http.send_now`).
"""

from __future__ import annotations

import asyncio
import collections.abc
import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["start_eagerly", "yield_to_loop"]


def start_eagerly(
    coro: Coroutine[Any, Any, None], *, name: str | None = None
) -> asyncio.Task[None] | None:
    """Run ``coro`` until it first waits; None if it finished, else the task finishing it.

    An exception raised before the first wait propagates to the caller.
    """
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_Started(coro, yielded), name=name)


class _Started(collections.abc.Coroutine):  # type: ignore[type-arg]
    """``coro``, already suspended on ``yielded``, as a coroutine a task can run.

    A task's first step sends None: this returns ``yielded`` instead (a future the coroutine
    awaits, still flagged as blocking, or None for a bare yield), so the task waits for it,
    or gives the loop a turn, as it would have after taking that step itself. Everything
    after goes to ``coro``. A cancel before that first step cancels the future too, then
    reaches ``coro`` where it waits.
    """

    __slots__ = ("_coro", "_first", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, None], yielded: object) -> None:
        self._coro = coro
        self._yielded: object = yielded
        self._first = True

    def send(self, value: object) -> object:
        """The task's step: the pending wait first, then ``coro``'s."""
        if self._first:
            self._first = False
            return self._yielded
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> object:
        """Raise into ``coro`` (a cancel, typically)."""
        if self._first:
            self._first = False
            if isinstance(self._yielded, asyncio.Future):
                self._yielded.cancel()
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)
        finally:
            # When ``coro`` lets the exception out, its traceback holds this frame: without
            # this, the frame's arguments would hold the exception, a reference cycle.
            del typ, val, tb

    def close(self) -> None:
        """Close ``coro``."""
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        # Part of the coroutine protocol, but a `_Started` is only ever run by its task.
        raise TypeError("a started coroutine is run by the task start_eagerly made")


@types.coroutine
def yield_to_loop() -> Generator[None, None, None]:
    """Let the other tasks run once, as ``asyncio.sleep(0)`` does (a bare yield makes the task
    reschedule itself), without sleep's own coroutine frame: for loops that yield per batch."""
    yield
