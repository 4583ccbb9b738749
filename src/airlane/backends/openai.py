"""The OpenAI-compatible upstream backend: relays a chat completion stream as Airlane events.

Works with any server that speaks the OpenAI ``/chat/completions`` streaming API (vLLM, TGI,
Ollama, llama.cpp, OpenAI). Two halves:

* `ChunkTranslator` (`airlane.backends.openai_chunks`) is sans-I/O: it turns the SSE messages
  of one completion stream (``chat.completion.chunk`` objects, then ``data: [DONE]``) into
  events.
* `OpenAIUpstreamBackend` does the I/O with `airlane.backends.upstream_http` (a lean HTTP/1.1
  client, see there why not httpx): it posts the request, feeds each read of the response body
  to the translator, and yields what that read completed as one batch; or, as a feed
  (`UpstreamFeed`, which the gateway runs where its hub appends at once), hands that batch to
  the stream from the connection's own call-back, with no task woken per read.

Failures never escape as exceptions: each becomes one final ``error`` event whose ``code`` says
what went wrong (``asyncio.CancelledError`` alone propagates, after the upstream response is
closed: that is how cancelling a stream aborts the upstream request)::

    upstream_http_error       the upstream answered with a non-2xx status (``status`` field)
    upstream_unavailable      no connection could be made
    upstream_timeout          connect, pool, write, first-byte or idle timeout
    upstream_connection_error the connection failed mid-request
    upstream_error            the upstream reported an error inside the stream
    upstream_protocol_error   a malformed HTTP response, chunk or event stream, a JSON answer
                              instead of a stream, or a stream that ended without ``[DONE]``
    invalid_request           the request could not be encoded as JSON

Latency accounting: the usage ledger's ``gateway_latency`` runs from the hub's append of an
event to a transport's write of it. In proxy mode the gateway also spends, before that append,
the time from the upstream's bytes reaching our socket to that append: parsing the read (and,
without a feed, one wake-up of the producer task). Events carry no receive time yet, so the
ledger does not see that share; ``benchmarks/proxy.py`` measures the whole added latency from
outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

import orjson

from airlane.backends.base import GenerationRequest, Sink
from airlane.backends.openai_chunks import PROTOCOL_ERROR, ChunkTranslator, error_message, quote
from airlane.backends.upstream_config import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    UpstreamTimeouts,
    split_url,
)
from airlane.backends.upstream_errors import (
    UpstreamConnectError,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from airlane.backends.upstream_http import ConnectionPool, UpstreamResponse
from airlane.core.events import Event, Kind

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_TIMEOUTS",
    "ChunkTranslator",
    "OpenAIUpstreamBackend",
    "UpstreamFeed",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = DEFAULT_LIMITS.max_connections
"""Upper bound on concurrent upstream connections (one per in-flight stream)."""

# An error body is read only to quote its message; anything longer is cut.
_ERROR_BODY_LIMIT = 64 * 1024

# Compression would make proxies buffer tokens; ask for the stream as it is produced.
_HEADERS = (
    ("Accept", "text/event-stream"),
    ("Accept-Encoding", "identity"),
    ("Content-Type", "application/json"),
    ("User-Agent", "airlane"),
)


class OpenAIUpstreamBackend:
    """A `Backend` that relays an OpenAI-compatible ``/chat/completions`` stream.

    ``base_url`` is the API root (``https://api.openai.com/v1``, ``http://localhost:8000/v1``).
    ``model``, when set, replaces the model named in every request. ``api_key``, when set, is
    sent as ``Authorization: Bearer``. ``ssl_context`` verifies an ``https`` upstream (default:
    the system's trust store).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        model: str | None = None,
        timeouts: UpstreamTimeouts = DEFAULT_TIMEOUTS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        try:
            origin, self._target = split_url(base_url.rstrip("/") + "/chat/completions")
        except ValueError as exc:
            raise ValueError(f"invalid base_url {base_url!r}: {exc}") from None
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, not {max_connections}")
        self._model = model
        self._headers = list(_HEADERS)
        if api_key:
            if any(c in api_key for c in "\r\n\0"):  # it would split the request head
                raise ValueError("api_key must not contain CR, LF or NUL")
            self._headers.append(("Authorization", f"Bearer {api_key}"))
        limits = replace(DEFAULT_LIMITS, max_connections=max_connections)
        self._pool = ConnectionPool(
            origin, timeouts=timeouts, limits=limits, ssl_context=ssl_context
        )

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """Yield the events of one upstream completion, a batch per upstream read; the last is
        ``done`` or ``error``."""
        content = _encoded(self._body(request))
        if isinstance(content, Event):
            yield [content]
            return
        relay: _Relay | None = None
        try:
            response = await self._pool.request("POST", self._target, self._headers, content)
            # Leaving this block by any path (the end, aclose(), cancellation) closes the
            # response; an unfinished one takes its connection down with it, which is what
            # aborts the generation upstream.
            async with response:
                relay = _Relay(response)
                error = await _unusable_response(response)
                if error is not None:
                    relay.ended = True
                    yield [error]
                    return
                # The relay loop: one read, one batch of every event it completed, one yield
                # (so one hub append). Inlined rather than a nested generator, which would cost
                # an extra resumption per read.
                read, batch = response.read, relay.batch
                while data := await read():
                    events = batch(data)
                    if events:
                        yield events
                        if relay.ended:
                            return
                events = relay.end()
                if events:
                    yield events
        except UpstreamHTTPError as exc:
            # The connection keeps this error, to raise it to any later reader, and its
            # traceback's frames hold the connection: dropped, or that is a reference cycle.
            exc.__traceback__ = None
            if relay is None or not relay.ended:
                yield [_transport_error(exc)]
        except Exception as exc:
            # The client's own errors are mapped above; anything else still ends the stream
            # with an error, logged for the operator, instead of escaping into the gateway.
            log.exception("upstream request to %s failed unexpectedly", self._pool.origin)
            if relay is None or not relay.ended:
                yield [_unexpected_error(exc)]

    def feed(self, request: GenerationRequest) -> UpstreamFeed:
        """The same events as `stream`, pushed: each read's batch goes to the sink from the
        connection's own call-back, with no task woken per upstream read."""
        return UpstreamFeed(self, request)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._pool.aclose()

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


_MAX_TAKE_BYTES = 64 * 1024
"""The most of a response body a feed hands over as one batch: a socket read's worth (what
a batch holds anyway while the feed keeps up), at most about a thousand of the smallest
chunks."""


class UpstreamFeed:
    """One upstream completion as a `airlane.backends.base.Feed` (`OpenAIUpstreamBackend.feed`).

    `run` sends the request and checks the response as `OpenAIUpstreamBackend.stream` does;
    then the response's connection calls the feed (`UpstreamResponse.listen`) whenever bytes,
    the end or an error arrive, and the feed hands each read's batch to the sink at once.
    Failures become one final ``error`` event, as in `stream`; what the sink raises (the
    stream was cancelled or deleted) is raised by `run` as it is, and closes the response,
    which aborts the generation upstream.
    """

    __slots__ = ("_backend", "_done", "_paused", "_refusal", "_relay", "_request", "_sink")

    def __init__(self, backend: OpenAIUpstreamBackend, request: GenerationRequest) -> None:
        self._backend = backend
        self._request = request
        self._sink: Sink | None = None
        self._relay: _Relay | None = None
        self._done: asyncio.Future[None] | None = None
        self._refusal: Exception | None = None
        self._paused = False

    def pause(self) -> None:
        """Take nothing from the response until `resume`: what arrives stays with the
        connection, which stops reading its socket once it holds `max_buffered_bytes`, so
        the upstream is then held back by TCP (and its silence is not taken for a timeout)."""
        self._paused = True

    def resume(self) -> None:
        """Hand over what arrived while paused, and go on (not from within the sink)."""
        if self._paused:
            self._paused = False
            self._on_ready()

    async def run(self, sink: Sink) -> None:
        """Feed the completion's batches to ``sink``; see `airlane.backends.base.Feed.run`."""
        if self._sink is not None:
            raise RuntimeError("UpstreamFeed.run: a feed runs once")
        self._sink = sink
        with contextlib.suppress(_Refused):
            await self._relay_all()
        # Raised here, outside the handler, so that it does not carry the `_Refused` as its
        # context (which would hold it back: a reference cycle).
        refusal, self._refusal = self._refusal, None
        if refusal is not None:
            try:
                raise refusal
            finally:
                del refusal  # its traceback holds this frame: no cycle through the name

    async def _relay_all(self) -> None:
        backend = self._backend
        content = _encoded(backend._body(self._request))
        if isinstance(content, Event):
            self._put([content])
            return
        pool = backend._pool
        try:
            response = await pool.request("POST", backend._target, backend._headers, content)
            async with response:  # closed however this ends: see `stream`
                self._relay = relay = _Relay(response)
                error = await _unusable_response(response)
                if error is not None:
                    relay.ended = True
                    self._put([error])
                    return
                self._done = done = asyncio.get_running_loop().create_future()
                response.listen(self._on_ready)
                try:
                    self._on_ready()  # what arrived with the head
                    await done
                finally:
                    response.listen(None)
                    # Nothing here keeps the future, whose exception (if any) holds frames
                    # that hold this feed: no reference cycle.
                    self._done = None
                    del done
        except UpstreamHTTPError as exc:
            # The connection keeps this error, to raise it to any later reader, and its
            # traceback's frames hold the connection: dropped, or that is a reference cycle.
            exc.__traceback__ = None
            if not self._ended:
                self._put([_transport_error(exc)])
        except _Refused:
            raise
        except Exception as exc:
            log.exception("upstream request to %s failed unexpectedly", pool.origin)
            if not self._ended:
                self._put([_unexpected_error(exc)])

    @property
    def _ended(self) -> bool:
        return self._relay is not None and self._relay.ended

    def _put(self, events: list[Event]) -> None:
        assert self._sink is not None
        try:
            self._sink(events)
        except Exception as exc:
            self._refusal = exc
            raise _Refused from None

    def _on_ready(self) -> None:
        """The connection's call-back: hand over what arrived; settle `run` at the end."""
        done, relay = self._done, self._relay
        if done is None or done.done() or relay is None:
            return
        take = relay.response.take
        try:
            # A read at a time, bounded: what piled up while the feed was paused comes in
            # pieces, each one batch, so the hub's queue grows by a bounded step between two
            # checks of its backlog (and the feed may be paused again between them).
            while not self._paused and (data := take(_MAX_TAKE_BYTES)) is not None:
                events = relay.batch(data) if data else relay.end()
                if events:
                    self._put(events)  # (which may pause this feed)
                if relay.ended:
                    done.set_result(None)
                    return
        except Exception as exc:  # an upstream failure, or the sink refused: `run` sorts it
            done.set_exception(exc)
            del done  # the exception's traceback holds this frame: no cycle through the name


class _Refused(Exception):
    """The sink refused a batch (`UpstreamFeed._refusal` says why): passes the mapping of
    upstream failures to error events by, since it is the stream's end, not the upstream's."""


class _Relay:
    """One streaming response's body as batches of events: each read's bytes in, the events
    they completed out."""

    __slots__ = ("_translator", "ended", "response")

    def __init__(self, response: UpstreamResponse) -> None:
        self.response = response
        self._translator = ChunkTranslator()
        self.ended = False
        """True once the stream's last event is out (or an error replaced it)."""

    def batch(self, data: bytes) -> list[Event]:
        """The events ``data`` completed (possibly none)."""
        events = self._translator.receive_data(data)
        if events and self._translator.finished:
            self.ended = True
            if events[-1].kind is Kind.DONE:
                # The body ends right after [DONE]: let the connection read that end and go
                # back to the pool, without holding up the last batch.
                self.response.drain_on_close()
        return events

    def end(self) -> list[Event]:
        """The body ended: what is left (an error if the stream was cut short)."""
        self.ended = True
        return self._translator.end_of_stream()


def _encoded(body: dict[str, Any]) -> bytes | Event:
    """The request body as JSON, or the error event for one that cannot be encoded."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        return Event.error(f"request cannot be encoded as JSON: {exc}", code="invalid_request")


def _unexpected_error(exc: Exception) -> Event:
    message = f"upstream request failed: {type(exc).__name__}: {exc}"
    return Event.error(message, code="upstream_connection_error")


async def _unusable_response(response: UpstreamResponse) -> Event | None:
    """The error event for a response that carries no event stream; None for one that does."""
    status = response.status
    if not 200 <= status < 300:
        problem = f"returned HTTP {status} {response.reason}".rstrip()
        return await _error_from_body(response, problem, "upstream_http_error")
    if (response.header("content-type") or "").startswith("application/json"):
        # The upstream ignored "stream": true and answered with one JSON document.
        problem = "answered with JSON instead of an event stream"
        return await _error_from_body(response, problem, PROTOCOL_ERROR)
    return None


async def _error_from_body(response: UpstreamResponse, problem: str, code: str) -> Event:
    """The error event for ``problem``, quoting the upstream's message from the body."""
    body = await response.read_up_to(_ERROR_BODY_LIMIT)
    try:
        detail = error_message(orjson.loads(body))
    except orjson.JSONDecodeError:
        detail = quote(body.decode("utf-8", "replace").strip())
    return Event.error(f"upstream {problem}: {detail}", code=code, status=response.status)


def _transport_error(exc: UpstreamHTTPError) -> Event:
    """The error event for a failure of the HTTP client (translated here, never leaked)."""
    if isinstance(exc, UpstreamTimeout):
        code = "upstream_timeout"
    elif isinstance(exc, UpstreamConnectError):
        code = "upstream_unavailable"
    elif isinstance(exc, UpstreamProtocolError):
        code = PROTOCOL_ERROR
    else:
        code = "upstream_connection_error"
    return Event.error(str(exc), code=code)
