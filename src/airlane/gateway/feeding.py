"""A pushed producer (`airlane.backends.base.Feed`) run into a hub's appender, held back
while the store behind the hub is behind.

A feed hands over its batches from loop call-backs, with no task that could wait; so holding
it back is a switch. Past ``backlog`` events waiting to be stored, the sink pauses the feed
and starts a task of the run's own that waits until the store has taken half of them, then
resumes it. A store that failed wakes that task too: the feed's next batch meets the failure
(the appender raises it), which ends the run with it. Without this, a broker that stalls for
a few seconds would fill the hub's bounded queue and end the generation with an error, where
a producer that awaits its appends is merely slowed down.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from airlane.backends.base import Feed
from airlane.core import Event
from airlane.hub import HubError

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
        with contextlib.suppress(HubError):  # raised to the feed by its next batch
            await settle(backlog // 2)
        releaser = None  # (before resuming: the batches it hands over may pause it again)
        feed.resume()

    try:
        await feed.run(sink)
    finally:
        if releaser is not None:
            releaser.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await releaser
