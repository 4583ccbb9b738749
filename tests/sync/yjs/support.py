"""What the Yjs interop tests share: a real server on 127.0.0.1 around `serve_yjs` (Airlane's
own, as ``airlane serve`` runs it, or uvicorn, in the test's own event loop, so a test can look
at the rooms and share one hub between two "nodes"), the Node client
(``tests/sync/node/yjs-client.mjs``) and a pycrdt client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pycrdt import Doc, Map, Text, create_sync_message, create_update_message
from websockets.asyncio.client import ClientConnection, connect

from airlane.backends.synthetic import SyntheticBackend
from airlane.gateway import Gateway
from airlane.hub import Hub
from airlane.security import SecurityPolicy
from airlane.sync.yjs import YRooms, YRoomsConfig
from airlane.sync.yjs.protocol import (
    AwarenessEntry,
    AwarenessMessage,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    encode,
    encode_awareness_update,
    parse_awareness_update,
    parse_message,
)
from airlane.transports.http.asgi import Receive, Request, Scope, Send
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.context import AppContext
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.server import ServerSettings
from airlane.transports.http.yjs import YJS_PATH_PREFIX, serve_yjs
from tests.asgi_server import serving

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
CLIENT = NODE_DIR / "yjs-client.mjs"


def node_binary() -> str:
    """``node``, with the client's packages installed; skips the test without them (fails it
    in CI, ``CI=true``, where setup installs them)."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (NODE_DIR / "node_modules" / "y-websocket").is_dir():
        missing = f"run 'npm ci --prefix {NODE_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Yjs interop tests need Node.js: {missing}")
        pytest.skip(f"Yjs interop tests need Node.js: {missing}")
    assert node is not None
    return node


