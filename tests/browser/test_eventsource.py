"""A real browser's ``EventSource`` on the streams API: it resumes by itself with
``Last-Event-ID`` after the connection drops (a TCP reset mid-response, made by a proxy in front
of the gateway) or after the gateway recycles the response (``?max_events=N``), and ends with
exactly the text of the stream's snapshot.

Headless Chromium (Debian's ``/usr/bin/chromium``) is driven through Playwright; the page is
served on 127.0.0.1 by a tiny HTTP server here and reaches the gateway cross-origin (CORS).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from airlane.backends.synthetic import SyntheticConfig, SyntheticScript
from airlane.core import Kind
from airlane.gateway.chat_request import parse_chat_request
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

GATEWAY_CONFIG = """
[synthetic]
ttft_ms = 5.0
itl_ms = 12.0
itl_jitter_ms = 1.0

[http]
cors_origins = ["*"]
"""
MIN_TOKENS = 250
"""The generation is at least this long (about 3 s at 12 ms per token): long enough that the
first connection is cut, and responses recycled, while it is still being produced."""
CUT_AFTER = 3000
"""Response bytes the proxy forwards on the first connection before resetting it."""
PAGE_TIMEOUT_MS = 20_000
TEST_TIMEOUT_S = 40.0

PAGE = b"<!doctype html><meta charset=utf-8><title>airlane eventsource</title><p>ready"

# The reader: applies snapshot (replace) / content delta (append); done or error ends it.
READER_JS = """
async ([url, timeoutMs]) => await new Promise((resolve) => {
  const log = [];
  let text = "", opens = 0, errors = 0;
  const es = new EventSource(url);
  const finish = (outcome, extra) => {
    clearTimeout(timer);
    es.close();
    resolve({outcome, text, log, opens, errors, ...extra});
  };
  const timer = setTimeout(() => finish("timeout", {}), timeoutMs);
  es.onopen = () => { opens += 1; };
  es.onerror = () => {
    errors += 1;
    if (es.readyState === EventSource.CLOSED) finish("closed", {});
  };
  es.onmessage = (m) => {
    const data = JSON.parse(m.data);
    log.push({id: m.lastEventId, seq: data.seq, kind: data.kind, open: opens});
    if (data.kind === "snapshot") text = data.text.content;
    else if (data.kind === "delta" && data.channel === "content") text += data.text;
    else if (data.kind === "done" || data.kind === "error") finish(data.kind, {last: data});
  };
})
"""


def require_browser() -> None:
    """Fail in CI, skip elsewhere, when Chromium or the Playwright package is missing."""
    reason = None
    if not os.path.exists(CHROMIUM):
        reason = f"{CHROMIUM} is missing (Debian: apt-get install chromium)"
    elif importlib.util.find_spec("playwright") is None:
        reason = "the playwright Python package is not installed"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def long_generation_body() -> dict[str, Any]:
    """A chat request whose synthetic answer has at least `MIN_TOKENS` content tokens.

    The synthetic text stops at a random sentence end (seeded), so the seed is searched with
    the backend's own pure script; the text depends only on seed, model and messages.
    """
    for seed in range(5000):
        body = {
            "model": "airlane-synthetic",
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 300,
            "seed": seed,
        }
        request = parse_chat_request(body).generation
        script = SyntheticScript(request, SyntheticConfig())
        if sum(event.kind is Kind.DELTA for _, event in script) >= MIN_TOKENS:
            return body
    raise AssertionError(f"no seed below 5000 gives {MIN_TOKENS} tokens")


@dataclass
class SniffedRequest:
    connection: int
    method: str
    target: str
    headers: dict[str, str]


@dataclass
class CuttingProxy:
    """A TCP proxy on 127.0.0.1: forwards bytes both ways and, when ``cut_after`` is set,
    resets the *first* connection (RST, SO_LINGER 0) after forwarding that many response bytes.
    It parses the request heads it forwards (GET/OPTIONS: no bodies)."""

    upstream: tuple[str, int]
    cut_after: int | None = None
    connections: int = 0
    requests: list[SniffedRequest] = field(default_factory=list)
    first_response: bytearray = field(default_factory=bytearray)
    cut: bool = False
    port: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        index = self.connections
        self.connections += 1
        upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        pumps = [
            asyncio.create_task(self._requests(index, client_r, upstream_w)),
            asyncio.create_task(self._responses(index, upstream_r, client_w, upstream_w)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for pump in pumps:
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await pump
            for writer in (client_w, upstream_w):
                writer.transport.abort()
            self._tasks.discard(task)

    async def _requests(
        self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pending = b""
        for _ in range(10_000):
            data = await reader.read(65536)
            if not data:
                return
            pending += data
            while b"\r\n\r\n" in pending:
                head, _, pending = pending.partition(b"\r\n\r\n")
                self._sniff(index, head)
            writer.write(data)
            await writer.drain()

    def _sniff(self, index: int, head: bytes) -> None:
        line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        headers = {}
        for header in lines:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        assert int(headers.get("content-length", "0")) == 0, "no request bodies expected"
        self.requests.append(SniffedRequest(index, method, target, headers))

    async def _responses(
        self,
        index: int,
        reader: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        upstream_w: asyncio.StreamWriter,
    ) -> None:
        forwarded = 0
        for _ in range(100_000):
            data = await reader.read(65536)
            if not data:
                return
            if index == 0 and self.cut_after is not None:
                data = data[: self.cut_after - forwarded]
            if index == 0 and len(self.first_response) < 65536:
                self.first_response += data
            client_w.write(data)
            await client_w.drain()
            forwarded += len(data)
            if index == 0 and self.cut_after is not None and forwarded >= self.cut_after:
                # Let the browser read what it got, then reset both sides: no FIN, no end of
                # the chunked body; the gateway sees its client vanish.
                await asyncio.sleep(0.2)
                sock = client_w.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client_w.transport.abort()
                upstream_w.transport.abort()
                self.cut = True
                return


@contextlib.asynccontextmanager
async def page_server() -> Any:
    """A static HTTP server on 127.0.0.1 for the page the EventSource runs in."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(PAGE), PAGE)
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()


