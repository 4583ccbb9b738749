"""`send_now`: run an ASGI ``send`` without a task switch when the server does not make it wait.

An ASGI server's ``send`` is a coroutine, but it only suspends to apply flow control (the
socket's buffer is full). Driving the coroutine by hand (`airlane.runtime.eager.start_eagerly`)
completes it in place in the common case; when it does suspend, the rest runs in a task, and
the caller waits for that task before it sends anything else, so the order of writes is kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, cast

from airlane.runtime.eager import start_eagerly

__all__ = ["send_now", "send_went_through"]


def send_now(
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]], message: MutableMapping[str, Any]
) -> asyncio.Task[None] | None:
    """Send ``message``; None if that completed here, else the task that completes it."""
    return start_eagerly(cast(Coroutine[Any, Any, None], send(message)))


def send_went_through(task: asyncio.Task[None], done: asyncio.Future[Any]) -> bool:
    """For a send that `send_now` finished in ``task``: True if it completed and the run whose
    outcome is ``done`` goes on; False if ``done`` is settled already, or once the send's
    cancellation or error has been passed on to it."""
    if done.done():
        return False
    if task.cancelled():
        done.cancel()
        return False
    if (exc := task.exception()) is not None:
        done.set_exception(exc)
        return False
    return True