class YjsTestApp:
    """A minimal ASGI app around the Yjs endpoint: what ``AirlaneApp`` routes to it."""

    def __init__(self, gateway: Gateway, config: YRoomsConfig, http: HttpConfig) -> None:
        gateway.rooms.yjs_config = config
        metrics = HttpMetrics(gateway.stats, lambda: 0)
        self.gateway = gateway
        self.context = AppContext(gateway, http, metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            return
        request = Request.from_scope(scope)
        if request.path.startswith(YJS_PATH_PREFIX):
            await serve_yjs(self.context, request, receive, send)
            return
        await receive()
        await send({"type": "websocket.close", "code": 1008})


@dataclass
class Node:
    """One running "gateway node": its URL (for y-websocket's serverUrl) and its rooms."""

    app: YjsTestApp
    port: int

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/yjs"

    @property
    def rooms(self) -> YRooms:
        return self.app.gateway.rooms.yjs


@contextlib.asynccontextmanager
async def running_node(
    hub: Hub,
    config: YRoomsConfig | None = None,
    *,
    http: HttpConfig | None = None,
    security: SecurityPolicy | None = None,
    on_uvicorn: bool = False,
) -> AsyncIterator[Node]:
    """Serve the Yjs endpoint on a free port of 127.0.0.1, over ``hub`` (not closed here: two
    nodes may share it): on Airlane's own server (its WebSocket extensions on), or on uvicorn
    (a plain ASGI server: the endpoint sends message by message)."""
    gateway = Gateway(hub, SyntheticBackend(), security=security)
    http = http or HttpConfig()
    app = YjsTestApp(gateway, config or YRoomsConfig(), http)
    if on_uvicorn:
        async with _on_uvicorn(app, http) as port:
            try:
                yield Node(app, port)
            finally:
                await app.gateway.rooms.aclose()
        return
    async with serving(app, ServerSettings.from_http(http, graceful_s=2.0)) as served:
        try:
            yield Node(app, served.port)
        finally:
            await app.gateway.rooms.aclose()


@contextlib.asynccontextmanager
async def _on_uvicorn(app: YjsTestApp, http: HttpConfig) -> AsyncIterator[int]:
    import uvicorn  # the test extra's: the endpoint under another ASGI server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            ws="websockets-sansio",
            ws_max_size=http.max_ws_message_bytes,
            timeout_graceful_shutdown=2,
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:  # uvicorn says it has started only with this flag
                assert not task.done(), "uvicorn did not start"
                await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
        sock.close()


async def run_node_client(node: str, timeout: float = 25.0, **options: Any) -> dict[str, Any]:
    """Run the Node client with ``options`` and return its JSON line (with ``status`` added)."""
    process = await asyncio.create_subprocess_exec(
        node,
        str(CLIENT),
        json.dumps(options),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=NODE_DIR,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"node client {options.get('name')} hung") from None
    lines = out.decode().strip().splitlines()
    assert lines, f"node client printed nothing (exit {process.returncode}): {err.decode()}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["status"] = process.returncode
    return result


async def node_client_ok(node: str, **options: Any) -> dict[str, Any]:
    """`run_node_client`, asserting that it finished (exit 0)."""
    result = await run_node_client(node, **options)
    assert result["status"] == 0, result
    return result


class PyClient:
    """A Yjs peer written with pycrdt, speaking y-websocket over a real socket: it answers
    step 1 with step 2, applies what arrives, and sends its own changes as updates."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.doc: Doc[Any] = Doc()
        self.text = self.doc.get("text", type=Text)
        self.map = self.doc.get("map", type=Map)
        self.synced = asyncio.Event()
        self.changed = asyncio.Event()
        self.awareness: dict[int, Any] = {}
        self.seen_peers: set[str] = set()  # every name that has been in the awareness states
        self._applying = False
        self._outgoing: list[bytes] = []
        self.doc.observe(self._on_change)
        self._reader: asyncio.Task[None] | None = None

    def _on_change(self, event: Any) -> None:
        if not self._applying:
            self._outgoing.append(event.update)

    async def start(self) -> None:
        await self.ws.send(create_sync_message(self.doc))
        entry = AwarenessEntry(self.doc.client_id, 1, {"user": {"name": self.name}})
        await self.ws.send(encode(AwarenessMessage(encode_awareness_update([entry]))))
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for data in self.ws:
            assert isinstance(data, bytes)
            message = parse_message(data)
            if isinstance(message, SyncStep1):
                await self.ws.send(encode(SyncStep2(self.doc.get_update(message.state_vector))))
            elif isinstance(message, SyncStep2 | SyncUpdate):
                self._applying = True
                try:
                    self.doc.apply_update(message.update)
                finally:
                    self._applying = False
                if isinstance(message, SyncStep2):
                    self.synced.set()
                self.changed.set()
            elif isinstance(message, AwarenessMessage):
                for entry in parse_awareness_update(message.update):
                    if entry.state is None:
                        self.awareness.pop(entry.client_id, None)
                    else:
                        self.awareness[entry.client_id] = entry.state
                self.seen_peers.update(self.peers())
                self.changed.set()

    async def flush(self) -> None:
        """Send the changes made since the last flush."""
        out, self._outgoing = self._outgoing, []
        for update in out:
            await self.ws.send(create_update_message(update))

    def peers(self) -> list[str]:
        return sorted(
            s["user"]["name"]
            for s in self.awareness.values()
            if isinstance(s, dict) and "user" in s
        )

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    async def aclose(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader


@contextlib.asynccontextmanager
async def py_client(node: Node, room: str, name: str = "py") -> AsyncIterator[PyClient]:
    """A synced `PyClient` in ``room`` on ``node``."""
    async with connect(f"{node.url}/{room}") as ws:
        client = PyClient(ws, name)
        await client.start()
        await asyncio.wait_for(client.synced.wait(), 10)
        try:
            yield client
        finally:
            await client.aclose()


def state(doc: Doc[Any]) -> dict[str, Any]:
    """A document's "text" and "map" as plain data."""
    return {
        "text": str(doc.get("text", type=Text)),
        "map": doc.get("map", type=Map).to_py(),
    }
