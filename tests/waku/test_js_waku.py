"""js-waku (npm ``@waku/sdk`` 0.0.36, a light node nobody here wrote) against ``airlane serve
--waku-port 0``: it connects over WebSocket (Noise, mplex, identify), subscribes with filter,
receives what is published over Airlane's HTTP API, pushes with light push what an HTTP
reader then sees, and queries the store, paged and by time, which Airlane answers from the
stream log.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlane.wire.waku import auto_shard, shard_topic
from tests.servers import FAST_SYNTHETIC, run_server
from tests.waku.support import CLUSTER, TOPIC, js_waku, node_binary

pytestmark = pytest.mark.timeout(90)

STREAM = "waku" + TOPIC


def _config(tmp_path: Path, extra: str = "") -> str:
    return FAST_SYNTHETIC + (
        f'\n[waku]\ncluster_id = {CLUSTER}\nkey_file = "{tmp_path / "node.key"}"\n{extra}'
    )


def _events(base: str) -> list[dict[str, Any]]:
    """Every event the stream holds, read over the HTTP API (SSE)."""
    with httpx.Client(base_url=base, timeout=10) as client:
        info = client.get(f"/v1/streams/{STREAM}").json()
        with client.stream(
            "GET", f"/v1/streams/{STREAM}/events", params={"max_events": info["last_seq"]}
        ) as response:
            return [
                json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")
            ]


async def test_filter_light_push_and_the_http_api_see_the_same_messages(tmp_path: Path) -> None:
    node_binary()
    with run_server("--waku-port", "0", config=_config(tmp_path)) as server:
        assert server.waku is not None
        async with js_waku(server.waku) as light:
            subscribed = await light.command("subscribe", contentTopic=TOPIC)
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                for n in range(3):
                    response = await http.post(
                        f"/v1/streams/{STREAM}/events",
                        json={"kind": "message", "payload": {"n": n}},
                    )
                    assert response.status_code == 200, response.text
            received = await light.wait_messages(3)
            assert [json.loads(base64.b64decode(m["payload"])) for m in received] == [
                {"n": 0},
                {"n": 1},
                {"n": 2},
            ]
            # Autosharding: js-waku and the node give the content topic the same shard.
            shard = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
            assert {m["pubsubTopic"] for m in received} == {subscribed["pubsubTopic"]} == {shard}

            pushed = await light.command(
                "push", contentTopic=TOPIC, payload=base64.b64encode(b"from js-waku").decode()
            )
            assert pushed["successes"] and not pushed["failures"]
            echoed = await light.wait_messages(4)
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                metrics = (await http.get("/metrics")).text
            assert "airlane_waku_peers 1.0" in metrics
            assert "airlane_waku_light_pushes_total 1.0" in metrics
            assert "airlane_waku_filter_pushed_total 4.0" in metrics

        events = _events(server.url)
        waku_event = events[-1]
        assert waku_event["kind"] == "message"
        assert base64.b64decode(waku_event["payload_base64"]) == b"from js-waku"
        # The node's hash is the one js-waku computed for what it sent and what it received.
        assert waku_event["hash"] == pushed["hash"] == echoed[-1]["hash"]
        assert waku_event["timestamp"] == int(pushed["timestamp"])
        assert waku_event["pubsub_topic"] == pushed["pubsubTopic"]


async def test_the_store_pages_and_filters_by_time_from_the_stream_log(tmp_path: Path) -> None:
    node_binary()
    with run_server("--waku-port", "0", config=_config(tmp_path)) as server:
        assert server.waku is not None
        async with js_waku(server.waku) as light:
            pushes = []
            for n in range(7):
                payload = base64.b64encode(f"m{n}".encode()).decode()
                # Timestamps a second apart, so a time range can pick some out.
                stamp = 1_800_000_000_000 + n * 1000
                pushes.append(
                    await light.command(
                        "push", contentTopic=TOPIC, payload=payload, timestampMs=stamp
                    )
                )
            forward = await light.command(
                "store", contentTopic=TOPIC, pageSize=3, direction="forward"
            )
            assert [base64.b64decode(m["payload"]) for m in forward["messages"]] == [
                f"m{n}".encode() for n in range(7)
            ]
            assert [m["hash"] for m in forward["messages"]] == [p["hash"] for p in pushes]
            backward = await light.command(
                "store", contentTopic=TOPIC, pageSize=2, direction="backward"
            )
            assert sorted(m["hash"] for m in backward["messages"]) == sorted(
                p["hash"] for p in pushes
            )
            ranged = await light.command(
                "store",
                contentTopic=TOPIC,
                timeStart=1_800_000_002_000,
                timeEnd=1_800_000_004_000,
            )
            assert [base64.b64decode(m["payload"]) for m in ranged["messages"]] == [
                b"m2",
                b"m3",
                b"m4",
            ]
            empty = await light.command("store", contentTopic="/airlane-test/1/other/proto")
            assert empty["messages"] == []


async def test_static_sharding_and_a_node_restarted_under_the_same_key(tmp_path: Path) -> None:
    node_binary()
    config = _config(tmp_path, "shards = [3, 5]\n")
    with run_server("--waku-port", "0", config=config) as server:
        first = server.waku
        assert first is not None
        async with js_waku(first, shards=[5]) as light:
            await light.command("subscribe", contentTopic=TOPIC)
            reply = await light.command("push", contentTopic=TOPIC, payload="YQ==")
            assert reply["pubsubTopic"] == f"/waku/2/rs/{CLUSTER}/5"
            await light.wait_messages(1)
        # A shard the node does not serve: js-waku will not use it for that shard.
        refused = None
        try:
            async with js_waku(first, shards=[4], timeout_ms=8000):
                pass
        except AssertionError as exc:
            refused = str(exc)
        assert refused is not None and "shard" in refused.lower()
    with run_server("--waku-port", "0", config=config) as again:
        assert again.waku is not None
        # The peer id (the part js-waku is configured with) survives the restart.
        assert again.waku.rsplit("/p2p/", 1)[1] == first.rsplit("/p2p/", 1)[1]
