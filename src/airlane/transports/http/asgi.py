"""Small raw-ASGI helpers shared by the HTTP handlers: requests, JSON and error responses, and
the SSE response pump (heartbeats, disconnect detection, flow control).

Raw ASGI messages, not a framework: the streaming paths are hot and the surface is small.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson

from airlane.core import Event
from airlane.hub import Subscription
from airlane.transports.http.metrics import HttpMetrics
from airlane.wire.compression import (
    Compression,
    CompressionChoice,
    classify_client,
    make_compressor,
    negotiate,
)
from airlane.wire.openai import error_body

__all__ = [
    "ASGIApp",
    "HttpError",
    "Receive",
    "Request",
    "SSEPump",
    "Scope",
    "Send",
    "read_json",
    "send_error",
    "send_json",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Tell nginx-style proxies not to buffer the stream.
    (b"x-accel-buffering", b"no"),
]

# uvloop's timers have millisecond resolution and may fire up to that much early.
_TIMER_SLACK_S = 0.001


class HttpError(Exception):
    """A request failed for a reason the client should be told: status, code and message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        type: str = "invalid_request_error",
        param: str | None = None,
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.headers = list(headers)


def _parse_query(raw: str) -> dict[str, str]:
    """``parse_qsl`` into a dict (last value wins), without its per-field unquoting when
    nothing is quoted: a request's setup is on the path to its first chunk."""
    if "%" in raw or "+" in raw:
        return dict(parse_qsl(raw))
    query = {}
    for field in raw.split("&"):
        name, _, value = field.partition("=")
        if value:  # like parse_qsl, blank values are dropped
            query[name] = value
    return query


