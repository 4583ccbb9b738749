"""The MQTT bridge when something holds it: a broker that refuses its dead letters, a hub that
stalls while the subscriber has stopped reading (its backpressure), a broker that goes away
meanwhile. Each against a real Mosquitto; the bridge must keep its connection and go on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from airlane.gateway import Gateway
from airlane.transports.mqtt import InboundRoute, MqttBridge, MqttBridgeConfig
from tests.mosquitto import Mosquitto
from tests.mqtt.support import stored, v5_client


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A Mosquitto whose ACL lets anonymous clients use ``data/#`` only: the bridge may
    subscribe there but not publish to its dead-letter topic (``airlane/dead-letter``), which
    an MQTT 5 broker answers with PUBACK 0x87 (not authorized)."""
    directory = tmp_path / "broker"
    directory.mkdir()
    acl = directory / "acl"
    acl.write_text("topic readwrite data/#\n")
    # The debug log shows the broker's side: the denied dead letters, the PUBACKs' reasons.
    broker = Mosquitto(directory, extra=f"acl_file {acl}\nlog_type debug\n")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def _until(check: Callable[[], bool], timeout: float) -> bool:
    """Whether ``check()`` holds within ``timeout`` seconds (polled every 50 ms)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_refused_dead_letter_does_not_stop_ingestion(
    acl_broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # Each refused dead letter used to leave its message held: after receive_maximum of them
    # the subscriber stopped reading for good, and nothing after them was stored.
    config = MqttBridgeConfig(
        acl_broker.url,
        receive_maximum=4,
        max_message=100,
        inbound=(InboundRoute("data/+", log="{2}"),),
    )
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    bad = 12
    try:
        await bridge.wait_connected(10)
        async with v5_client(acl_broker.port, "sensor") as sensor:
            for round_ in range(2):
                for number in range(bad // 2):
                    # QoS 1 and 2, 3 of each per round: a QoS 2 flow ended with a refusing
                    # PUBREC kept its place in Mosquitto's receive maximum (4), and the
                    # second round never came.
                    await sensor.publish("data/big", b"x" * 200, qos=1 + number % 2)
                await sensor.publish("data/good", orjson.dumps(round_), qos=1)
                kept = await stored(gateway, "good", round_ + 1)
                assert [r.json() for r in kept] == list(range(round_ + 1))
        # Each one once: the broker did not send them again. The QoS 2 flows are over too.
        assert await _until(lambda: bridge.inbound_stats.dead_letters_refused == bad, 5)
        assert await _until(lambda: bridge.journal.live == 0, 5)
    finally:
        await bridge.aclose()
    stats = bridge.inbound_stats
    assert stats.dead_lettered == 0
    assert stats.dead_letters_refused == bad
    assert stats.stored == 2
    assert bridge.stats.connects == 1
    log = acl_broker.read_log()
    assert log.count("Denied PUBLISH from airlane-mqtt-pub") == bad
    # QoS 1: refused back with 0x83 (event_too_large's 0x95 is no PUBACK reason code).
    assert log.count("Received PUBACK from airlane-mqtt (Mid") == bad // 2 + 2
    assert log.count("RC:131)") == bad // 2


@asynccontextmanager
async def _held_appends(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[asyncio.Event]:
    """Appends to the gateway's logs wait until the event yielded is set (a stalled hub):
    the bridge holds what it took, and its subscriber stops reading. Set on the way out."""
    release = asyncio.Event()
    append = gateway.logs.append

    async def held(*args: Any, **kwargs: Any) -> Any:
        await release.wait()
        return await append(*args, **kwargs)

    monkeypatch.setattr(gateway.logs, "append", held)
    try:
        yield release
    finally:
        release.set()


def _paused_config(broker: Mosquitto) -> MqttBridgeConfig:
    """Two messages held stop the subscriber's reading; a keep-alive of 2 s, which Mosquitto
    enforces at 1.5 times: a connection silent for 3 s is dropped."""
    return MqttBridgeConfig(
        broker.url, receive_maximum=2, keepalive_s=2, reconnect_min_s=0.1, reconnect_max_s=0.5
    )


async def test_a_paused_subscriber_keeps_its_connection_alive(
    broker: Mosquitto, gateway: Gateway, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Timers were handled only between reads: a subscriber that stopped reading sent no
    # PINGREQ, and Mosquitto dropped it after 1.5 keep-alives.
    bridge = MqttBridge(gateway, _paused_config(broker), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with _held_appends(gateway, monkeypatch) as release:
            async with v5_client(broker.port, "sensor") as sensor:
                for number in range(2):
                    await sensor.publish("airlane/logs/held", orjson.dumps(number), qos=1)
            link = bridge.link
            assert link is not None
            assert await _until(lambda: link.pending == 2, 5)
            await asyncio.sleep(7.0)  # more than twice what Mosquitto allows a silent client
            assert bridge.stats.connects == 1
            release.set()
            records = await stored(gateway, "held", 2)
        async with v5_client(broker.port, "sensor") as sensor:
            await sensor.publish("airlane/logs/held", orjson.dumps(2), qos=1)
        records = await stored(gateway, "held", 3)
    finally:
        await bridge.aclose()
    assert [r.json() for r in records] == [0, 1, 2]
    assert bridge.stats.connects == 1
    assert "exceeded timeout" not in broker.read_log()


@pytest.mark.parametrize("filled", [False, True], ids=["buffer-free", "buffer-full"])
async def test_a_paused_subscriber_notices_the_broker_closing_and_reconnects(
    broker: Mosquitto,
    gateway: Gateway,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    filled: bool,
) -> None:
    # A subscriber that had stopped reading never saw the end of its connection: it stayed on
    # the dead one while the appends were held, however long that took. With its socket's
    # buffer full (4 MB of QoS 0 behind), asyncio stops reading the socket too and does not
    # see the broker's FIN: the PINGREQ after it draws a reset, and the next one fails.
    bridge = MqttBridge(gateway, _paused_config(broker), state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with _held_appends(gateway, monkeypatch) as release:
            async with v5_client(broker.port, "sensor") as sensor:
                for number in range(2):
                    await sensor.publish("airlane/logs/held", orjson.dumps(number), qos=1)
                for _ in range(40 if filled else 0):
                    await sensor.publish("airlane/logs/bulk", b"z" * 100_000, qos=0)
            first = bridge.link
            assert first is not None
            assert await _until(lambda: first.pending >= 2, 5)
            await asyncio.sleep(0.5)  # the broker has written what it could
            broker.restart()
            # Connected again while the appends are still held (within two keep-alives and a
            # reconnection); the broker sends both again (and the new link, full with them,
            # reads its SUBACK once they are stored).
            assert await _until(lambda: bridge.stats.connects == 2, 8), bridge.stats
            second = bridge.link
            assert second is not None and second is not first
            assert await _until(lambda: second.pending == 2, 5)
            release.set()
            records = await stored(gateway, "held", 2)
        async with v5_client(broker.port, "sensor") as sensor:
            await sensor.publish("airlane/logs/held", orjson.dumps(2), qos=1)
        records = await stored(gateway, "held", 3)
        await asyncio.sleep(0.3)  # a duplicate would show by now
        records = await stored(gateway, "held", 3)
    finally:
        await bridge.aclose()
    # The copies the broker sent again were stored under the numbers they had: once each.
    assert [r.json() for r in records] == [0, 1, 2]
    assert bridge.stats.connects == 2


async def test_a_batch_that_fails_unexpectedly_is_sent_again_and_the_bridge_goes_on(
    broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    # An exception nothing handles (a bug) ended the inbound task: the bridge stayed
    # connected, held what it had taken, and stored nothing more, with nothing in the log.
    # The fault here: routing one message raises once (the hub's own failures are retried).
    config = MqttBridgeConfig(broker.url, reconnect_min_s=0.1, reconnect_max_s=0.5)
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    plans = bridge.inbound._plans
    failures = [RuntimeError("a bug")]

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return plans(*args, **kwargs)

    bridge.inbound._plans = failing_once  # type: ignore[method-assign]
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with v5_client(broker.port, "sensor") as sensor:
            await sensor.publish("airlane/logs/bug", orjson.dumps(0), qos=1)
            assert (await stored(gateway, "bug", 1))[0].json() == 0  # sent again, stored
            await sensor.publish("airlane/logs/bug", orjson.dumps(1), qos=1)
            records = await stored(gateway, "bug", 2)
    finally:
        await bridge.aclose()
    assert [r.json() for r in records] == [0, 1]
    assert bridge.inbound_stats.failed_batches == 1
    assert bridge.stats.connects == 2
