"""The MQTT bridge with MQTT.js (npm ``mqtt``, pinned in ``tests/mqtt/node``) under Node on the
other side of a real Mosquitto: a client nobody here wrote publishes sensor readings at QoS 1
and 2 into an event log, subscribes to a topic the bridge publishes a stream to, and receives
the generations a rule starts from its own readings.

Each test runs ``tests/mqtt/node/mqtt-client.mjs``, which prints what happens as JSON lines.
Without Node.js or the client's packages (``npm ci --prefix tests/mqtt/node``, which
``scripts/setup.sh`` runs) the tests skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlane.core.events import Event
from airlane.gateway import Gateway
from airlane.transports.mqtt import MqttBridge, MqttBridgeConfig, OutboundRoute
from tests.mosquitto import Mosquitto
from tests.mqtt.support import PRINCIPAL, stored

pytestmark = pytest.mark.timeout(60)

NODE_DIR = Path(__file__).resolve().parent / "node"
CLIENT = NODE_DIR / "mqtt-client.mjs"


def node_binary() -> str:
    """``node``, with MQTT.js installed; skips the test without them (fails it in CI,
    ``CI=true``, where setup installs them)."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (NODE_DIR / "node_modules" / "mqtt").is_dir():
        missing = f"run 'npm ci --prefix {NODE_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"MQTT.js interop tests need Node.js: {missing}")
        pytest.skip(f"MQTT.js interop tests need Node.js: {missing}")
    assert node is not None
    return node


class NodeClient:
    """A running ``mqtt-client.mjs``: its JSON lines as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []

    async def next_line(self, timeout: float) -> dict[str, Any]:
        """The next JSON line (AssertionError, with stderr, when the client ends first)."""
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not raw:
            await self._ended("ended early")
        line: dict[str, Any] = json.loads(raw)
        self.lines.append(line)
        return line

    async def until(self, event: str, timeout: float = 10.0) -> dict[str, Any]:
        """Read lines until one of ``event``."""
        async with asyncio.timeout(timeout):
            while True:
                line = await self.next_line(timeout)
                if line["event"] == event:
                    return line

    async def finish(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Read to the end; every line, once the client has exited 0."""
        async with asyncio.timeout(timeout):
            assert self.process.stdout is not None
            while raw := await self.process.stdout.readline():
                self.lines.append(json.loads(raw))
            await self.process.wait()
        if self.process.returncode != 0:
            await self._ended(f"exited {self.process.returncode}")
        return self.lines

    async def _ended(self, how: str) -> None:
        assert self.process.stderr is not None
        await asyncio.wait_for(self.process.wait(), 5)
        err = (await asyncio.wait_for(self.process.stderr.read(), 5)).decode(errors="replace")
        raise AssertionError(f"the MQTT.js client {how}: {self.lines}\nstderr: {err}")


