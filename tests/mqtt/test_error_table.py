"""Every `ErrorCode`, raised by the gateway while the bridge stores a message, has the outcome
the bridge's table gives it: kept and stored again (``retry``), or published to the dead-letter
topic with the code and its MQTT 5 reason code, then acknowledged. The bridge serves on after
each one."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import aiomqtt
import orjson

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Gateway
from airlane.security import principal_named
from airlane.transports.mqtt import MQTT_REASON, MqttBridge, MqttBridgeConfig
from airlane.transports.mqtt.errors import retried
from tests.mosquitto import Mosquitto

PRINCIPAL = principal_named("mqtt-bridge@default")


async def test_every_code_is_retried_or_dead_lettered_as_the_table_says(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    codes = list(ErrorCode)
    failing: dict[int, ErrorCode] = {}
    original = gateway.logs.append

    async def append(principal, log, events):  # type: ignore[no-untyped-def]
        for event in events:
            number = orjson.loads(event.data)["i"]
            code = failing.get(number)
            if code is not None:
                if retried(code):
                    del failing[number]  # "not now": the next try succeeds
                raise AirlaneError(f"injected {code.value}", code=code)
        return await original(principal, log, events)

    gateway.logs.append = append  # type: ignore[method-assign]
    config = MqttBridgeConfig(broker.url, retry_store_s=0.01)
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    letters: dict[int, tuple[dict, dict]] = {}
    try:
        await bridge.wait_connected(10)
        async with (
            aiomqtt.Client(
                "127.0.0.1", broker.port, identifier="dlq", protocol=aiomqtt.ProtocolVersion.V5
            ) as watcher,
            aiomqtt.Client(
                "127.0.0.1", broker.port, identifier="s", protocol=aiomqtt.ProtocolVersion.V5
            ) as sensor,
        ):
            await watcher.subscribe("airlane/dead-letter", qos=1)
            for number, code in enumerate(codes):
                failing[number] = code
                await sensor.publish("airlane/logs/table", orjson.dumps({"i": number}), qos=1)
            dead = sum(not retried(code) for code in codes)
            async with asyncio.timeout(20):
                async for message in watcher.messages:
                    body = orjson.loads(message.payload)
                    number = orjson.loads(base64.b64decode(body["payload_base64"]))["i"]
                    letters[number] = (body, dict(message.properties.UserProperty))
                    if len(letters) == dead:
                        break
        stored = []
        for _ in range(200):
            stored = await gateway.logs.read(PRINCIPAL, "table", limit=1000)
            if len(stored) == len(codes) - dead:
                break
            await asyncio.sleep(0.05)
    finally:
        await bridge.aclose()
    kept = sorted(orjson.loads(r.data)["i"] for r in stored)
    assert kept == [n for n, code in enumerate(codes) if retried(code)]
    for number, code in enumerate(codes):
        if retried(code):
            continue
        body, props = letters[number]
        assert body["error"] == code.value
        assert props["reason-code"] == str(MQTT_REASON[code])
    assert bridge.inbound_stats.retried >= len(kept)
    assert bridge.stats.connects == 1  # no reconnection: the bridge served on
