"""The load-test source: ``GET /v1/loadtest/sse`` and ``GET /v1/loadtest/ws``.

One GET creates a fresh synthetic stream of the seed's benchmark chunks (16 tokens, ~1.2 KB of
JSON, with ``seq`` and ``ts`` first) and serves it through the full path (backend -> hub ->
transport), so external tools (wrk, k6, ``airlane bench``) can drive the gateway. Each SSE
event's ``data:`` line, and each WebSocket text message, is exactly one chunk object.

Query: ``chunks`` (1..100000, default 200), ``mode`` (``burst`` | ``paced``),
``interval_ms`` (0.1..60000, default 20).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import AsyncIterator

from airlane.backends.base import GenerationRequest, LoadTestSpec
from airlane.core import Event, OrphanMode, OrphanPolicy
from airlane.gateway import Gateway
from airlane.hub import StreamNotFound, Subscription
from airlane.security import Principal
from airlane.transports.http.asgi import HttpError, Request

__all__ = [
    "LOADTEST_ORPHAN",
    "loadtest_chunks",
    "loadtest_request",
    "loadtest_stream",
    "render_loadtest_sse",
]

LOADTEST_ORPHAN = OrphanPolicy(OrphanMode.CANCEL)
"""A load-test stream nobody reads is cancelled at once: it exists only for its reader."""


def loadtest_request(request: Request) -> GenerationRequest:
    """The synthetic generation a load-test GET asks for, or a 400 that says why not."""
    chunks = request.query_int("chunks", 200, 1, 100_000)
    mode = request.query.get("mode", "burst")
    if mode not in ("burst", "paced"):
        raise HttpError(400, "query parameter 'mode' must be 'burst' or 'paced'")
    try:
        interval_ms = float(request.query.get("interval_ms", "20"))
    except ValueError:
        raise HttpError(400, "query parameter 'interval_ms' must be a number") from None
    if not 0.1 <= interval_ms <= 60_000:
        raise HttpError(400, "query parameter 'interval_ms' must be between 0.1 and 60000")
    spec = LoadTestSpec(
        chunks=chunks, mode="paced" if mode == "paced" else "burst", interval_ms=interval_ms
    )
    return GenerationRequest(model="airlane-loadtest", loadtest=spec)


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


@contextlib.asynccontextmanager
async def loadtest_stream(
    gateway: Gateway, principal: Principal, generation: GenerationRequest
) -> AsyncIterator[tuple[str, Subscription]]:
    """A fresh load-test stream and its one reader; the stream is deleted afterwards, since
    nobody else can want its chunks (keeping them would grow memory with every benchmark)."""
    info = await gateway.generate(principal, generation, orphan=LOADTEST_ORPHAN)
    try:
        async with await gateway.subscribe(principal, info.stream_id) as subscription:
            yield info.stream_id, subscription
    finally:
        with contextlib.suppress(StreamNotFound):
            await gateway.delete(principal, info.stream_id)
