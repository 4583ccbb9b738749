"""The usage ledger counts what its fields say: re-reading a finished stream's history is
replayed, not delivered again, and adds nothing to the gateway's latency."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.servers import ServerProcess, run_server

BODY = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 13}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        yield running


async def read_all(http: httpx.AsyncClient, url: str, **headers: str) -> str:
    async with http.stream("GET", url, headers=headers) as response:
        return (await response.aread()).decode()


async def test_resumes_of_a_finished_completion_are_replays(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        created = await http.post("/v1/streams", json=BODY)
        assert created.status_code == 201, created.text
        info = created.json()
        events = f"/v1/streams/{info['id']}/events"
        await read_all(http, events)  # the live reader
        live = (await http.get(f"/v1/streams/{info['id']}")).json()["usage"]
        completion = live["completion_tokens"]
        # What was appended before the reader came is history it reads, the rest reached it
        # live: together, the whole completion once.
        first_read = sum(live["delivered_tokens"].values()) + sum(live["replayed_tokens"].values())
        assert first_read == completion
        samples = live["gateway_latency_ms"]["samples"]
        assert samples > 0 and live["gateway_latency_ms"]["p99"] < 5_000

        for _ in range(2):  # two resumes from the start, once it has ended
            await read_all(http, events, **{"last-event-id": f"{info['epoch']}:0"})
        later = (await http.get(f"/v1/streams/{info['id']}")).json()["usage"]
    assert later["gateway_latency_ms"]["samples"] == samples  # history is not latency
    assert later["gateway_latency_ms"]["p99"] == live["gateway_latency_ms"]["p99"]
    assert later["delivered_tokens"] == live["delivered_tokens"]  # nothing more reached live
    replayed = sum(later["replayed_tokens"].values()) - sum(live["replayed_tokens"].values())
    assert replayed == 2 * completion
    assert later["replayed_events"] > 0
