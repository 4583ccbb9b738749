"""Messages from a real Mosquitto, published by paho-mqtt (through aiomqtt), stored by the
bridge into event logs and streams, at each QoS; bad ones go to the dead-letter topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from airlane.gateway import Gateway
from airlane.transports.mqtt import InboundRoute, MqttBridge, MqttBridgeConfig
from tests.mosquitto import Mosquitto
from tests.mqtt.support import PRINCIPAL, stored, v5_client

STRICT_AND_LOGS = (
    InboundRoute("strict/+", log="strict", require_json=True),
    InboundRoute("airlane/logs/+", log="{3}"),
)
"""JSON only on strict/+ (into the log ``strict``); airlane/logs/<name> into the log <name>."""


async def test_each_qos_lands_in_its_log_with_the_mqtt_facts(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "sensor-1") as sensor:
            for qos in (0, 1, 2):
                props = PahoProperties(PacketTypes.PUBLISH)
                props.UserProperty = [("site", "plant-7")]
                await sensor.publish(
                    "airlane/logs/sensors",
                    orjson.dumps({"temp": 20 + qos}),
                    qos=qos,
                    properties=props,
                )
        records = await stored(gateway, "sensors", 3)
    finally:
        await bridge.aclose()
    assert [r.json()["temp"] for r in records] == [20, 21, 22]
    assert [r.headers["mqtt-qos"] for r in records] == ["0", "1", "2"]
    assert all(r.headers["mqtt-topic"] == "airlane/logs/sensors" for r in records)
    assert all(r.headers["mqtt-user-site"] == "plant-7" for r in records)
    assert all(r.content_type == "application/json" for r in records)
    assert bridge.inbound_stats.stored == 3


async def test_bad_messages_go_to_the_dead_letter_topic_and_the_bridge_goes_on(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        broker.url,
        max_message=1000,
        inbound=STRICT_AND_LOGS,
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with (
            v5_client(broker.port, "watcher") as watcher,
            v5_client(broker.port, "sensor") as sensor,
        ):
            await watcher.subscribe("airlane/dead-letter", qos=1)
            await sensor.publish("strict/a", b"not json {", qos=1)
            await sensor.publish("airlane/logs/big", b"x" * 5000, qos=1)
            await sensor.publish("airlane/logs/bad name!", b"{}", qos=1)
            await sensor.publish("strict/b", b'{"ok": true}', qos=1)
            letters = []
            async with asyncio.timeout(10):
                async for message in watcher.messages:
                    letters.append(orjson.loads(message.payload))
                    if len(letters) == 3:
                        break
        good = await stored(gateway, "strict", 1)
    finally:
        await bridge.aclose()
    by_topic = {letter["topic"]: letter for letter in letters}
    assert by_topic["strict/a"]["error"] == "invalid_json"
    assert by_topic["airlane/logs/big"]["error"] == "event_too_large"
    assert by_topic["airlane/logs/big"]["bytes"] == 5000
    assert by_topic["airlane/logs/bad name!"]["error"] == "invalid_log_name"
    assert [r.json() for r in good] == [{"ok": True}]
    assert bridge.inbound_stats.dead_lettered == 3


async def test_a_full_bridge_goes_on_dead_lettering(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # receive_maximum 2: the subscriber stops reading at two messages held, and each refused
    # message is acknowledged only once the broker has its dead letter. When dead letters went
    # out on the subscriber's own connection, their PUBACKs waited behind the paused reader:
    # the bridge waited for itself, forever (a CI run caught it at the default of 64).
    config = MqttBridgeConfig(
        broker.url,
        receive_maximum=2,
        inbound=STRICT_AND_LOGS,
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    bad, good = 30, 10
    try:
        await bridge.wait_connected(10)
        async with (
            v5_client(broker.port, "watcher") as watcher,
            v5_client(broker.port, "sensor") as sensor,
        ):
            await watcher.subscribe("airlane/dead-letter", qos=1)
            for number in range(bad):
                await sensor.publish(f"strict/{number}", b"not json {", qos=1)
                if number < good:
                    await sensor.publish("airlane/logs/good", orjson.dumps(number), qos=number % 3)
            letters = 0
            async with asyncio.timeout(15):
                async for _ in watcher.messages:
                    letters += 1
                    if letters == bad:
                        break
        kept = await stored(gateway, "good", good)
    finally:
        await bridge.aclose()
    assert bridge.inbound_stats.dead_lettered == bad
    # Sorted: MQTT orders messages per QoS, not across QoS levels.
    assert sorted(r.json() for r in kept) == list(range(good))
    assert bridge.stats.connects == 1
    assert bridge.stats.publisher_connects == 1


async def test_a_311_message_over_max_packet_is_dead_lettered_not_sent_forever(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # MQTT 3.1.1 cannot tell the broker the bridge's packet limit. Ending the connection at a
    # larger packet made Mosquitto send it again on the next one, and again: the bridge never
    # got past it. Now its head is read, the rest skipped, and it goes to the dead letters.
    config = MqttBridgeConfig(broker.url, protocol=4, max_packet=4096, max_message=2048)
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with (
            aiomqtt.Client(
                "127.0.0.1",
                broker.port,
                identifier="watcher",
                protocol=aiomqtt.ProtocolVersion.V311,
            ) as watcher,
            aiomqtt.Client(
                "127.0.0.1",
                broker.port,
                identifier="sensor",
                protocol=aiomqtt.ProtocolVersion.V311,
            ) as sensor,
        ):
            await watcher.subscribe("airlane/dead-letter", qos=1)
            for qos in (1, 2, 0):
                await sensor.publish("airlane/logs/dumps", b"x" * (100_000 + qos), qos=qos)
                await sensor.publish("airlane/logs/dumps", orjson.dumps({"after": qos}), qos=qos)
            letters = []
            async with asyncio.timeout(10):
                async for message in watcher.messages:
                    letters.append(orjson.loads(message.payload))
                    if len(letters) == 3:
                        break
        kept = await stored(gateway, "dumps", 3)
    finally:
        await bridge.aclose()
    assert sorted(letter["bytes"] for letter in letters) == [100_000, 100_001, 100_002]
    assert {letter["error"] for letter in letters} == {"event_too_large"}
    assert all("payload_base64" not in letter for letter in letters)
    assert sorted(r.json()["after"] for r in kept) == [0, 1, 2]
    assert bridge.stats.connects == 1


async def test_a_stream_route_appends_message_events(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        broker.url, inbound=(InboundRoute("sensor/+/vibration", stream="agents/vibration"),)
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "s") as sensor:
            await sensor.publish("sensor/m1/vibration", b'{"g": 3.9}', qos=1)
            await sensor.publish("sensor/m2/vibration", b"\xff\x00", qos=1)
        for _ in range(200):
            if bridge.inbound_stats.stored == 2:
                break
            await asyncio.sleep(0.05)
        subscription = await gateway.subscribe(PRINCIPAL, "agents/vibration")
        async with subscription:
            events = subscription.poll(10)
    finally:
        await bridge.aclose()
    payloads = [e.data["payload"] for e in events if e.kind.value == "message"]
    assert payloads[0] == {"topic": "sensor/m1/vibration", "payload": {"g": 3.9}}
    assert payloads[1] == {"topic": "sensor/m2/vibration", "payload_base64": "/wA="}


async def test_a_publisher_identity_stores_a_message_once_at_any_qos(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    bridge = MqttBridge(gateway, MqttBridgeConfig(broker.url), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "sensor-id") as sensor:
            for qos, ident in ((0, "a-1"), (0, "a-1"), (1, "a-2"), (2, "a-2"), (1, "a-3")):
                props = PahoProperties(PacketTypes.PUBLISH)
                props.UserProperty = [("msg-id", ident)]
                await sensor.publish(
                    "airlane/logs/ids", orjson.dumps({"id": ident}), qos=qos, properties=props
                )
        for _ in range(200):
            if bridge.inbound_stats.stored == 5:
                break
            await asyncio.sleep(0.05)
        records = await stored(gateway, "ids", 3)
    finally:
        await bridge.aclose()
    assert [r.json()["id"] for r in records] == ["a-1", "a-2", "a-3"]


async def test_a_shared_subscription_route(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        broker.url, inbound=(InboundRoute("$share/airlane/plant/+/temp", log="temp-{2}"),)
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "s") as sensor:
            await sensor.publish("plant/m7/temp", b"21.5", qos=1)
        records = await stored(gateway, "temp-m7", 1)
    finally:
        await bridge.aclose()
    assert [r.data for r in records] == [b"21.5"]
    assert records[0].content_type == "application/json"  # 21.5 parses as JSON


async def test_data_classes_set_the_qos_retention_and_lane(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        broker.url,
        inbound=(
            InboundRoute("sensor/+/temp", log="temperature", data_class="telemetry"),
            InboundRoute("commands/+", stream="commands", data_class="command"),
        ),
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "s") as sensor:
            await sensor.publish("sensor/m1/temp", b"21.5", qos=2)  # taken at telemetry's 0
            await sensor.publish("commands/m1", b'{"firmware": "2.1"}', qos=2)
        records = await stored(gateway, "temperature", 1)
        info = await gateway.logs.info(PRINCIPAL, "temperature")
        for _ in range(200):
            if bridge.inbound_stats.stored == 2:
                break
            await asyncio.sleep(0.05)
        subscription = await gateway.subscribe(PRINCIPAL, "commands")
        async with subscription:
            events = [e for e in subscription.poll(10) if e.kind.value == "message"]
    finally:
        await bridge.aclose()
    assert records[0].headers["mqtt-qos"] == "0"
    assert records[0].headers["mqtt-class"] == "telemetry"
    assert info.limits.max_age_s == 86_400
    assert events[0].lane.name == "CONTROL"
