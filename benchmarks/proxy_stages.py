"""Proxy mode's per-chunk cost in process, stage by stage, without sockets or a loop turn.

A proxied chunk crosses three stages in the gateway: the upstream read (the HTTP/1.1
connection's protocol call-back, its parser, the feed's listener, the SSE splitter and the
chunk translator), the hub (append to the stream's log, a subscriber's poll, the write's
accounting) and the render (OpenAI SSE frame with its ``id:``). This times each on one
realistic chunk (the ~280-byte content chunk `benchmarks/upstream.py` sends), with the real
classes, so a change to one stage shows as microseconds rather than as a few percent of a
noisy end-to-end run (`benchmarks/proxy.py`). The garbage collector is off while timing.

    .venv/bin/python benchmarks/proxy_stages.py
    .venv/bin/python benchmarks/proxy_stages.py --number 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import timeit
from collections.abc import Callable

from airlane.backends.openai_chunks import ChunkTranslator
from airlane.backends.upstream_config import DEFAULT_LIMITS, DEFAULT_TIMEOUTS
from airlane.backends.upstream_connection import UpstreamConnection
from airlane.core import Event, Retention
from airlane.hub import MemoryHub
from airlane.transports.http.chat import _OpenAIRenderer
from airlane.wire.openai import ChunkFactory

_PAYLOAD = (
    b'data: {"id":"chatcmpl-up123456789","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench","choices":[{"index":0,"delta":{"content":"#5@123456789012'
    + b" lorem" * 15
    + b'"},"finish_reason":null}]}\n\n'
)
_CHUNK = b"%x\r\n%b\r\n" % (len(_PAYLOAD), _PAYLOAD)
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _NullTransport:
    """Takes the request and any flow control, sends nothing."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _upstream_read(out: list[Event]) -> Callable[[], None]:
    """One read as the connection's protocol gets it; the listener feeds the translator the
    way `airlane.backends.openai.UpstreamFeed` does."""
    conn = UpstreamConnection(
        "bench", DEFAULT_TIMEOUTS, DEFAULT_LIMITS, lambda _c: None, lambda _c, _s: None
    )
    conn.connection_made(_NullTransport())  # type: ignore[arg-type]
    conn.start_request(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n")
    conn.data_received(_HEAD)
    conn.take()
    translator = ChunkTranslator()
    take, receive = conn.take, translator.receive_data

    def listener() -> None:
        while data := take():
            out.extend(receive(data))
        out.clear()  # keep memory flat over the repeats

    conn.listen(listener)
    data_received = conn.data_received
    return lambda: data_received(_CHUNK)


async def _hub_round_trip() -> tuple[Callable[[], None], MemoryHub]:
    """Append one delta, have a subscriber poll it, and record its write. Retention is
    unbounded: a proxied stream of a few hundred chunks never trims, and a log that did would
    time the fold instead."""
    hub = MemoryHub()
    await hub.create("s", retention=Retention(max_events=1 << 30, max_bytes=1 << 40, ttl_s=None))
    subscription = await hub.subscribe("s")
    append = hub.appender("s")
    assert append is not None
    poll, written = subscription.poll, subscription.mark_written
    text = _PAYLOAD.decode()[100:190]

    def step() -> None:
        append([Event.delta(text)])
        written(poll(64), time.monotonic_ns())

    return step, hub


def _render() -> Callable[[], None]:
    renderer = _OpenAIRenderer(ChunkFactory("chatcmpl-x", "bench", 1700000000), "epoch", False)
    text = _PAYLOAD.decode()[100:190]
    seq = [0]

    def step() -> None:
        event = Event.delta(text)  # a fresh event: its encode cache is empty, as on the path
        seq[0] += 1
        event.seq = seq[0]
        renderer([event])

    return step


def _time(step: Callable[[], None], number: int, repeat: int) -> float:
    return min(timeit.repeat(step, number=number, repeat=repeat)) / number * 1e6


async def main(number: int, repeat: int) -> None:
    out: list[Event] = []
    hub_step, hub = await _hub_round_trip()
    stages = {
        "upstream read (connection + translate)": _upstream_read(out),
        "hub (append, poll, accounting)": hub_step,
        "render (OpenAI SSE frame)": _render(),
    }
    gc.disable()
    try:
        results = {name: _time(step, number, repeat) for name, step in stages.items()}
    finally:
        gc.enable()
        await hub.aclose()
    for name, us in results.items():
        print(f"{name:42s} {us:6.2f} us")
    print(f"{'sum':42s} {sum(results.values()):6.2f} us per chunk")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=50_000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings; the fastest is kept")
    args = parser.parse_args(argv)
    if args.number < 1 or args.repeat < 1:
        parser.error("--number and --repeat must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    asyncio.run(main(arguments.number, arguments.repeat))
