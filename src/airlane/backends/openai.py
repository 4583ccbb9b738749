"""The OpenAI-compatible upstream backend: relays a chat completion stream as Airlane events.

Works with any server that speaks the OpenAI ``/chat/completions`` streaming API (vLLM, TGI,
Ollama, llama.cpp, OpenAI). Two halves:

* `ChunkTranslator` is sans-I/O: it turns the SSE messages of one completion stream
  (``chat.completion.chunk`` objects, then ``data: [DONE]``) into events.
* `OpenAIUpstreamBackend` does the I/O with httpx: it posts the request, feeds the response
  bytes to `airlane.wire.sse.SSEDecoder`, and yields what the translator makes of them.

Failures never escape as exceptions: each becomes one final ``error`` event whose ``code`` says
what went wrong (``asyncio.CancelledError`` alone propagates, after the upstream response is
closed: that is how cancelling a stream aborts the upstream request)::

    upstream_http_error       the upstream answered with a non-2xx status (``status`` field)
    upstream_unavailable      no connection could be made
    upstream_timeout          connect, read, write or pool timeout
    upstream_connection_error the connection failed mid-request
    upstream_error            the upstream reported an error inside the stream
    upstream_protocol_error   a malformed chunk or event stream, a JSON answer instead of a
                              stream, or a stream that ended without ``[DONE]``
    invalid_request           the request could not be encoded as JSON
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import aclosing
from typing import Any

import httpx
import orjson

from airlane.backends.base import GenerationRequest
from airlane.core.events import Channel, Event, Kind
from airlane.wire.errors import SSEError
from airlane.wire.sse import SSEDecoder, SSEMessage

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "ChunkTranslator",
    "OpenAIUpstreamBackend",
]

log = logging.getLogger(__name__)

# Reasoning models may think for minutes before their first streamed byte, so the read
# timeout (the longest silence between two reads) is generous; connecting is not.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0)
"""Timeouts for upstream requests, in seconds."""
DEFAULT_MAX_CONNECTIONS = 1000
"""Upper bound on concurrent upstream connections (one per in-flight stream)."""

# An error body is read only to quote its message; anything longer is cut.
_ERROR_BODY_LIMIT = 64 * 1024
# After [DONE] the body normally ends at once; reading that end lets the connection go back to
# the pool. A peer that keeps talking is cut off after this much data or time.
_DRAIN_LIMIT_BYTES = 64 * 1024
_DRAIN_TIMEOUT_S = 1.0
_QUOTE_LIMIT = 200
_PROTOCOL_ERROR = "upstream_protocol_error"

# Compression would make proxies buffer tokens; ask for the stream as it is produced.
_HEADERS = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
_JSON = {"Content-Type": "application/json"}


class _MalformedChunk(Exception):
    """A chunk that is valid JSON but not a ``chat.completion.chunk``."""


class ChunkTranslator:
    """Turns the bytes of one chat completion stream into events; no I/O.

    Feed the response body to `receive_data` as it arrives, then call `end_of_stream` when it
    ends. Once a terminal event has been returned (``done`` on ``[DONE]``, or ``error``),
    `finished` is true and further input is ignored. A body that ends before ``[DONE]`` gets
    an ``error`` from `end_of_stream`.
    """

    def __init__(self, decoder: SSEDecoder | None = None) -> None:
        self.finished = False
        """True once a terminal event has been returned."""
        self._decoder = decoder if decoder is not None else SSEDecoder()
        self._finish_reason: str | None = None

    def receive_data(self, data: bytes) -> list[Event]:
        """The events completed by ``data``, up to and including a terminal one."""
        if self.finished:
            return []
        try:
            messages = self._decoder.feed(data)
        except SSEError as exc:
            return self._fail(f"upstream sent a malformed event stream: {exc}", _PROTOCOL_ERROR)
        return self.receive_messages(messages)

    def receive_messages(self, messages: Iterable[SSEMessage]) -> list[Event]:
        """The events carried by already decoded ``messages``."""
        events: list[Event] = []
        for message in messages:
            if self.finished:
                break
            events.extend(self._receive_one(message))
        return events

    def end_of_stream(self) -> list[Event]:
        """The terminal event owed when the body ends; none if already finished."""
        if self.finished:
            return []
        events = self.receive_messages(self._decoder.close())
        if self.finished:
            return events
        return events + self._fail("upstream stream ended without [DONE]", _PROTOCOL_ERROR)

    def _receive_one(self, message: SSEMessage) -> list[Event]:
        if message.data.strip() == "[DONE]":
            self.finished = True
            return [Event.done(self._finish_reason or "stop")]
        try:
            chunk = orjson.loads(message.data)
        except orjson.JSONDecodeError:
            if message.event == "error":
                return self._fail(f"upstream error: {_quote(message.data)}", "upstream_error")
            return self._fail(
                f"upstream sent a malformed JSON chunk: {_quote(message.data)}",
                _PROTOCOL_ERROR,
            )
        # vLLM and others report a failure mid-stream as a chunk holding an error object.
        if message.event == "error" or (isinstance(chunk, dict) and chunk.get("error")):
            return self._fail(f"upstream error: {_error_message(chunk)}", "upstream_error")
        try:
            return self._chunk_events(chunk)
        except _MalformedChunk as exc:
            return self._fail(
                f"upstream sent a malformed chunk ({exc}): {_quote(message.data)}",
                _PROTOCOL_ERROR,
            )

    def _chunk_events(self, chunk: Any) -> list[Event]:
        if not isinstance(chunk, dict):
            raise _MalformedChunk("not a JSON object")
        events: list[Event] = []
        choices = _present(chunk.get("choices"), [])
        if not isinstance(choices, list):
            raise _MalformedChunk("choices is not a list")
        if choices:
            events.extend(self._choice_events(_object(choices[0], "choices[0]")))
        usage = chunk.get("usage")
        if usage is not None:
            usage = _object(usage, "usage")
            events.append(
                Event.usage(
                    prompt_tokens=_count(usage, "prompt_tokens"),
                    completion_tokens=_count(usage, "completion_tokens"),
                )
            )
        return events

    def _choice_events(self, choice: dict[str, Any]) -> list[Event]:
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str):
            self._finish_reason = finish_reason
        delta = _object(_present(choice.get("delta"), {}), "delta")
        events: list[Event] = []
        # vLLM and DeepSeek call it reasoning_content; others (OpenRouter, Ollama) reasoning.
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(Event.delta(reasoning, channel=Channel.REASONING))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(Event.delta(content))
        tool_calls = _present(delta.get("tool_calls"), [])
        if not isinstance(tool_calls, list):
            raise _MalformedChunk("tool_calls is not a list")
        for position, item in enumerate(tool_calls):
            event = _tool_call_event(_object(item, "tool_calls[]"), position)
            if event is not None:
                events.append(event)
        return events

    def _fail(self, message: str, code: str) -> list[Event]:
        self.finished = True
        return [Event.error(message, code=code)]


def _present(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the field is absent or JSON null."""
    return default if value is None else value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _MalformedChunk(f"{what} is not an object")
    return value


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key, 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _MalformedChunk(f"usage.{key} is not a count")
    return value


