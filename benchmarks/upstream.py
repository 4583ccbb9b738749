"""A lean OpenAI-compatible upstream for proxy benchmarks: paced chat completion streams.

A separate process standing in for vLLM and the like, cheap enough per chunk that hundreds of
paced streams leave most of its core idle. Raw asyncio on uvloop, requests parsed by
httptools, responses written by hand::

    .venv/bin/python benchmarks/upstream.py --port 0 --interval-ms 20 --chunks 50

It prints ``upstream listening on http://HOST:PORT (pid N)`` once ready and serves:

``POST /v1/chat/completions`` with ``"stream": true``
    An SSE stream of ``chat.completion.chunk`` objects: a role chunk at once, then content
    chunk i (0, 1, ...) due at ``start + ttft + i * interval``, then a chunk with the
    ``finish_reason``, a usage chunk if ``stream_options.include_usage``, and ``data: [DONE]``.
    The chunk count is ``bench.chunks`` if the request has it, else ``max_tokens / 16``
    rounded up, else ``--chunks``; ``bench.interval_ms`` overrides ``--interval-ms``.
``POST /v1/chat/completions`` without streaming
    The whole ``chat.completion`` at once (the same text, unpaced).
``GET /healthz``
    ``{"pid": ..., "streams": <streams in progress>}``.

Each content chunk carries 16 tokens (like a load-test chunk) and starts with a stamp,
``#<i>@<ts>``: ``ts`` is the chunk's scheduled send time in CLOCK_MONOTONIC nanoseconds
(`time.monotonic_ns`), and a chunk is never sent before it, so a client on the same machine
measures lag as receive time minus ``ts``. The stamp is in the text rather than a field of the
chunk because the text is what a proxy relays: Airlane rebuilds chunks from its own events, and
may merge consecutive deltas for a slow reader, which keeps every stamp in order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import time
from typing import Any, cast

import httptools
import orjson
import uvloop

__all__ = ["STAMP", "TOKENS_PER_CHUNK", "UpstreamServer", "main"]

TOKENS_PER_CHUNK = 16
"""Tokens of text in one content chunk: the stamp and 15 words."""
STAMP = re.compile(rb"#(\d+)@(\d+)")
"""Finds ``(i, ts)`` stamps in the bytes of a response."""
DEFAULT_INTERVAL_MS = 20.0
DEFAULT_CHUNKS = 50
MAX_CHUNKS = 100_000
"""Refuse requests for more, so a typo cannot keep a stream open for hours."""
MAX_REQUEST_BYTES = 1 << 20
"""Largest request head plus body accepted."""
MAX_WRITE_BUFFER = 1 << 20
"""A client this far behind is not reading: its connection is closed instead of buffered."""

_FILLER = b"".join(b" w%d" % i for i in range(TOKENS_PER_CHUNK - 1))
_LATE_MARGIN_S = 0.001  # uvloop's timers have 1 ms resolution and may fire that much early
_NS = 1_000_000_000


def _event(payload: bytes) -> bytes:
    """``payload`` as one SSE event in one HTTP/1.1 chunk (RFC 9112 section 7.1)."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _response_head(status: int, content_type: bytes, length: int | None = None) -> bytes:
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s\r\n\r\n" % (
        status, reason, content_type, framing
    )  # fmt: skip


