"""Content topics kept in event logs (``[[waku.logs]]``), both ways: a light push becomes one
record (its hash the idempotency key, so a repeat is the same record), a record appended
through the gateway reaches filter subscribers and the store, ephemeral messages stay out of
the store, relay between nodes keeps each message once in every node's log, and the routes
load from a configuration file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from airlane.gateway import NewEvent
from airlane.server.config import ConfigError, load_config
from airlane.transports.waku import LightClient, WakuNode
from airlane.transports.waku.config import LogRoute
from airlane.wire.waku import StoreQuery, WakuMessage, auto_shard, shard_topic
from tests.waku.support import CLUSTER, local_node

pytestmark = pytest.mark.timeout(60)

TOPIC = "/airlane-test/1/orders/json"
PUBSUB = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
ROUTES = (LogRoute(TOPIC, "orders"),)


async def _records(node: WakuNode) -> list[bytes]:
    records = await node.gateway.logs.read(node.bridge.principal, "orders", from_seq=1)
    return [record.data for record in records]


async def test_a_light_push_is_one_record_with_the_waku_facts() -> None:
    async with local_node(logs=ROUTES) as node, LightClient.connect(node.multiaddrs[0]) as client:
        message = WakuMessage(b'{"id":1}', TOPIC, timestamp=1_800_000_000_000_000_000)
        await client.push(message)
        await client.push(message)  # the same message again: the same record
        records = await node.gateway.logs.read(node.bridge.principal, "orders", from_seq=1)
        assert len(records) == 1
        record = records[0]
        assert record.type == "waku.message" and record.content_type == "application/json"
        assert record.data == b'{"id":1}'
        assert record.headers["waku-hash"] == message.hash(PUBSUB).hex()
        assert record.headers["waku-timestamp"] == str(message.timestamp)
        assert record.headers["waku-pubsub-topic"] == PUBSUB
        page = await client.store(StoreQuery("q", content_topics=(TOPIC,), forward=True))
        assert [m.message_hash for m in page.messages] == [message.hash(PUBSUB)]
        assert page.messages[0].message == message


async def test_records_appended_to_the_log_reach_subscribers_and_the_store() -> None:
    async with local_node(logs=ROUTES) as node, LightClient.connect(node.multiaddrs[0]) as client:
        received: list[WakuMessage] = []
        await client.subscribe(PUBSUB, [TOPIC], lambda message, pubsub: received.append(message))
        logs, principal = node.gateway.logs, node.bridge.principal
        await logs.create(principal, "orders")
        await logs.append(principal, "orders", [NewEvent("order.v1", b'{"id":2}')])
        # A record with a forged, undecodable meta header is still delivered (without it).
        forged = {"waku-hash": "00", "waku-meta": "%%%"}
        await logs.append(principal, "orders", [NewEvent("order.v1", b'{"id":3}', headers=forged)])
        async with asyncio.timeout(10):
            while len(received) < 2:
                await asyncio.sleep(0.02)
        assert [m.payload for m in received] == [b'{"id":2}', b'{"id":3}']
        assert received[0].timestamp is not None and received[0].timestamp % 1_000_000 == 0
        await client.push(WakuMessage(b"gone", TOPIC, ephemeral=True))
        page = await client.store(StoreQuery("q", content_topics=(TOPIC,), forward=True))
        assert [m.message.payload for m in page.messages if m.message] == [
            b'{"id":2}',
            b'{"id":3}',
        ]
        assert len(await _records(node)) == 3  # the ephemeral one is in the log all the same


async def test_relay_keeps_each_message_once_in_every_nodes_log() -> None:
    async with (
        local_node(logs=ROUTES) as a,
        local_node(logs=ROUTES, peers=(str(a.multiaddrs[0]),)) as b,
    ):
        assert a.relay is not None and b.relay is not None
        async with asyncio.timeout(10):
            while a.relay.peer_count < 1 or b.relay.peer_count < 1:
                await asyncio.sleep(0.02)
        async with LightClient.connect(a.multiaddrs[0]) as client:
            for n in range(5):
                await client.push(WakuMessage(b'{"n":%d}' % n, TOPIC, timestamp=n + 1))
        logs, principal = b.gateway.logs, b.bridge.principal
        await logs.create(principal, "orders")  # b's own record, relayed to a
        await logs.append(principal, "orders", [NewEvent("order.v1", b'{"from":"b"}')])
        expected = sorted([b'{"n":%d}' % n for n in range(5)] + [b'{"from":"b"}'])
        async with asyncio.timeout(10):
            while sorted(await _records(a)) != expected or sorted(await _records(b)) != expected:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert sorted(await _records(a)) == sorted(await _records(b)) == expected


def test_routes_load_from_the_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "airlane.toml"
    path.write_text(
        '[waku]\nenabled = true\n[[waku.logs]]\ncontent_topic = "/shop/1/orders/json"\n'
        'log = "orders"\n'
    )
    assert load_config(path).waku.logs == (LogRoute("/shop/1/orders/json", "orders"),)
    path.write_text('[waku]\n[[waku.logs]]\ncontent_topic = "/shop/1/orders/json"\n')
    with pytest.raises(ConfigError, match="content_topic and log"):
        load_config(path)
    twice = '[[waku.logs]]\ncontent_topic = "/a/1/b/c"\nlog = "x"\n'
    path.write_text("[waku]\n" + twice + twice)
    with pytest.raises((ConfigError, ValueError), match="one log only"):
        load_config(path)
    with pytest.raises(ValueError, match="content topic"):
        LogRoute("not-a-topic", "orders")
