"""Airlane streams published to MQTT topics by the bridge, read by paho-mqtt (aiomqtt): the
events in order, with the stream position in MQTT 5 user properties, resumed after a bridge
restart from the last position the broker acknowledged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiomqtt
import orjson

from airlane.core.events import Event
from airlane.gateway import Gateway
from airlane.security import principal_named
from airlane.transports.mqtt import MqttBridge, MqttBridgeConfig, OutboundRoute
from tests.mosquitto import Mosquitto

PRINCIPAL = principal_named("mqtt-bridge@default")


async def _receive(client: aiomqtt.Client, count: int, timeout: float = 10.0) -> list:
    got = []
    async with asyncio.timeout(timeout):
        async for message in client.messages:
            got.append(message)
            if len(got) == count:
                return got
    return got


def _subscriber(broker: Mosquitto) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1", broker.port, identifier="app", protocol=aiomqtt.ProtocolVersion.V5
    )


async def test_a_stream_goes_to_its_topic_in_order_with_its_position(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    route = OutboundRoute("agents/7/events", "results/agent-7", qos=1, message_expiry_s=60)
    bridge = MqttBridge(
        gateway, MqttBridgeConfig(broker.url, outbound=(route,)), state_dir=state_dir
    )
    await bridge.start()
    try:
        async with _subscriber(broker) as app:
            await app.subscribe("results/#", qos=1)
            await bridge.wait_connected(10)
            for n in range(5):
                await gateway.publish(PRINCIPAL, "agents/7/events", Event.message({"n": n}))
            got = await _receive(app, 5)
    finally:
        await bridge.aclose()
    bodies = [orjson.loads(m.payload) for m in got]
    assert [b["payload"]["n"] for b in bodies] == [0, 1, 2, 3, 4]
    assert [b["kind"] for b in bodies] == ["message"] * 5
    props = [dict(m.properties.UserProperty) for m in got]
    assert [int(p["seq"]) for p in props] == [b["seq"] for b in bodies]
    assert {p["stream"] for p in props} == {"agents/7/events"}
    assert len({p["epoch"] for p in props}) == 1
    assert all(m.properties.ContentType == "application/json" for m in got)
    assert all(0 < m.properties.MessageExpiryInterval <= 60 for m in got)
    assert all(m.topic.value == "results/agent-7" for m in got)


async def test_a_restarted_bridge_resumes_after_what_the_broker_acknowledged(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    route = OutboundRoute("agents/8/events", "results/agent-8", qos=1)
    config = MqttBridgeConfig(broker.url, outbound=(route,))
    async with _subscriber(broker) as app:
        await app.subscribe("results/#", qos=1)
        bridge = MqttBridge(gateway, config, state_dir=state_dir)
        await bridge.start()
        await bridge.wait_connected(10)
        for n in range(3):
            await gateway.publish(PRINCIPAL, "agents/8/events", Event.message({"n": n}))
        first = await _receive(app, 3)
        # The subscriber may get the third message before the bridge has the broker's PUBACK
        # for it; only then is the position saved (closing sooner would rightly send all three
        # again: at least once).
        key = f"0:{route.stream}->{route.topic}"
        for _ in range(200):
            saved = bridge.positions.get(key)
            if saved is not None and saved.seq == 3:
                break
            await asyncio.sleep(0.025)
        assert saved is not None and saved.seq == 3, saved
        await bridge.aclose()
        # Written while no bridge runs: the next one starts after n=2, not from the start.
        for n in range(3, 6):
            await gateway.publish(PRINCIPAL, "agents/8/events", Event.message({"n": n}))
        again = MqttBridge(gateway, config, state_dir=state_dir)
        await again.start()
        try:
            second = await _receive(app, 3)
            await gateway.publish(PRINCIPAL, "agents/8/events", Event.done())
            last = await _receive(app, 1)
            for _ in range(100):
                if again.outbound_stats[0].finished:
                    break
                await asyncio.sleep(0.05)
        finally:
            await again.aclose()
    numbers = [orjson.loads(m.payload)["payload"]["n"] for m in first + second]
    assert numbers == [0, 1, 2, 3, 4, 5]
    assert orjson.loads(last[0].payload)["kind"] == "done"
    assert again.outbound_stats[0].finished


async def test_deltas_written_while_no_bridge_ran_come_out_each_with_its_own_seq(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # A consumer keeping the last seq it applied must never get text it has again: a run of
    # deltas merged into one (what a reader that is behind gets on SSE) would carry only the
    # last seq, so the route hands them out apart.
    route = OutboundRoute("agents/9/events", "results/agent-9", qos=1)
    config = MqttBridgeConfig(broker.url, outbound=(route,))
    for text in ("Hel", "lo", " wor", "ld"):
        await gateway.publish(PRINCIPAL, "agents/9/events", Event.delta(text))
    async with _subscriber(broker) as app:
        await app.subscribe("results/#", qos=1)
        bridge = MqttBridge(gateway, config, state_dir=state_dir)
        await bridge.start()
        try:
            got = await _receive(app, 4)
        finally:
            await bridge.aclose()
    events = [orjson.loads(m.payload) for m in got]
    assert [(e["text"], e["seq"]) for e in events] == [
        ("Hel", 1),
        ("lo", 2),
        (" wor", 3),
        ("ld", 4),
    ]


async def test_a_route_waits_for_a_stream_that_does_not_exist_yet(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    route = OutboundRoute("later", "results/later", qos=0)
    bridge = MqttBridge(
        gateway, MqttBridgeConfig(broker.url, outbound=(route,)), state_dir=state_dir
    )
    await bridge.start()
    try:
        async with _subscriber(broker) as app:
            await app.subscribe("results/later", qos=0)
            await bridge.wait_connected(10)
            await asyncio.sleep(0.2)
            await gateway.publish(PRINCIPAL, "later", Event.message({"hello": 1}))
            got = await _receive(app, 1)
    finally:
        await bridge.aclose()
    assert orjson.loads(got[0].payload)["payload"] == {"hello": 1}


async def test_a_stream_goes_out_whole_and_in_order_across_dropped_connections(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # The publisher's connection is cut (no DISCONNECT, as in a crash) three times while
    # batches are in flight and others wait for room under the broker's receive maximum. A
    # consumer that keeps the last seq and skips what is not past it must still get every
    # event: nothing later may reach the broker before something earlier.
    route = OutboundRoute("agents/10/events", "results/agent-10", qos=1)
    config = MqttBridgeConfig(broker.url, outbound=(route,), reconnect_min_s=0.05)
    total = 600
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    applied: list[int] = []
    arrivals = 0
    try:
        async with _subscriber(broker) as app:
            await app.subscribe("results/#", qos=1)
            await bridge.wait_connected(10)
            for n in range(total):
                await gateway.publish(PRINCIPAL, "agents/10/events", Event.message({"n": n}))
            cuts = [100, 250, 400]
            async with asyncio.timeout(30):
                async for message in app.messages:
                    arrivals += 1
                    seq = int(dict(message.properties.UserProperty)["seq"])
                    if not applied or seq > applied[-1]:
                        applied.append(seq)
                    if cuts and arrivals >= cuts[0]:
                        cuts.pop(0)
                        assert bridge.publisher is not None
                        bridge.publisher.close()
                    if applied[-1] == total:
                        break
    finally:
        await bridge.aclose()
    assert applied == list(range(1, total + 1))
    assert bridge.stats.publisher_connects >= 4
