"""Shared rooms under faults: LWW rooms written over HTTP from every node, then loaded on
every node and compared with what all the room's records give."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import httpx
import orjson

from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from airlane.sync.ops import Op
from tests.cluster.faultlab.clients import path, sse
from tests.cluster.faultlab.cluster import Cluster

__all__ = ["LWW_ROOM", "RoomWriters", "check_rooms"]

LWW_ROOM = "lab"
KEYS = 12
ROOM_READY_S = 10.0
"""How long a node may answer 503 for the room after the last fault (the hub's own
``unavailable_after_s`` is 4 s in the lab)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def canonical(op: dict[str, Any]) -> bytes:
    """An op's dict as comparable bytes (key order aside)."""
    return orjson.dumps(op, option=orjson.OPT_SORT_KEYS)


class RoomWriters:
    """Two clients, each with its own replica and clock, setting keys of one LWW room through
    whichever node answers; an op answered 202 is stored."""

    def __init__(self, cluster: Cluster, client: httpx.AsyncClient, rng: random.Random) -> None:
        self.cluster = cluster
        self.client = client
        self.rng = rng
        self.acked: list[dict[str, Any]] = []
        self.errors: list[str] = []

    async def run(self, stop: asyncio.Event, name: str) -> None:
        """Write until ``stop``."""
        replica = LWWMap(HybridClock(name))
        n = 0
        while not stop.is_set():
            live = self.cluster.live()
            if live:
                node = self.rng.choice(live)
                op = replica.set(f"k{self.rng.randrange(KEYS)}", f"{name}-{n}", now_ms())
                n += 1
                with contextlib.suppress(httpx.HTTPError):
                    response = await self.client.post(
                        f"{node.url}/v1/rooms/{LWW_ROOM}/ops", json={"ops": [op.to_dict()]}
                    )
                    if response.status_code == 202:
                        self.acked.append(op.to_dict())
                    elif response.status_code >= 500 and response.status_code != 503:
                        self.errors.append(f"room op: {response.status_code} {response.text}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(0.05, 0.2))


async def _records(client: httpx.AsyncClient, url: str, stream_id: str) -> list[dict[str, Any]]:
    """Every record of a stream that never ends: read until it has been quiet a moment."""
    info = await client.get(f"{url}/v1/streams/{path(stream_id)}")
    info.raise_for_status()
    last_seq = info.json()["last_seq"]
    records: list[dict[str, Any]] = []
    if last_seq == 0:
        return records
    start = f"{info.json()['epoch']}:0"
    async with asyncio.timeout(20):
        async for _, event in sse(
            client, f"{url}/v1/streams/{path(stream_id)}/events?from={start}"
        ):
            records.append(event)
            if event["seq"] >= last_seq:
                break
    return records


async def _room(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """The room's state from one node. A 503 (a node still reading the logs of the streams'
    home processes after a restart: busy, not wrong) is asked again for a few seconds, as
    a client would; anything else is the answer."""
    deadline = time.monotonic() + ROOM_READY_S
    while True:
        response = await client.get(f"{url}/v1/rooms/{LWW_ROOM}")
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.5)


async def check_rooms(
    cluster: Cluster, client: httpx.AsyncClient, writers: RoomWriters
) -> list[str]:
    """The LWW room as every node serves it equals what all its records give, and holds every
    op that was acknowledged."""
    problems = list(writers.errors)
    nodes = cluster.live()
    stream_id = f"rooms/{LWW_ROOM}"
    try:
        records = await _records(client, nodes[0].url, stream_id)
    except (httpx.HTTPError, TimeoutError) as exc:
        return [*problems, f"room {LWW_ROOM}: its records could not be read ({exc!r})"]
    expected = LWWMap(HybridClock("checker"))
    stored = set()
    for record in records:
        body = record.get("payload") or {}
        for item in body.get("ops") or body.get("state") or []:
            expected.apply(Op.from_dict(item), now_ms())
            stored.add(canonical(item))
    for op in writers.acked:
        if canonical(op) not in stored:
            problems.append(f"room {LWW_ROOM}: acknowledged op {op} is in no record")
    want = sorted(canonical(op.to_dict()) for op in expected.entries())
    for node in nodes:
        response = await _room(client, node.url)
        if response.status_code != 200:
            problems.append(
                f"room {LWW_ROOM} on {node.node_id}: {response.status_code} {response.text[:300]}"
            )
            continue
        got = sorted(canonical(entry) for entry in response.json()["entries"])
        if got != want:
            problems.append(
                f"room {LWW_ROOM} on {node.node_id}: {len(got)} entries, the records give "
                f"{len(want)} (differing: {len(set(got) ^ set(want))})"
            )
    return problems
