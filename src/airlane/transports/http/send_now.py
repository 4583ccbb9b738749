"""`send_now`: run an ASGI ``send`` without a task switch when the server does not make it wait.

An ASGI server's ``send`` is a coroutine, but it only suspends to apply flow control (the
socket's buffer is full). Driving the coroutine by hand completes it in place in the common
case; when it does suspend, the rest is handed to a task that drives it exactly as an asyncio
``Task`` would (awaiting the future it yielded, passing cancellation in), and the caller
waits for that task before it sends anything else, so the order of writes is kept.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableMapping
from typing import Any, cast

__all__ = ["send_now"]


def send_now(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]], message: MutableMapping[str, Any]
) -> asyncio.Task[None] | None:
    """Send ``message``; None if that completed here, else the task that completes it."""
    coro = cast(Coroutine[Any, Any, None], send(message))
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_finish(coro, yielded))


@types.coroutine
def _yield_to_loop() -> Generator[None, None, None]:
    yield


async def _finish(coro: Coroutine[Any, Any, Any], yielded: object) -> None:
    """Drive ``coro``, which suspended on ``yielded``, to its end (what Task.__step does)."""
    while True:
        try:
            if isinstance(yielded, asyncio.Future):
                # The protocol of a future awaited by a task: the task clears the flag, waits
                # for it to be done, then resumes the coroutine, which reads the result.
                yielded._asyncio_future_blocking = False
                await asyncio.wait((yielded,))
            else:  # a bare yield: run again on the next loop turn
                await _yield_to_loop()
        except asyncio.CancelledError as exc:
            if isinstance(yielded, asyncio.Future):
                yielded.cancel()
            try:
                yielded = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            yielded = coro.send(None)
        except StopIteration:
            return
