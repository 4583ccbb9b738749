"""Yjs rooms under faults: pycrdt editors on y-websocket connections to any node, then the
room as every node serves it compared with the document all its records give.

An insert counts as confirmed once an editor connected to another node than the writer's has
it: it crossed the hub, so JetStream holds it, and no later fault may lose it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
from typing import Any

import httpx
from pycrdt import Doc, Text
from websockets.asyncio.client import connect

from tests.cluster.faultlab.cluster import Cluster, Incarnation
from tests.cluster.faultlab.rooms import _records
from tests.sync.yjs.support import PyClient

__all__ = ["YJS_ROOM", "YjsWriters", "check_yjs"]

YJS_ROOM = "labdoc"
CONNECT_TIMEOUT_S = 5.0
CONFIRM_TIMEOUT_S = 5.0


def ws_url(node: Incarnation) -> str:
    return node.url.replace("http://", "ws://") + f"/v1/yjs/{YJS_ROOM}"


@contextlib.asynccontextmanager
async def editor(node: Incarnation, name: str) -> Any:
    """A synced pycrdt editor of the lab's room on ``node`` (bounded)."""
    async with asyncio.timeout(CONNECT_TIMEOUT_S):
        ws = await connect(ws_url(node), open_timeout=CONNECT_TIMEOUT_S)
        client = PyClient(ws, name)
        await client.start()
        await client.synced.wait()
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await client.aclose()


class YjsWriters:
    """Editors appending unique words to one Yjs text through whichever node answers."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.confirmed: list[str] = []
        """Words another node's editor saw."""

    async def run(self, stop: asyncio.Event, name: str) -> None:
        """Write until ``stop``: a few words per connection, each batch confirmed elsewhere."""
        n = 0
        while not stop.is_set():
            live = self.cluster.live()
            if len(live) < 2:
                await self._pause(stop)
                continue
            writer_node, reader_node = self.rng.sample(live, 2)
            words = [f"{name}.{n + i};" for i in range(self.rng.randint(1, 3))]
            n += len(words)
            with contextlib.suppress(Exception):  # a node dying under us: try elsewhere
                async with editor(writer_node, name) as client:
                    for word in words:
                        client.text.insert(len(client.text), word)
                    await client.flush()
                    async with editor(reader_node, f"{name}-check") as check:
                        await check.wait_until(
                            lambda: all(w in str(check.text) for w in words),  # noqa: B023
                            CONFIRM_TIMEOUT_S,
                        )
                        self.confirmed += words
            await self._pause(stop)

    async def _pause(self, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self.rng.uniform(0.1, 0.3))


async def check_yjs(cluster: Cluster, client: httpx.AsyncClient, writers: YjsWriters) -> list[str]:
    """The Yjs room as every node serves it equals what all its records give, and holds every
    confirmed word."""
    nodes = cluster.live()
    try:
        records = await _records(client, nodes[0].url, f"yjs/{YJS_ROOM}")
    except (httpx.HTTPError, TimeoutError) as exc:
        return [f"yjs room {YJS_ROOM}: its records could not be read ({exc!r})"]
    everything = Doc()
    text = everything.get("text", type=Text)
    for record in records:
        body = record.get("payload") or {}
        if body.get("type") in ("update", "state"):
            everything.apply_update(base64.b64decode(body["data"]))
    expected = str(text)
    problems = [
        f"yjs room {YJS_ROOM}: confirmed word {word!r} is in no record"
        for word in writers.confirmed
        if word not in expected
    ]
    for node in nodes:
        try:
            async with editor(node, "checker") as served:
                with contextlib.suppress(TimeoutError):
                    await served.wait_until(lambda: str(served.text) == expected, 5.0)
                got = str(served.text)
        except (TimeoutError, OSError) as exc:
            problems.append(f"yjs room {YJS_ROOM} on {node.node_id}: not served ({exc!r})")
            continue
        if got != expected:
            problems.append(
                f"yjs room {YJS_ROOM} on {node.node_id}: {len(got)} characters, the records "
                f"give {len(expected)}"
            )
    return problems
