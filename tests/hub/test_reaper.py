"""`Reaper`: discarded lists are freed a slice at a time from the loop, within its bounds; and
the memory hub frees forgotten streams through it, never while a reader still needs them."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from airlane.core import Event, Retention
from airlane.hub import MemoryHub, MemoryHubConfig
from airlane.hub.reaper import Reaper


class Marker:
    """Something a test can watch being freed (`Event` itself takes no weak references)."""


async def _until(predicate, timeout_s: float = 5.0) -> None:
    """Wait (bounded) until ``predicate()`` holds."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.002)


async def test_a_discarded_list_is_freed_later_in_slices_from_its_end():
    # One batch of 64 per step, steps far enough apart to look between them.
    reaper = Reaper(slice_s=0.0, period_s=0.2)
    items = [Marker() for _ in range(200)]
    first, last = weakref.ref(items[0]), weakref.ref(items[-1])
    reaper.discard(items, size=200)
    assert len(items) == 200 and reaper.pending_items == 200 and reaper.pending_bytes == 200
    await _until(lambda: len(items) < 200)
    assert len(items) == 136  # one step: the last 64
    gc.collect()
    assert last() is None and first() is not None
    await _until(lambda: not items)
    assert reaper.pending_items == 0 and reaper.pending_bytes == 0
    gc.collect()
    assert first() is None


async def test_lists_are_freed_in_the_order_they_were_discarded():
    reaper = Reaper(slice_s=0.0, period_s=0.1)  # one batch of 64 per step
    older, newer = [Marker() for _ in range(100)], [Marker() for _ in range(100)]
    reaper.discard(older, size=1)
    reaper.discard(newer, size=1)
    await _until(lambda: not older)
    assert len(newer) == 100  # untouched until the older list is gone
    await _until(lambda: not newer)
    assert reaper.pending_bytes == 0


async def test_a_step_frees_until_its_time_is_up():
    reaper = Reaper(slice_s=10.0)  # a generous slice: everything in the first step
    items = list(range(10_000))
    reaper.discard(items, size=10_000)
    await _until(lambda: not items)


async def test_past_the_bound_a_list_is_freed_at_once():
    reaper = Reaper(max_pending_bytes=1_000)
    held = [Marker() for _ in range(10)]
    reaper.discard(held, size=900)
    over = [Marker() for _ in range(10)]
    reaper.discard(over, size=200)
    assert over == [] and len(held) == 10  # freed at once; the first still waits
    assert reaper.pending_bytes == 900
    reaper.close()


def test_without_a_running_loop_a_list_is_freed_at_once():
    reaper = Reaper()
    items = [Marker()]
    reaper.discard(items, size=10)
    assert items == [] and reaper.pending_bytes == 0


async def test_close_frees_everything_pending_and_stops():
    reaper = Reaper(slice_s=0.0)
    lists = [[Marker() for _ in range(100)] for _ in range(3)]
    for items in lists:
        reaper.discard(items, size=100)
    reaper.close()
    assert all(items == [] for items in lists)
    assert reaper.pending_items == 0 and reaper.pending_bytes == 0
    await asyncio.sleep(0.005)  # no step left behind to fail on the emptied queue


async def test_an_empty_list_is_ignored():
    reaper = Reaper()
    reaper.discard([], size=0)
    assert reaper.pending_items == 0
    assert reaper._timer is None  # nothing scheduled


# -- the memory hub -------------------------------------------------------------------------


def _marked(marker: Marker) -> Event:
    return Event.status(marker=marker)


def _watched() -> tuple[Marker, weakref.ref[Marker]]:
    marker = Marker()
    return marker, weakref.ref(marker)


async def _until_freed(hub: MemoryHub, watch: weakref.ref[Marker]) -> None:
    """Wait until the hub's reaper has nothing left; then the watched marker is gone."""
    await _until(lambda: hub._reaper.pending_items == 0)
    gc.collect()
    assert watch() is None


@pytest.fixture
async def hub():
    hub = MemoryHub(MemoryHubConfig(tick_s=0.05, ended_ttl_s=0.1))
    await hub.start()
    yield hub
    await hub.aclose()


async def test_a_deleted_stream_is_handed_to_the_reaper_not_freed_in_the_delete(hub):
    await hub.create("s", retention=Retention(max_events=10_000))
    marker, watch = _watched()
    await hub.append_many("s", [_marked(marker)] + [Event.delta("x") for _ in range(2_000)])
    del marker
    await hub.delete("s")
    assert hub._reaper.pending_items >= 2_001  # the whole history, waiting
    gc.collect()
    assert watch() is not None
    await _until_freed(hub, watch)


async def test_a_reader_still_attached_gets_the_end_of_a_deleted_stream_then_it_is_freed(hub):
    await hub.create("s")
    marker, watch = _watched()
    reader = await hub.subscribe("s")
    await hub.append_many("s", [_marked(marker), Event.delta("a"), Event.delta("b")])
    del marker
    await hub.delete("s")
    assert hub._reaper.pending_items == 0  # not while someone reads it
    batch = reader.poll()
    assert [e.kind.value for e in batch] == ["status", "delta", "done"]
    assert batch[-1].data["finish_reason"] == "deleted"
    del batch
    await reader.aclose()  # the last reader gone: now it is freed
    await _until_freed(hub, watch)


async def test_an_expired_ended_stream_is_freed_through_the_reaper(hub):
    await hub.create("s")
    marker, watch = _watched()
    await hub.append_many("s", [_marked(marker), Event.done()])
    del marker
    await _until(lambda: hub.stats().streams == 0)  # ended_ttl_s=0.1, swept about once a second
    await _until_freed(hub, watch)


async def test_a_stream_recreated_under_a_deleted_ones_id_is_not_freed_with_it(hub):
    await hub.create("s")
    old_reader = await hub.subscribe("s")
    await hub.delete("s")
    await hub.create("s")
    await hub.append("s", Event.delta("new"))
    await old_reader.aclose()  # releases the old stream, not the new one
    reader = await hub.subscribe("s")
    assert [e.text for e in reader.poll()] == ["new"]
    await reader.aclose()
