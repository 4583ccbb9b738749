"""The load-test source: ``GET /v1/loadtest/sse`` and ``GET /v1/loadtest/ws``.

One GET creates a fresh synthetic stream of the seed's benchmark chunks (16 tokens, ~1.2 KB of
JSON, with ``seq`` and ``ts`` first) and serves it through the full path (backend -> hub ->
transport), so external tools (wrk, k6, ``airlane bench``) can drive the gateway. Each SSE
event's ``data:`` line, and each WebSocket text message, is exactly one chunk object.

Query: ``chunks`` (1..100000, default 200), ``mode`` (``burst`` | ``paced``),
``interval_ms`` (0.1..60000, default 20).

A stream that fails (its last event is an error) says why: SSE ends with one ``event: error``
whose data is the error's JSON (``{"message": ..., "code": ...}``), and the WebSocket closes
with 1011 and ``<code>: <message>``. Otherwise a failed benchmark stream would look like one
that simply ended early.
"""

from __future__ import annotations

import operator

import orjson

from airlane.core import Event, Kind
from airlane.gateway import Gateway, LoadTestSpec
from airlane.transports.http.asgi import Request

__all__ = ["loadtest_chunks", "loadtest_failure", "loadtest_spec", "render_loadtest_sse"]


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
_ERROR = b"event: error\ndata: "


def loadtest_chunks(batch: list[Event]) -> list[bytes]:
    """The chunks' JSON in ``batch``: only load-test chunks carry raw JSON (usage and done
    have none, and are not sent). map and filter keep the per-chunk work in C."""
    return list(filter(None, map(_raw_of, batch)))


def loadtest_failure(batch: list[Event]) -> Event | None:
    """The error event that ends ``batch``, if the stream failed there (a terminal event is
    the last of its stream, so of its batch)."""
    last = batch[-1] if batch else None
    return last if last is not None and last.kind is Kind.ERROR else None


def render_loadtest_sse(batch: list[Event]) -> bytes:
    """``data: <chunk>`` for each chunk; usage and done are not sent, an error is (as
    ``event: error``)."""
    # One join with the frame boundary as separator: cheaper than three parts per chunk.
    chunks = loadtest_chunks(batch)
    frames = b"".join((_DATA, _BETWEEN.join(chunks), _END)) if chunks else b""
    failure = loadtest_failure(batch)
    if failure is not None:
        frames += b"".join((_ERROR, orjson.dumps(failure.data), _END))
    return frames
