"""`run_held_back`: a pushed producer paused while its store is behind, and never left paused:
a store that fails ends the run with the failure, a cancel ends it at once. (The end-to-end
case, a broker stopped under a fast producer, is in test_feeds.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from airlane.backends.synthetic import SyntheticBackend
from airlane.core import Event, StreamTooLarge
from airlane.gateway.feeding import run_held_back
from tests.gateway.test_feeds import paced


class BehindStore:
    """An appender and a settle whose store is behind from the first batch, then fails with
    ``failure`` (or, with None, stays behind until told)."""

    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure
        self.batches = 0
        self.settling = asyncio.Event()

    def append(self, events: Sequence[Event]) -> int:
        if self.batches and self.failure is not None:
            raise self.failure  # the store's failure, met by the next batch
        self.batches += 1
        return 10_000  # far behind: the feed pauses

    async def settle(self, backlog: int) -> None:
        self.settling.set()
        if self.failure is not None:
            raise self.failure
        await asyncio.Event().wait()  # behind for good


async def test_a_store_that_fails_while_the_feed_is_paused_ends_the_run_with_its_failure():
    feed = SyntheticBackend().feed(paced(100, interval_ms=1))
    assert feed is not None
    store = BehindStore(StreamTooLarge("the stream reached its text limit"))
    started = time.monotonic()
    with pytest.raises(StreamTooLarge, match="text limit"):
        await asyncio.wait_for(run_held_back(feed, store.append, store.settle, 8), 10)
    # At once, not at the timeout (a feed left paused would end only there).
    assert time.monotonic() - started < 2
    assert store.batches == 1  # paused after the first, resumed only to meet the failure


async def test_cancelling_a_paused_run_stops_it_and_its_releaser():
    feed = SyntheticBackend().feed(paced(100, interval_ms=1))
    assert feed is not None
    store = BehindStore(None)
    running = asyncio.create_task(run_held_back(feed, store.append, store.settle, 8))
    await asyncio.wait_for(store.settling.wait(), 5)
    await asyncio.sleep(0.05)  # paused: steps fall due and wait
    assert store.batches == 1 and not running.done()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    releasers = [t for t in asyncio.all_tasks() if t.get_name() == "airlane-feed-release"]
    assert releasers == []
