"""A consumer group's settings belong to the group, whichever node a member fetches on.

Issue 34, item 3: a group created with ``ack_wait_s`` 1.5 was re-joined with the defaults by a
fetch on another node that gave only ``max_events`` and ``timeout_s`` (as the docs ask of an
existing group), which set its ack wait to 30 s, so the next redelivery never came. Here two
"nodes" are two `EventLogs` facades (what every transport calls), each with its own NATS
connection and event log, on one real ``nats-server -js``; the in-memory log, where both
facades share one process's logs, must behave the same.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from airlane.eventlog import GroupSettingsConflict, NewEvent
from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.logs import EventLogs
from airlane.security import ANONYMOUS, AllowAll
from tests.natsserver import NatsServer

ACK_WAIT_S = 1.5


@pytest.fixture(params=["jetstream", "memory"])
async def nodes(request: pytest.FixtureRequest) -> AsyncIterator[tuple[EventLogs, EventLogs]]:
    """Two nodes' facades on the same logs: two connections to one broker, or one process's
    memory."""
    if request.param == "memory":
        shared = EventSourcing()
        yield EventLogs(shared, AllowAll()), EventLogs(shared, AllowAll())
        return
    broker: NatsServer = request.getfixturevalue("nats_session")
    prefix = f"t{uuid.uuid4().hex[:10]}"  # this test's own streams on the shared broker
    events = [EventSourcing(servers=(broker.url,), prefix=prefix) for _ in "ab"]
    for node in events:
        await node.start()
    facades = [EventLogs(node, AllowAll()) for node in events]
    try:
        yield facades[0], facades[1]
    finally:
        for facade in facades:
            await facade.aclose()
        for name in await events[0].logs.logs():
            await events[0].logs.delete_log(name)
        for node in events:
            await node.aclose()


async def test_a_fetch_on_another_node_without_settings_keeps_the_groups_ack_wait(
    nodes: tuple[EventLogs, EventLogs],
) -> None:
    a, b = nodes
    await a.create(ANONYMOUS, "rewards")
    # Node a creates the group with a short ack wait (nothing to hand out yet).
    created = await a.fetch(
        ANONYMOUS, "rewards", "trainers", timeout_s=0, settings={"ack_wait_s": ACK_WAIT_S}
    )
    assert created == []
    await a.append(ANONYMOUS, "rewards", [NewEvent("reward.v1", b'{"reward": 1}')])

    # Node b fetches as the docs say a member of an existing group does: only max_events and
    # timeout_s. It does not ack.
    [first] = await b.fetch(ANONYMOUS, "rewards", "trainers", max_events=10, timeout_s=5)
    handed_out = time.monotonic()
    assert first.deliveries == 1

    # The group's 1.5 s ack wait still holds: the record comes back within this long poll (a
    # reset to the 30 s default would leave it empty). Bounded, not a sleep: it returns as
    # soon as the redelivery comes.
    [again] = await b.fetch(ANONYMOUS, "rewards", "trainers", max_events=10, timeout_s=10)
    waited = time.monotonic() - handed_out
    # Count 2, or 1 where JetStream took back the count of a redelivery to a pull request that
    # had just expired (docs/eventlog.md: a JetStream count can repeat).
    assert again.seq == first.seq and again.deliveries in (1, 2), again.deliveries
    assert ACK_WAIT_S - 0.25 < waited < ACK_WAIT_S + 5, waited
    await again.ack()
    for node in (a, b):
        info = await node.group_info(ANONYMOUS, "rewards", "trainers")
        assert (info.ack_wait_s, info.max_deliver) == (ACK_WAIT_S, None)


async def test_a_fetch_asking_for_other_settings_is_refused_and_changes_nothing(
    nodes: tuple[EventLogs, EventLogs],
) -> None:
    a, b = nodes
    await a.create(ANONYMOUS, "rewards")
    await a.fetch(ANONYMOUS, "rewards", "trainers", timeout_s=0, settings={"ack_wait_s": 1.5})
    with pytest.raises(GroupSettingsConflict) as raised:
        await b.fetch(ANONYMOUS, "rewards", "trainers", timeout_s=0, settings={"ack_wait_s": 30})
    assert raised.value.code == "group_settings_conflict"
    assert raised.value.conflicts == [("ack_wait_s", 1.5, 30.0)]
    # The same settings, given again, are fine; so is leaving them out.
    await b.fetch(ANONYMOUS, "rewards", "trainers", timeout_s=0, settings={"ack_wait_s": 1.5})
    await b.fetch(ANONYMOUS, "rewards", "trainers", timeout_s=0)
    with pytest.raises(GroupSettingsConflict):
        await a.fetch(ANONYMOUS, "rewards", "trainers", timeout_s=0, settings={"max_deliver": 2})
    info = await a.group_info(ANONYMOUS, "rewards", "trainers")
    assert (info.ack_wait_s, info.max_deliver) == (1.5, None)
