"""The load-test source: ``GET /v1/loadtest/sse`` and ``GET /v1/loadtest/ws``.

One GET creates a fresh synthetic stream of the seed's benchmark chunks (16 tokens, ~1.2 KB of
JSON, with ``seq`` and ``ts`` first) and serves it through the full path (backend -> hub ->
transport), so external tools (wrk, k6, ``airlane bench``) can drive the gateway. Each SSE
event's ``data:`` line, and each WebSocket text message, is exactly one chunk object.

Query: ``chunks`` (1..100000, default 200), ``mode`` (``burst`` | ``paced``),
``interval_ms`` (0.1..60000, default 20).
"""

from __future__ import annotations

import operator

from airlane.core import Event
from airlane.gateway import Gateway, LoadTestSpec
from airlane.transports.http.asgi import Request

__all__ = ["loadtest_chunks", "loadtest_spec", "render_loadtest_sse"]


def loadtest_spec(request: Request) -> LoadTestSpec:
    """The benchmark workload a load-test GET asks for in its query, or a `BadRequest` that
    says which value is wrong."""
    chunks = request.query_int("chunks", 200, 1, 100_000)
    try:
        interval_ms: object = float(request.query.get("interval_ms", "20"))
    except ValueError:
        interval_ms = request.query["interval_ms"]  # refused below, with the reason
    return Gateway.loadtest_spec(chunks, request.query.get("mode", "burst"), interval_ms)


_raw_of = operator.attrgetter("raw")
_DATA = b"data: "
_END = b"\n\n"
_BETWEEN = _END + _DATA


def loadtest_chunks(batch: list[Event]) -> list[bytes]:
    """The chunks' JSON in ``batch``: only load-test chunks carry raw JSON (usage and done
    have none, and are not sent). map and filter keep the per-chunk work in C."""
    return list(filter(None, map(_raw_of, batch)))


def render_loadtest_sse(batch: list[Event]) -> bytes:
    """``data: <chunk>`` for each chunk; other events (usage, done) are not sent."""
    # One join with the frame boundary as separator: cheaper than three parts per chunk.
    chunks = loadtest_chunks(batch)
    if not chunks:
        return b""
    return b"".join((_DATA, _BETWEEN.join(chunks), _END))
