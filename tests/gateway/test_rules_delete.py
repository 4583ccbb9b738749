"""Deleting a rule leaves nothing behind for a rule added again under its name.

A rule's output log holds its rows, and its actions run on every row of it; the rows, the
messages and appends of its actions, and its generations have keys of their own. A rule added
again under the name of a deleted one must neither run its actions on the old rows nor have
its own rows, appends or generations taken for the old one's. So every key holds the rule's
incarnation, a new rule's actions start after what its output log holds, and a delete with
the event log away is refused (503, the rule left running).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Gateway, NewEvent
from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.rules import RulesConfig, RuleState, output_log
from airlane.gateway.rules.store import STATE_FORMAT
from airlane.hub import MemoryHub
from airlane.security import AllowAll, principal_named
from tests.gateway.test_rules_service import _append, _eventually, _rows
from tests.natsserver import running_nats

pytestmark = pytest.mark.timeout(150)

ALICE = principal_named("alice@acme")
COPYING = {"sql": "SELECT n FROM src", "actions": [{"append": {"log": "copies"}}]}


@contextlib.asynccontextmanager
async def _gateway(tmp_path: Path, events: EventSourcing | None = None) -> AsyncIterator[Gateway]:
    """A started gateway keeping its rules in ``tmp_path``; closed after."""
    gateway = Gateway(
        MemoryHub(),
        SyntheticBackend(SyntheticConfig(speed=0)),
        rules=RulesConfig(dir=str(tmp_path / "rules"), late_s=0.05),
        security=AllowAll(),
        events=events,
    )
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.aclose()


async def _copies(gateway: Gateway) -> list[Any]:
    return [record.json() for record in await gateway.logs.read(ALICE, "copies")]


async def test_a_rule_added_again_acts_on_its_own_rows_only(
    tmp_path: Path,
) -> None:
    async with _gateway(tmp_path) as gateway:
        await gateway.logs.create(ALICE, "src")
        # What an earlier rule "r" left (a delete cut short): an output row, under the key
        # a rule added before incarnations gave its first row.
        await gateway.logs.create(ALICE, output_log("r"))
        old = NewEvent("rule.output", orjson.dumps({"n": 0}), idempotency_key="rule.r.0")
        await gateway.logs.append(ALICE, output_log("r"), [old])
        await gateway.rules.put(ALICE, "r", COPYING)
        await _append(gateway, "src", {"n": 1}, who=ALICE)
        # Its first row is stored (not taken for a copy of the old one), and its actions run
        # on its own rows only.
        assert await _rows(gateway, output_log("r"), 2, who=ALICE) == [{"n": 0}, {"n": 1}]
        assert await _rows(gateway, "copies", 1, who=ALICE) == [{"n": 1}]
        await asyncio.sleep(0.3)  # nothing more comes
        assert await _copies(gateway) == [{"n": 1}]
        assert "output_lost" not in gateway.rules.get(ALICE, "r")["stats"]


async def test_a_delete_with_the_event_log_away_is_refused_and_the_rule_goes_on(
    tmp_path: Path,
) -> None:
    with running_nats() as broker:
        events = EventSourcing(servers=(broker.url,), prefix=f"t{uuid.uuid4().hex[:10]}")
        async with _gateway(tmp_path, events) as gateway:
            await gateway.logs.create(ALICE, "src")
            await gateway.rules.put(ALICE, "r", COPYING)
            await _append(gateway, "src", {"n": 1}, who=ALICE)
            assert await _rows(gateway, "copies", 1, who=ALICE) == [{"n": 1}]
            broker.kill()  # SIGKILL: the event log is away
            with pytest.raises(AirlaneError) as refused:
                await gateway.rules.delete(ALICE, "r")
            assert refused.value.code is ErrorCode.EVENT_LOG_UNAVAILABLE, refused.value
            assert [rule["name"] for rule in gateway.rules.names(ALICE)] == ["r"]
            broker.start()  # the same port and store
            # Back once it stores again (it may answer before it does, having just started).
            await _eventually(lambda: gateway.logs.create(ALICE, "ready"), timeout=30)

            async def deleted() -> bool:
                await gateway.rules.delete(ALICE, "r")
                return True

            await _eventually(deleted, timeout=60)
            assert gateway.rules.names(ALICE) == []
            assert output_log("r") not in await gateway.logs.names(ALICE)
            # Made again: its own rows, their actions run once, none taken for a copy.
            await gateway.rules.put(ALICE, "r", COPYING)
            await _append(gateway, "src", {"n": 2}, who=ALICE)
            assert await _rows(gateway, output_log("r"), 1, who=ALICE) == [{"n": 2}]
            assert await _rows(gateway, "copies", 2, who=ALICE) == [{"n": 1}, {"n": 2}]


async def test_a_rule_restarted_over_new_in_memory_logs_acts_on_every_new_row(
    tmp_path: Path,
) -> None:
    # The in-memory event log does not outlive its process; the rule's file does, saying
    # that it read 2 records of its source and ran the actions of 2 rows. In the new logs
    # those are other records and rows.
    async with _gateway(tmp_path) as first:
        await first.logs.create(ALICE, "src")
        await first.rules.put(ALICE, "r", COPYING)
        await _append(first, "src", {"n": 1}, {"n": 2}, who=ALICE)
        assert await _rows(first, "copies", 2, who=ALICE) == [{"n": 1}, {"n": 2}]
    async with _gateway(tmp_path) as second:
        # The new source reaches the saved position (2) before the rule finds it: it is
        # read from its start all the same.
        await second.logs.create(ALICE, "src")
        await _append(second, "src", {"n": 3}, {"n": 4}, who=ALICE)
        assert await _rows(second, "copies", 2, who=ALICE) == [{"n": 3}, {"n": 4}]


def test_a_rule_kept_from_before_incarnations_keeps_its_keys() -> None:
    # Its file has no incarnation: a batch read again after an upgrade gets the keys it had.
    kept = RuleState.from_dict(
        {"format": STATE_FORMAT, "key": "r", "definition": {}, "owner": {}, "revision": 2}
    )
    assert kept.incarnation == ""
    assert kept.output_key("r", 7) == "rule.r.r2.7"
    assert kept.action_key("r", 7, 0) == "rule.r.7.0"
    assert kept.generation_stream("r", 7, 0) == "rules/r/7.0"
    added = RuleState("r", {}, {}, incarnation="5eed")
    assert added.output_key("r", 7) == "rule/r/5eed/7"
    assert RuleState.from_dict(added.to_dict()).incarnation == "5eed"
