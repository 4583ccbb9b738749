"""The usage ledger counts what its fields say, on every wire: re-reading a stream's history
is replayed, not delivered again, and adds nothing to the gateway's latency, while what a
reader receives live is delivered and timed. The accounting lives below the transports (in
the stream log every hub uses), so one real gateway is read over SSE, WebSocket, gRPC and AIRC.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from airlane.client import AircClient, AirlaneClient, GrpcClient, StreamEvent, WsClient
from tests.servers import ServerProcess, run_server

BODY = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 13}
WIRES = ["sse", "ws", "grpc", "airc"]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        assert running.grpc is not None and running.airc is not None
        yield running


@contextlib.asynccontextmanager
async def reader(
    wire: str, server: ServerProcess, stream_id: str, resume: str | None = None
) -> AsyncIterator[AsyncIterator[StreamEvent]]:
    """A subscription to ``stream_id`` over ``wire``, from after ``resume`` (None: the start)."""
    if wire == "sse":
        async with AirlaneClient(server.url) as sse:
            events = sse.events(stream_id, resume=resume)
            async with contextlib.aclosing(events):
                yield events
    elif wire == "ws":
        async with WsClient(server.url) as ws:
            yield await ws.subscribe(stream_id, resume)
    elif wire == "grpc":
        assert server.grpc is not None
        async with GrpcClient(server.grpc) as grpc:  # closing the channel ends the call
            yield grpc.subscribe(stream_id, resume)
    else:
        assert server.airc is not None
        async with await AircClient.tcp(*server.airc) as airc:
            yield await airc.subscribe(stream_id, resume)


async def read_to_end(wire: str, server: ServerProcess, stream_id: str, resume: str) -> str:
    """Read ``stream_id`` over ``wire`` from after ``resume`` to its end; the text read."""
    async with asyncio.timeout(30), reader(wire, server, stream_id, resume) as events:
        seen = [event async for event in events]
    assert seen and seen[-1].kind == "done", [event.kind for event in seen]
    return "".join(event.text for event in seen if event.kind == "delta")


async def usage_of(http: httpx.AsyncClient, stream_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/streams/{stream_id}")
    assert response.status_code == 200, response.text
    usage: dict[str, Any] = response.json()["usage"]
    return usage


async def read_all(http: httpx.AsyncClient, url: str, **headers: str) -> str:
    async with http.stream("GET", url, headers=headers) as response:
        return (await response.aread()).decode()


@pytest.mark.parametrize("wire", WIRES)
async def test_resumes_of_a_finished_completion_are_replays(
    server: ServerProcess, wire: str
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        created = await http.post("/v1/streams", json=BODY)
        assert created.status_code == 201, created.text
        info = created.json()
        await read_all(http, f"/v1/streams/{info['id']}/events")  # the first reader
        live = await usage_of(http, info["id"])
        completion = live["completion_tokens"]
        assert live["gateway_latency_ms"]["samples"] > 0
        assert live["gateway_latency_ms"]["p99"] < 5_000

        for _ in range(2):  # two resumes from the start, once it has ended
            await read_to_end(wire, server, info["id"], f"{info['epoch']}:0")
        later = await usage_of(http, info["id"])
    assert later["gateway_latency_ms"] == live["gateway_latency_ms"]  # history is not latency
    assert later["delivered_tokens"] == live["delivered_tokens"]  # nothing more reached live
    # What was appended before the first reader came is history it read, the rest reached it
    # live: together, the whole completion once.
    first_read = sum(live["delivered_tokens"].values()) + sum(live["replayed_tokens"].values())
    assert first_read == completion
    replayed = sum(later["replayed_tokens"].values()) - sum(live["replayed_tokens"].values())
    assert replayed == 2 * completion
    assert later["replayed_events"] > live["replayed_events"]


@pytest.mark.parametrize("wire", WIRES)
async def test_a_live_reader_is_timed_and_its_history_is_not(
    server: ServerProcess, wire: str
) -> None:
    name = f"ledger/{wire}"
    events_url = f"/v1/streams/{name}/events"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        created = await http.post("/v1/streams", json={"name": name})
        assert created.status_code == 201, created.text
        epoch = created.json()["epoch"]
        published = await http.post(events_url, json={"kind": "delta", "text": "old "})
        assert published.status_code == 200, published.text
        async with asyncio.timeout(30), reader(wire, server, name) as events:
            # Its first event says the reader is there; all after it reaches it live.
            assert (await anext(events)).text == "old "
            batch = [{"kind": "delta", "text": "new "}, {"kind": "delta", "text": "news"}]
            published = await http.post(events_url, json={"events": batch})
            assert published.status_code == 200, published.text
            assert (await http.post(f"/v1/streams/{name}/cancel")).status_code == 200
            rest = [event async for event in events]
        assert "".join(e.text for e in rest if e.kind == "delta") == "new news"
        live = await usage_of(http, name)
        assert sum(live["delivered_tokens"].values()) == 2
        assert sum(live["replayed_tokens"].values()) == 1  # "old ": there before it came
        # The two new deltas (one frame if merged) and the done, each timed; "old " is not.
        assert 2 <= live["gateway_latency_ms"]["samples"] <= 3
        assert live["replayed_events"] == 1

        for _ in range(2):  # then it resumes twice from the start: all of it replayed
            assert await read_to_end(wire, server, name, f"{epoch}:0") == "old new news"
        later = await usage_of(http, name)
    assert later["gateway_latency_ms"] == live["gateway_latency_ms"]
    assert later["delivered_tokens"] == live["delivered_tokens"]
    assert sum(later["replayed_tokens"].values()) == 1 + 2 * 3
    assert later["replayed_events"] > live["replayed_events"]


def lag_samples(metrics: str) -> float:
    """How many writes ``airlane_delivery_lag_seconds`` has timed, from ``/metrics`` text."""
    for family in text_string_to_metric_families(metrics):
        if family.name == "airlane_delivery_lag_seconds":
            return next(s.value for s in family.samples if s.name.endswith("_count"))
    raise AssertionError("no airlane_delivery_lag_seconds on /metrics")


async def test_the_delivery_lag_metric_times_live_writes_only(server: ServerProcess) -> None:
    # A named stream, its reader connected before the live writes: a generation started
    # first could end (under a loaded machine) before its reader came, and nothing was live.
    name = "lag/live"
    events_url = f"/v1/streams/{name}/events"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        created = await http.post("/v1/streams", json={"name": name})
        assert created.status_code == 201, created.text
        epoch = created.json()["epoch"]
        published = await http.post(events_url, json={"kind": "delta", "text": "old "})
        assert published.status_code == 200, published.text
        before = lag_samples((await http.get("/metrics")).text)
        async with asyncio.timeout(30), reader("sse", server, name) as events:
            assert (await anext(events)).text == "old "  # history: not timed
            published = await http.post(events_url, json={"kind": "delta", "text": "new"})
            assert published.status_code == 200, published.text
            assert (await http.post(f"/v1/streams/{name}/cancel")).status_code == 200
            rest = [event async for event in events]  # live: timed
        assert "".join(e.text for e in rest if e.kind == "delta") == "new"
        live = lag_samples((await http.get("/metrics")).text)
        assert live > before
        for wire in ("sse", "ws"):  # the HTTP listener's wires; then history only
            await read_to_end(wire, server, name, f"{epoch}:0")
        assert lag_samples((await http.get("/metrics")).text) == live