def _tool_call_event(item: dict[str, Any], position: int) -> Event | None:
    """The event for one ``tool_calls`` item; None for an item that carries nothing."""
    index = item.get("index", position)  # some servers leave out the index of a lone call
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _MalformedChunk("tool call index is not a count")
    function = _object(_present(item.get("function"), {}), "tool call function")
    call_id, name, arguments = item.get("id"), function.get("name"), function.get("arguments")
    call_id = call_id if isinstance(call_id, str) else None
    name = name if isinstance(name, str) else None
    arguments = arguments if isinstance(arguments, str) else ""
    if call_id is None and name is None and not arguments:
        return None
    return Event.tool_call(index, arguments, call_id=call_id, name=name)


def _error_message(payload: Any) -> str:
    """The human message in an OpenAI-style error payload, or a quote of the payload."""
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for candidate in (error, payload.get("message"), payload.get("detail")):
            if isinstance(candidate, str) and candidate:
                return candidate
    return _quote(orjson.dumps(payload).decode())


def _quote(text: str) -> str:
    return repr(text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "...")


# -- the I/O half --------------------------------------------------------------------------


class OpenAIUpstreamBackend:
    """A `Backend` that relays an OpenAI-compatible ``/chat/completions`` stream.

    ``base_url`` is the API root (``https://api.openai.com/v1``, ``http://localhost:8000/v1``).
    ``model``, when set, replaces the model named in every request. ``api_key``, when set, is
    sent as ``Authorization: Bearer``.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        try:
            url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        except httpx.InvalidURL as exc:
            raise ValueError(f"invalid base_url {base_url!r}: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an absolute http(s) URL, not {base_url!r}")
        if url.port is not None and not 0 < url.port < 65536:  # httpx does not check it
            raise ValueError(f"invalid port in base_url {base_url!r}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, not {max_connections}")
        self._url = url
        self._model = model
        headers = dict(_HEADERS)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """Yield the events of one upstream completion, a batch per upstream read; the last is
        ``done`` or ``error``."""
        try:
            content = orjson.dumps(self._body(request))
        except orjson.JSONEncodeError as exc:
            message = f"request cannot be encoded as JSON: {exc}"
            yield [Event.error(message, code="invalid_request")]
            return
        ended = False
        try:
            # Leaving this block by any path (the end, aclose(), cancellation) closes the
            # response; an unfinished response takes its connection down with it, which is
            # what aborts the generation upstream.
            async with (
                self._client.stream("POST", self._url, content=content, headers=_JSON) as response,
                aclosing(_response_events(response)) as events,
            ):
                async for batch in events:
                    ended = batch[-1].terminal
                    yield batch
        except httpx.HTTPError as exc:
            if not ended:
                yield [_transport_error(exc, self._url)]
        except Exception as exc:
            # httpx maps what it expects; anything else (an exception group out of the
            # connection layer, say) still ends the stream with an error, logged for the
            # operator, instead of escaping into the gateway.
            log.exception("upstream request to %s failed unexpectedly", self._url)
            if not ended:
                message = f"upstream request failed: {type(exc).__name__}: {exc}"
                yield [Event.error(message, code="upstream_connection_error")]

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        # request.extra goes first so that the typed fields and streaming win over it.
        body = dict(request.extra)
        body["model"] = self._model or request.model
        body["messages"] = request.messages
        body["stream"] = True
        stream_options = body.get("stream_options")
        if not isinstance(stream_options, dict):
            stream_options = {}
        body["stream_options"] = {**stream_options, "include_usage": True}
        for name in ("seed", "max_tokens", "temperature", "tool_choice"):
            value = getattr(request, name)
            if value is not None:
                body[name] = value
        if request.tools:  # OpenAI rejects an empty list
            body["tools"] = request.tools
        return body


async def _response_events(response: httpx.Response) -> AsyncGenerator[list[Event], None]:
    """The events of one upstream response, a non-empty batch per read that completed any,
    ending with a terminal one (or an httpx error)."""
    if not response.is_success:
        problem = f"returned HTTP {response.status_code} {response.reason_phrase}"
        yield [await _unusable_response(response, problem, "upstream_http_error")]
        return
    if response.headers.get("content-type", "").startswith("application/json"):
        # The upstream ignored "stream": true and answered with one JSON document.
        problem = "answered with JSON instead of an event stream"
        yield [await _unusable_response(response, problem, _PROTOCOL_ERROR)]
        return
    translator = ChunkTranslator()
    chunks = response.aiter_bytes()
    async for data in chunks:
        events = translator.receive_data(data)
        if translator.finished and events[-1].kind is Kind.DONE:
            await _drain(chunks)
        if events:
            yield events
        if translator.finished:
            return
    events = translator.end_of_stream()
    if events:
        yield events


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the rest of a body after ``[DONE]`` so its connection can be reused; bounded."""
    received = 0
    try:
        async with asyncio.timeout(_DRAIN_TIMEOUT_S):
            async for data in chunks:
                received += len(data)
                if received > _DRAIN_LIMIT_BYTES:
                    return
    except (TimeoutError, httpx.HTTPError):
        # The stream already ended well; at worst the connection is closed, not reused.
        return


