"""The consumer group handles a node holds open for HTTP and gRPC members: at most 256
(docs/eventlog.md, "Bounds"), the least recently used closed first."""

from __future__ import annotations

import pytest

from airlane.eventlog import InvalidRequest, MemoryEventLog
from airlane.eventlog.handles import MAX_GROUP_HANDLES, GroupHandles


async def test_a_node_holds_at_most_256_handles_and_closes_the_least_recently_used() -> None:
    log = MemoryEventLog()
    names = [(f"log{n // 60}", f"g{n}") for n in range(MAX_GROUP_HANDLES + 1)]  # 60 a log
    for name in {log_name for log_name, _ in names}:
        await log.create_log(name)
    handles = GroupHandles()
    assert handles.limit == MAX_GROUP_HANDLES == 256
    opened = [await handles.get(log, name, group, {}) for name, group in names[:-1]]
    # The first is used again (now the most recent); the second is the least recent.
    assert await handles.get(log, *names[0], {}) is opened[0]
    await handles.get(log, *names[-1], {})  # one more than the bound
    with pytest.raises(InvalidRequest, match="closed"):
        await opened[1].fetch(timeout_s=0)
    assert await opened[0].fetch(timeout_s=0) == []  # still open
    rejoined = await handles.get(log, *names[1], {})  # joined again, on demand
    assert rejoined is not opened[1] and await rejoined.fetch(timeout_s=0) == []
    await handles.aclose()
    with pytest.raises(InvalidRequest, match="closed"):
        await rejoined.fetch(timeout_s=0)


async def test_a_handle_joined_with_other_settings_replaces_the_open_one() -> None:
    log = MemoryEventLog()
    await log.create_log("a")
    handles = GroupHandles(limit=4)
    first = await handles.get(log, "a", "g", {})
    assert await handles.get(log, "a", "g", {}) is first
    other = await handles.get(log, "a", "g", {"start_seq": 1})
    assert other is not first
    with pytest.raises(InvalidRequest, match="closed"):
        await first.fetch(timeout_s=0)
    await handles.forget("a")
    with pytest.raises(InvalidRequest, match="closed"):
        await other.fetch(timeout_s=0)


async def test_a_handle_older_than_recheck_s_is_joined_again_at_its_next_use() -> None:
    # Another node may have deleted the group and created it with other settings: a handle
    # used for ever would go on serving the old ones (tests/cluster/test_nodes.py has that).
    log = MemoryEventLog()
    await log.create_log("a")
    now = [0.0]
    handles = GroupHandles(recheck_s=2.0, clock=lambda: now[0])
    first = await handles.get(log, "a", "g", {})
    now[0] = 1.9
    assert await handles.get(log, "a", "g", {}) is first
    now[0] = 2.0
    second = await handles.get(log, "a", "g", {})
    assert second is not first
    now[0] = 3.9
    assert await handles.get(log, "a", "g", {}) is second  # its own two seconds
    await handles.aclose()