@dataclass(slots=True)
class Request:
    """The parts of an ASGI scope the handlers use."""

    scope: Scope
    method: str
    path: str
    query: dict[str, str]
    headers: dict[bytes, bytes]

    @classmethod
    def from_scope(cls, scope: Scope) -> Request:
        """Parse method, path, query string and headers (last value of a repeated header)."""
        raw_query = scope.get("query_string", b"").decode("latin-1")
        query = _parse_query(raw_query) if raw_query else {}
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        return cls(scope, scope.get("method", "GET"), scope["path"], query, headers)

    def header(self, name: bytes) -> str | None:
        """A header's value as text, or None."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    @property
    def bearer(self) -> str | None:
        """The token of an ``Authorization: Bearer`` header."""
        value = self.header(b"authorization")
        if value and value[:7].lower() == "bearer ":
            return value[7:].strip()
        return None

    def compression(self) -> CompressionChoice:
        """The SSE compression for this client: its explicit choice (``?compress=`` or the
        ``x-airlane-compression`` header), else the seed's default for its client class
        (intranet: none, desktop browser: brotli 3, mobile: lz4) if ``Accept-Encoding`` allows
        it (`airlane.wire.compression.negotiate`)."""
        override = self.query.get("compress") or self.header(b"x-airlane-compression")
        client = classify_client(self.header(b"user-agent"), self.client_host)
        return negotiate(self.header(b"accept-encoding"), client, override)

    @property
    def client_host(self) -> str | None:
        """The peer's address."""
        client = self.scope.get("client")
        return client[0] if client else None

    def query_int(self, name: str, default: int, low: int, high: int) -> int:
        """An integer query parameter within ``[low, high]``, or a 400 that says why."""
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise HttpError(400, f"query parameter {name!r} must be an integer") from None
        if not low <= value <= high:
            raise HttpError(400, f"query parameter {name!r} must be between {low} and {high}")
        return value


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing (413) anything larger than ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise HttpError(499, "client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise HttpError(413, f"request body exceeds {limit} bytes", code="body_too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_json(receive: Receive, limit: int) -> Any:
    """The request body parsed as JSON, or a 400 that says what is wrong."""
    body = await read_body(receive, limit)
    if not body:
        raise HttpError(400, "request body is empty; send a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HttpError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


async def send_body(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """A complete response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, obj: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A JSON response."""
    await send_body(send, status, orjson.dumps(obj), b"application/json", headers)


async def send_error(send: Send, error: HttpError) -> None:
    """An OpenAI-style JSON error response."""
    body = error_body(error.message, type=error.type, code=error.code, param=error.param)
    await send_body(send, error.status, body, b"application/json", error.headers)


class SSEPump:
    """Streams a subscription as an SSE response until it ends or the client leaves.

    ``render`` turns a batch of events into SSE bytes (from the events' encode caches).
    Heartbeat comments keep idle connections alive through proxies. ASGI servers drop writes
    after a disconnect without telling the sender, so a watcher task reads ``receive`` and
    stops the pump when ``http.disconnect`` arrives. ``send`` applies the server's flow
    control: a slow reader blocks the pump, its cursor falls behind, and its next read is
    coalesced, so memory per connection stays bounded by the server's write buffer plus one
    batch.

    A ping goes out once the pump has waited ``ping_s`` for the next batch. That deadline is
    kept by one timer per ping period, re-armed only when it fires, not one ``asyncio.timeout``
    per wait: under uvloop a timeout costs about 10 us, more than the rest of a batch's wait.
    """

    def __init__(
        self,
        send: Send,
        receive: Receive,
        *,
        ping_s: float,
        batch_limit: int,
        metrics: HttpMetrics,
        compression: CompressionChoice | None = None,
    ) -> None:
        self.send = send
        self.receive = receive
        self.compression = compression or CompressionChoice(Compression.NONE)
        self._compressor = (
            None
            if self.compression.method is Compression.NONE
            else make_compressor(self.compression)
        )
        self.ping_s = ping_s
        self.batch_limit = batch_limit
        self.metrics = metrics
        self.disconnected = False
        # Loop time at which the current wait for a batch began; None while not waiting.
        self._waiting_since: float | None = None
        self._ping_due = False
        self._timer: asyncio.TimerHandle | None = None

    async def start(
        self, headers: Iterable[tuple[bytes, bytes]] = (), prelude: bytes = b""
    ) -> None:
        """Send the response head (and ``prelude``, e.g. a ``retry:`` field)."""
        extra = list(headers)
        if self._compressor is not None:
            extra.append((b"content-encoding", self.compression.method.value.encode()))
            extra.append((b"vary", b"accept-encoding"))
        await self.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*SSE_HEADERS, *extra],
            }
        )
        if prelude:
            await self.write(prelude)

    async def write(self, body: bytes) -> None:
        """Send part of the body (compressed and flushed, if compression was negotiated)."""
        if self._compressor is not None:
            body = self._compressor.compress(body)
        await self.send({"type": "http.response.body", "body": body, "more_body": True})
        self.metrics.count_sent(len(body))

    async def finish(self, body: bytes = b"") -> None:
        """End the response."""
        if self._compressor is not None:
            body = self._compressor.compress(body) + self._compressor.finish()
        if not self.disconnected:
            await self.send({"type": "http.response.body", "body": body, "more_body": False})
            self.metrics.count_sent(len(body))

    async def pump(
        self,
        subscription: Subscription,
        render: Callable[[list[Event]], bytes],
        *,
        max_events: int | None = None,
    ) -> bool:
        """Write the subscription's frames until it ends (True), the client leaves (False) or
        ``max_events`` frames were written (False; the client is expected to resume)."""
        budget = max_events if max_events is not None else -1
        limit = self.batch_limit if budget < 0 else min(budget, self.batch_limit)
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        watcher = self._arm(loop, task)
        # Bound once: the loop below runs once per batch, and each lookup is paid per batch.
        poll, next_batch = subscription.poll, subscription.next_batch
        send, compressor = self.send, self._compressor
        mark_written, observe_written = subscription.mark_written, self.metrics.observe_written
        try:
            while True:
                # What is ready goes out at once; only an idle stream can be due a heartbeat.
                batch = poll(limit)
                if not batch:
                    self._waiting_since = loop.time()
                    try:
                        batch = await next_batch(limit)
                    except asyncio.CancelledError:
                        if not self._ping_due:
                            raise
                        self._ping_due = False
                        if task.uncancel() > 0:
                            raise  # also cancelled by someone else
                        await self.write(b": ping\n\n")
                        continue
                    finally:
                        self._waiting_since = None
                    if not batch:
                        return True
                # `write`, inlined: one coroutine fewer per batch.
                body = render(batch)
                if compressor is not None:
                    body = compressor.compress(body)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                now_ns = time.monotonic_ns()
                mark_written(batch, now_ns)  # the subscriber's gateway latency, in the ledger
                observe_written(batch, now_ns, len(body))  # delivery lag and bytes sent
                if budget > 0:
                    budget -= len(batch)
                    if budget == 0:
                        return False
                    limit = min(budget, limit)
        except asyncio.CancelledError:
            if self.disconnected and task.uncancel() == 0:
                return False
            raise
        finally:
            await self._disarm(watcher)

    def _arm(
        self, loop: asyncio.AbstractEventLoop, pumping: asyncio.Task[Any]
    ) -> asyncio.Task[None]:
        """Start the disconnect watcher and the ping timer for a `pump` run by ``pumping``."""
        self._timer = loop.call_at(loop.time() + self.ping_s, self._on_ping_timer, loop, pumping)
        return asyncio.create_task(self._watch(pumping), name="sse-disconnect-watch")

    async def _disarm(self, watcher: asyncio.Task[None]) -> None:
        """Stop what `_arm` started."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher

    def _on_ping_timer(self, loop: asyncio.AbstractEventLoop, pumping: asyncio.Task[Any]) -> None:
        """Interrupt a wait that has lasted ``ping_s`` (the pump then pings); else re-arm for
        when the current wait, or the next one, can first be due."""
        now = loop.time()
        since = self._waiting_since
        if since is not None and now >= since + self.ping_s - _TIMER_SLACK_S:
            if not self._ping_due:
                self._ping_due = True
                pumping.cancel()
            since = None  # the pump pings, then waits afresh
        due = (now if since is None else since) + self.ping_s
        self._timer = loop.call_at(due, self._on_ping_timer, loop, pumping)

    async def _watch(self, pumping: asyncio.Task[Any]) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        pumping.cancel()
