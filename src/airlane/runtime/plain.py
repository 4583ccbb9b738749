"""`plain_context`: one empty `contextvars.Context` per thread, for the loop call-backs that
read no context variable.

asyncio copies the current context for every call-back it files without one (``call_soon``,
``call_at``, ``Future.add_done_callback``): one more tracked object per timer and per done
call-back, kept for as long as the call-back waits. An idle SSE reader held four (its ping
timer, its pump's done call-back, its task's two), and at 100,000 idle connections the
garbage collector's full passes walk every one. Call-backs that read no context variable
(sending a heartbeat, waking a task, dropping a finished task from a set) are filed with
this context instead, which costs nothing per call-back.

Only call-backs that never set a context variable may run in it: what one sets, every other
would see. There is one per thread, since two threads cannot be in one context at once.
"""

from __future__ import annotations

import contextvars
import threading

__all__ = ["plain_context"]

_local = threading.local()


def plain_context() -> contextvars.Context:
    """This thread's empty context for call-backs that read and set no context variable."""
    context: contextvars.Context | None = getattr(_local, "context", None)
    if context is None:
        context = _local.context = contextvars.Context()
    return context
