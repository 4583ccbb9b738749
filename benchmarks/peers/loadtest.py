"""What the Python reference servers share: the load-test contract, in plain Python.

`airlane bench --compare` runs the same workload against Airlane and against servers written
the way an engineer would write them with FastAPI or aiohttp (`fastapi_app.py`,
`aiohttp_app.py`). Both serve ``GET /v1/loadtest/sse`` and ``GET /v1/loadtest/ws`` exactly as
Airlane does (see `airlane.backends.synthetic.LoadTestChunk` and
`airlane.transports.http.loadtest`):

- query ``chunks`` (1..100000, default 200), ``mode`` (``burst`` | ``paced``),
  ``interval_ms`` (0.1..60000, default 20); anything else is refused;
- each chunk is one JSON object, about 1.2 KB, that starts ``{"seq":N,"ts":T,`` (``seq`` from
  1; ``ts`` in CLOCK_MONOTONIC nanoseconds) followed by an OpenAI ``chat.completion.chunk``
  body carrying 16 tokens and their log-probabilities, padded;
- burst: chunks as fast as possible, ``ts`` the time each was made, a yield to the event loop
  every `YIELD_EVERY` chunks so that the other streams progress;
- paced: chunk i is due at start + i * interval, that is its ``ts``, and it is never sent
  before it.

The chunk body is encoded once per stream and ``seq``/``ts`` are spliced in, as Airlane's
synthetic backend does, so that the comparison measures the serving stacks, not JSON encoders.
This module is imported by the peer programs (it sits beside them); it needs only the
standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

__all__ = [
    "CHUNK_BYTES",
    "TOKENS_PER_CHUNK",
    "YIELD_EVERY",
    "ChunkTemplate",
    "LoadTestQuery",
    "announce",
    "chunk_stream",
    "listening_socket",
    "parse_args",
]

TOKENS_PER_CHUNK = 16
"""Tokens in one chunk, as in Airlane's load test."""
CHUNK_BYTES = 1200
"""Target size of one encoded chunk, as in Airlane's load test."""
YIELD_EVERY = 4
"""Burst mode yields to the event loop after this many chunks (Airlane's default too)."""
MODEL = "airlane-loadtest"
"""The model name in every chunk: the same as Airlane's, so that sizes match."""

MAX_CHUNKS = 100_000
# Some tokens are non-ASCII (two-, three- and four-byte UTF-8), as in Airlane's chunks.
_WORD_LIST = """
    stream token model signal packet message event cursor buffer window frame channel lane
    gateway client server browser device river harbor garden lantern compass bridge meadow
    quiet bright gentle rapid steady careful runs moves carries sends holds reads writes
    café naïve Zürich 日本 🚀
"""
_WORDS = tuple(_WORD_LIST.split())


@dataclass(frozen=True, slots=True)
class LoadTestQuery:
    """The parameters of one load-test request."""

    chunks: int = 200
    """Chunks to send."""
    mode: str = "burst"
    """``burst`` or ``paced``."""
    interval_ms: float = 20.0
    """Time between chunks in paced mode."""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> LoadTestQuery:
        """The query of a request, checked.

        Raises:
            ValueError: a parameter is missing its form or out of range (the client's fault).
        """
        try:
            chunks = int(params.get("chunks", "200"))
            interval_ms = float(params.get("interval_ms", "20"))
        except ValueError:
            raise ValueError("'chunks' must be an integer and 'interval_ms' a number") from None
        mode = params.get("mode", "burst")
        if not 1 <= chunks <= MAX_CHUNKS:
            raise ValueError(f"'chunks' must be between 1 and {MAX_CHUNKS}")
        if mode not in ("burst", "paced"):
            raise ValueError("'mode' must be 'burst' or 'paced'")
        if not 0.1 <= interval_ms <= 60_000:
            raise ValueError("'interval_ms' must be between 0.1 and 60000")
        return cls(chunks, mode, interval_ms)


class ChunkTemplate:
    """One stream's chunk body, encoded once; `encode` adds ``seq`` and ``ts`` in front."""

    def __init__(self, rng: random.Random | None = None) -> None:
        rng = rng or random.Random()
        tokens = [" " + rng.choice(_WORDS) for _ in range(TOKENS_PER_CHUNK)]
        body = {
            "id": f"chatcmpl-{rng.getrandbits(96):024x}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "system_fingerprint": "fp_peer",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "".join(tokens)},
                    "logprobs": {
                        "content": [
                            {"token": token, "logprob": round(-rng.random() * 2, 4)}
                            for token in tokens
                        ]
                    },
                    "finish_reason": None,
                }
            ],
        }
        self._tail = self._encode_tail(body)
        # Pad to the target size counting a three-digit seq and a ts as long as today's clock.
        size = len(self.encode(100, time.monotonic_ns()).encode()) + len(',"padding":""')
        body["padding"] = "." * max(0, CHUNK_BYTES - size)
        self._tail = self._encode_tail(body)

    @staticmethod
    def _encode_tail(body: dict[str, object]) -> str:
        # Compact separators: the contract's head is exactly '{"seq":N,"ts":T,'.
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)[1:]

    def encode(self, seq: int, ts_ns: int) -> str:
        """Chunk number ``seq``, scheduled (or made) at ``ts_ns``, as JSON text."""
        return f'{{"seq":{seq},"ts":{ts_ns},{self._tail}'


async def _sleep_until_ns(deadline_ns: int) -> None:
    # The loop's timers may fire up to a millisecond early (uvloop rounds its clock), and a
    # paced chunk must never leave before its ts: sleep again for whatever is left.
    while (remaining := deadline_ns - time.monotonic_ns()) > 0:  # noqa: ASYNC110
        await asyncio.sleep(remaining / 1e9)


async def chunk_stream(query: LoadTestQuery) -> AsyncIterator[str]:
    """The chunks of one load-test stream, burst or paced as ``query`` says."""
    template = ChunkTemplate()
    if query.mode == "paced":
        start_ns = time.monotonic_ns()
        interval_ns = query.interval_ms * 1_000_000
        for index in range(query.chunks):
            ts_ns = start_ns + round(index * interval_ns)
            await _sleep_until_ns(ts_ns)
            yield template.encode(index + 1, ts_ns)
        return
    for seq in range(1, query.chunks + 1):
        yield template.encode(seq, time.monotonic_ns())
        if seq % YIELD_EVERY == 0:
            await asyncio.sleep(0)


def parse_args(description: str, *, upstream: bool = False) -> argparse.Namespace:
    """``--host`` and ``--port`` (0: any free port) from the command line; with ``upstream``,
    also the required ``--upstream`` base URL of a proxy peer (``http://HOST:PORT/v1``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one")
    if upstream:
        parser.add_argument("--upstream", required=True, help="OpenAI-compatible base URL")
    return parser.parse_args()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` and listening.

    The program binds it itself so that it knows the port even for ``--port 0``; from here on
    a client that connects waits in the backlog until the server accepts.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def announce(sock: socket.socket) -> None:
    """Print the ready line the benchmark runner waits for: ``listening on http://H:P``."""
    host, port = sock.getsockname()[:2]
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    print(f"listening on http://{authority}", flush=True)
