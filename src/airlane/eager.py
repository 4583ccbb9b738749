"""Running a coroutine's first steps in place, before any task switch.

`start_eagerly` runs a coroutine until it first waits, in the caller's own loop turn, and
hands the rest to a task only if it does wait; `drive` is that task's body, which resumes the
coroutine exactly as an asyncio ``Task`` would (it waits for the future the coroutine yielded,
passes cancellation in). Python 3.12's eager task factory does this for every task; here it
is used where it matters:

- the gateway starts a producer this way, so that a stream's first batch is made while its
  request is being set up rather than after every other request of the same loop turn, and
  its pacing clock starts then too (`airlane.gateway.Gateway.generate`);
- the SSE pump drives an ASGI ``send`` this way (`airlane.transports.http.send_now`).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["drive", "start_eagerly", "yield_to_loop"]


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
    driver = drive(coro, yielded)
    # Step the driver into its first (bare) yield before it becomes a task: a cancellation
    # that arrives before the task's first step is then thrown in where the driver handles it
    # (passes it to ``coro``), not into a coroutine that never started, which would leave
    # ``coro`` to be closed by the garbage collector instead of cancelled.
    driver.send(None)
    return asyncio.get_running_loop().create_task(driver, name=name)


@types.coroutine
def yield_to_loop() -> Generator[None, None, None]:
    """Let the other tasks run once, as ``asyncio.sleep(0)`` does (a bare yield makes the task
    reschedule itself), without sleep's own coroutine frame: for loops that yield per batch."""
    yield


async def drive(coro: Coroutine[Any, Any, Any], yielded: object) -> None:
    """Resume ``coro``, which has suspended on ``yielded``, to its end (what Task.__step
    does): await the future it yielded, or give the loop one turn for a bare yield, then
    resume it; it reads the future's outcome itself. Starts with a bare yield of its own (see
    `start_eagerly`), which also serves as the loop turn a bare ``yielded`` asks for."""
    first = True
    while True:
        if first or not isinstance(yielded, asyncio.Future):
            try:
                await yield_to_loop()
            except asyncio.CancelledError as exc:
                # Cancelled while not waiting on the coroutine's future: pass it in.
                if isinstance(yielded, asyncio.Future):
                    yielded.cancel()
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
                continue
            first = False
        if isinstance(yielded, asyncio.Future):
            # The protocol of a future awaited by a task: clear the flag, wait for the future
            # (a cancellation of this task cancels it, as a task's would), then resume the
            # coroutine, whose own await reads the result or raises the exception.
            yielded._asyncio_future_blocking = False
            if not yielded.done():
                try:
                    await yielded
                except asyncio.CancelledError as exc:
                    if not yielded.cancelled():  # this task was cancelled, not the future
                        try:
                            yielded = coro.throw(exc)
                        except StopIteration:
                            return
                        continue
                except Exception:  # the coroutine reads it from the future itself
                    pass
        try:
            yielded = coro.send(None)
        except StopIteration:
            return
