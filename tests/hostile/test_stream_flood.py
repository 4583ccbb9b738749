"""Streams that never end cannot fill the hub for everyone.

The attack: one client of a gateway without keys made 100,000 named streams in 9 s (+331 MiB),
after which everyone's chat completions got ``503 hub_full``, and named streams never expired.
Replayed at a smaller scale on a real gateway (``[streams] max_streams = 2000``): named streams
stop at 90 % of the hub (``generation_share``), chat completions still run, a named tenant
stops at its own share while another tenant goes on, and idle streams end and leave. ``/healthz``
answers throughout, and the process's RSS stays within 64 MiB of where it started.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.hostile.memory import rss_mib
from tests.servers import run_server

CONFIG = """
[streams]
max_streams = 2000
max_tenant_streams = 500
idle_ttl_s = 10.0
ended_ttl_s = 1.0
tick_s = 0.05
[synthetic]
ttft_ms = 1.0
itl_ms = 0.5
"""
CHAT = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def flood(http: httpx.AsyncClient, prefix: str, count: int, key: str | None) -> list[int]:
    """Create ``count`` named streams (eight at a time); the status of each answer."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    statuses: list[int] = []

    async def one(n: int) -> None:
        answer = await http.post("/v1/streams", json={"name": f"{prefix}/{n}"}, headers=headers)
        statuses.append(answer.status_code)

    for start in range(0, count, 8):
        await asyncio.gather(*(one(n) for n in range(start, min(start + 8, count))))
    return statuses


async def test_named_streams_leave_room_for_chat_completions() -> None:
    with run_server(config=CONFIG) as gateway:
        before = rss_mib(gateway.process.pid)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            statuses = await flood(http, "flood", 1900, None)
            assert statuses.count(201) == 1800 and statuses.count(503) == 100, statuses[-3:]
            refused = await http.post("/v1/streams", json={"name": "one-more"})
            assert refused.json()["error"]["code"] == "hub_full"
            assert "kept for generations" in refused.json()["error"]["message"]
            for _ in range(5):  # everyone's generations still run
                answer = await http.post("/v1/chat/completions", json=CHAT)
                assert answer.status_code == 200, answer.text
            assert (await http.get("/healthz")).status_code == 200
            # Nobody reads or writes them: idle, they end ("expired"), and once kept their
            # ended_ttl_s for resumes they leave the hub, which has room again. (An idle time
            # of 10 s: under a busy machine's flood, none may end before the flood is over.)
            ended = None
            async with asyncio.timeout(30):
                while (await http.post("/v1/streams", json={"name": "later"})).status_code != 201:
                    info = (await http.get("/v1/streams/flood/7")).json()
                    ended = info.get("finish_reason", ended)
                    await asyncio.sleep(0.2)
            assert ended == "expired"
            assert (await http.get("/v1/streams/flood/7")).status_code == 404
        assert rss_mib(gateway.process.pid) - before < 64


async def test_one_tenant_stops_at_its_share_and_another_goes_on() -> None:
    keys = ["--api-key", "mallory@m=sk-m", "--api-key", "ann@a=sk-a"]
    with run_server(*keys, config=CONFIG) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            statuses = await flood(http, "flood", 520, "sk-m")
            assert statuses.count(201) == 500 and statuses.count(503) == 20
            mine = await flood(http, "notes", 10, "sk-a")
            assert mine == [201] * 10
            chat = await http.post(
                "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-a"}
            )
            assert chat.status_code == 200, chat.text
            assert (await http.get("/healthz")).status_code == 200
