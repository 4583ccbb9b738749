"""`plain_context`: one empty context per thread, for call-backs that read none."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from airlane.runtime.plain import plain_context

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def test_one_empty_context_per_thread() -> None:
    mine = plain_context()
    assert plain_context() is mine and len(mine) == 0
    theirs: list[contextvars.Context] = []
    thread = threading.Thread(target=lambda: theirs.append(plain_context()))
    thread.start()
    thread.join()
    assert theirs[0] is not mine


async def test_a_call_back_filed_with_it_sees_no_variable_of_the_caller() -> None:
    """What a request sets stays its own: a timer or done call-back filed with the plain
    context sees the default, and sets nothing the next one would see."""
    MARK.set("request")
    seen: list[str] = []
    loop = asyncio.get_running_loop()
    fired = loop.create_future()
    loop.call_later(
        0, lambda: (seen.append(MARK.get()), fired.set_result(None)), context=plain_context()
    )
    await fired
    done = loop.create_future()
    done.add_done_callback(lambda _: seen.append(MARK.get()), context=plain_context())
    done.set_result(None)
    await asyncio.sleep(0)
    assert seen == ["unset", "unset"]
    assert MARK.get() == "request" and len(plain_context()) == 0
