"""New versions are announced on the stream ``artifacts/<name>``, to readers on any transport,
and ``pull --follow`` installs each one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time

import httpx
import pytest

from airlane.artifacts.packer import pack
from airlane.artifacts.service import ArtifactService
from airlane.client import AirlaneClient, WsClient
from airlane.hub import MemoryHub
from tests.artifacts.conftest import SMALL_CHUNKS
from tests.artifacts.support import checkpoint
from tests.brokerprocess import free_port
from tests.servers import FAST_SYNTHETIC, run_gateway, run_server


@pytest.fixture
def sources(tmp_path):
    return [
        checkpoint(tmp_path / "src" / str(n) / "model.safetensors", changed=(n,) if n else ())
        for n in range(3)
    ]


def _announced(event) -> dict | None:
    payload = event.data.get("payload") if event.kind == "message" else None
    return (
        payload if isinstance(payload, dict) and payload.get("type") == "artifact.version" else None
    )


async def _next_announcement(events, timeout: float = 15.0) -> dict:
    async def first():
        async for event in events:
            if (payload := _announced(event)) is not None:
                return payload
        raise AssertionError("the stream ended")

    return await asyncio.wait_for(first(), timeout)


async def test_versions_are_announced_over_sse_and_websocket(tmp_path, sources):
    store = tmp_path / "store"
    pack([sources[0]], store, name="tiny", version="1", params=SMALL_CHUNKS)
    config = FAST_SYNTHETIC + "\n[artifacts]\nscan_interval_s = 0.2\n"
    with run_server(
        "--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1", config=config
    ) as server:
        async with AirlaneClient(server.url) as client, WsClient(server.url) as ws:
            sse = client.events("artifacts/tiny")
            first = await _next_announcement(sse)
            assert (first["name"], first["version"]) == ("tiny", "1")
            assert first["manifest"] == "/v1/artifacts/tiny/1/manifest.json"
            socket = await ws.subscribe("artifacts/tiny")
            assert (await _next_announcement(socket))["version"] == "1"  # history first
            made = pack([sources[1]], store, name="tiny", version="2", params=SMALL_CHUNKS)
            over_sse = await _next_announcement(sse)
            over_ws = await _next_announcement(socket)
            assert over_sse == over_ws
            assert over_sse["version"] == "2"
            assert over_sse["sha256"] == made.manifest.sha256
            assert over_sse["size"] == made.manifest.size
            await sse.aclose()


async def test_rescan_announces_at_once_and_only_once(tmp_path, sources):
    store = tmp_path / "store"
    pack([sources[0]], store, name="tiny", version="1", params=SMALL_CHUNKS)
    config = FAST_SYNTHETIC + "\n[artifacts]\nscan_interval_s = 0\n"
    with run_server(
        "--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1", config=config
    ) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            assert (await http.post("/v1/artifacts/rescan")).json() == {"announced": []}
            pack([sources[1]], store, name="tiny", version="2", params=SMALL_CHUNKS)
            announced = (await http.post("/v1/artifacts/rescan")).json()["announced"]
            assert [a["version"] for a in announced] == ["2"]
            assert (await http.post("/v1/artifacts/rescan")).json() == {"announced": []}
            info = (await http.get("/v1/streams/artifacts/tiny")).json()
            assert info["last_seq"] == 2


async def test_pull_follow_installs_every_announced_version(tmp_path, sources):
    store, dest = tmp_path / "store", tmp_path / "dest"
    pack([sources[0]], store, name="tiny", version="1", params=SMALL_CHUNKS)
    config = FAST_SYNTHETIC + "\n[artifacts]\nscan_interval_s = 0.2\n"
    with run_server(
        "--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1", config=config
    ) as server:
        follower = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "airlane",
            "artifacts",
            "pull",
            server.url,
            "tiny",
            "--dest",
            str(dest),
            "--follow",
            "--quiet",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await _until(lambda: _current(dest) == "1")
            pack([sources[1]], store, name="tiny", version="2", params=SMALL_CHUNKS)
            await _until(lambda: _current(dest) == "2")
            pack([sources[2]], store, name="tiny", version="3", params=SMALL_CHUNKS)
            await _until(lambda: _current(dest) == "3")
        finally:
            with contextlib.suppress(ProcessLookupError):
                follower.send_signal(signal.SIGINT)
            output = (await asyncio.wait_for(follower.communicate(), 10))[0].decode()
    assert "tiny 2 installed" in output and "reused" in output, output
    assert os.readlink(dest / "tiny" / "previous") == "versions/2"


def _current(dest) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(dest / "tiny" / "current").rsplit("/", 1)[-1]
    return None


async def _until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


async def test_a_follower_stays_on_its_version_across_a_restart_of_an_in_memory_gateway(
    tmp_path, sources
):
    # The restarted gateway's announcement stream is new and the follower's position on it is
    # from the old one, so it reads the stream from the start: it once held every version
    # again, oldest first, and the follower installed 1, then 2, then 3 once more.
    store, dest = tmp_path / "store", tmp_path / "dest"
    for n in range(3):
        pack([sources[n]], store, name="tiny", version=str(n + 1), params=SMALL_CHUNKS)
    port = free_port()
    config = tmp_path / "airlane.toml"
    config.write_text(FAST_SYNTHETIC + "\n[artifacts]\nscan_interval_s = 0.2\n")
    command = [sys.executable, "-m", "airlane", "serve", "--port", str(port), "--config",
               str(config), "--artifacts", str(store), "--airc-port", "-1", "--grpc-port",
               "-1"]  # fmt: skip
    seen: set[str | None] = set()

    async def watch(condition) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            seen.add(_current(dest))
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.01)

    follower = None
    try:
        with run_gateway(command) as server:
            follower = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "airlane", "artifacts", "pull", server.url, "tiny",
                "--dest", str(dest), "--follow", "--quiet",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            await watch(lambda: _current(dest) == "3")
        seen.clear()
        with run_gateway(command):
            await asyncio.sleep(3)  # the follower reconnects and reads the new stream
            pack([sources[0]], store, name="tiny", version="4", params=SMALL_CHUNKS)
            await watch(lambda: _current(dest) == "4")
    finally:
        assert follower is not None
        with contextlib.suppress(ProcessLookupError):
            follower.send_signal(signal.SIGINT)
        output = (await asyncio.wait_for(follower.communicate(), 10))[0].decode()
    assert seen <= {"3"}, (seen, output)
    assert "tiny 1 installed" not in output and "tiny 2 installed" not in output, output


async def test_a_fresh_stream_announces_the_newest_version_that_reads(tmp_path, sources):
    # Only one version is announced where none was yet: the newest whose manifest reads. A
    # newest one that cannot be read must not leave followers with no announcement at all.
    store = tmp_path / "store"
    for n in range(3):
        pack([sources[n]], store, name="tiny", version=str(n + 1), params=SMALL_CHUNKS)
        time.sleep(0.01)  # versions are ordered by when their manifest appeared
    (store / "tiny" / "3" / "manifest.json").write_text("{not json")
    hub = MemoryHub()
    await hub.start()
    try:
        service = ArtifactService(store, hub, scan_interval_s=0)
        made = await service.scan()
        assert [m["version"] for m in made] == ["2"]
        pack([sources[0]], store, name="tiny", version="4", params=SMALL_CHUNKS)
        assert [m["version"] for m in await service.scan()] == ["4"]  # then each new one
    finally:
        await hub.aclose()
