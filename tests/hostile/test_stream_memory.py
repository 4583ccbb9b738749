"""A stream's memory is bounded by what it may hold, and given back when it is deleted.

A real gateway on its defaults. The attack: 60 MB of deltas published to one stream, which
folding used to keep whole in the snapshot (a 60.3 MB snapshot). Now a stream holds at most
`DEFAULT_MAX_TEXT_CHARS` characters of text over its life; the delta that would pass it gets
``413 stream_too_large`` and the stream stays readable. Deleting streams gives their memory
back: ten rounds of filling a stream with 3.6 MB and deleting it end within two rounds' worth
of where they started. ``/healthz`` answers throughout.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from airlane.core.retention import DEFAULT_MAX_TEXT_CHARS
from tests.hostile.memory import rss_mib
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

CHUNK = 900_000
"""Characters per published delta: under the 1 MiB event limit."""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        yield running


def delta(http: httpx.Client, stream: str, text: str) -> httpx.Response:
    return http.post(f"/v1/streams/{stream}/events", json={"kind": "delta", "text": text})


def test_sixty_megabytes_of_deltas_stop_at_the_stream_text_limit(server: ServerProcess) -> None:
    before = rss_mib(server.process.pid)
    accepted = refused = 0
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for n in range(66):  # 66 x 900 KB: the attack's 60 MB
            answer = delta(http, "flood", chr(ord("a") + n % 26) * CHUNK)
            if answer.status_code == 200:
                accepted += 1
                continue
            assert answer.status_code == 413, answer.text
            error = answer.json()["error"]
            assert error["code"] == "stream_too_large", error
            assert "max_text_chars" in error["message"]
            refused += 1
        assert accepted == DEFAULT_MAX_TEXT_CHARS // CHUNK and refused == 66 - accepted
        snapshot = http.get("/v1/streams/flood/snapshot").json()
        assert len(snapshot["text"]["content"]) == accepted * CHUNK
        assert http.post("/v1/streams/flood/events", json={"kind": "done"}).status_code == 200
        assert http.get("/healthz").status_code == 200
    # What the stream holds (at most 4 Mi ASCII characters, retained or folded) and the
    # request bodies' passing copies; without the limit this grew by the whole 60 MB.
    grown = rss_mib(server.process.pid) - before
    assert grown < 32, f"+{grown:.1f} MiB"


def test_deleted_streams_give_their_memory_back(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:

        def fill_and_delete(n: int) -> None:
            for _ in range(4):
                assert delta(http, f"round-{n}", "z" * CHUNK).status_code == 200
            assert http.delete(f"/v1/streams/round-{n}").status_code == 204

        fill_and_delete(0)  # the allocator's first growth is not what is measured
        before = rss_mib(server.process.pid)
        for n in range(1, 11):
            fill_and_delete(n)
        grown = rss_mib(server.process.pid) - before
        assert http.get("/healthz").status_code == 200
    assert grown < 2 * 4 * CHUNK / (1 << 20), f"+{grown:.1f} MiB after 10 rounds of 3.4 MiB"
