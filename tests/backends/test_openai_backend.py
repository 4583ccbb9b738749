"""The OpenAI-compatible upstream backend, against a real HTTP server on 127.0.0.1.

The server is a small ASGI app served by uvicorn in a thread. Each test picks a scenario by
the first path segment of ``base_url``; the app records what it received and when a client
disconnected (the ``http.disconnect`` ASGI message).
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson
import pytest
import uvicorn

from airlane.backends.base import Backend, FeedingBackend, GenerationRequest
from airlane.backends.openai import _MAX_TAKE_BYTES, ChunkTranslator, OpenAIUpstreamBackend
from airlane.backends.openai_chunks import EventSplitter
from airlane.backends.upstream_config import UpstreamTimeouts
from airlane.core.events import Channel, Event, Kind
from airlane.wire.errors import SSEError
from airlane.wire.sse import SSEDecoder, SSEMessage
from tests.backends.pausing import PausingSink

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def sse(*payloads: object) -> bytes:
    """An event stream carrying each payload as one ``data:`` event (strings verbatim)."""
    parts = []
    for payload in payloads:
        data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        parts.append(f"data: {data}\n\n".encode())
    return b"".join(parts)


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


USAGE = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
}

NORMAL = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Think"}),
    chunk({"reasoning": "ing."}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo, café"}),
    chunk({"content": " 日本 🚀"}),
    chunk({}, finish_reason="stop"),
    USAGE,
    "[DONE]",
)

TOOL_CALLS = sse(
    chunk(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "search", "arguments": ""},
                }
            ],
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"que'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ry": "x"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {"index": 1, "id": "call_def", "function": {"name": "lookup", "arguments": "{}"}}
            ]
        }
    ),
    chunk({}, finish_reason="tool_calls"),
    USAGE,
    "[DONE]",
)

LONG = sse(
    *(chunk({"content": f"token {n} "}) for n in range(5000)),
    chunk({}, finish_reason="stop"),
    USAGE,
    "[DONE]",
)
"""About 0.6 MB: more than an upstream connection buffers unread (`max_buffered_bytes`)."""

SCENARIOS: dict[str, tuple[int, str, bytes]] = {
    "normal": (200, "text/event-stream", NORMAL),
    "long": (200, "text/event-stream", LONG),
    "tools": (200, "text/event-stream", TOOL_CALLS),
    "unauthorized": (
        401,
        "application/json",
        orjson.dumps(
            {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        ),
    ),
    "crash": (500, "text/plain", b"Internal Server Error"),
    "malformed": (200, "text/event-stream", sse(chunk({"content": "a"}), "{not json", "[DONE]")),
    "wrongshape": (200, "text/event-stream", sse({"choices": "nope"}, "[DONE]")),
    "nodone": (200, "text/event-stream", sse(chunk({"content": "a"}), chunk({}, "stop"))),
    "midstream": (
        200,
        "text/event-stream",
        sse(chunk({"content": "a"}), {"error": {"message": "model overloaded"}}),
    ),
    "json200": (200, "application/json", orjson.dumps({"object": "chat.completion"})),
    "longline": (200, "text/event-stream", b"data: " + b"x" * (1 << 21)),
}


class Upstream:
    """A canned OpenAI-compatible server (an ASGI app)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.disconnected: defaultdict[str, threading.Event] = defaultdict(threading.Event)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        key = scope["path"].split("/")[1]
        self.requests.append(
            {
                "key": key,
                "path": scope["path"],
                "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
                "body": orjson.loads(body),
                "client": tuple(scope["client"]),
            }
        )
        if key.startswith("stall"):
            await self.stall(key, receive, send)
            return
        status, content_type, payload = SCENARIOS[key]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type.encode())],
            }
        )
        # Odd-sized pieces, so that events and UTF-8 characters straddle reads.
        size = 7 if len(payload) < 4096 else 65536
        for start in range(0, len(payload), size):
            piece = payload[start : start + size]
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def stall(self, key: str, receive: Receive, send: Send) -> None:
        """Send one token, then nothing, until the client goes away."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send(
            {"type": "http.response.body", "body": sse(chunk({"content": "a"})), "more_body": True}
        )
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected[key].set()


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", loop="asyncio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


REQUEST = GenerationRequest(model="gpt-test", messages=[{"role": "user", "content": "hi"}])


async def collect(backend: OpenAIUpstreamBackend, req: GenerationRequest = REQUEST) -> list[Event]:
    try:
        return [event async for batch in backend.stream(req) for event in batch]
    finally:
        await backend.aclose()


def error_of(events: list[Event]) -> dict[str, Any]:
    assert sum(e.terminal for e in events) == 1
    assert events[-1].kind is Kind.ERROR
    assert events[-1].data is not None
    return events[-1].data


async def wait_for_disconnect(app: Upstream, key: str) -> None:
    assert await asyncio.to_thread(app.disconnected[key].wait, 5), "upstream saw no disconnect"


def test_is_a_backend() -> None:
    backend: Backend = OpenAIUpstreamBackend("http://127.0.0.1:1/v1")  # mypy checks this
    assert isinstance(backend, Backend)
    assert isinstance(backend, FeedingBackend)  # every request can be fed
    assert backend.name == "openai"


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host/v1", "/v1", "http://h:99999/v1"])
def test_base_url_is_validated(url: str) -> None:
    with pytest.raises(ValueError):
        OpenAIUpstreamBackend(url)


def test_api_key_that_would_split_the_request_is_refused() -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        OpenAIUpstreamBackend("http://127.0.0.1:1/v1", "sk-1\r\nX-Injected: 1")
    assert "sk-1" not in str(caught.value), "the key is not echoed"


# -- the happy paths -----------------------------------------------------------------------


async def test_normal_stream(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    events = await collect(OpenAIUpstreamBackend(f"{url}/normal/v1/"))
    reasoning = [e.text for e in events if e.kind is Kind.DELTA and e.channel is Channel.REASONING]
    content = [e.text for e in events if e.kind is Kind.DELTA and e.channel is Channel.CONTENT]
    assert reasoning == ["Think", "ing."]
    assert content == ["Hel", "lo, café", " 日本 🚀"]
    assert [e.kind for e in events[-2:]] == [Kind.USAGE, Kind.DONE]
    assert events[-2].data == {"prompt_tokens": 9, "completion_tokens": 4}
    assert events[-1].data == {"finish_reason": "stop"}


async def test_request_is_forwarded(upstream: tuple[Upstream, str]) -> None:
    app, url = upstream
    tools = [{"type": "function", "function": {"name": "search"}}]
    req = GenerationRequest(
        model="client-model",
        messages=[{"role": "user", "content": "hi"}],
        seed=3,
        max_tokens=50,
        temperature=0.5,
        tools=tools,
        tool_choice="auto",
        reasoning=True,
        extra={"top_p": 0.9, "stream": False, "stream_options": {"continuous_usage_stats": True}},
    )
    backend = OpenAIUpstreamBackend(f"{url}/normal/v1", "sk-secret", model="served-model")
    await collect(backend, req)
    received = app.requests[-1]
    assert received["path"] == "/normal/v1/chat/completions"
    assert received["headers"]["authorization"] == "Bearer sk-secret"
    assert received["headers"]["content-type"] == "application/json"
    assert received["body"] == {
        "model": "served-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"continuous_usage_stats": True, "include_usage": True},
        "seed": 3,
        "max_tokens": 50,
        "temperature": 0.5,
        "tools": tools,
        "tool_choice": "auto",
        "top_p": 0.9,
    }


async def test_unset_fields_are_not_sent(upstream: tuple[Upstream, str]) -> None:
    app, url = upstream
    await collect(OpenAIUpstreamBackend(f"{url}/normal/v1"))
    received = app.requests[-1]
    assert "authorization" not in received["headers"]
    assert set(received["body"]) == {"model", "messages", "stream", "stream_options"}
    assert received["body"]["model"] == "gpt-test"


async def test_tool_calls(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    events = await collect(OpenAIUpstreamBackend(f"{url}/tools/v1"))
    calls = [(e.data, e.text) for e in events if e.kind is Kind.TOOL_CALL]
    assert calls == [
        ({"index": 0, "id": "call_abc", "name": "search"}, ""),
        ({"index": 0}, '{"que'),
        ({"index": 0}, 'ry": "x"}'),
        ({"index": 1, "id": "call_def", "name": "lookup"}, "{}"),
    ]
    assert events[-1].data == {"finish_reason": "tool_calls"}


async def test_connection_is_reused_after_done(upstream: tuple[Upstream, str]) -> None:
    app, url = upstream
    backend = OpenAIUpstreamBackend(f"{url}/normal/v1")
    try:
        for _ in range(2):
            events = [e async for batch in backend.stream(REQUEST) for e in batch]
            assert events[-1].kind is Kind.DONE
            # After [DONE] the connection reads the rest of the body in the background before
            # it goes back to the pool: wait for that (bounded), as a later request would.
            for _ in range(200):
                if backend._pool.idle_connections:
                    break
                await asyncio.sleep(0.005)
    finally:
        await backend.aclose()
    first, second = app.requests[-2:]
    assert first["client"] == second["client"]


# -- failures become error events ----------------------------------------------------------


async def test_http_error_quotes_the_upstream_message(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    error = error_of(await collect(OpenAIUpstreamBackend(f"{url}/unauthorized/v1", "bad")))
    assert error["code"] == "upstream_http_error"
    assert error["status"] == 401
    assert "401" in error["message"]
    assert "Incorrect API key provided" in error["message"]


async def test_http_error_without_json(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    error = error_of(await collect(OpenAIUpstreamBackend(f"{url}/crash/v1")))
    assert error["status"] == 500
    assert "Internal Server Error" in error["message"]


@pytest.mark.parametrize(
    ("key", "code", "words"),
    [
        ("malformed", "upstream_protocol_error", "malformed JSON"),
        ("wrongshape", "upstream_protocol_error", "choices is not a list"),
        ("nodone", "upstream_protocol_error", "without [DONE]"),
        ("midstream", "upstream_error", "model overloaded"),
        ("longline", "upstream_protocol_error", "limit"),
        ("json200", "upstream_protocol_error", "instead of an event stream"),
    ],
)
async def test_bad_streams(upstream: tuple[Upstream, str], key: str, code: str, words: str) -> None:
    _, url = upstream
    events = await collect(OpenAIUpstreamBackend(f"{url}/{key}/v1"))
    error = error_of(events)
    assert error["code"] == code
    assert words in error["message"]


async def test_connection_refused() -> None:
    with socket.socket() as closed:  # bound but not listening: connecting is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        error = error_of(await collect(OpenAIUpstreamBackend(f"http://127.0.0.1:{port}/v1")))
    assert error["code"] == "upstream_unavailable"
    assert f"127.0.0.1:{port}" in error["message"]


async def test_read_timeout(upstream: tuple[Upstream, str]) -> None:
    app, url = upstream
    timeouts = UpstreamTimeouts(idle=0.3)
    events = await collect(OpenAIUpstreamBackend(f"{url}/stall-timeout/v1", timeouts=timeouts))
    assert events[0].text == "a"
    error = error_of(events)
    assert error["code"] == "upstream_timeout"
    assert "timed out" in error["message"]
    await wait_for_disconnect(app, "stall-timeout")


async def test_unencodable_request() -> None:
    req = GenerationRequest(model="m", extra={"bad": object()})
    error = error_of(await collect(OpenAIUpstreamBackend("http://127.0.0.1:1/v1"), req))
    assert error["code"] == "invalid_request"


# -- cancellation aborts the upstream request ----------------------------------------------


@pytest.mark.parametrize("way", ["stream", "feed"])
async def test_cancelling_the_consumer_closes_the_upstream(
    upstream: tuple[Upstream, str], way: str
) -> None:
    app, url = upstream
    key = f"stall-cancel-{way}"
    backend = OpenAIUpstreamBackend(f"{url}/{key}/v1")
    got: list[Event] = []

    async def consume() -> None:
        if way == "feed":
            await backend.feed(REQUEST).run(got.extend)
            return
        async for batch in backend.stream(REQUEST):
            got.extend(batch)

    task = asyncio.create_task(consume())
    deadline = time.monotonic() + 5
    while not got:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.text for e in got] == ["a"]
    await wait_for_disconnect(app, key)
    await backend.aclose()


async def test_aclose_of_the_stream_closes_the_upstream(upstream: tuple[Upstream, str]) -> None:
    app, url = upstream
    backend = OpenAIUpstreamBackend(f"{url}/stall-aclose/v1")
    stream = backend.stream(REQUEST)
    assert [e.text for e in await anext(stream)] == ["a"]
    await stream.aclose()
    await wait_for_disconnect(app, "stall-aclose")
    await backend.aclose()


# -- the translator alone ------------------------------------------------------------------


@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_translator_is_indifferent_to_read_sizes(piece: int) -> None:
    translator = ChunkTranslator()
    events: list[Event] = []
    for start in range(0, len(NORMAL), piece):
        events += translator.receive_data(NORMAL[start : start + piece])
    assert translator.finished
    assert translator.end_of_stream() == []
    text = "".join(e.text for e in events if e.kind is Kind.DELTA)
    assert text == "Thinking.Hello, café 日本 🚀"
    assert events[-1].kind is Kind.DONE


def test_translator_ignores_what_follows_done() -> None:
    translator = ChunkTranslator()
    events = translator.receive_data(sse("[DONE]", chunk({"content": "late"})))
    assert [e.kind for e in events] == [Kind.DONE]
    assert translator.receive_data(sse(chunk({"content": "later"}))) == []


def test_translator_reports_a_truncated_stream() -> None:
    translator = ChunkTranslator()
    events = translator.receive_data(sse(chunk({"content": "a"})) + b"data: [DO")
    assert [e.text for e in events] == ["a"]
    (error,) = translator.end_of_stream()
    assert error.kind is Kind.ERROR


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        {"choices": [1]},
        {"choices": [{"delta": "x"}]},
        {"choices": [{"delta": {"tool_calls": {}}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": -1}]}}]},
        {"choices": [], "usage": {"prompt_tokens": "9"}},
    ],
)
def test_translator_rejects_malformed_chunks(payload: object) -> None:
    translator = ChunkTranslator()
    (error,) = translator.receive_data(sse(payload))
    assert error.kind is Kind.ERROR
    assert error.data is not None and error.data["code"] == "upstream_protocol_error"
    assert translator.finished


def test_translator_skips_empty_tool_call_items() -> None:
    translator = ChunkTranslator()
    items = [{"index": 0, "function": {"arguments": ""}}, {"index": 0, "type": "function"}]
    assert translator.receive_data(sse(chunk({"tool_calls": items}))) == []
    assert not translator.finished


def test_translator_reports_an_error_event() -> None:
    translator = ChunkTranslator()
    (error,) = translator.receive_data(b"event: error\ndata: rate limited\n\n")
    assert error.data is not None
    assert error.data["code"] == "upstream_error"
    assert "rate limited" in error.data["message"]


# -- the event splitter: the shortcut agrees with the exact decoder --------------------------

SPLITTER_STREAMS = [
    NORMAL,
    NORMAL.replace(b"\n", b"\r\n"),  # CRLF line ends: the decoder takes over
    b"\xef\xbb\xbf" + NORMAL,  # a byte-order mark at the start
    b": comment\n\nevent: ping\ndata: {}\n\nid: 7\ndata: [1]\n\n" + NORMAL,
    b"data: line one\ndata: line two\n\n\n\ndata:no-space\n\ndata: \xff\xfe\n\n",
    b"data: x\r\rdata: y\n\n",
]


def decoded(messages: list[bytes | SSEMessage]) -> list[tuple[str, str]]:
    return [
        ("message", m.decode("utf-8", "replace")) if isinstance(m, bytes) else (m.event, m.data)
        for m in messages
    ]


@pytest.mark.parametrize("stream", SPLITTER_STREAMS)
def test_splitter_matches_the_decoder_at_every_cut(stream: bytes) -> None:
    expected = [(m.event, m.data) for m in SSEDecoder().feed(stream)]
    assert expected, "a fixture with events"
    for cut in range(len(stream) + 1):
        splitter = EventSplitter()
        got = decoded(splitter.feed(stream[:cut]) + splitter.feed(stream[cut:]))
        assert got == expected, cut


@pytest.mark.parametrize("stream", SPLITTER_STREAMS)
def test_splitter_matches_the_decoder_byte_by_byte(stream: bytes) -> None:
    splitter = EventSplitter()
    got: list[bytes | SSEMessage] = []
    for i in range(len(stream)):
        got += splitter.feed(stream[i : i + 1])
    assert decoded(got) == [(m.event, m.data) for m in SSEDecoder().feed(stream)]


@pytest.mark.parametrize("stream", SPLITTER_STREAMS)
def test_splitter_matches_the_decoder_one_event_a_read(stream: bytes) -> None:
    # Upstreams usually write one event per read: the splitter's shortest path.
    reads = [part + b"\n\n" for part in stream.split(b"\n\n")[:-1]] + [stream.split(b"\n\n")[-1]]
    assert b"".join(reads) == stream
    splitter = EventSplitter()
    got: list[bytes | SSEMessage] = []
    for read in reads:
        got += splitter.feed(read)
    assert decoded(got) == [(m.event, m.data) for m in SSEDecoder().feed(stream)]


def test_a_whole_event_a_read_is_sliced_out_unchanged() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a":1}\n\n') == [b'{"a":1}']
    assert splitter.feed(b"data: \n\n") == [b""]
    assert splitter.feed(b"data: [DONE]\n\n") == [b"[DONE]"]


def test_splitter_hands_an_overlong_line_to_the_decoder_limit() -> None:
    splitter = EventSplitter(SSEDecoder(max_line_bytes=100), max_line_bytes=100)
    assert splitter.feed(b"data: " + b"x" * 60) == []
    with pytest.raises(SSEError):  # held past the limit: the decoder judges it
        splitter.feed(b"x" * 60)
    splitter = EventSplitter(SSEDecoder(max_line_bytes=100), max_line_bytes=100)
    with pytest.raises(SSEError):  # a complete block over the limit, in one read
        splitter.feed(b"data: " + b"x" * 200 + b"\n\n")


def test_translator_reads_invalid_utf8_as_the_decoder_does() -> None:
    translator = ChunkTranslator()
    payload = orjson.dumps(chunk({"content": "AB"})).replace(b"AB", b"A\xffB")
    (event,) = translator.receive_data(b"data: " + payload + b"\n\n")
    assert event.text == "A\ufffdB"


# -- the feed: the same events, pushed -----------------------------------------------------


async def fed(backend: OpenAIUpstreamBackend, req: GenerationRequest = REQUEST) -> list[Event]:
    """The events of ``backend.feed(req)``, checking that it ends with its terminal event."""
    batches: list[list[Event]] = []
    try:
        await asyncio.wait_for(backend.feed(req).run(batches.append), 10)
    finally:
        await backend.aclose()
    assert all(batches), "no empty batch"
    assert batches[-1][-1].terminal
    return [event for batch in batches for event in batch]


def summary(events: list[Event]) -> list[tuple[object, ...]]:
    return [(e.kind, e.channel, e.text, e.data) for e in events]


@pytest.mark.parametrize("key", sorted(SCENARIOS))
async def test_the_feed_carries_what_the_stream_carries(
    upstream: tuple[Upstream, str], key: str
) -> None:
    _, url = upstream
    pulled = await collect(OpenAIUpstreamBackend(f"{url}/{key}/v1"))
    pushed = await fed(OpenAIUpstreamBackend(f"{url}/{key}/v1"))
    assert summary(pushed) == summary(pulled)


async def test_the_feed_reports_failures_before_and_after_the_head(
    upstream: tuple[Upstream, str],
) -> None:
    app, url = upstream
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        refused = error_of(await fed(OpenAIUpstreamBackend(f"http://127.0.0.1:{port}/v1")))
    assert refused["code"] == "upstream_unavailable"
    req = GenerationRequest(model="m", extra={"bad": object()})
    unencodable = error_of(await fed(OpenAIUpstreamBackend("http://127.0.0.1:1/v1"), req))
    assert unencodable["code"] == "invalid_request"
    timeouts = UpstreamTimeouts(idle=0.3)
    events = await fed(OpenAIUpstreamBackend(f"{url}/stall-feedtimeout/v1", timeouts=timeouts))
    assert events[0].text == "a"
    assert error_of(events)["code"] == "upstream_timeout"
    await wait_for_disconnect(app, "stall-feedtimeout")


class StreamGone(Exception):
    """What a hub raises when the stream can take nothing more (any exception will do)."""


async def test_a_refusing_sink_ends_the_feed_with_its_reason_and_closes_the_upstream(
    upstream: tuple[Upstream, str],
) -> None:
    app, url = upstream
    backend = OpenAIUpstreamBackend(f"{url}/stall-feedrefused/v1")

    def sink(batch: list[Event]) -> None:
        raise StreamGone("cancelled meanwhile")

    with pytest.raises(StreamGone, match="cancelled meanwhile"):
        await asyncio.wait_for(backend.feed(REQUEST).run(sink), 5)
    await wait_for_disconnect(app, "stall-feedrefused")
    await backend.aclose()


async def test_a_feed_runs_once() -> None:
    backend = OpenAIUpstreamBackend("http://127.0.0.1:1/v1")
    feed = backend.feed(GenerationRequest(model="m", extra={"bad": object()}))
    await feed.run(lambda batch: None)
    with pytest.raises(RuntimeError, match="runs once"):
        await feed.run(lambda batch: None)
    await backend.aclose()


async def test_feeds_that_fail_leave_no_reference_cycle(upstream: tuple[Upstream, str]) -> None:
    """A failed feed's exception holds frames that hold the feed, its response and its
    connection; nothing may hold the exception back (a future, a local, the parser's
    call-backs), or each failed stream waits for a full collection to be freed. The plain
    asyncio loop's own socket transports keep a cycle on close (uvloop's do not): those are
    left out."""
    _, url = upstream

    def refusing(batch: list[Event]) -> None:
        raise StreamGone("gone")

    async def fail_twice(backend: OpenAIUpstreamBackend) -> None:
        # Not under asyncio.wait_for: on Python 3.11 its frame and the task it wraps hold
        # the task's exception in a cycle of their own.
        with pytest.raises(StreamGone):
            await backend.feed(REQUEST).run(refusing)
        events: list[Event] = []
        await backend.feed(REQUEST).run(events.extend)
        assert events[-1].kind is Kind.ERROR  # the idle timeout, set on the feed's future

    backend = OpenAIUpstreamBackend(f"{url}/stall-cycles/v1", timeouts=UpstreamTimeouts(idle=0.05))
    try:
        await fail_twice(backend)  # warm: connections, first-use caches
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            await fail_twice(backend)
            gc.collect()
            ours = [
                type(o).__name__
                for o in gc.garbage
                if type(o).__module__.startswith(("airlane", "tests"))
                or type(o).__name__ in ("frame", "traceback", "Future", "Task")
            ]
            assert ours == []
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    finally:
        await backend.aclose()


async def test_a_paused_feed_takes_nothing_and_holds_the_upstream_back_until_resumed(
    upstream: tuple[Upstream, str],
) -> None:
    _, url = upstream
    pulled = await collect(OpenAIUpstreamBackend(f"{url}/long/v1"))
    # An idle timeout far shorter than the pause: the silence of a paused feed is not the
    # upstream's.
    backend = OpenAIUpstreamBackend(f"{url}/long/v1", timeouts=UpstreamTimeouts(idle=0.3))
    feed = backend.feed(REQUEST)
    sink = PausingSink(feed)
    batches = sink.batches
    task = asyncio.create_task(feed.run(sink))
    try:
        deadline = time.monotonic() + 5
        while not batches and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        assert len(batches) == 1 and not task.done()
        # What the connection holds unread stops its reading: TCP holds the upstream back.
        assert feed._relay is not None and feed._relay.response._conn._reading_paused
        feed.resume()
        await asyncio.wait_for(task, 10)
    finally:
        await backend.aclose()
    assert summary(sink.events) == summary(pulled)
    # What piled up came a bounded read at a time (each batch a step of the hub's queue).
    smallest = min(len(piece) for piece in LONG.split(b"\n\n") if piece)
    assert max(len(batch) for batch in sink.batches) <= _MAX_TAKE_BYTES // smallest + 1