class _Stream:
    """One paced completion on one connection; its only timer is cancelled on disconnect."""

    def __init__(self, conn: _Connection, request: dict[str, Any], defaults: argparse.Namespace):
        self.conn = conn
        self.chunks = _chunk_count(request, defaults.chunks)
        interval_ms = float(_bench_field(request, "interval_ms", defaults.interval_ms))
        if not 0 <= interval_ms <= 60_000:
            raise ValueError("interval_ms must be 0 to 60000")
        self.interval_ns = int(interval_ms * 1e6)
        self.include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self.prompt_tokens = _prompt_tokens(request)
        self.index = 0
        self.timer: asyncio.TimerHandle | None = None
        model = str(request.get("model", "bench")).encode()
        completion_id = b"chatcmpl-up%d" % time.monotonic_ns()
        common = b'{"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s",' % (
            completion_id, int(time.time()), orjson.dumps(model.decode())[1:-1]
        )  # fmt: skip
        self.prefix = common + b'"choices":[{"index":0,"delta":{"content":"'
        self.suffix = b'"},"finish_reason":null}]}'
        self.common = common
        self.start_ns = time.monotonic_ns() + int(defaults.ttft_ms * 1e6)

    def begin(self) -> None:
        role = self.common + (
            b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"finish_reason":null}]}'
        )
        self.conn.write(_response_head(200, b"text/event-stream") + _event(role))
        self._schedule()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _due_ns(self) -> int:
        return self.start_ns + self.index * self.interval_ns

    def _schedule(self) -> None:
        delay = (self._due_ns() - time.monotonic_ns()) / _NS
        self.timer = self.conn.loop.call_later(max(delay, 0.0), self._tick)

    def _tick(self) -> None:
        self.timer = None
        due = self._due_ns()
        now = time.monotonic_ns()
        if now < due:  # early (timer resolution): never send before the stamp's time
            self.timer = self.conn.loop.call_later((due - now) / _NS + _LATE_MARGIN_S, self._tick)
            return
        out = _event(self.prefix + b"#%d@%d" % (self.index, due) + _FILLER + self.suffix)
        self.index += 1
        if self.index < self.chunks:
            self.conn.write(out)
            self._schedule()
            return
        self.conn.write(out + self._ending())
        self.conn.stream_ended()

    def _ending(self) -> bytes:
        parts = [
            _event(self.common + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
        ]
        if self.include_usage:
            completion = self.chunks * TOKENS_PER_CHUNK
            usage = b'"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,' % (
                self.prompt_tokens, completion
            ) + b'"total_tokens":%d}}' % (self.prompt_tokens + completion)  # fmt: skip
            parts.append(_event(self.common + usage))
        parts.append(_event(b"[DONE]"))
        parts.append(b"0\r\n\r\n")
        return b"".join(parts)


def _bench_field(request: dict[str, Any], name: str, default: Any) -> Any:
    bench = request.get("bench")
    return bench.get(name, default) if isinstance(bench, dict) else default


def _chunk_count(request: dict[str, Any], default: int) -> int:
    max_tokens = request.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > 0:
        default = -(-max_tokens // TOKENS_PER_CHUNK)
    chunks = int(_bench_field(request, "chunks", default))
    if not 1 <= chunks <= MAX_CHUNKS:
        raise ValueError(f"chunks must be 1 to {MAX_CHUNKS}")
    return chunks


def _prompt_tokens(request: dict[str, Any]) -> int:
    words = 0
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        words += len(content.split()) if isinstance(content, str) else 0
    return words


def _completion(request: dict[str, Any], defaults: argparse.Namespace) -> bytes:
    chunks = _chunk_count(request, defaults.chunks)
    now = time.monotonic_ns()
    text = b"".join(b"#%d@%d" % (i, now) + _FILLER for i in range(chunks)).decode()
    prompt, completion = _prompt_tokens(request), chunks * TOKENS_PER_CHUNK
    return orjson.dumps(
        {
            "id": f"chatcmpl-up{now}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "bench"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


class _Connection(asyncio.Protocol):
    """One client connection: parses requests with httptools, one at a time (keep-alive)."""

    def __init__(self, server: UpstreamServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body = bytearray()
        self.received = 0
        self.stream: _Stream | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > MAX_REQUEST_BYTES:
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.respond(400, b'{"error":{"message":"malformed request"}}')
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.stream is not None:
            self.stream.cancel()
            self.stream_ended()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        method, path = self.parser.get_method(), self.url.split(b"?")[0]
        body, self.body, self.url, self.received = bytes(self.body), bytearray(), b"", 0
        if path == b"/healthz":
            health = {"pid": os.getpid(), "streams": self.server.streams}
            self.respond(200, orjson.dumps(health))
        elif method == b"POST" and path == b"/v1/chat/completions":
            self.chat(body)
        else:
            self.respond(404, b'{"error":{"message":"not found"}}')

    # helpers
    def chat(self, body: bytes) -> None:
        try:
            request = orjson.loads(body)
            if not isinstance(request, dict):
                raise ValueError("the body must be a JSON object")
            if not request.get("stream"):
                self.respond(200, _completion(request, self.server.options))
                return
            stream = _Stream(self, request, self.server.options)
        except (ValueError, TypeError) as exc:
            self.respond(400, orjson.dumps({"error": {"message": str(exc)}}))
            return
        self.stream = stream
        self.server.streams += 1
        stream.begin()

    def stream_ended(self) -> None:
        if self.stream is not None:
            self.stream = None
            self.server.streams -= 1

    def respond(self, status: int, body: bytes) -> None:
        self.write(_response_head(status, b"application/json", len(body)) + body)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None:
            return
        if transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            self.close()
            return
        transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class UpstreamServer:
    """The listening server; ``streams`` counts streams in progress."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.streams = 0

    async def serve(self) -> None:
        """Listen until SIGINT or SIGTERM."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.options.host, self.options.port))
        server = await loop.create_server(lambda: _Connection(self), sock=sock, backlog=4096)
        host, port = sock.getsockname()[:2]
        print(f"upstream listening on http://{host}:{port} (pid {os.getpid()})", flush=True)
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with server:
            await stop.wait()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--interval-ms", type=float, default=DEFAULT_INTERVAL_MS)
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS, help="chunks per stream")
    parser.add_argument(
        "--ttft-ms", type=float, default=None, help="delay of the first content chunk"
    )
    options = parser.parse_args(argv)
    if options.ttft_ms is None:
        options.ttft_ms = options.interval_ms
    return options


def main(argv: list[str] | None = None) -> None:
    """Run the server."""
    uvloop.run(UpstreamServer(parse_args(argv)).serve())


if __name__ == "__main__":
    main()
