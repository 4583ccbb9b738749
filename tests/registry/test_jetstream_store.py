"""`JetStreamSchemaStore` against the registry contract, and what only a shared broker shows:
two nodes see one registry, racing registrations get distinct versions, and the registry
survives a broker restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js.api import StorageType

from airlane.registry import (
    DEFAULT_BUCKET,
    Compatibility,
    JetStreamSchemaStore,
    RegistryUnavailable,
    Schema,
    SchemaRegistry,
    SchemaVersion,
)
from tests.natsserver import NatsServer
from tests.registry.contract import CLOSED_V1, CLOSED_V2, RegistryContract


def unique_bucket() -> str:
    return f"T_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(nats_session: NatsServer) -> AsyncIterator[JetStreamSchemaStore]:
    nc = await nats.connect(nats_session.url)
    js = nc.jetstream()
    bucket = unique_bucket()
    yield await JetStreamSchemaStore.open(js, bucket)
    await js.delete_key_value(bucket)
    await nc.close()


class TestJetStreamStoreContract(RegistryContract):
    """The shared contract, over a real nats-server."""


async def connect(server: NatsServer, bucket: str = DEFAULT_BUCKET):
    nc = await nats.connect(server.url)
    return nc, SchemaRegistry(await JetStreamSchemaStore.open(nc.jetstream(), bucket))


async def test_bucket_is_created_with_history_one_and_file_storage(nats_server: NatsServer):
    nc, registry = await connect(nats_server)
    try:
        await registry.register("orders", CLOSED_V1)
        info = await nc.jetstream().stream_info(f"KV_{DEFAULT_BUCKET}")
        assert info.config.storage == StorageType.FILE
        assert info.config.max_msgs_per_subject == 1
        entry = await (await nc.jetstream().key_value(DEFAULT_BUCKET)).get("subjects.orders.v.1")
        assert b'"subject":"orders"' in entry.value
    finally:
        await nc.close()


async def test_two_nodes_see_one_registry(nats_server: NatsServer):
    (nc_a, node_a), (nc_b, node_b) = await connect(nats_server), await connect(nats_server)
    try:
        await node_a.register("orders", CLOSED_V1)
        assert (await node_b.get("orders")).schema == CLOSED_V1
        await node_b.set_compatibility("orders", Compatibility.FORWARD)
        assert await node_a.compatibility("orders") is Compatibility.FORWARD
        await node_a.set_compatibility("orders", Compatibility.BACKWARD)
        await node_b.register("orders", CLOSED_V2)
        assert await node_a.versions("orders") == [1, 2]
        assert await node_a.subjects() == ["orders"]
        await node_a.delete_subject("orders")
        assert await node_b.subjects() == []
    finally:
        await nc_a.close()
        await nc_b.close()


class RaceAtCreate(JetStreamSchemaStore):
    """Holds its first create until the rival node has also read the subject, so that both
    try to write the same version number."""

    barrier: asyncio.Barrier
    raced = False
    lost = 0

    async def create(self, version: SchemaVersion) -> bool:
        if not self.raced:
            self.raced = True
            await self.barrier.wait()
        created = await super().create(version)
        self.lost += not created
        return created


async def racing_nodes(server: NatsServer, bucket: str):
    barrier = asyncio.Barrier(2)
    nodes = []
    for _ in range(2):
        nc = await nats.connect(server.url)
        store = await RaceAtCreate.open(nc.jetstream(), bucket)
        store.barrier = barrier
        nodes.append((nc, SchemaRegistry(store)))
    return nodes


async def test_racing_registrations_get_versions_one_and_two(nats_session: NatsServer):
    (nc_a, node_a), (nc_b, node_b) = await racing_nodes(nats_session, unique_bucket())
    try:
        extra = Schema.json({**CLOSED_V1.document, "title": "also v1, but a different schema"})
        got_a, got_b = await asyncio.gather(
            node_a.register("orders", CLOSED_V1), node_b.register("orders", extra)
        )
        assert sorted([got_a.version, got_b.version]) == [1, 2]
        assert node_a.store.lost + node_b.store.lost == 1  # they did race for version 1
        assert await node_a.versions("orders") == [1, 2]
        for got in (got_a, got_b):
            assert (await node_b.get("orders", got.version)).schema == got.schema
    finally:
        await nc_a.close()
        await nc_b.close()


async def test_racing_identical_registrations_share_one_version(nats_session: NatsServer):
    (nc_a, node_a), (nc_b, node_b) = await racing_nodes(nats_session, unique_bucket())
    try:
        got_a, got_b = await asyncio.gather(
            node_a.register("orders", CLOSED_V1), node_b.register("orders", CLOSED_V1)
        )
        assert got_a == got_b and got_a.version == 1
        assert node_a.store.lost + node_b.store.lost == 1
        assert await node_b.versions("orders") == [1]
    finally:
        await nc_a.close()
        await nc_b.close()


async def test_registry_survives_a_broker_restart(nats_server: NatsServer):
    nc, registry = await connect(nats_server)
    await registry.register("orders", CLOSED_V1)
    await registry.register("orders", CLOSED_V2)
    await registry.set_compatibility("orders", Compatibility.FULL)
    await nc.close()
    nats_server.restart()  # SIGKILL, then start on the same store
    nc, registry = await connect(nats_server)
    try:
        assert await registry.versions("orders") == [1, 2]
        assert (await registry.get("orders")).schema == CLOSED_V2
        assert await registry.compatibility("orders") is Compatibility.FULL
    finally:
        await nc.close()


async def test_broker_down_is_registry_unavailable(nats_server: NatsServer):
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=1, reconnect_time_wait=0.1)
    store = await JetStreamSchemaStore.open(nc.jetstream(timeout=0.5), unique_bucket())
    registry = SchemaRegistry(store)
    nats_server.kill()
    try:
        with pytest.raises(RegistryUnavailable) as info:
            await registry.register("orders", CLOSED_V1)
        assert info.value.code == "registry_unavailable" and info.value.__cause__ is not None
    finally:
        await nc.close()
