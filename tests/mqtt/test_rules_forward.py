"""A rule's work in flight outlives its task: a generation being published to its result topic,
and a row approved for the actions after its hold, go on after the rule is replaced or its
gateway restarts (real Mosquitto, a real MQTT 5 subscriber, the bridge in process).

Both are saved in the rule's file before the row counts as done, and taken up again by the task
that starts from that file, which is what a gateway restarted after a SIGKILL does too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.gateway import Gateway, NewEvent
from airlane.gateway.rules import RulesConfig, RuleStore
from airlane.hub import MemoryHub
from airlane.transports.mqtt import MqttBridge, MqttBridgeConfig
from tests.mosquitto import Mosquitto
from tests.mqtt.support import PRINCIPAL, v5_client

pytestmark = pytest.mark.timeout(60)

RULE = {
    "sql": "SELECT i FROM feed",
    "actions": [
        {"generate": {"prompt": "Reading {i}", "max_tokens": 40, "result_topic": "advice/{i}"}}
    ],
}


def _gateway(tmp_path: Path, ttft_ms: float = 10) -> Gateway:
    # 40 tokens 30 ms apart: a generation takes more than a second to publish.
    backend = SyntheticBackend(SyntheticConfig(ttft_ms=ttft_ms, itl_ms=30, itl_jitter_ms=0))
    rules = RulesConfig(dir=str(tmp_path / "rules"), late_s=0.05)
    return Gateway(MemoryHub(), backend, rules=rules)


async def test_a_generation_being_published_goes_on_after_its_rule_is_replaced(
    broker: Mosquitto, tmp_path: Path
) -> None:
    gateway = _gateway(tmp_path)
    await gateway.start()
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url, inbound=()), state_dir=tmp_path)
    await bridge.start()
    got: list[dict[str, Any]] = []
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "advice-reader") as reader:
            await reader.subscribe("advice/#", qos=1)
            await gateway.rules.put(PRINCIPAL, "advise", RULE)
            await gateway.logs.create(PRINCIPAL, "feed")
            await gateway.logs.append(PRINCIPAL, "feed", [NewEvent("r", orjson.dumps({"i": 7}))])
            async with asyncio.timeout(30):
                async for message in reader.messages:
                    assert isinstance(message.payload, bytes)
                    got.append(orjson.loads(message.payload))
                    if len(got) == 3:
                        # Mid-generation: what a restarted gateway reads is in the file.
                        (state,) = RuleStore(tmp_path / "rules").load_all()
                        stream = f"rules/advise/{state.incarnation}/1.0"
                        assert list(state.forwards) == [stream], state.forwards
                        # The task that published it stops; the one replacing it goes on.
                        await gateway.rules.put(PRINCIPAL, "advise", RULE)
                    if got[-1]["kind"] == "done":
                        break
        snapshot = await gateway.snapshot(PRINCIPAL, stream)
        # The reader may have "done" before the bridge has the broker's PUBACK for it; only
        # then is the forward finished and struck from the rule's file (bounded wait).
        for _ in range(200):
            if not RuleStore(tmp_path / "rules").load_all()[0].forwards:
                break
            await asyncio.sleep(0.05)
    finally:
        await bridge.aclose()
        await gateway.aclose()
    # An event may come twice (published as its task stopped); the new task's first read
    # joins the deltas it had not published into one event (the hub's replay). So: the text,
    # each seq once, is the stream's.
    once = sorted({event["seq"]: event for event in got}.items())
    text = "".join(event["text"] for _, event in once if event["kind"] == "delta")
    assert got[-1]["kind"] == "done" and len(once) > 20
    assert snapshot.data is not None and text == snapshot.data["text"]["content"]
    (state,) = RuleStore(tmp_path / "rules").load_all()
    assert state.forwards == {}


async def test_an_approved_row_runs_its_actions_in_the_next_process_if_this_one_stops(
    tmp_path: Path,
) -> None:
    rule = {
        "sql": "SELECT machine FROM commands",
        "actions": [{"hold": {"timeout_s": 600}}, {"append": {"log": "stops"}}],
    }
    first = _gateway(tmp_path)
    await first.start()
    logs = first.logs
    append = logs.append
    stalled = asyncio.Event()

    async def stops_never_stored(who: Any, name: str, events: Any) -> Any:
        if name == "stops":
            stalled.set()
            await asyncio.Event().wait()  # until the process stops
        return await append(who, name, events)

    try:
        await first.rules.put(PRINCIPAL, "stop", rule)
        await first.logs.create(PRINCIPAL, "commands")
        await append(PRINCIPAL, "commands", [NewEvent("c", orjson.dumps({"machine": "m1"}))])
        async with asyncio.timeout(10):
            while not (held := first.rules.pending(PRINCIPAL, "stop")):
                await asyncio.sleep(0.02)
        logs.append = stops_never_stored  # type: ignore[method-assign]
        await first.rules.decide(PRINCIPAL, "stop", held[0]["id"], approve=True)
        await asyncio.wait_for(stalled.wait(), 10)
        assert first.rules.pending(PRINCIPAL, "stop") == []  # decided: no longer offered
        (state,) = RuleStore(tmp_path / "rules").load_all()  # what a SIGKILL would leave
        assert [item.get("approved") for item in state.pending.values()] == [True]
    finally:
        await first.aclose()

    second = _gateway(tmp_path)
    await second.start()
    try:
        async with asyncio.timeout(10):
            while "stops" not in await second.logs.names(PRINCIPAL):
                await asyncio.sleep(0.02)
        records = await second.logs.read(PRINCIPAL, "stops")
        assert [record.json() for record in records] == [{"machine": "m1"}]
        assert second.rules.pending(PRINCIPAL, "stop") == []
        async with asyncio.timeout(10):
            while RuleStore(tmp_path / "rules").load_all()[0].pending:
                await asyncio.sleep(0.02)
    finally:
        await second.aclose()


async def test_a_rule_forwards_at_most_16_generations_at_once_and_the_next_waits(
    broker: Mosquitto, tmp_path: Path
) -> None:
    from airlane.gateway.rules import task as rule_task

    # Each generation's first token comes after 2 s: the first 16 are all under way at once.
    gateway = _gateway(tmp_path, ttft_ms=2000)
    await gateway.start()
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url, inbound=()), state_dir=tmp_path)
    await bridge.start()
    rows = rule_task.MAX_GENERATIONS + 4
    done: set[str] = set()
    most = 0  # the most generations the rule's file ever listed as being published

    async def watch() -> None:
        nonlocal most
        while True:
            for state in RuleStore(tmp_path / "rules").load_all():
                most = max(most, len(state.forwards))
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "advice-reader") as reader:
            await reader.subscribe("advice/#", qos=1)
            await gateway.rules.put(PRINCIPAL, "advise", RULE)
            await gateway.logs.create(PRINCIPAL, "feed")
            feed = [NewEvent("r", orjson.dumps({"i": i})) for i in range(rows)]
            await gateway.logs.append(PRINCIPAL, "feed", feed)
            async with asyncio.timeout(40):
                async for message in reader.messages:
                    event = orjson.loads(message.payload)  # type: ignore[arg-type]
                    if event["kind"] == "done":
                        done.add(str(message.topic))
                        if len(done) == rows:
                            break
    finally:
        watcher.cancel()
        await bridge.aclose()
        await gateway.aclose()
    assert done == {f"advice/{i}" for i in range(rows)}  # every one, whole
    assert most == rule_task.MAX_GENERATIONS  # 16 at once, never 20
