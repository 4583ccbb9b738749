"""A rule's promise under SIGKILL: what it reads through the bridge is stored before the broker
hears an acknowledgement, and its output rows come out exactly once, windows included.

A real ``airlane serve`` (JetStream hub on a real nats-server, bridged to a real Mosquitto,
rules kept in a directory) is killed with SIGKILL twice while paho-mqtt sensors publish
numbered QoS 1 readings (each with its ``msg-id``). Two rules read them: a mapping rule whose
output must hold every number once, and a 200 ms tumbling count whose windows must add up to
every reading once.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiomqtt
import httpx
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from tests.mosquitto import Mosquitto
from tests.natsserver import NatsServer
from tests.servers import FAST_SYNTHETIC, ServerProcess, run_gateway

TOPIC = "plant/line-1/t"
RULES = {
    "each": {"sql": "SELECT i FROM 'plant/+/t' WHERE i >= 0"},
    "count": {
        "sql": "SELECT count(*) AS n, sum(i) AS s FROM 'plant/+/t' WHERE i >= 0 "
        "GROUP BY TUMBLINGWINDOW(ms, 200)"
    },
}


def _command(tmp_path: Path, broker: Mosquitto, hub: str) -> list[str]:
    config = tmp_path / "airlane.toml"
    config.write_text(
        FAST_SYNTHETIC
        + f"""
[rules]
dir = "{tmp_path / "rules"}"
late_s = 0.1

[[mqtt]]
url = "{broker.url}"
state_dir = "{tmp_path / "bridge"}"
receive_maximum = 32
reconnect_min_s = 0.05
reconnect_max_s = 0.5
"""
    )
    return [
        sys.executable, "-m", "airlane", "serve", "--port", "0", "--config", str(config),
        "--hub", hub, "--log-level", "info", "--airc-port", "-1", "--grpc-port", "-1",
        "--http3-port", "-1", "--rsocket-port", "-1",
    ]  # fmt: skip


async def _until(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return False


async def _stat(client: httpx.AsyncClient, server: ServerProcess, rule: str, key: str) -> int:
    response = await client.get(f"{server.url}/v1/rules/{rule}")
    response.raise_for_status()
    return int(response.json()["stats"].get(key, 0))


async def _rows(client: httpx.AsyncClient, server: ServerProcess, rule: str) -> list[Any]:
    rows: list[Any] = []
    seq = 1
    while True:
        response = await client.get(
            f"{server.url}/v1/logs/rules.{rule}.out/events",
            params={"from_seq": seq, "limit": 1000},
        )
        response.raise_for_status()
        records = response.json()["records"]
        if not records:
            return rows
        rows += [record["data"] for record in records]
        seq = records[-1]["seq"] + 1


def _props(i: int) -> PahoProperties:
    props = PahoProperties(PacketTypes.PUBLISH)
    props.UserProperty = [("msg-id", f"reading-{i}")]
    return props


async def test_rule_outputs_are_exactly_once_across_gateway_sigkills(
    nats_server: NatsServer, broker: Mosquitto, tmp_path: Path
) -> None:
    total = 400
    command = _command(tmp_path, broker, nats_server.url)
    published = 0

    async def publish() -> None:
        nonlocal published
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, identifier="sensor", protocol=aiomqtt.ProtocolVersion.V5
        ) as sensor:
            for i in range(total):
                await sensor.publish(TOPIC, orjson.dumps({"i": i}), qos=1, properties=_props(i))
                published += 1
                await asyncio.sleep(0.01)

    async with httpx.AsyncClient(timeout=10) as client:
        with run_gateway(command) as first:
            for name, body in RULES.items():
                response = await client.put(f"{first.url}/v1/rules/{name}", json=body)
                assert response.status_code == 201, response.text
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="probe") as probe:

                async def tapped() -> bool:  # a probe the rules filter out reaches them
                    await probe.publish(TOPIC, b'{"i": -1}', qos=1)
                    return await _stat(client, first, "each", "rows_in") > 0

                assert await _until(tapped, 20), "the rules' filter was never subscribed"
            publisher = asyncio.create_task(publish())
            assert await _until(lambda: _fed(client, first, 100), 30)
            first.kill()
        await asyncio.sleep(0.3)  # readings wait at the broker meanwhile
        with run_gateway(command) as again:
            assert await _until(lambda: _fed(client, again, 250), 30)
            again.kill()
        await asyncio.wait_for(publisher, 60)
        assert published == total
        with run_gateway(command) as last:
            if not await _until(lambda: _all_counted(client, last, total), 60):
                raise AssertionError(await _diagnosis(client, last))
            await asyncio.sleep(1.0)  # anything counted twice would show by now
            each = await _rows(client, last, "each")
            windows = await _rows(client, last, "count")
    numbers = [row["i"] for row in each]
    assert sorted(numbers) == list(range(total)), (
        f"{len(numbers)} rows; twice: {sorted({n for n in numbers if numbers.count(n) > 1})[:20]}"
    )
    assert sum(w["n"] for w in windows) == total
    assert sum(w["s"] for w in windows) == total * (total - 1) // 2


async def _fed(client: httpx.AsyncClient, server: ServerProcess, count: int) -> bool:
    return await _stat(client, server, "each", "rows_out") >= count


async def _all_counted(client: httpx.AsyncClient, server: ServerProcess, total: int) -> bool:
    if len(await _rows(client, server, "each")) < total:
        return False
    return sum(w["n"] for w in await _rows(client, server, "count")) >= total


async def _diagnosis(client: httpx.AsyncClient, server: ServerProcess) -> str:
    each = [row["i"] for row in await _rows(client, server, "each")]
    windows = await _rows(client, server, "count")
    missing = sorted(set(range(max(each, default=0))) - set(each))
    stats = {}
    for rule in RULES:
        stats[rule] = (await client.get(f"{server.url}/v1/rules/{rule}")).json()["stats"]
    return (
        f"each: {len(each)} rows, missing {missing[:20]}; count: n={sum(w['n'] for w in windows)}"
        f" over {len(windows)} windows; stats {stats}"
    )
