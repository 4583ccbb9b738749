"""Small RSocket calls: latency percentiles and calls per second, request-response and
fire-and-forget (the seed reports both for RSocket).

A gateway is spawned and pinned; one RSocket/TCP connection carries every call, as RSocket
clients multiplex theirs, and ``--concurrency`` callers each make calls back to back until
``--calls`` calls have completed in all or ``--duration-s`` has passed:

- ``--model response``: request-response ``streams.publish`` (one small ``message`` event to a
  named stream); the latency is from the request's write to its answer;
- ``--model fnf``: fire-and-forget ``streams.publish`` of the same event, and a request-stream
  subscriber on that stream on the same connection; the latency is from the request's write to
  the event's arrival at the subscriber (fire-and-forget has no answer: its delivery is what a
  user waits for). A caller sends its next call once its last one was delivered.

Reported: calls/s, and latency p50 / p95 / p99 / max in milliseconds, on the client.

    .venv/bin/python benchmarks/rsocket_unary.py                      # 20000 calls, 16 callers
    .venv/bin/python benchmarks/rsocket_unary.py --model fnf
    .venv/bin/python benchmarks/rsocket_unary.py --calls 200 --json - # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import LocalGateway, pin_client
from airlane.bench.stats import Percentiles
from airlane.wire.rsocket import (
    Frame,
    FrameReader,
    FrameType,
    encode_composite,
    encode_routing,
    frame_with_length,
)
from airlane.wire.rsocket.metadata import COMPOSITE, ROUTING

STREAM = "bench/rsocket-unary"
UNBOUNDED = (1 << 31) - 1


def _route(name: str) -> bytes:
    return encode_composite([(ROUTING, encode_routing([name]))])


class Connection:
    """One RSocket connection: requests by stream id, answers matched back to them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.answers: dict[int, asyncio.Future[Frame]] = {}
        self.delivered: dict[int, asyncio.Future[int]] = {}  # fnf: call number -> arrival ns
        self._next_id = 1
        self.subscriber = 0  # the fire-and-forget model's request-stream
        self._frames = FrameReader()

    def send(self, frame: Frame) -> None:
        self.writer.write(frame_with_length(frame))

    def next_id(self) -> int:
        stream_id, self._next_id = self._next_id, self._next_id + 2
        return stream_id

    async def read(self) -> None:
        """Route every frame to its waiter until the connection closes."""
        while data := await self.reader.read(1 << 16):
            now = time.monotonic_ns()
            for frame in self._frames.feed(data):
                if frame.stream_id == self.subscriber and frame.type is FrameType.PAYLOAD:
                    event = orjson.loads(frame.data)
                    waiter = self.delivered.pop(event["payload"]["n"], None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(now)
                    continue
                answer = self.answers.pop(frame.stream_id, None)
                if answer is not None and not answer.done():
                    answer.set_result(frame)


async def measure(gateway: LocalGateway, args: argparse.Namespace) -> dict[str, Any]:
    """Run the callers against ``gateway``; return the summary."""
    assert gateway.rsocket is not None, "the gateway has no RSocket listener"
    reader, writer = await asyncio.open_connection(*gateway.rsocket)
    connection = Connection(reader, writer)
    connection.send(Frame(FrameType.SETUP, keepalive_ms=30_000, lifetime_ms=120_000,
                          metadata_mime=COMPOSITE, data_mime="application/json"))  # fmt: skip
    reading = asyncio.create_task(connection.read())
    try:
        first = await _call(connection, {"stream_id": STREAM, "event": {"payload": {"n": -1}}})
        assert first.type is FrameType.PAYLOAD, first  # the stream exists now
        if args.model == "fnf":  # follow the stream from its end
            info = await _call(connection, {"stream_id": STREAM}, "streams.info")
            subscribe = {"stream_id": STREAM, "resume": orjson.loads(info.data)["resume_token"]}
            connection.subscriber = connection.next_id()
            connection.send(Frame(FrameType.REQUEST_STREAM, connection.subscriber,
                                  request_n=UNBOUNDED, metadata=_route("streams.subscribe"),
                                  data=orjson.dumps(subscribe)))  # fmt: skip
        latencies_ns: list[int] = []
        errors = 0
        deadline = time.monotonic() + args.duration_s
        numbers = iter(range(args.calls))

        async def caller() -> None:
            nonlocal errors
            for n in numbers:
                if time.monotonic() >= deadline:
                    return
                body = {"stream_id": STREAM, "event": {"payload": {"n": n}}}
                started = time.monotonic_ns()
                try:
                    async with asyncio.timeout(10):
                        done = await (_forget(connection, n, body) if args.model == "fnf"
                                      else _answered(connection, body))  # fmt: skip
                except (TimeoutError, RuntimeError):
                    errors += 1
                    continue
                latencies_ns.append(done - started)

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(args.concurrency)))
        wall = time.monotonic() - started
    finally:
        reading.cancel()
        writer.close()
    ms = Percentiles.of(sorted(value / 1e6 for value in latencies_ns))
    return {
        "model": args.model,
        "calls": len(latencies_ns),
        "errors": errors,
        "concurrency": args.concurrency,
        "calls_per_s": round(len(latencies_ns) / wall, 1),
        "latency_ms": ms.to_dict(),
    }


async def _call(connection: Connection, body: dict[str, Any], route: str = "streams.publish"
                ) -> Frame:  # fmt: skip
    """A request-response; its answer (PAYLOAD or ERROR)."""
    stream_id = connection.next_id()
    answer = connection.answers[stream_id] = asyncio.get_running_loop().create_future()
    connection.send(Frame(FrameType.REQUEST_RESPONSE, stream_id, metadata=_route(route),
                          data=orjson.dumps(body)))  # fmt: skip
    return await answer


async def _answered(connection: Connection, body: dict[str, Any]) -> int:
    """A request-response publish; when its answer came (ns)."""
    answer = await _call(connection, body)
    if answer.type is not FrameType.PAYLOAD:
        raise RuntimeError(f"refused: {answer.data!r}")
    return time.monotonic_ns()


async def _forget(connection: Connection, n: int, body: dict[str, Any]) -> int:
    """A fire-and-forget publish; when the subscriber got its event (ns)."""
    arrived = connection.delivered[n] = asyncio.get_running_loop().create_future()
    connection.send(Frame(FrameType.REQUEST_FNF, connection.next_id(),
                          metadata=_route("streams.publish"), data=orjson.dumps(body)))  # fmt: skip
    return await arrived


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--model", choices=["response", "fnf"], default="response")
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    with LocalGateway() as gateway:
        pin_client()
        result = run_on_fast_loop(measure(gateway, args))
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    latency = result["latency_ms"]
    print(
        f"RSocket {result['model']} streams.publish, {result['concurrency']} callers on one "
        f"connection: {result['calls']} calls, {result['calls_per_s']:,} calls/s, errors "
        f"{result['errors']}; latency ms "
        + ", ".join(f"{key} {value:.2f}" for key, value in latency.items() if value is not None)
    )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
