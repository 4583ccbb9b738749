"""Rules over MQTT topics through a real Mosquitto: paho-mqtt (through aiomqtt) sensors, the
bridge storing what a rule reads before acknowledging it, and the rule's actions publishing
back; a filter that overlaps an inbound route is stored once for each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from airlane.gateway import Gateway
from airlane.gateway.rules import input_log, output_log
from airlane.transports.mqtt import InboundRoute, MqttBridge, MqttBridgeConfig
from tests.mosquitto import Mosquitto
from tests.mqtt.support import PRINCIPAL, stored, v5_client

pytestmark = pytest.mark.timeout(60)


async def _tapped(bridge: MqttBridge) -> None:
    for _ in range(200):
        if bridge.up.is_set() and bridge.taps and not bridge._side_tasks:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the rule's filter was never subscribed")


async def test_the_seeds_vibration_rule_publishes_alerts_per_device_at_qos_1(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        await gateway.rules.put(
            PRINCIPAL,
            "vibration",
            {
                "sql": "SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n "
                "FROM 'sensor/+/vibration' "
                "GROUP BY deviceId, TUMBLINGWINDOW(ms, 500) HAVING avg(vibration) > 3.5",
                "actions": [{"publish": {"topic": "alerts/{deviceId}", "qos": 1}}],
            },
        )
        await _tapped(bridge)
        async with (
            v5_client(broker.port, "operator") as operator,
            v5_client(broker.port, "sensors") as sensors,
        ):
            await operator.subscribe("alerts/#", qos=1)
            readings = [("m1", 5.0), ("m2", 1.0), ("m1", 4.0), ("m2", 2.0)]
            for device, value in readings:
                body = {"deviceId": device, "vibration": value}
                await sensors.publish(f"sensor/{device}/vibration", orjson.dumps(body), qos=1)
            async with asyncio.timeout(15):
                message = await anext(operator.messages)
    finally:
        await bridge.aclose()
    assert str(message.topic) == "alerts/m1" and message.qos == 1
    alert = orjson.loads(message.payload)
    assert alert["deviceId"] == "m1" and alert["avg_v"] > 3.5
    props = dict(message.properties.UserProperty)
    assert props["rule"] == "vibration" and props["msg-id"].startswith("rule/vibration/")
    kept = await stored(gateway, input_log("vibration"), 4)
    assert [r.headers["mqtt-topic"] for r in kept][:1] == ["sensor/m1/vibration"]


async def test_a_filter_overlapping_an_inbound_route_is_stored_once_in_each(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    total = 30
    config = MqttBridgeConfig(broker.url, inbound=(InboundRoute("plant/#", log="plant"),))
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        await gateway.rules.put(PRINCIPAL, "hot", {"sql": "SELECT i FROM 'plant/+/temp'"})
        await _tapped(bridge)
        async with v5_client(broker.port, "sensor") as sensor:
            for i in range(total):
                await sensor.publish("plant/p1/temp", orjson.dumps({"i": i}), qos=1)
        route = await stored(gateway, "plant", total)
        tapped = await stored(gateway, input_log("hot"), total)
        rows = await stored(gateway, output_log("hot"), total)
        await asyncio.sleep(0.5)  # a copy stored twice would show by now
        route = await stored(gateway, "plant", total)
        tapped = await stored(gateway, input_log("hot"), total)
    finally:
        await bridge.aclose()
    # Mosquitto sends one copy per matching subscription; each is stored only where its
    # subscription identifier says.
    assert [r.json()["i"] for r in route] == list(range(total))
    assert [r.json()["i"] for r in tapped] == list(range(total))
    assert [r.json()["i"] for r in rows] == list(range(total))


async def test_deleting_a_rule_unsubscribes_its_filter(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(broker.url, inbound=())
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        await gateway.rules.put(PRINCIPAL, "gone", {"sql": "SELECT * FROM 'x/+'"})
        await _tapped(bridge)
        await gateway.rules.delete(PRINCIPAL, "gone")
        assert bridge.taps == {}
        received = bridge.inbound_stats.received
        async with v5_client(broker.port, "sensor") as sensor:
            await sensor.publish("x/1", b"{}", qos=1)
        await asyncio.sleep(0.3)
        assert bridge.inbound_stats.received == received
    finally:
        await bridge.aclose()
