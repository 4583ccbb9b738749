"""The MQTT bridge against a second broker implementation: amqtt (pure Python, PyPI ``amqtt``
0.12, in a virtual environment of its own, ``.venv-amqtt``), which speaks MQTT 3.1.1 only, so
the bridge connects with ``protocol=4``. Publishers and subscribers are paho-mqtt (through
aiomqtt), also at 3.1.1.

The broker runs in a subprocess (``python -m amqtt.scripts.broker_script -c CONFIG``, what its
``amqtt`` console script runs) on a free port of 127.0.0.1, anonymous, no other plugins.

amqtt 0.12 sends a subscriber every message at the QoS the subscription was granted, not at
the lower of that and the message's own QoS (MQTT 3.1.1 section 3.8.4 asks the minimum): the
bridge subscribes at QoS 2, so what is published at QoS 0 or 1 reaches it at QoS 2 there, and
its ``mqtt-qos`` header says so. The tests allow that: at least the QoS published.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import orjson
import pytest

from airlane.core.events import Event
from airlane.gateway import Gateway
from airlane.security import principal_named
from airlane.transports.mqtt import (
    DEFAULT_INBOUND,
    InboundRoute,
    MqttBridge,
    MqttBridgeConfig,
    OutboundRoute,
)

pytestmark = pytest.mark.timeout(60)

PRINCIPAL = principal_named("mqtt-bridge@default")

AMQTT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-amqtt" / "bin" / "python"
"""amqtt runs from a virtual environment of its own (``scripts/setup.sh --test`` makes it): it
pins ``websockets==15.0.1``, and in Airlane's own environment it would hold Airlane's
websockets back at that version."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Amqtt:
    """One amqtt broker in a subprocess, with its config and log in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        path = self.directory / "amqtt.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = 15.0) -> None:
        config = self.directory / "amqtt.yaml"
        config.write_text(
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: 127.0.0.1:{self.port}\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )
        with (self.directory / "amqtt.log").open("wb") as log:
            self.process = subprocess.Popen(
                [str(AMQTT_PYTHON), "-m", "amqtt.scripts.broker_script", "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"amqtt exited: {self.log[-2000:]}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"amqtt did not start in {timeout} s: {self.log[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@pytest.fixture
def amqtt_broker(tmp_path: Path) -> Iterator[Amqtt]:
    """A fresh amqtt broker; skips without the package (fails in CI, ``CI=true``)."""
    if not AMQTT_PYTHON.exists():
        where = AMQTT_PYTHON.parent.parent
        message = f"amqtt is not installed in {where} (scripts/setup.sh --test makes it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    directory = tmp_path / "amqtt"
    directory.mkdir()
    broker = Amqtt(directory)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _client(broker: Amqtt, name: str) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1", broker.port, identifier=name, protocol=aiomqtt.ProtocolVersion.V311
    )


def _bridge(
    gateway: Gateway,
    broker: Amqtt,
    state_dir: Path,
    inbound: tuple[InboundRoute, ...] = DEFAULT_INBOUND,
    outbound: tuple[OutboundRoute, ...] = (),
) -> MqttBridge:
    """A bridge speaking MQTT 3.1.1 (``protocol=4``) to ``broker``."""
    config = MqttBridgeConfig(broker.url, protocol=4, inbound=inbound, outbound=outbound)
    return MqttBridge(gateway, config, state_dir=state_dir)


async def _until(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def test_each_qos_from_a_311_publisher_is_stored_once_in_order(
    amqtt_broker: Amqtt, gateway: Gateway, state_dir: Path
) -> None:
    total = 30
    bridge = _bridge(gateway, amqtt_broker, state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with _client(amqtt_broker, "sensor-311") as sensor:
            for i in range(total):
                await sensor.publish("airlane/logs/plant", orjson.dumps({"i": i}), qos=i % 3)
        assert await _until(lambda: bridge.inbound_stats.stored >= total), bridge.inbound_stats
        await asyncio.sleep(0.3)  # a copy stored twice would show by now
        records = await gateway.logs.read(PRINCIPAL, "plant", limit=1000)
    finally:
        await bridge.aclose()
    assert bridge.stats.connects == 1 and bridge.stats.refused_filters == 0
    assert [r.json()["i"] for r in records] == list(range(total))
    # At least the QoS published (amqtt raises it to the subscription's: the docstring).
    assert all(int(r.headers["mqtt-qos"]) >= i % 3 for i, r in enumerate(records))
    assert all(r.headers["mqtt-topic"] == "airlane/logs/plant" for r in records)
    assert all(r.content_type == "application/json" for r in records)
    assert bridge.inbound_stats.stored == total
    assert bridge.inbound_stats.dead_lettered == 0


async def test_a_bad_message_goes_to_the_dead_letter_topic_over_311(
    amqtt_broker: Amqtt, gateway: Gateway, state_dir: Path
) -> None:
    bridge = _bridge(
        gateway,
        amqtt_broker,
        state_dir,
        inbound=(InboundRoute("strict/+", log="strict", require_json=True),),
    )
    await bridge.start()
    try:
        await bridge.wait_connected(10)
        async with (
            _client(amqtt_broker, "watcher") as watcher,
            _client(amqtt_broker, "sensor") as sensor,
        ):
            await watcher.subscribe("airlane/dead-letter", qos=1)
            await sensor.publish("strict/a", b"not json {", qos=1)
            await sensor.publish("strict/b", b'{"ok": true}', qos=1)
            async with asyncio.timeout(10):
                async for message in watcher.messages:
                    letter = orjson.loads(message.payload)
                    break
        assert await _until(lambda: bridge.inbound_stats.stored >= 1)
        records = await gateway.logs.read(PRINCIPAL, "strict", limit=10)
    finally:
        await bridge.aclose()
    assert letter["error"] == "invalid_json" and letter["topic"] == "strict/a"
    assert [r.json() for r in records] == [{"ok": True}]
    assert bridge.inbound_stats.dead_lettered == 1


async def test_a_stream_goes_to_a_311_subscriber_in_order(
    amqtt_broker: Amqtt, gateway: Gateway, state_dir: Path
) -> None:
    count = 5
    route = OutboundRoute(stream="results/x", topic="results/x", qos=1)
    bridge = _bridge(gateway, amqtt_broker, state_dir, inbound=(), outbound=(route,))
    await bridge.start()
    got = []
    try:
        async with _client(amqtt_broker, "app") as app:
            await app.subscribe("results/x", qos=1)
            await bridge.wait_connected(10)
            for n in range(count):
                await gateway.publish(PRINCIPAL, "results/x", Event.message({"n": n}))
            await gateway.publish(PRINCIPAL, "results/x", Event.done())
            async with asyncio.timeout(10):
                async for message in app.messages:
                    got.append(message)
                    if len(got) == count + 1:
                        break
        assert await _until(lambda: bridge.outbound_stats[0].finished)
    finally:
        await bridge.aclose()
    bodies = [orjson.loads(m.payload) for m in got]
    # MQTT 3.1.1 has no properties: the position rides in the body.
    assert [b["kind"] for b in bodies] == ["message"] * count + ["done"]
    assert {b["stream"] for b in bodies} == {"results/x"} and len({b["epoch"] for b in bodies}) == 1
    assert [b["payload"]["n"] for b in bodies[:count]] == list(range(count))
    assert [b["seq"] for b in bodies] == sorted({b["seq"] for b in bodies})
    assert all(m.properties is None for m in got)
    assert all(m.topic.value == "results/x" for m in got)
    assert bridge.outbound_stats[0].published == count + 1
