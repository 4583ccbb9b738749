"""`AirlaneClient`: chat completions and stream events over HTTP + SSE, resuming by itself.

The point of Airlane is that a stream outlives a connection. This client makes that
invisible to its caller:

- `AirlaneClient.events` reads ``GET /v1/streams/{id}/events``. When the connection drops, or
  the gateway ends the response early (``?max_events=N`` connection recycling), it reconnects
  with ``Last-Event-ID`` set to the last resume token it saw, backing off between attempts
  that deliver nothing (`RetryPolicy`). It stops after the terminal ``done`` / ``error`` event,
  or on a 204, which means the stream had already ended at the resume point.
- `AirlaneClient.chat_stream` posts an OpenAI-style streaming chat request. It remembers the
  ``x-airlane-stream-id`` header and the last SSE ``id:``; if the response breaks off before
  the finish, it continues the same generation through `events` from that token. The caller
  sees one sequence of `ChatDelta` pieces whose text is exact (no gap, no repeat). A request
  the gateway was too busy to start (503, code ``overloaded``: nothing was started) is sent
  again within the same `RetryPolicy`, waiting at least what its ``Retry-After`` asked.

SSE bytes are parsed with `airlane.wire.sse.SSEDecoder`. httpx exceptions never escape: they
become the errors of `airlane.client.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from airlane.client.accumulator import TextAccumulator
from airlane.client.chat import deltas_from_event
from airlane.client.errors import (
    ClientClosed,
    ConnectFailed,
    GatewayOverloaded,
    ProtocolViolation,
    RequestRejected,
    ResumeFailed,
    StreamFailed,
    rejected,
)
from airlane.client.events import ChatDelta, StreamEvent, chat_deltas_from_chunk
from airlane.client.retry import RetryPolicy
from airlane.wire.errors import SSEError
from airlane.wire.sse import SSEDecoder, SSEMessage

__all__ = ["DEFAULT_TIMEOUT", "AirlaneClient", "stream_path"]

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=75.0, write=10.0, pool=10.0)
"""The read timeout outlasts two of the gateway's 30 s SSE heartbeats: a connection silent for
that long is dead, and the client resumes on a fresh one."""

_DONE = "[DONE]"
_RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class _StreamOver(Exception):
    """The gateway answered 204: nothing follows the resume point."""


class AirlaneClient:
    """An async client for one gateway; use it as ``async with AirlaneClient(url) as c:``.

    ``transport`` replaces httpx's network transport (tests, custom proxies).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self.retry = retry or RetryPolicy()
        """How dropped streams are resumed."""
        self.stream_id: str | None = None
        """The stream id of the last chat completion (the ``x-airlane-stream-id`` header)."""
        self.last_id: str | None = None
        """The last resume token seen on any stream this client read."""
        self.bytes_received = 0
        """Response body bytes read from streaming responses, over this client's life."""
        self.resumes = 0
        """How many times a stream was resumed on a new connection."""
        self.overload_retries = 0
        """How many times a request was sent again because the gateway was too busy to
        start it."""

    async def __aenter__(self) -> AirlaneClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        await self._http.aclose()

    # -- chat completions -------------------------------------------------------------------

    async def chat_stream(
        self, model: str, messages: Iterable[Mapping[str, Any]], **params: Any
    ) -> AsyncGenerator[ChatDelta, None]:
        """Stream one chat completion; extra ``params`` go into the request body as they are.

        Raises:
            ConnectFailed: the request could not be sent.
            GatewayOverloaded: the gateway was too busy to start it, every time the client's
                `RetryPolicy` allowed.
            RequestRejected: the gateway refused it (bad model, auth ...).
            StreamFailed: the generation failed.
            ResumeFailed: the response broke off and the stream could not be resumed.
        """
        body = {**params, "model": model, "messages": list(messages), "stream": True}
        state = TextAccumulator()
        self.stream_id = None
        dropped: Exception | None = None
        try:
            async with (
                self._open_started("POST", "/v1/chat/completions", json=body) as response,
                contextlib.aclosing(self._chat_pieces(response, state)) as pieces,
            ):
                self.stream_id = response.headers.get("x-airlane-stream-id")
                async for piece in pieces:
                    yield piece
        except httpx.TransportError as exc:
            dropped = exc
        if state.ended:
            return
        async for piece in self._resume_chat(state, dropped):
            yield piece

    async def _chat_pieces(
        self, response: httpx.Response, state: TextAccumulator
    ) -> AsyncGenerator[ChatDelta, None]:
        decoder = SSEDecoder()
        async for chunk in response.aiter_bytes():
            self.bytes_received += len(chunk)
            for message in _feed(decoder, chunk):
                if message.data == _DONE:
                    return
                if message.id:
                    self.last_id = message.id
                for piece in chat_deltas_from_chunk(_chat_chunk(message), message.id):
                    state.apply_delta(piece)
                    yield piece

    async def _resume_chat(
        self, state: TextAccumulator, cause: Exception | None
    ) -> AsyncGenerator[ChatDelta, None]:
        if self.stream_id is None or self.last_id is None:
            raise ResumeFailed("the response broke off before the stream was identified") from (
                cause
            )
        async with contextlib.aclosing(self.events(self.stream_id, resume=self.last_id)) as events:
            async for event in events:
                for piece in deltas_from_event(event, state):
                    yield piece

    # -- stream events ----------------------------------------------------------------------

    async def events(
        self,
        stream_id: str,
        *,
        resume: str | None = None,
        max_retries: int | None = None,
        params: Mapping[str, str | int] | None = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Read a stream's events from after ``resume`` (a resume token; None: the start) to
        its end, reconnecting as needed. ``params`` are extra query parameters (for example
        ``{"max_events": 100}``); ``max_retries`` overrides the client's `RetryPolicy`.

        Raises:
            StreamNotFound: no such stream.
            RequestRejected: the gateway refused the read (bad token, auth ...).
            ResumeFailed: the retry budget ran out.
        """
        policy = self.retry if max_retries is None else replace(self.retry, max_retries=max_retries)
        path = stream_path(stream_id, "events")
        position, failures = resume, 0
        while True:
            progressed, cause = False, None
            try:
                async with contextlib.aclosing(self._read_events(path, position, params)) as read:
                    async for event in read:
                        progressed = True
                        position = event.id or position
                        yield event
                        if event.terminal:
                            return
            except _StreamOver:
                return
            except (httpx.TransportError, ConnectFailed, RequestRejected) as exc:
                if isinstance(exc, RequestRejected) and exc.status not in _RETRYABLE_STATUS:
                    raise
                cause = exc
            failures = 0 if progressed else failures + 1
            if policy.exhausted(failures):
                raise ResumeFailed(
                    f"stream {stream_id!r}: gave up after {failures} failed reconnections"
                ) from cause
            self.resumes += 1
            await asyncio.sleep(_backoff(policy, failures, cause))

    async def _read_events(
        self, path: str, position: str | None, params: Mapping[str, str | int] | None
    ) -> AsyncGenerator[StreamEvent, None]:
        headers = {"last-event-id": position} if position else {}
        async with self._open("GET", path, headers=headers, params=params) as response:
            if response.status_code == 204:
                raise _StreamOver
            decoder = SSEDecoder()
            async for chunk in response.aiter_bytes():
                self.bytes_received += len(chunk)
                for message in _feed(decoder, chunk):
                    event = StreamEvent.from_json(message.data, message.id)
                    if message.id:
                        self.last_id = message.id
                    yield event

    # -- small requests ---------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """The gateway's ``GET /healthz`` answer. It also opens the client's connection, so
        a request sent after it does not wait for connecting (``airlane demo`` measures so)."""
        return await self._json("GET", "/healthz")

    async def info(self, stream_id: str) -> dict[str, Any]:
        """A stream's status, usage and current resume token (``GET /v1/streams/{id}``)."""
        return await self._json("GET", stream_path(stream_id))

    async def cancel(self, stream_id: str) -> bool:
        """Stop a stream's producer; True if it was still running."""
        body = await self._json("POST", stream_path(stream_id, "cancel"))
        return bool(body.get("cancelled"))

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        async with self._open(method, path, **kwargs) as response:
            try:
                body = orjson.loads(await response.aread())
            except (orjson.JSONDecodeError, httpx.TransportError) as exc:
                raise ProtocolViolation(f"{method} {path}: unreadable response") from exc
        if not isinstance(body, dict):
            raise ProtocolViolation(f"{method} {path}: expected a JSON object")
        return body

    # -- plumbing ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _open_started(
        self, method: str, path: str, **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        """`_open` for a request that starts something: sent again while the gateway answers
        that it was too busy to start it (nothing was started), as `retry` allows."""
        async with contextlib.AsyncExitStack() as stack:
            failures = 0
            while True:
                try:
                    response = await stack.enter_async_context(self._open(method, path, **kwargs))
                    break
                except GatewayOverloaded as exc:
                    failures += 1
                    if self.retry.exhausted(failures):
                        raise
                    self.overload_retries += 1
                    await asyncio.sleep(_backoff(self.retry, failures, exc))
            yield response

    @contextlib.asynccontextmanager
    async def _open(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        """A streaming response with a 2xx status; anything else becomes `RequestRejected`."""
        if self._http.is_closed:
            raise ClientClosed("this AirlaneClient is closed")
        try:
            request = self._http.build_request(method, path, **kwargs)
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise ConnectFailed(f"{method} {path}: {exc or type(exc).__name__}") from exc
        try:
            if response.status_code >= 300:
                raise await _rejection(response)
            yield response
        finally:
            await response.aclose()


def stream_path(stream_id: str, action: str = "") -> str:
    """The path of a stream resource. Ids may contain ``/``; their slashes are sent
    percent-encoded, so that an id ending in an action word (``agents/1/events``) cannot be
    mistaken for that action (the gateway splits an encoded path on its literal slashes)."""
    path = "/v1/streams/" + quote(stream_id, safe=":")
    return f"{path}/{action}" if action else path


def _feed(decoder: SSEDecoder, chunk: bytes) -> list[SSEMessage]:
    try:
        return decoder.feed(chunk)
    except SSEError as exc:
        raise ProtocolViolation(str(exc)) from None


def _chat_chunk(message: SSEMessage) -> Any:
    try:
        chunk = orjson.loads(message.data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolViolation(f"chat chunk is not valid JSON: {exc}") from None
    if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
        error = chunk["error"]
        raise StreamFailed(str(error.get("message", "the stream failed")), code=error.get("code"))
    return chunk


async def _rejection(response: httpx.Response) -> RequestRejected:
    """The error an HTTP error response describes (OpenAI-style ``{"error": {...}}`` body)."""
    try:
        body = orjson.loads(await response.aread())
        error = body.get("error") if isinstance(body, dict) else None
    except (orjson.JSONDecodeError, httpx.TransportError):
        error = None
    if isinstance(error, dict):
        message, code = str(error.get("message")), error.get("code")
    else:
        message, code = f"HTTP {response.status_code}", None
    retry_after_s = _retry_after_s(response.headers.get("retry-after"))
    return rejected(message, status=response.status_code, code=code, retry_after_s=retry_after_s)


def _retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` of delay-seconds; None when absent or an HTTP date (which a gateway
    this client talks to does not send)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value)


def _backoff(policy: RetryPolicy, failures: int, cause: Exception | None) -> float:
    """The policy's delay after ``failures``, but at least what the gateway's ``Retry-After``
    asked for, within the policy's cap on a delay."""
    delay = policy.delay(failures)
    if isinstance(cause, RequestRejected) and cause.retry_after_s is not None:
        delay = max(delay, min(cause.retry_after_s, policy.max_delay_s))
    return delay