@pytest.fixture(scope="module")
def gateway() -> Iterator[ServerProcess]:
    with run_server(config=GATEWAY_CONFIG) as server:
        yield server


@contextlib.asynccontextmanager
async def browser_page(page_url: str) -> Any:
    """Headless Chromium with the page loaded, before any stream exists: the browser's start
    (a second or two) must not eat into the generation the test watches."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(page_url)
            yield page
        finally:
            await browser.close()


async def create_generation(client: httpx.AsyncClient) -> dict[str, Any]:
    created = await client.post("/v1/streams", json=long_generation_body())
    assert created.status_code == 201, created.text
    return created.json()


async def snapshot_text(client: httpx.AsyncClient, stream_id: str) -> str:
    """The stream's content text once it has ended (bounded wait)."""
    for _ in range(100):
        info = (await client.get(f"/v1/streams/{stream_id}")).json()
        if info["ended"]:
            break
        await asyncio.sleep(0.05)
    assert info["ended"] and info["finish_reason"] in ("stop", "length"), info
    snapshot = await client.get(f"/v1/streams/{stream_id}/snapshot")
    assert snapshot.status_code == 200
    return snapshot.json()["text"]["content"]


async def no_subscribers_left(client: httpx.AsyncClient, stream_id: str) -> None:
    """Every cursor of the stream is gone (the reset one included) once the browser closed."""
    for _ in range(100):
        info = (await client.get(f"/v1/streams/{stream_id}")).json()
        if info["subscribers"] == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"cursors left behind: {info}")


def check_log(result: dict[str, Any], epoch: str) -> None:
    """In order, no event twice, every id a resume token of this epoch, ended by ``done``."""
    assert result["outcome"] == "done", {k: v for k, v in result.items() if k != "log"}
    log = result["log"]
    seqs = [entry["seq"] for entry in log]
    assert seqs == sorted(set(seqs)), "an event arrived twice or out of order"
    assert all(entry["id"] == f"{epoch}:{entry['seq']}" for entry in log)
    assert result["last"]["finish_reason"] in ("stop", "length")


async def test_eventsource_resumes_after_connection_reset(gateway: ServerProcess) -> None:
    require_browser()
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        CuttingProxy((host, int(port)), cut_after=CUT_AFTER) as proxy,
        page_server() as page_url,
        browser_page(page_url) as page,
    ):
        stream = await create_generation(client)
        events_url = f"http://127.0.0.1:{proxy.port}{stream['events_url']}"
        result = await page.evaluate(READER_JS, [events_url, PAGE_TIMEOUT_MS])
        expected = await snapshot_text(client, stream["id"])

        check_log(result, stream["epoch"])
        assert result["text"] == expected
        assert len(expected.split()) >= MIN_TOKENS
        # The first connection really was reset mid-stream, after some events...
        assert proxy.cut and proxy.connections >= 2
        assert b"retry: 1000" in proxy.first_response
        first = [entry for entry in result["log"] if entry["open"] == 1]
        assert len(first) >= 5 and all(entry["kind"] != "done" for entry in first)
        # Still generating when the browser came back: live deltas after the resumed backlog.
        second = [e for e in result["log"] if e["open"] == 2 and e["kind"] == "delta"]
        assert len(second) >= 2, result["log"]
        assert result["errors"] >= 1 and result["opens"] >= 2
        # ...and the browser came back by itself with the id of the last event it had.
        gets = [r for r in proxy.requests if r.method == "GET"]
        assert gets[0].connection == 0 and "last-event-id" not in gets[0].headers
        resumed = [r for r in gets if r.connection > 0]
        assert resumed, proxy.requests
        assert resumed[0].headers.get("last-event-id") == first[-1]["id"]
        assert resumed[0].target == stream["events_url"]
        await no_subscribers_left(client, stream["id"])


async def test_eventsource_follows_connection_recycling(gateway: ServerProcess) -> None:
    require_browser()
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    async with (
        asyncio.timeout(TEST_TIMEOUT_S),
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        CuttingProxy((host, int(port))) as proxy,
        page_server() as page_url,
        browser_page(page_url) as page,
    ):
        stream = await create_generation(client)
        target = f"{stream['events_url']}?max_events=40"
        events_url = f"http://127.0.0.1:{proxy.port}{target}"
        result = await page.evaluate(READER_JS, [events_url, PAGE_TIMEOUT_MS])
        expected = await snapshot_text(client, stream["id"])

        check_log(result, stream["epoch"])
        assert result["text"] == expected
        # The gateway ended responses after 40 events and the browser resumed each time.
        gets = [r for r in proxy.requests if r.method == "GET"]
        assert len(gets) >= 2 and result["opens"] >= 2
        assert all(r.target == target for r in gets)
        assert "last-event-id" not in gets[0].headers
        by_open: dict[int, list[dict[str, Any]]] = {}
        for entry in result["log"]:
            by_open.setdefault(entry["open"], []).append(entry)
        assert all(len(entries) <= 40 for entries in by_open.values())
        assert len(by_open[1]) == 40
        for request, previous in zip(gets[1:], sorted(by_open)[: len(gets) - 1], strict=False):
            assert request.headers.get("last-event-id") == by_open[previous][-1]["id"]
        await no_subscribers_left(client, stream["id"])