@contextlib.asynccontextmanager
async def node_client(broker: Mosquitto, *args: str) -> AsyncIterator[NodeClient]:
    """Start ``mqtt-client.mjs`` against ``broker``; killed on the way out if still running."""
    process = await asyncio.create_subprocess_exec(
        node_binary(),
        str(CLIENT),
        "--url",
        broker.url,
        *args,
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield NodeClient(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_mqttjs_readings_at_qos_1_and_2_are_stored_once_each_in_order(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    total = 20
    node_binary()  # skip before starting anything
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with node_client(
            broker, "--publish", "airlane/logs/plant", "--count", str(total), "--qos", "1,2"
        ) as client:
            lines = await client.finish()
        records = await stored(gateway, "plant", total)
        await asyncio.sleep(0.2)  # a copy stored twice would show by now
        records = await stored(gateway, "plant", total)
    finally:
        await bridge.aclose()
    published = [line for line in lines if line["event"] == "published"]
    assert [(p["i"], p["qos"]) for p in published] == [(i, 1 + i % 2) for i in range(total)]
    assert [r.json()["i"] for r in records] == list(range(total))
    assert [r.headers["mqtt-qos"] for r in records] == [str(1 + i % 2) for i in range(total)]
    assert all(r.headers["mqtt-topic"] == "airlane/logs/plant" for r in records)
    assert all(r.headers["mqtt-user-sensor"] == "node-1" for r in records)
    assert all(r.content_type == "application/json" for r in records)
    assert [r.seq for r in records] == list(range(1, total + 1))
    assert bridge.inbound_stats.stored == total
    assert bridge.inbound_stats.dead_lettered == 0


async def test_mqttjs_receives_a_stream_in_order_with_its_position(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    count = 4
    node_binary()
    route = OutboundRoute(stream="results/x", topic="results/x", qos=1)
    bridge = MqttBridge(
        gateway, MqttBridgeConfig(broker.url, outbound=(route,)), state_dir=state_dir
    )
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with node_client(
            broker, "--subscribe", "results/x", "--expect", str(count + 1)
        ) as client:
            subscribed = await client.until("subscribed")
            for n in range(count):
                await gateway.publish(PRINCIPAL, "results/x", Event.message({"n": n}))
            await gateway.publish(PRINCIPAL, "results/x", Event.done())
            lines = await client.finish()
        for _ in range(100):
            if bridge.outbound_stats[0].finished:
                break
            await asyncio.sleep(0.05)
    finally:
        await bridge.aclose()
    assert subscribed["granted"] == [{"topic": "results/x", "qos": 1}]
    got = [line for line in lines if line["event"] == "message"]
    bodies = [m["payload"] for m in got]
    assert [b["kind"] for b in bodies] == ["message"] * count + ["done"]
    assert [b["payload"]["n"] for b in bodies[:count]] == list(range(count))
    props = [m["userProperties"] for m in got]
    assert [int(p["seq"]) for p in props] == [b["seq"] for b in bodies]
    assert [b["seq"] for b in bodies] == sorted({b["seq"] for b in bodies})
    assert {p["stream"] for p in props} == {"results/x"}
    assert len({p["epoch"] for p in props}) == 1 and props[0]["epoch"]
    assert all(m["contentType"] == "application/json" for m in got)
    assert all(m["topic"] == "results/x" and m["qos"] == 1 for m in got)
    assert bridge.outbound_stats[0].published == count + 1
    assert bridge.outbound_stats[0].finished


async def test_mqttjs_readings_trigger_a_rule_whose_generations_it_receives(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    node_binary()
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url, inbound=()), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        await gateway.rules.put(
            PRINCIPAL,
            "warm",
            {
                "sql": "SELECT sensor, i, temp FROM 'sensor/+/temp' WHERE i >= 1",
                "actions": [
                    {
                        "generate": {
                            "prompt": "Reading {i} of {sensor}: {row}",
                            "max_tokens": 6,
                            "result_topic": "advice/{sensor}",
                        }
                    }
                ],
            },
        )
        await _until_tapped(bridge)
        async with node_client(
            broker,
            "--subscribe", "advice/#", "--expect-done", "2",
            "--publish", "sensor/node-1/temp", "--count", "3", "--qos", "1",
        ) as client:  # fmt: skip
            lines = await client.finish()
    finally:
        await bridge.aclose()
    got = [line for line in lines if line["event"] == "message"]
    streams: dict[str, list[dict[str, Any]]] = {}
    for message in got:
        assert message["topic"] == "advice/node-1" and message["qos"] == 1
        assert message["contentType"] == "application/json"
        props = message["userProperties"]
        assert props["rule"] == "warm"
        streams.setdefault(props["stream"], []).append(message["payload"])
    # Readings 1 and 2 passed WHERE: two generations, each whole and in order.
    (incarnation,) = {stream.split("/")[2] for stream in streams}
    assert sorted(streams) == [f"rules/warm/{incarnation}/1.0", f"rules/warm/{incarnation}/2.0"]
    for events in streams.values():
        assert events[-1]["kind"] == "done"
        assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
        assert any(e["kind"] == "delta" for e in events)


async def _until_tapped(bridge: MqttBridge) -> None:
    """Wait until the rule's filter is subscribed (its tap added and the link up)."""
    for _ in range(100):
        if bridge.taps and not bridge._side_tasks:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the rule's topic filter was never subscribed")
