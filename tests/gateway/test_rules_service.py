"""The rule service in one process: rules over event logs and streams, their actions, held
rows with audited approvals, tenants and permissions, and state kept across a restart."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import Event
from airlane.gateway import Gateway, NewEvent
from airlane.gateway.rules import RulesConfig, RuleState, RuleStore, output_log
from airlane.hub import MemoryHub
from airlane.security import ANONYMOUS, ApiKeyPolicy, Principal, principal_named
from airlane.security.audit import AuditConfig, AuditLog

ALICE = principal_named("alice@acme")
BOB = principal_named("bob@other")


def _gateway(tmp_path: Path, **kwargs: Any) -> Gateway:
    return Gateway(
        MemoryHub(),
        SyntheticBackend(SyntheticConfig(speed=0)),
        rules=RulesConfig(dir=str(tmp_path / "rules"), late_s=0.05, **kwargs),
        audit=AuditLog(AuditConfig(path=str(tmp_path / "audit.log"))),
        security=ApiKeyPolicy({"a": "alice@acme", "b": "bob@other"}),
    )


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    gateway = _gateway(tmp_path)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.aclose()


async def _append(
    gateway: Gateway, log: str, *rows: dict[str, Any], who: Principal = ALICE
) -> None:
    await gateway.logs.append(who, log, [NewEvent("reading", orjson.dumps(row)) for row in rows])


async def _eventually(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = await check()
        except (AirlaneError, AssertionError):
            if time.monotonic() > deadline:
                raise
        else:
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError("not reached in time")
        await asyncio.sleep(0.02)


async def _rows(gateway: Gateway, log: str, count: int, who: Principal = ALICE) -> list[Any]:
    async def enough() -> list[Any] | None:
        records = await gateway.logs.read(who, log, limit=10_000)
        return [r.json() for r in records] if len(records) >= count else None

    rows: list[Any] = await _eventually(enough)
    return rows


async def test_a_filter_rule_appends_each_match_to_its_output_and_a_templated_log(
    gateway: Gateway,
) -> None:
    await gateway.logs.create(ALICE, "sensors")
    await _append(gateway, "sensors", {"deviceId": "old", "t": 99})  # before the rule: not read
    described, created = await gateway.rules.put(
        ALICE,
        "hot",
        {
            "sql": "SELECT deviceId, t FROM sensors WHERE t > 30",
            "actions": [{"append": {"log": "alerts.{deviceId}", "type": "alert.v1"}}],
        },
    )
    assert created and described["output_log"] == "rules.hot.out"
    await _append(gateway, "sensors", {"deviceId": "d1", "t": 35}, {"deviceId": "d2", "t": 20})
    await _append(gateway, "sensors", {"deviceId": "d1", "t": 31})
    assert await _rows(gateway, "alerts.d1", 2) == [
        {"deviceId": "d1", "t": 35},
        {"deviceId": "d1", "t": 31},
    ]
    assert await _rows(gateway, output_log("hot"), 2) == [
        {"deviceId": "d1", "t": 35},
        {"deviceId": "d1", "t": 31},
    ]
    stats = gateway.rules.get(ALICE, "hot")["stats"]
    assert (stats["rows_in"], stats["rows_filtered"], stats["appended"]) == (3, 1, 2)


async def test_a_window_closes_on_the_clock_once_the_rule_has_read_everything(
    gateway: Gateway,
) -> None:
    await gateway.rules.put(
        ALICE,
        "avg",
        {
            "sql": "SELECT deviceId, avg(v) AS v, count(*) AS n FROM vib "
            "GROUP BY deviceId, TUMBLINGWINDOW(ms, 300) HAVING avg(v) > 3.5"
        },
    )
    await gateway.logs.create(ALICE, "vib")
    await _append(gateway, "vib", {"deviceId": "a", "v": 5}, {"deviceId": "b", "v": 1})
    await _append(gateway, "vib", {"deviceId": "a", "v": 4})
    rows = await _rows(gateway, output_log("avg"), 1)
    assert sum(row["n"] for row in rows if row["deviceId"] == "a") == 2
    assert all(row["deviceId"] == "a" for row in rows)


async def test_a_held_row_runs_the_rest_only_when_approved_and_the_decision_is_audited(
    gateway: Gateway, tmp_path: Path
) -> None:
    await gateway.rules.put(
        ALICE,
        "stop",
        {
            "sql": "SELECT deviceId FROM commands WHERE action = 'stop'",
            "actions": [
                {"append": {"log": "requested"}},
                {"hold": {"timeout_s": 600}},
                {"append": {"log": "executed"}},
            ],
        },
    )
    await gateway.logs.create(ALICE, "commands")
    await _append(
        gateway,
        "commands",
        {"deviceId": "m1", "action": "stop"},
        {"deviceId": "m2", "action": "stop"},
    )
    await _rows(gateway, "requested", 2)
    held = await _eventually(
        lambda: _resolved(len(gateway.rules.pending(ALICE, "stop")) == 2, gateway, "stop")
    )
    assert [item["row"]["deviceId"] for item in held] == ["m1", "m2"]
    with pytest.raises(AirlaneError) as refused:  # another tenant does not see the rule
        await gateway.rules.decide(BOB, "stop", held[0]["id"], approve=True)
    assert refused.value.code is ErrorCode.NOT_FOUND

    approved = await gateway.rules.decide(ALICE, "stop", held[0]["id"], approve=True)
    assert approved["approved"] is True
    await gateway.rules.decide(ALICE, "stop", held[1]["id"], approve=False)
    assert await _rows(gateway, "executed", 1) == [{"deviceId": "m1"}]
    await asyncio.sleep(0.2)
    assert len(await gateway.logs.read(ALICE, "executed")) == 1  # the rejected one never runs
    assert gateway.rules.pending(ALICE, "stop") == []
    with pytest.raises(AirlaneError) as twice:
        await gateway.rules.decide(ALICE, "stop", held[0]["id"], approve=True)
    assert twice.value.code is ErrorCode.NOT_FOUND

    records = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    decisions = [(r["code"], r["principal"], r["resource"]) for r in records]
    assert ("rule_approve", "alice", f"rules/stop/approvals/{held[0]['id']}") in decisions
    assert ("rule_reject", "alice", f"rules/stop/approvals/{held[1]['id']}") in decisions
    assert ("rule_put", "alice", "rules/stop") in decisions


async def _resolved(ready: bool, gateway: Gateway, name: str) -> list[dict[str, Any]] | None:
    return gateway.rules.pending(ALICE, name) if ready else None


async def test_a_hold_that_times_out_is_rejected_and_audited(
    gateway: Gateway, tmp_path: Path
) -> None:
    await gateway.rules.put(
        ALICE,
        "brief",
        {
            "sql": "SELECT x FROM cmds",
            "actions": [{"hold": {"timeout_s": 0.2}}, {"append": {"log": "never"}}],
        },
    )
    await gateway.logs.create(ALICE, "cmds")
    await _append(gateway, "cmds", {"x": 1})
    await _eventually(lambda: _stat(gateway, "brief", "expired", 1), timeout=10)
    assert gateway.rules.pending(ALICE, "brief") == []
    with pytest.raises(AirlaneError):
        await gateway.logs.info(ALICE, "never")
    codes = [json.loads(line)["code"] for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert "rule_hold_expired" in codes


async def _stat(gateway: Gateway, name: str, key: str, value: int) -> bool:
    return gateway.rules.get(ALICE, name)["stats"].get(key, 0) >= value


async def test_rules_are_per_tenant_and_need_a_principal(gateway: Gateway) -> None:
    await gateway.rules.put(ALICE, "mine", {"sql": "SELECT * FROM s"})
    assert [r["name"] for r in gateway.rules.names(ALICE)] == ["mine"]
    assert gateway.rules.names(BOB) == []
    with pytest.raises(AirlaneError) as missing:
        gateway.rules.get(BOB, "mine")
    assert missing.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(AirlaneError) as anonymous:
        await gateway.rules.put(ANONYMOUS, "x", {"sql": "SELECT * FROM s"})
    assert anonymous.value.code is ErrorCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"actions": []}, "sql", "'sql' is required"),
        ({"sql": "SELECT FROM WHERE"}, "sql", ""),
        ({"sql": "SELECT * FROM s", "actions": [{"email": {}}]}, "actions[0]", "unknown action"),
        (
            {"sql": "SELECT * FROM s", "actions": [{"publish": {"topic": "a/#"}}]},
            "actions[0].publish.topic",
            "wildcard",
        ),
        (
            {"sql": "SELECT * FROM s", "actions": [{"publish": {"topic": "a", "qos": 3}}]},
            None,
            "0, 1 or 2",
        ),
        ({"sql": "SELECT * FROM s", "colour": "red"}, "colour", "unknown rule fields"),
        ({"sql": "SELECT * FROM 'a/+x'"}, "sql", "whole level"),
    ],
)
async def test_a_bad_definition_is_a_clear_400_and_nothing_runs(
    gateway: Gateway, body: dict[str, Any], param: str | None, words: str
) -> None:
    with pytest.raises(AirlaneError) as refused:
        await gateway.rules.put(ALICE, "bad", body)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    if param is not None:
        assert refused.value.param == param
    assert words in str(refused.value)
    assert gateway.rules.names(ALICE) == []


async def test_replace_keeps_the_position_and_delete_forgets_everything(gateway: Gateway) -> None:
    await gateway.logs.create(ALICE, "src")
    await gateway.rules.put(ALICE, "r", {"sql": "SELECT n FROM src"})
    await _append(gateway, "src", {"n": 1})
    await _rows(gateway, output_log("r"), 1)
    _, created = await gateway.rules.put(ALICE, "r", {"sql": "SELECT n, n * 2 AS twice FROM src"})
    assert not created
    await _append(gateway, "src", {"n": 2})
    rows = await _rows(gateway, output_log("r"), 2)
    assert rows == [{"n": 1}, {"n": 2, "twice": 4}]  # n=1 is not read again

    await gateway.rules.delete(ALICE, "r")
    assert gateway.rules.names(ALICE) == []
    assert output_log("r") not in await gateway.logs.names(ALICE)
    await gateway.rules.put(ALICE, "r", {"sql": "SELECT n FROM src"})
    await _append(gateway, "src", {"n": 3})
    assert await _rows(gateway, output_log("r"), 1) == [{"n": 3}]  # a fresh output, not deduped


async def test_a_stream_source_reads_message_payloads(gateway: Gateway) -> None:
    await gateway.create_named(ALICE, "agents")
    await gateway.rules.put(
        ALICE,
        "tools",
        {"sql": "SELECT agent, tool FROM agents WHERE tool IS NOT NULL", "source": "stream"},
    )
    await asyncio.sleep(0.1)
    for body in (
        {"agent": "a1", "tool": "search"},
        {"agent": "a2"},
        {"agent": "a3", "tool": "sql"},
    ):
        await gateway.publish(ALICE, "agents", Event.message(body))
    rows = await _rows(gateway, output_log("tools"), 2)
    assert rows == [{"agent": "a1", "tool": "search"}, {"agent": "a3", "tool": "sql"}]


async def test_generate_starts_a_generation_with_the_row_in_its_prompt(gateway: Gateway) -> None:
    await gateway.logs.create(ALICE, "alarms")
    await gateway.rules.put(
        ALICE,
        "explain",
        {"sql": "SELECT deviceId FROM alarms", "actions": [{"generate": {"max_tokens": 4}}]},
    )
    await _append(gateway, "alarms", {"deviceId": "m7"})
    await _eventually(lambda: _stat(gateway, "explain", "generated", 1))
    incarnation = gateway.rules.get(ALICE, "explain")["incarnation"]
    subscription = await gateway.subscribe(ALICE, f"rules/explain/{incarnation}/1.0")
    events = []
    while batch := await subscription.next_batch(64):
        events += batch
    await subscription.aclose()
    assert events[-1].kind.value == "done"


async def test_rules_and_their_windows_survive_a_restart(tmp_path: Path) -> None:
    sql = "SELECT count(*) AS n FROM feed GROUP BY TUMBLINGWINDOW(ss, 2)"
    first = _gateway(tmp_path)
    await first.start()
    try:
        await first.logs.create(ALICE, "feed")
        await first.rules.put(ALICE, "counted", {"sql": sql})
        await _append(first, "feed", {"x": 1}, {"x": 2}, {"x": 3})
        await _eventually(lambda: _stat(first, "counted", "rows_in", 3))
    finally:
        await first.aclose()

    second = _gateway(tmp_path)  # the same directory; its logs are new (in memory)
    await second.start()
    try:
        described = second.rules.get(ALICE, "counted")
        assert described["sql"] == sql and described["stats"]["rows_in"] == 3
        await second.logs.create(ALICE, "feed")
        await _append(second, "feed", {"x": 4}, {"x": 5})

        async def all_counted() -> bool:
            records = await second.logs.read(ALICE, output_log("counted"), limit=100)
            return sum(r.json()["n"] for r in records) == 5

        # The rows counted before the restart are in the windows that close after it.
        await _eventually(all_counted, timeout=15)
    finally:
        await second.aclose()


async def test_the_file_a_crash_leaves_mid_batch_reads_the_batch_again(
    gateway: Gateway, tmp_path: Path
) -> None:
    """What a SIGKILL would leave on disk while a batch's output rows are on their way to the
    output log and the action task saves meanwhile: the file must not say the batch was
    read, or the restarted rule would skip rows whose outputs exist nowhere."""
    await gateway.logs.create(ALICE, "feed")
    await gateway.rules.put(ALICE, "each", {"sql": "SELECT x FROM feed"})
    out = output_log("each")
    logs = gateway.logs
    append, read = logs.append, logs.read
    stalled, go_on = asyncio.Event(), asyncio.Event()

    async def second_output_waits(who: Principal, name: str, events: Any) -> Any:
        if name == out and any(orjson.loads(e.data) == {"x": 2} for e in events):
            stalled.set()
            await go_on.wait()
        return await append(who, name, events)

    async def actions_read_once_it_waits(who: Principal, name: str, **kwargs: Any) -> Any:
        if name == out:
            await stalled.wait()  # the action task then saves while the output waits
        return await read(who, name, **kwargs)

    logs.append = second_output_waits  # type: ignore[method-assign]
    logs.read = actions_read_once_it_waits  # type: ignore[method-assign]
    try:
        await _append(gateway, "feed", {"x": 1})
        await _eventually(lambda: _count(read(ALICE, out), 1))
        await _append(gateway, "feed", {"x": 2})
        await asyncio.wait_for(stalled.wait(), 10)
        saved = await _eventually(lambda: _saved(tmp_path, "actions_done", 1))
        # As if killed now: the file says row 1 was read and counted, row 2 not yet.
        assert (saved.input, saved.outputs) == ({"seq": 1}, 1)
        assert saved.snapshot is not None and saved.snapshot["stats"]["rows_in"] == 1
    finally:
        go_on.set()
        logs.append, logs.read = append, read  # type: ignore[method-assign]
    await _eventually(lambda: _count(read(ALICE, out), 2))
    saved = await _eventually(lambda: _saved(tmp_path, "outputs", 2))
    assert saved.input == {"seq": 2}


async def test_a_rule_replaced_mid_batch_with_new_sql_stores_its_own_rows(
    gateway: Gateway,
) -> None:
    """The old rule stored a batch's output and stopped before counting it: the new rule
    makes another row from the same input, and the output log must not take it for a copy."""
    await gateway.logs.create(ALICE, "feed")
    await gateway.rules.put(ALICE, "m", {"sql": "SELECT x FROM feed"})
    out = output_log("m")
    logs = gateway.logs
    append = logs.append
    stopped = asyncio.Event()

    async def stored_then_stopped(who: Principal, name: str, events: Any) -> Any:
        records = await append(who, name, events)
        if name == out and any(orjson.loads(e.data) == {"x": 2} for e in events):
            stopped.set()
            await asyncio.Event().wait()  # until the task is stopped
        return records

    await _append(gateway, "feed", {"x": 1})
    await _eventually(lambda: _count(logs.read(ALICE, out), 1))
    logs.append = stored_then_stopped  # type: ignore[method-assign]
    try:
        await _append(gateway, "feed", {"x": 2})
        await asyncio.wait_for(stopped.wait(), 10)
    finally:
        logs.append = append  # type: ignore[method-assign]
    await gateway.rules.put(ALICE, "m", {"sql": "SELECT x AS y FROM feed"})
    rows = await _rows(gateway, out, 3)
    assert rows == [{"x": 1}, {"x": 2}, {"y": 2}]


async def _count(records: Awaitable[list[Any]], n: int) -> bool:
    return len(await records) >= n


async def _saved(tmp_path: Path, field: str, value: int) -> RuleState | None:
    (state,) = RuleStore(tmp_path / "rules").load_all()
    return state if getattr(state, field) >= value else None


async def test_the_test_call_runs_sql_over_samples_and_closes_open_windows(
    gateway: Gateway,
) -> None:
    answer = gateway.rules.test(
        ALICE,
        {
            "sql": "SELECT topic_level(2) AS dev, max(v) AS peak FROM 'sensor/+/vib' "
            "GROUP BY topic_level(2), TUMBLINGWINDOW(ss, 10)",
            "messages": [
                {"payload": {"v": 1}, "ts": 1, "topic": "sensor/a/vib"},
                {"payload": {"v": 7}, "ts": 4, "topic": "sensor/a/vib"},
                {"payload": {"v": 2}, "ts": 12, "topic": "sensor/b/vib"},
            ],
        },
    )
    assert answer["columns"] == ["dev", "peak"]
    assert answer["outputs"] == [
        {"dev": "a", "peak": 7, "window_start": 0.0, "window_end": 10.0},
        {"dev": "b", "peak": 2, "window_start": 10.0, "window_end": 20.0},
    ]
    with pytest.raises(AirlaneError) as bad:
        gateway.rules.test(ALICE, {"sql": "SELECT * FROM s", "messages": [{"v": 1}]})
    assert bad.value.param == "messages[0]"


async def test_a_kept_rule_its_owner_may_no_longer_run_does_not_stop_the_gateway(
    tmp_path: Path,
) -> None:
    first = Gateway(
        MemoryHub(),
        SyntheticBackend(SyntheticConfig(speed=0)),
        rules=RulesConfig(dir=str(tmp_path / "rules")),
    )
    await first.start()  # no keys: rules run as the anonymous principal
    try:
        await first.rules.put(ANONYMOUS, "open", {"sql": "SELECT * FROM s"})
    finally:
        await first.aclose()
    second = _gateway(tmp_path)  # API keys now: anonymous may do nothing
    await second.start()
    try:
        assert second.rules.names(ALICE) == []
        await second.rules.put(ALICE, "mine", {"sql": "SELECT * FROM s"})
        assert [r["name"] for r in second.rules.names(ALICE)] == ["mine"]
    finally:
        await second.aclose()
    assert len(list((tmp_path / "rules").glob("*.json"))) == 2  # the other one waits there


async def test_a_node_runs_at_most_max_rules_and_a_rule_holds_at_most_max_pending(
    tmp_path: Path,
) -> None:
    gateway = _gateway(tmp_path, max_rules=2, max_pending=2)
    await gateway.start()
    try:
        held = {"sql": "SELECT n FROM orders", "actions": [{"hold": {"timeout_s": 600}}]}
        await gateway.rules.put(ALICE, "first", held)
        await gateway.rules.put(ALICE, "second", {"sql": "SELECT n FROM orders"})
        with pytest.raises(AirlaneError) as refused:
            await gateway.rules.put(ALICE, "third", {"sql": "SELECT n FROM orders"})
        assert refused.value.code is ErrorCode.INVALID_REQUEST and "2 rules" in str(refused.value)
        await gateway.rules.put(ALICE, "second", {"sql": "SELECT n AS m FROM orders"})  # replaced
        await gateway.logs.create(ALICE, "orders")
        await _append(gateway, "orders", {"n": 1}, {"n": 2}, {"n": 3})
        await _eventually(lambda: _stat(gateway, "first", "hold_refused", 1))
        assert [row["row"] for row in gateway.rules.pending(ALICE, "first")] == [
            {"n": 1},
            {"n": 2},
        ]
    finally:
        await gateway.aclose()


async def test_a_failing_action_is_tried_three_times_counted_and_the_next_row_goes_on(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airlane.gateway.rules import task as rule_task

    monkeypatch.setattr(rule_task, "RETRY_PAUSE_S", 0.01)  # the pauses between tries, short
    caplog.set_level(logging.INFO, logger="airlane.rules")
    await gateway.logs.create(ALICE, "readings")
    await gateway.rules.put(
        ALICE,
        "relay",
        {
            "sql": "SELECT n FROM readings",
            # No MQTT bridge runs: the publish fails; the append after it still runs.
            "actions": [{"publish": {"topic": "out/{n}"}}, {"append": {"log": "copies"}}],
        },
    )
    await _append(gateway, "readings", {"n": 1}, {"n": 2})
    assert await _rows(gateway, "copies", 2) == [{"n": 1}, {"n": 2}]
    await _eventually(lambda: _stat(gateway, "relay", "failed", 2))
    stats = gateway.rules.get(ALICE, "relay")["stats"]
    assert (stats["failed"], stats["appended"]) == (2, 2)
    tries = [r for r in caplog.records if "trying again" in r.getMessage()]
    assert len(tries) == 2 * (rule_task.ACTION_ATTEMPTS - 1)  # 3 tries a row: 2 retries
    failures = [r for r in caplog.records if "publish action failed on output" in r.getMessage()]
    assert len(failures) == 2 and "no MQTT bridge" in failures[0].getMessage()


async def test_rows_trimmed_from_the_output_log_before_their_actions_ran_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlane.gateway.rules import task as rule_task

    # Each row's publish fails for ~0.6 s (three tries, no bridge) while six rows come: the
    # output log keeps three, so rows whose actions had not run go, counted.
    monkeypatch.setattr(rule_task, "RETRY_PAUSE_S", 0.2)
    gateway = _gateway(tmp_path, output_retention=3)
    await gateway.start()
    try:
        await gateway.logs.create(ALICE, "readings")
        await gateway.rules.put(
            ALICE,
            "slow",
            {
                "sql": "SELECT n FROM readings",
                "actions": [{"publish": {"topic": "out"}}, {"append": {"log": "copies"}}],
            },
        )
        await _append(gateway, "readings", *({"n": n} for n in range(1, 7)))

        # Every row is accounted for: its actions ran (failed, then appended) or it was lost.
        async def accounted() -> bool:
            stats = gateway.rules.get(ALICE, "slow")["stats"]
            return stats.get("output_lost", 0) + stats.get("appended", 0) == 6

        await _eventually(accounted, timeout=20)
        stats = gateway.rules.get(ALICE, "slow")["stats"]
        assert stats["output_lost"] >= 1
        copies = [r.json()["n"] for r in await gateway.logs.read(ALICE, "copies")]
        assert copies == sorted(copies) and copies[-3:] == [4, 5, 6]
        assert len(copies) + stats["output_lost"] == 6
    finally:
        await gateway.aclose()


async def test_a_test_call_past_max_test_messages_is_a_400(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, max_test_messages=2)
    messages = [{"payload": {"v": n}, "ts": n, "topic": "t"} for n in range(3)]
    with pytest.raises(AirlaneError) as refused:
        gateway.rules.test(ALICE, {"sql": "SELECT v FROM 't'", "messages": messages})
    assert refused.value.code == ErrorCode.INVALID_REQUEST  # a 400 on the HTTP API
    assert refused.value.param == "messages"
    assert "at most 2" in str(refused.value)
    answer = gateway.rules.test(ALICE, {"sql": "SELECT v FROM 't'", "messages": messages[:2]})
    assert answer["outputs"] == [{"v": 0}, {"v": 1}]
