"""A pushed producer (`airlane.backends.base.Feed`) run into a hub's appender, held back
while the store behind the hub is behind.

A feed hands over its batches from loop call-backs, with no task that could wait; so holding
it back is a switch. Past ``backlog`` events waiting to be stored, the sink pauses the feed
and starts a task of the run's own that waits until at most half that many wait, then resumes
it. A store that failed wakes that task too: the feed's next batch meets the failure (the
appender raises it), which ends the run with it. Without this, a broker that stalls for
a few seconds would fill the hub's bounded queue and end the generation with an error, where
a producer that awaits its appends is merely slowed down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from airlane.backends.base import Feed
from airlane.core import Event

__all__ = ["run_held_back"]


async def run_held_back(
    feed: Feed,
    appender: Callable[[Sequence[Event]], int],
    settle: Callable[[int], Awaitable[None]],
    backlog: int,
) -> None:
    """Run ``feed`` into ``appender`` (`airlane.hub.Hub.appender`), pausing it while more
    than ``backlog`` of its events wait to be stored; ``settle(n)`` returns once at most
    ``n`` wait (`airlane.hub.Hub.settle`). Raises what `Feed.run` raises."""
    releaser: asyncio.Task[None] | None = None
    """The task that resumes the feed, while it is paused (made then: most runs need none)."""

    def sink(events: Sequence[Event]) -> None:
        nonlocal releaser
        if appender(events) > backlog and releaser is None:
            feed.pause()
            releaser = asyncio.create_task(release(), name="airlane-feed-release")

    async def release() -> None:
        nonlocal releaser
        try:
            await settle(backlog // 2)
        except asyncio.CancelledError:
            raise
        except Exception:  # a failed store (HubError, StreamTooLarge): the appender raises
            pass  # it at the feed's next batch, which ends the run with it
        releaser = None  # (before resuming: the batches it hands over may pause it again)
        feed.resume()

    try:
        await feed.run(sink)
    finally:
        if releaser is not None:
            releaser.cancel()
            # Waited for, not awaited: neither its end nor a cancel of this task is lost.
            await asyncio.wait([releaser])
