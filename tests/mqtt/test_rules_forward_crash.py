"""A generation a rule publishes to its result topic, across a SIGKILL of its gateway.

A real ``airlane serve`` (JetStream hub on a real nats-server, bridged to a real Mosquitto)
runs a rule whose ``generate`` action publishes each event of the generation to a topic. The
broker is stopped (SIGSTOP) while the generation goes on, so the forward falls behind, and the
gateway is killed with SIGKILL. The gateway started again under the same identity publishes
again what followed the last position it saved. A consumer that keeps the last ``seq`` it
applied, as edge.md says, must rebuild exactly the text the stream holds: each delta comes
with its own seq, never several merged into one that would repeat text it had.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiomqtt
import httpx
import orjson
import pytest

from tests.mosquitto import Mosquitto
from tests.natsserver import NatsServer
from tests.servers import run_gateway

pytestmark = pytest.mark.timeout(120)

RULE = {
    "sql": "SELECT i FROM feed",
    "actions": [
        {"generate": {"prompt": "Reading {i}", "max_tokens": 400, "result_topic": "advice/{i}"}}
    ],
}


def _command(tmp_path: Path, broker: Mosquitto, hub: str) -> list[str]:
    config = tmp_path / "airlane.toml"
    config.write_text(
        f"""
[synthetic]
ttft_ms = 5.0
itl_ms = 15.0
itl_jitter_ms = 0.0

[rules]
dir = "{tmp_path / "rules"}"

[[mqtt]]
url = "{broker.url}"
state_dir = "{tmp_path / "bridge"}"
reconnect_min_s = 0.05
reconnect_max_s = 0.5
"""
    )
    return [
        sys.executable, "-m", "airlane", "serve", "--port", "0", "--config", str(config),
        "--hub", hub, "--node-id", "edge-1", "--log-level", "warning", "--airc-port", "-1",
        "--grpc-port", "-1", "--http3-port", "-1", "--rsocket-port", "-1",
    ]  # fmt: skip


async def test_a_consumer_keeping_the_last_seq_rebuilds_the_text_across_a_sigkill(
    nats_server: NatsServer, broker: Mosquitto, tmp_path: Path
) -> None:
    command = _command(tmp_path, broker, nats_server.url)
    applied: list[dict[str, Any]] = []  # what a consumer keeping the last seq applies
    copies = 0
    ended = asyncio.Event()

    async def consume(reader: aiomqtt.Client) -> None:
        nonlocal copies
        async for message in reader.messages:
            event = orjson.loads(message.payload)  # type: ignore[arg-type]
            if applied and event["seq"] <= applied[-1]["seq"]:
                copies += 1  # published again after the restart: skipped
                continue
            applied.append(event)
            if event["kind"] in ("done", "error"):
                ended.set()
                return

    async with (
        httpx.AsyncClient(timeout=10) as client,
        aiomqtt.Client(
            "127.0.0.1", broker.port, identifier="advice-reader",
            protocol=aiomqtt.ProtocolVersion.V5,
        ) as reader,
    ):  # fmt: skip
        await reader.subscribe("advice/#", qos=1)
        consumer = asyncio.create_task(consume(reader))
        with run_gateway(command, timeout=30) as first:
            assert (await client.put(f"{first.url}/v1/logs/feed")).status_code == 201
            response = await client.put(f"{first.url}/v1/rules/advise", json=RULE)
            assert response.status_code == 201, response.text
            incarnation = response.json()["incarnation"]
            row = {"type": "r", "data": {"i": 7}}
            assert (await client.post(f"{first.url}/v1/logs/feed/events", json=row)).is_success
            async with asyncio.timeout(20):
                while len(applied) < 20:
                    await asyncio.sleep(0.02)
            # The broker stops taking messages: the forward waits on a publish while the
            # generation goes on, so the position it saved falls behind the stream.
            assert broker.process is not None
            os.kill(broker.process.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(1.5)
                first.kill()  # SIGKILL
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
        behind = len(applied)
        with run_gateway(command, timeout=30) as again:
            await asyncio.wait_for(ended.wait(), 60)
            # The first output row's generation (`rules/<name>/<incarnation>/<row>.<action>`).
            stream = f"rules/advise/{incarnation}/1.0"
            response = await client.get(f"{again.url}/v1/streams/{stream}/snapshot")
            assert response.status_code == 200, response.text
            snapshot = response.json()
        await asyncio.wait_for(consumer, 5)
    text = "".join(e.get("text", "") for e in applied if e["kind"] == "delta")
    assert text == snapshot["text"]["content"], (len(text), len(snapshot["text"]["content"]))
    assert [e["seq"] for e in applied] == sorted({e["seq"] for e in applied})
    assert len(applied) > behind  # the generation went on past where the consumer stood
    assert copies >= 1  # the restarted gateway published again what the consumer had
