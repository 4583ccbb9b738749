"""What the Waku tests share: the js-waku light node under Node (`JsWaku`), a gateway with a
Waku node in this process (`local_node`), and a libp2p dialer written here (`dial`) for what
js-waku would never send (malformed, oversized, hostile).

Without Node.js or the client's packages (``npm ci --prefix tests/waku/node``, which
``scripts/setup.sh`` runs) the js-waku tests skip, except in CI (``CI=true``), where they
fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.gateway import Gateway, GatewayConfig
from airlane.hub import MemoryHub
from airlane.transports.waku import WakuConfig, WakuNode
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.pipe import open_pipe
from airlane.wire.libp2p import Identity, Multiaddr

NODE_DIR = Path(__file__).resolve().parent / "node"
CLIENT = NODE_DIR / "waku-client.mjs"
RELAY_PEER = NODE_DIR / "relay-peer.mjs"
CLUSTER = 42
TOPIC = "/airlane-test/1/chat/proto"


def node_binary() -> str:
    """``node`` with js-waku installed; skips the test without them (fails it in CI)."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (NODE_DIR / "node_modules" / "@waku" / "sdk").is_dir():
        missing = f"run 'npm ci --prefix {NODE_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"js-waku interop tests need Node.js: {missing}")
        pytest.skip(f"js-waku interop tests need Node.js: {missing}")
    assert node is not None
    return node


class JsWaku:
    """A running Node peer (``waku-client.mjs``, ``relay-peer.mjs``): commands in, JSON lines
    out."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        """Every message received so far, in order."""
        self.started: dict[str, Any] = {}
        """The reply to ``start``, where the helper that started it keeps it."""
        self._replies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._arrived = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while line := await stdout.readline():
            item = json.loads(line)
            if item.get("event") == "message":
                self.messages.append(item)
                self._arrived.set()
            else:
                await self._replies.put(item)

    async def command(self, op: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Send one command; its reply (an ``error`` reply raises AssertionError)."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
        await stdin.drain()
        reply = await asyncio.wait_for(self._replies.get(), timeout)
        assert reply.get("op") != "error", f"{op}: {reply.get('message')}"
        return reply

    async def attempt(self, op: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Like `command`, but an error reply is returned rather than raised."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
        await stdin.drain()
        return await asyncio.wait_for(self._replies.get(), timeout)

    async def wait_messages(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until ``count`` filter messages arrived; all of them."""
        async with asyncio.timeout(timeout):
            while len(self.messages) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.messages)

    async def close(self) -> None:
        """Stop the node (EOF on stdin), killed if it does not exit."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 15)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def js_waku(
    peer: str, *, cluster: int = CLUSTER, timeout_ms: int = 20_000, **network: Any
) -> AsyncIterator[JsWaku]:
    """A js-waku light node connected to ``peer`` (autosharding over 8 shards unless
    ``shards=[...]`` is given)."""
    client = await _spawn(CLIENT)
    try:
        if "shards" not in network:
            network.setdefault("numShardsInCluster", 8)
        await client.command("start", peer=peer, clusterId=cluster, timeoutMs=timeout_ms, **network)
        yield client
    finally:
        await client.close()


async def _spawn(script: Path) -> JsWaku:
    process = await asyncio.create_subprocess_exec(
        node_binary(),
        str(script),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL if not os.environ.get("WAKU_DEBUG") else None,
        limit=1 << 22,  # a message event with a large payload is one long line
    )
    return JsWaku(process)


@contextlib.asynccontextmanager
async def js_relay(peer: str, topics: list[str]) -> AsyncIterator[JsWaku]:
    """A js-libp2p gossipsub node (``relay-peer.mjs``) relaying ``topics`` with ``peer``."""
    client = await _spawn(RELAY_PEER)
    try:
        await client.command("start", peer=peer, topics=topics)
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def js_relay_listening(listen: list[str], topics: list[str]) -> AsyncIterator[JsWaku]:
    """A js-libp2p gossipsub node listening on ``listen`` for a node to dial it; its start
    reply (with its addresses) is ``started``."""
    client = await _spawn(RELAY_PEER)
    try:
        client.started = await client.command("start", listen=listen, topics=topics)
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def local_node(
    identity: Identity | None = None,
    *,
    hub: MemoryHub | None = None,
    gateway_config: GatewayConfig | None = None,
    **settings: Any,
) -> AsyncIterator[WakuNode]:
    """A gateway (in-memory streams) and a Waku node on 127.0.0.1 (a free port unless
    ``port`` is given)."""
    backend = SyntheticBackend(SyntheticConfig(speed=0))
    gateway = Gateway(hub or MemoryHub(), backend, config=gateway_config)
    await gateway.start()
    settings.setdefault("cluster_id", CLUSTER)
    settings.setdefault("port", 0)
    node = WakuNode(gateway, WakuConfig(**settings), identity=identity or Identity())
    await node.start()
    try:
        yield node
    finally:
        await node.aclose()
        await gateway.aclose()


@contextlib.asynccontextmanager
async def dial(
    address: Multiaddr, identity: Identity | None = None
) -> AsyncIterator[PeerConnection]:
    """A libp2p connection (this project's own dialer) to a node's address."""
    pipe = await open_pipe(address)
    connection = PeerConnection(
        pipe, identity or Identity(), {}, initiator=True, remote=address.peer_id()
    )
    runner = asyncio.create_task(connection.run())
    try:
        await asyncio.wait_for(connection.ready.wait(), 10)
        yield connection
    finally:
        await connection.close()
        await asyncio.wait_for(runner, 10)
