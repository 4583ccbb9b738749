"""``/console/`` and ``GET /v1/metrics/stream`` on Airlane's own server: who gets the console,
what its responses carry, what a bad path or parameter gets, and the samples the overview
plots (rates that follow the traffic)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import airlane
from airlane.transports.http.asgi import ASGIApp
from tests.asgi_server import Served, serving

pytestmark = pytest.mark.timeout(60)


def from_elsewhere(app: ASGIApp) -> ASGIApp:
    """``app`` as a client on another host reaches it (its address is what the console
    checks; over loopback the test cannot be elsewhere)."""

    async def remote(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            scope = {**scope, "client": ("192.0.2.7", 40000)}
        await app(scope, receive, send)

    return remote


async def gateway_app(config: airlane.HttpConfig | None = None) -> Any:
    gateway = airlane.Gateway(airlane.MemoryHub(), airlane.SyntheticBackend())
    return airlane.create_app(gateway, config)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serving(await gateway_app()) as running:
        yield running


async def test_the_console_is_served_to_this_host_with_its_policy(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as http:
        page = await http.get("/console/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "'sha256-" in policy  # the import map's hash
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "/console/assets/app/app.js" in page.text
        module = await http.get("/console/assets/client/index.js")
        assert module.status_code == 200
        assert module.headers["content-type"] == "text/javascript; charset=utf-8"
        assert "AirlaneClient" in module.text
        head = await http.head("/console/assets/console.css")
        assert head.status_code == 200 and head.content == b""
        for path in ("/console/assets/../../__init__.py", "/console/assets/%2e%2e/files.py",
                     "/console/nope", "/console/assets/app"):  # fmt: skip
            missing = await http.get(path)
            assert missing.status_code == 404, path
            assert missing.json()["error"]["code"] == "not_found"
        refused = await http.post("/console/")
        assert refused.status_code == 405


async def test_other_hosts_get_it_only_when_configured() -> None:
    app = from_elsewhere(await gateway_app())
    async with serving(app) as running, httpx.AsyncClient(base_url=running.url) as http:
        answer = await http.get("/console/")
        assert answer.status_code == 404
        assert "console_remote" in answer.json()["error"]["message"]
        assert (await http.get("/healthz")).status_code == 200  # the rest serves on
    app = from_elsewhere(await gateway_app(airlane.HttpConfig(console_remote=True)))
    async with serving(app) as running, httpx.AsyncClient(base_url=running.url) as http:
        assert (await http.get("/console/")).status_code == 200
    off = await gateway_app(airlane.HttpConfig(console=False))
    async with serving(off) as running, httpx.AsyncClient(base_url=running.url) as http:
        assert (await http.get("/console/")).status_code == 404


async def samples(http: httpx.AsyncClient, count: int, query: str = "") -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with http.stream("GET", f"/v1/metrics/stream{query}") as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line.removeprefix("data: ")))
                if len(got) == count:
                    return got
    raise AssertionError("the stream ended")


async def test_the_metrics_stream_samples_follow_the_traffic(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as http:
        idle = await samples(http, 1, "?interval_ms=200")
        assert idle[0]["streams"] == 0 and idle[0]["delivered_per_s"] == 0
        assert idle[0]["lag_ms"] == {"p50": None, "p99": None}
        assert set(idle[0]["connections"]) >= {"sse", "ws"}
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                "max_tokens": 200}  # fmt: skip

        async def chat() -> None:
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                async for _ in response.aiter_bytes():
                    pass

        _, busy = await asyncio.gather(chat(), samples(http, 4, "?interval_ms=200"))
        assert any(s["streams"] == 1 for s in busy)
        assert any(s["delivered_per_s"] > 0 and s["appended_per_s"] > 0 for s in busy)
        assert any(s["bytes_per_s"] > 0 for s in busy)
        assert any(s["lag_ms"]["p99"] is not None for s in busy)
        for query in ("?interval_ms=10", "?interval_ms=x", "?interval_ms=999999"):
            bad = await http.get(f"/v1/metrics/stream{query}")
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "interval_ms"


async def test_a_gateway_without_a_shared_hub_is_a_cluster_of_one(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as http:
        body = (await http.get("/v1/cluster")).json()
        assert body["shared"] is False
        (only,) = body["nodes"]
        assert only["self"] is True and only["alive"] is True
        assert (await http.post("/v1/cluster")).status_code == 405
