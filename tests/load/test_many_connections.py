"""200 SSE subscribers on one named stream each get all 100 published events, exactly and in
order, and the gateway keeps serving afterwards."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson

from airlane.wire.sse import SSEDecoder
from tests.load.rawhttp import ChunkedDecoder
from tests.servers import run_server

SUBSCRIBERS = 200
EVENTS = 100
DEADLINE_S = 30.0
STREAM = "rooms/many"


async def subscribe(host: str, port: int, ready: asyncio.Event, connected: list[int]) -> list[dict]:
    """One raw HTTP/1.1 SSE reader: the native JSON events up to and including ``done``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"GET /v1/streams/{STREAM}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        connected.append(1)
        if len(connected) == SUBSCRIBERS:
            ready.set()
        chunked, decoder = ChunkedDecoder(), SSEDecoder()
        events: list[dict] = []
        while not chunked.done:
            data = await reader.read(65536)
            if not data:
                break
            for message in decoder.feed(chunked.feed(data)):
                events.append(orjson.loads(message.data))
        return events
    finally:
        writer.close()


async def test_200_subscribers_get_every_event_in_order() -> None:
    with run_server() as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            created = await client.post("/v1/streams", json={"name": STREAM})
            assert created.status_code == 201, created.text
            ready = asyncio.Event()
            connected: list[int] = []
            started = time.monotonic()
            readers = [
                asyncio.create_task(subscribe(host, int(port), ready, connected))
                for _ in range(SUBSCRIBERS)
            ]
            async with asyncio.timeout(DEADLINE_S):
                await ready.wait()
                # Every reader has its response head; the hub counts every cursor.
                info = (await client.get(f"/v1/streams/{STREAM}")).json()
                assert info["subscribers"] == SUBSCRIBERS, info
                for i in range(EVENTS):
                    published = await client.post(
                        f"/v1/streams/{STREAM}/events",
                        json={"kind": "message", "payload": {"i": i, "pad": "x" * (i % 17)}},
                    )
                    assert published.status_code == 200, published.text
                    assert published.json()["seq"] == [i + 1]
                done = await client.post(
                    f"/v1/streams/{STREAM}/events", json={"kind": "done", "finish_reason": "stop"}
                )
                assert done.status_code == 200, done.text
                results = await asyncio.gather(*readers)
            elapsed = time.monotonic() - started
            expected = [
                {"seq": i + 1, "kind": "message", "payload": {"i": i, "pad": "x" * (i % 17)}}
                for i in range(EVENTS)
            ]
            for events in results:
                assert events[:-1] == expected
                assert events[-1]["kind"] == "done" and events[-1]["seq"] == EVENTS + 1
            print(f"\n{SUBSCRIBERS} subscribers x {EVENTS} events in {elapsed:.2f}s")

            # Still serving: health, a fresh stream, and no cursor left behind (each handler
            # closes its cursor just after its last write: polled, as the gateway offers no
            # signal of it; each check is a request to it, paced).
            health = await client.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            for _ in range(50):
                info = (await client.get(f"/v1/streams/{STREAM}")).json()
                if info["subscribers"] == 0:
                    break
                await asyncio.sleep(0.05)
            assert info["subscribers"] == 0, info
            fresh = await client.post("/v1/streams", json={"name": "rooms/after"})
            assert fresh.status_code == 201
            assert server.process.poll() is None