async def _unusable_response(response: httpx.Response, problem: str, code: str) -> Event:
    """The error event for a response that carries no stream, quoting the upstream's message."""
    body = bytearray()
    async for data in response.aiter_bytes():
        body += data
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    try:
        detail = _error_message(orjson.loads(body))
    except orjson.JSONDecodeError:
        detail = _quote(body.decode("utf-8", "replace").strip())
    return Event.error(f"upstream {problem}: {detail}", code=code, status=response.status_code)


def _transport_error(exc: httpx.HTTPError, url: httpx.URL) -> Event:
    """The error event for an httpx failure (translated here, never leaked)."""
    where = f"{url.scheme}://{url.netloc.decode()}"
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting to",
            httpx.ReadTimeout: "waiting for data from",
            httpx.WriteTimeout: "sending the request to",
            httpx.PoolTimeout: "waiting for a free connection to",
        }.get(type(exc), "talking to")
        return Event.error(f"timed out {phase} upstream {where}", code="upstream_timeout")
    if isinstance(exc, httpx.ConnectError):
        return Event.error(
            f"cannot connect to upstream {where}: {exc or 'connection refused'}",
            code="upstream_unavailable",
        )
    return Event.error(
        f"upstream connection to {where} failed: {type(exc).__name__}: {exc}",
        code="upstream_connection_error",
    )
