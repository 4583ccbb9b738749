"""HTTP/3: the gateway's API over QUIC, from aioquic's client (Airlane's `H3Client`).

A real ``airlane serve`` with its defaults: HTTP/3 on the HTTP port's number over UDP, with a
self-signed certificate made at start, advertised by ``Alt-Svc`` on the TCP port. Chat
completions stream as SSE (event by event, not one buffered answer), a stream resumes from
``Last-Event-ID``, many generations share one connection, artifacts answer byte ranges, and
API keys, bad requests and garbage datagrams get the same answers as over TCP while the
listener keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlane.artifacts.chunker import ChunkParams
from airlane.artifacts.packer import pack
from airlane.client import ConnectFailed, ConnectionLost, StreamNotFound
from airlane.client.h3 import H3Client
from airlane.security.certs import issue_certificate, make_ca
from tests.artifacts.support import checkpoint
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

CHAT = {
    "model": "synthetic",
    "messages": [{"role": "user", "content": "tell me about QUIC"}],
    "stream": True,
    "max_tokens": 40,
}
JSON = [("content-type", "application/json")]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        yield running


async def h3(server: ServerProcess) -> H3Client:
    assert server.h3 is not None, "the gateway printed no HTTP/3 address"
    host, port = server.h3
    return await H3Client.connect(host, port, verify=False)


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON data of each SSE event in ``body`` (``[DONE]`` left out)."""
    lines = body.decode().splitlines()
    return [
        json.loads(line.removeprefix("data: "))
        for line in lines
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def content(events: list[dict[str, Any]]) -> str:
    """The text OpenAI chunks carry."""
    return "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])


async def test_the_tcp_port_advertises_http3_and_it_answers(server: ServerProcess) -> None:
    assert server.h3 is not None
    with httpx.Client(base_url=server.url, timeout=10) as http:
        answer = http.get("/healthz")
    assert answer.headers["alt-svc"] == f'h3=":{server.h3[1]}"; ma=86400'
    async with await h3(server) as client:
        health = await client.request("GET", "/healthz")
        assert health.status == 200 and json.loads(await health.read())["status"] == "ok"
        assert health.header("alt-svc") is None  # already on HTTP/3


async def test_a_chat_completion_streams_event_by_event(server: ServerProcess) -> None:
    async with await h3(server) as client:
        response = await client.request(
            "POST", "/v1/chat/completions", headers=JSON, body=json.dumps(CHAT).encode()
        )
        assert response.status == 200
        assert (response.header("content-type") or "").startswith("text/event-stream")
        pieces = [chunk async for chunk in response.chunks()]
    text = content(sse_events(b"".join(pieces)))
    assert len(pieces) > 3 and text  # several writes, as generated: not one buffered body
    stream_id = response.header("x-airlane-stream-id")
    with httpx.Client(base_url=server.url, timeout=10) as http:
        snapshot = http.get(f"/v1/streams/{stream_id}/snapshot").json()
    assert snapshot["text"]["content"] == text


async def test_a_stream_resumes_after_its_last_event_id(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for n in range(5):
            event = {"kind": "message", "payload": {"n": n}}
            assert http.post("/v1/streams/h3/resume/events", json=event).status_code == 200
        http.post("/v1/streams/h3/resume/events", json={"kind": "done"})
        epoch = http.get("/v1/streams/h3/resume").json()["epoch"]
    async with await h3(server) as client:
        response = await client.request(
            "GET", "/v1/streams/h3/resume/events", headers=[("last-event-id", f"{epoch}:3")]
        )
        body = (await response.read()).decode()
    assert response.status == 200
    ids = [line.removeprefix("id: ") for line in body.splitlines() if line.startswith("id: ")]
    assert ids == [f"{epoch}:4", f"{epoch}:5", f"{epoch}:6"]


async def test_many_generations_share_one_connection(server: ServerProcess) -> None:
    async with await h3(server) as client:

        async def one(seed: int) -> str:
            body = json.dumps({**CHAT, "seed": seed}).encode()
            response = await client.request("POST", "/v1/chat/completions", headers=JSON, body=body)
            return content(sse_events(await response.read()))

        texts = await asyncio.gather(*(one(seed) for seed in range(20)))
    assert all(texts) and len(set(texts)) > 1


async def test_refusals_are_the_same_as_over_tcp(server: ServerProcess) -> None:
    async with await h3(server) as client:
        missing = await client.request("GET", "/v1/streams/nowhere")
        assert missing.status == 404
        assert json.loads(await missing.read())["error"]["code"] == "stream_not_found"
        bad = await client.request("POST", "/v1/chat/completions", headers=JSON, body=b"{nope")
        assert bad.status == 400
        assert json.loads(await bad.read())["error"]["code"] == "invalid_json"
        blob = b'{"kind": "message", "payload": "' + b"x" * (3 << 20) + b'"}'
        big = await client.request("POST", "/v1/streams/h3/big/events", headers=JSON, body=blob)
        assert big.status == 413  # the HTTP body limit, as over TCP; the stream was stopped
        assert json.loads(await big.read())["error"]["code"] == "body_too_large"
        health = await client.request("GET", "/healthz")
        assert health.status == 200


async def test_keys_are_asked_for_over_http3_too() -> None:
    with run_server("--api-key", "ann=sk-ann") as gateway:
        async with await h3(gateway) as client:
            refused = await client.request("GET", "/v1/models")
            assert refused.status == 401
            await refused.read()
            allowed = await client.request(
                "GET", "/v1/models", headers=[("authorization", "Bearer sk-ann")]
            )
            assert allowed.status == 200
            await allowed.read()


async def test_artifacts_answer_byte_ranges(tmp_path: Path) -> None:
    store = tmp_path / "store"
    pack([checkpoint(tmp_path / "a.safetensors", seed=1, layers=1, hidden=64)], store,
         name="base", version="1")  # fmt: skip
    with run_server("--artifacts", str(store)) as gateway:
        with httpx.Client(base_url=gateway.url, timeout=10) as http:
            manifest = http.get("/v1/artifacts/base/1/manifest.json").json()
            path = manifest["files"][0]["path"]
            whole = http.get(f"/v1/artifacts/base/1/{path}").content
        async with await h3(gateway) as client:
            ranged = await client.request(
                "GET", f"/v1/artifacts/base/1/{path}", headers=[("range", "bytes=100-1099")]
            )
            assert ranged.status == 206
            assert ranged.header("content-range") == f"bytes 100-1099/{len(whole)}"
            assert await ranged.read() == whole[100:1100]


async def test_garbage_datagrams_leave_the_listener_serving(server: ServerProcess) -> None:
    assert server.h3 is not None
    host, port = server.h3
    rng = random.Random(7)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for n in range(2000):
            size = rng.choice((1, 20, 1200, 1500))
            data = os.urandom(size)
            if n % 3 == 0:  # a long-header Initial's first byte, then garbage
                data = bytes([0xC0 | rng.randrange(16)]) + b"\x00\x00\x00\x01" + data
            sock.sendto(data, (host, port))
    async with await h3(server) as client:
        health = await client.request("GET", "/healthz")
        assert health.status == 200


async def test_a_configured_certificate_is_served_and_mutual_tls_turns_http3_off(
    tmp_path: Path,
) -> None:
    make_ca(tmp_path / "ca", "example.org")
    cert = issue_certificate(tmp_path / "ca", "spiffe://example.org/gateway", tmp_path / "s")
    tls = ["--tls-cert", str(cert.cert), "--tls-key", str(cert.key)]
    with run_server(*tls) as gateway:
        assert gateway.h3 is not None
        host, port = gateway.h3
        # Verified against the CA: the listener shows the gateway's own certificate.
        cafile = str(tmp_path / "ca" / "ca.pem")
        async with await H3Client.connect(host, port, cafile=cafile) as client:
            assert (await client.request("GET", "/healthz")).status == 200
    log = tmp_path / "serve.log"
    with (
        log.open("w") as err,
        run_server(
            *tls, "--tls-client-ca", str(tmp_path / "ca" / "ca.pem"), stderr=err, log_level="info"
        ) as gateway,
    ):
        # aioquic cannot ask a client for a certificate: HTTP/3 would let clients in
        # without the one every other listener requires, so it stays off.
        assert gateway.h3 is None
    assert "HTTP/3 is off" in log.read_text()


async def test_events_resume_and_the_cli_streams_over_http3(server: ServerProcess) -> None:
    async with await h3(server) as client:
        stream_id = await client.start_stream({**CHAT, "max_tokens": 12})
        first = [event async for event in client.events(stream_id)]
        assert first[-1].kind == "done" and client.last_id is not None
        middle = first[len(first) // 2]
        rest = [event async for event in client.events(stream_id, resume=middle.id)]
        # What came after the resume point, exactly (deltas a late reader gets may be merged).
        after = [e for e in first if e.seq > middle.seq]
        assert "".join(e.text for e in rest) == "".join(e.text for e in after)
        assert rest[-1].seq == after[-1].seq and rest[0].seq > middle.seq
        with pytest.raises(StreamNotFound):
            _ = [event async for event in client.events("nowhere")]
    done = subprocess.run(
        [sys.executable, "-m", "airlane", "stream", "--transport", "h3", "--url", server.url,
         "--prompt", "Hello", "--max-tokens", "15"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "last id" in done.stderr and "finish length" in done.stderr
    assert done.stdout.strip()


async def test_a_client_that_leaves_mid_answer_leaves_no_traceback(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    slow = "[synthetic]\nttft_ms = 5.0\nitl_ms = 5.0\n"
    with log.open("w") as err, run_server(config=slow, stderr=err) as gateway:
        for _ in range(3):
            async with await h3(gateway) as client:
                body = json.dumps({**CHAT, "max_tokens": 400}).encode()
                response = await client.request(
                    "POST", "/v1/chat/completions", headers=JSON, body=body
                )
                async for _chunk in response.chunks():
                    break  # gone after the first piece, the generation still running
        await asyncio.sleep(0.5)
        async with await h3(gateway) as client:
            assert (await client.request("GET", "/healthz")).status == 200
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text[-2000:]


def _packed(tmp_path: Path, seed: int) -> tuple[Path, list[Path], int, Path, Path]:
    """A checkpoint packed as ``base`` version 1 in small chunks: the store, the files, its
    size, where a pull installs it and where that pull keeps its partial state."""
    store = tmp_path / "store"
    files = [checkpoint(tmp_path / "a.safetensors", seed=seed, layers=6, hidden=128)]
    params = ChunkParams(min_size=4 << 10, avg_size=16 << 10, max_size=64 << 10)
    size = pack(files, store, name="base", version="1", params=params).manifest.size
    dest = tmp_path / "dest"
    return store, files, size, dest, dest / "base" / ".partial" / "1" / "state"


async def test_an_artifact_pull_over_http3_resumes_after_a_kill(tmp_path: Path) -> None:
    from airlane.artifacts.fetch import PullOptions, pull

    store, _, size, dest, state = _packed(tmp_path, seed=2)
    with run_server("--artifacts", str(store)) as gateway:
        # The CLI pulls over HTTP/3 at a capped rate (about 6 s for it all) and is killed once
        # its saved state shows progress.
        pulling = subprocess.Popen(
            [sys.executable, "-m", "airlane", "artifacts", "pull", gateway.url, "base",
             "--dest", str(dest), "--transport", "h3", "--limit-rate", str(size // 6),
             "--parallel", "2", "--range-size", "64KiB", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            async with asyncio.timeout(30):
                while _bits(state) < 8:
                    assert pulling.poll() is None, "the pull ended before it was killed"
                    await asyncio.sleep(0.05)
        finally:
            pulling.kill()
            pulling.wait()
        assert not (dest / "base" / "current").exists()
        options = PullOptions(transport="h3", parallel=3, range_bytes=256 << 10)
        result = await pull(gateway.url + "/v1/artifacts", "base", dest, options=options)
        assert result.resumed_bytes > 0 and result.fetched_bytes > 0
        assert result.resumed_bytes + result.fetched_bytes == size
        assert result.connections == 1 and result.requests >= 1
        path = result.manifest.files[0].path
        assert (result.directory / path).read_bytes() == (store / "base" / "1" / path).read_bytes()
        again = subprocess.run(
            [sys.executable, "-m", "airlane", "artifacts", "pull", gateway.url, "base",
             "--dest", str(tmp_path / "cli"), "--transport", "h3", "--quiet"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "over HTTP/3 (1 QUIC connection)" in again.stdout


def _free_ports(count: int) -> int:
    """A port P with P .. P+count-1 free for TCP and P free for UDP on 127.0.0.1 now (a
    gateway given ``--port P`` listens on the next ones too: AIRC, gRPC, RSocket)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            with contextlib.ExitStack() as held:
                for offset in range(count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", base + offset))
                udp = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                udp.bind(("127.0.0.1", base))
        except OSError:
            continue
        return base
    raise AssertionError("no run of free ports")


async def test_an_artifact_pull_over_http3_reopens_its_connection_when_the_gateway_restarts(
    tmp_path: Path,
) -> None:
    store, files, size, dest, state = _packed(tmp_path, seed=3)
    listen = ("--artifacts", str(store), "--port", str(_free_ports(4)))
    pulling: subprocess.Popen[str] | None = None
    try:
        with run_server(*listen) as gateway:
            # Over HTTP/3 at a capped rate (about 5 s for it all); the gateway stops (its QUIC
            # connections closed) once the pull has made progress, and comes back on the port.
            pulling = subprocess.Popen(
                [sys.executable, "-m", "airlane", "artifacts", "pull", gateway.url, "base",
                 "--dest", str(dest), "--transport", "h3", "--limit-rate", str(size // 5),
                 "--parallel", "2", "--range-size", "64KiB"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            async with asyncio.timeout(30):
                while _bits(state) < 8:
                    assert pulling.poll() is None, "the pull ended before the restart"
                    await asyncio.sleep(0.05)
        with run_server(*listen):
            out, err = await asyncio.to_thread(pulling.communicate, timeout=90)
    finally:
        if pulling is not None and pulling.poll() is None:
            pulling.kill()
            pulling.wait()
    assert pulling.returncode == 0, err
    assert "over HTTP/3 (2 QUIC connections)" in out, out
    path = files[0].name
    installed = dest / "base" / "current" / path
    assert installed.read_bytes() == (store / "base" / "1" / path).read_bytes()


def _bits(state: Path) -> int:
    """Chunks the saved bitmaps of a partial pull claim."""
    total = 0
    for bitmap in state.glob("*.bitmap"):
        with contextlib.suppress(FileNotFoundError):
            total += sum(bin(b).count("1") for b in bitmap.read_bytes()[8 + 32 + 4 :])
    return total


async def test_a_reloaded_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    make_ca(tmp_path / "ca1", "example.org")
    make_ca(tmp_path / "ca2", "example.org")
    cert = issue_certificate(tmp_path / "ca1", "spiffe://example.org/gateway", tmp_path / "s")
    tls = ["--tls-cert", str(cert.cert), "--tls-key", str(cert.key)]
    with run_server(*tls, config="[tls]\nreload_s = 0.2\n") as gateway:
        assert gateway.h3 is not None
        host, port = gateway.h3
        first = str(tmp_path / "ca1" / "ca.pem")
        async with await H3Client.connect(host, port, cafile=first) as old:
            assert (await old.request("GET", "/healthz")).status == 200
            # The files change on disk (a renewal by another CA, written in place).
            renewed = issue_certificate(
                tmp_path / "ca2", "spiffe://example.org/gateway", tmp_path / "renewed"
            )
            cert.cert.write_bytes(renewed.cert.read_bytes())
            cert.key.write_bytes(renewed.key.read_bytes())
            second = str(tmp_path / "ca2" / "ca.pem")
            async with asyncio.timeout(10):
                while True:
                    try:
                        new = await H3Client.connect(host, port, cafile=second, timeout_s=2)
                    except ConnectFailed:
                        await asyncio.sleep(0.2)
                        continue
                    break
            async with new:
                assert (await new.request("GET", "/healthz")).status == 200
            # The connection open before the renewal goes on with its certificate.
            assert (await old.request("GET", "/healthz")).status == 200


async def test_a_reader_that_falls_too_far_behind_has_its_response_stopped(
    server: ServerProcess,
) -> None:
    """QUIC lets the gateway send as fast as data arrives; a response nobody reads past
    ``max_buffered_bytes`` is stopped with a clear error, and the connection goes on."""
    assert server.h3 is not None
    client = await H3Client.connect(*server.h3, verify=False, max_buffered_bytes=64 * 1024)
    async with client:
        response = await client.request("GET", "/v1/loadtest/sse?chunks=2000&mode=burst")
        assert response.status == 200
        for _ in range(200):  # ~2.4 MB comes, unread, until the bound stops it (bounded wait)
            if response.buffered > 64 * 1024:
                break
            await asyncio.sleep(0.05)
        with pytest.raises(ConnectionLost, match="fell more than 65536 bytes behind"):
            await response.read()
        health = await client.request("GET", "/healthz")
        assert health.status == 200 and json.loads(await health.read())["status"] == "ok"
