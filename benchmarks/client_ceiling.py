"""The load client's own ceiling: how fast ``airlane bench`` can read, on one core.

A tiny server answers ``/v1/loadtest/sse`` and ``/v1/loadtest/ws`` with the same chunks, SSE
events and WebSocket frames the gateway sends, with no generation, hub or ASGI behind them. It
runs in a child process pinned to one core; N streams of the bench's own clients
(`run_sse_stream`, `run_ws_stream`) run in this process, pinned to another. What the clients
reach is the most any gateway can be measured at on this machine, and their CPU time per chunk
is the client's cost.

- ``--mode burst``: each response is built once and written as fast as the socket drains.
- ``--mode paced``: chunk i of each stream is written at start + i * interval (one SSE event
  per HTTP chunk, or one frame, per write, as a paced gateway writes them), all streams from
  one shared millisecond timer, with as little Python per chunk as a server can have. The
  delivery lag the clients then report is the measurement's own floor: a gateway measured
  at the same N cannot look better than that. The server's CPU per chunk is printed too.

    .venv/bin/python benchmarks/client_ceiling.py --streams 500 --chunks 200
    .venv/bin/python benchmarks/client_ceiling.py --transport ws --server-cpu 2 --client-cpu 3
    .venv/bin/python benchmarks/client_ceiling.py --mode paced --streams 1000 --rounds 1

``--serve`` runs the server alone, pinned to ``--server-cpu``, until interrupted (it prints
``listening on http://...`` and answers ``/healthz`` with its pid), so that other scripts can
measure it like any peer: ``benchmarks/scaling.py --url ... --label floor`` draws the floor's
curve next to the gateway's.

    .venv/bin/python benchmarks/client_ceiling.py --serve
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import math
import multiprocessing
import os
import resource
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import cast
from urllib.parse import parse_qs, urlsplit

import uvloop

from airlane.backends.synthetic import LoadTestChunk
from airlane.bench.sse_load import run_sse_stream
from airlane.bench.stats import Percentiles, steady_window
from airlane.bench.tally import StreamTally, lag_sampling_stride
from airlane.bench.ws_load import run_ws_stream
from airlane.server.gcpacer import tune_gc

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n"
)
SSE_END = b"0\r\n\r\n"
WS_CLOSE = b"\x88\x06" + (1000).to_bytes(2, "big") + b"done"  # code 1000, reason "done"


# -- the server -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bodies:
    """Pre-built responses for one chunk count."""

    sse: bytes
    """The SSE response's body: the events in chunked framing, and its end."""
    ws_frames: bytes
    """One unmasked text frame per chunk, then a close frame with code 1000."""


def build_bodies(chunks: int, events_per_write: int) -> Bodies:
    """The bytes the gateway would send for ``chunks`` chunks (``ts`` fixed at build time)."""
    encoder = LoadTestChunk("airlane-loadtest", b"ceiling")
    ts = time.monotonic_ns()
    payloads = [encoder.encode(seq, ts) for seq in range(1, chunks + 1)]
    writes = []
    for first in range(0, chunks, events_per_write):
        events = b"".join(b"data: %b\n\n" % p for p in payloads[first : first + events_per_write])
        writes.append(b"%x\r\n%b\r\n" % (len(events), events))
    sse = b"".join(writes) + SSE_END
    frames = b"".join(_text_frame(p) for p in payloads)
    return Bodies(sse, frames + WS_CLOSE)


def _text_frame(payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 1 << 16:
        return b"\x81\x7e" + size.to_bytes(2, "big") + payload
    return b"\x81\x7f" + size.to_bytes(8, "big") + payload


class _PacedStream:
    """One paced response: chunk ``index + 1`` is due at ``start_ns + index * interval_ns``."""

    __slots__ = ("count", "encoder", "index", "interval_ns", "start_ns", "transport", "ws")

    def __init__(self, transport: asyncio.Transport, *, ws: bool, count: int, interval_ns: int):
        self.transport = transport
        self.ws = ws
        self.encoder = LoadTestChunk("airlane-loadtest", os.urandom(8))
        self.count = count
        self.interval_ns = interval_ns
        self.start_ns = time.monotonic_ns()
        self.index = 0

    @property
    def due_ns(self) -> int:
        """When the next chunk is due."""
        return self.start_ns + self.index * self.interval_ns

    def write_next(self) -> bool:
        """Write the next chunk (and the end after the last one); False once it has ended."""
        ts_ns = self.due_ns
        self.index += 1
        payload = self.encoder.encode(self.index, ts_ns)
        last = self.index >= self.count
        if self.ws:
            self.transport.write(_text_frame(payload) + (WS_CLOSE if last else b""))
        else:  # one event per HTTP chunk, as a paced gateway writes them
            event = b"data: %b\n\n" % payload
            self.transport.write(b"%x\r\n%b\r\n%b" % (len(event), event, SSE_END if last else b""))
            if last:
                self.transport.close()
        return not last


class _PacedWriter:
    """Every paced stream of the server, written from one timer that fires each millisecond:
    the streams due in a millisecond are filed under it, and a chunk never leaves before its
    ``ts``."""

    def __init__(self) -> None:
        self._due: dict[int, list[_PacedStream]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, stream: _PacedStream) -> None:
        """Start ``stream``: its first chunk goes out now."""
        self._file(stream)
        if self._timer is None:
            self._tick()

    def _file(self, stream: _PacedStream) -> None:
        # Under the first whole millisecond at or after its due time (never early).
        self._due.setdefault(-(-stream.due_ns // 1_000_000), []).append(stream)

    def _tick(self) -> None:
        now_ms = time.monotonic_ns() // 1_000_000
        for ms in sorted(ms for ms in self._due if ms <= now_ms):
            for stream in self._due.pop(ms):
                if stream.transport.is_closing():
                    continue
                if stream.write_next():
                    self._file(stream)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + 0.001, self._tick) if self._due else None


class _CeilingServer(asyncio.Protocol):
    """One connection: read the request head, then write a pre-built response in one go.

    The transport keeps a reference to whatever the socket does not take at once (bytes are
    not copied), so writing the whole response costs no memory per stream.
    """

    def __init__(self, bodies: Callable[[int], Bodies], paced: _PacedWriter) -> None:
        self.bodies = bodies
        self.paced = paced
        self.transport: asyncio.Transport | None = None
        self.request = b""
        self.responded = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.responded:  # the WebSocket client's close frame: the exchange is over
            self.transport.close()
            return
        self.request += data
        end = self.request.find(b"\r\n\r\n")
        if end >= 0:
            self.responded = True
            self._respond(self.request[:end].decode("latin-1").split("\r\n"))

    def _respond(self, lines: list[str]) -> None:
        assert self.transport is not None
        target = urlsplit(lines[0].split(" ")[1])
        if target.path == "/healthz":  # for scripts that sample the server's CPU
            body = b'{"pid":%d}' % os.getpid()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body)
            )
            self.transport.close()
            return
        query = parse_qs(target.query)
        chunks = int(query.get("chunks", ["200"])[0])
        ws = target.path == "/v1/loadtest/ws"
        if ws:
            key = next(line.split(":", 1)[1].strip() for line in lines if _is_key(line))
            accept = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest())
            self.transport.write(
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                b"connection: Upgrade\r\nsec-websocket-accept: %b\r\n\r\n" % accept
            )
        else:
            self.transport.write(SSE_HEAD)
        if query.get("mode", ["burst"])[0] == "paced":
            interval_ns = round(float(query.get("interval_ms", ["20"])[0]) * 1_000_000)
            stream = _PacedStream(self.transport, ws=ws, count=chunks, interval_ns=interval_ns)
            self.paced.add(stream)
        elif ws:
            self.transport.write(self.bodies(chunks).ws_frames)  # the client answers the close
        else:
            self.transport.write(self.bodies(chunks).sse)
            self.transport.close()  # after the buffered data is sent


def _is_key(line: str) -> bool:
    return line.lower().startswith("sec-websocket-key:")


def serve(cpu: int, events_per_write: int, ready: Connection | None) -> None:
    """Run the server pinned to ``cpu``; send its port on ``ready``, stop when it closes.
    Without ``ready``: print the port and serve until interrupted."""
    os.sched_setaffinity(0, {cpu})
    cache: dict[int, Bodies] = {}
    paced = _PacedWriter()

    def bodies(chunks: int) -> Bodies:
        if chunks not in cache:
            cache[chunks] = build_bodies(chunks, events_per_write)
        return cache[chunks]

    async def listen() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _CeilingServer(bodies, paced), "127.0.0.1", 0, backlog=4096
        )
        port = server.sockets[0].getsockname()[1]
        if ready is None:
            print(f"listening on http://127.0.0.1:{port}", flush=True)
            await server.serve_forever()
        ready.send(port)
        await loop.run_in_executor(None, ready.recv)  # the parent says stop (or exits)
        server.close()

    with contextlib.suppress(EOFError, KeyboardInterrupt):  # the parent exited, or ^C
        uvloop.run(listen())


# -- the clients ------------------------------------------------------------------------------


@dataclass(slots=True)
class Measurement:
    """One transport's run against the ceiling server."""

    transport: str
    wall_s: float
    user_s: float
    sys_s: float
    chunks: int
    payload_bytes: int
    errors: list[str]
    lag_ms: Percentiles | None = None
    """Paced: the delivery lag over the run."""
    steady_lag_ms: Percentiles | None = None
    """Paced: the delivery lag while every stream ran."""
    server_cpu_s: float | None = None
    """The server's CPU time over the run (user + system)."""

    @property
    def us_per_chunk(self) -> float:
        """Client CPU time (user + system) per chunk received, in microseconds."""
        return (self.user_s + self.sys_s) / max(1, self.chunks) * 1e6

    def line(self) -> str:
        """One line for the terminal."""
        mb_s = self.payload_bytes / 1e6 / self.wall_s
        cpu_s = self.user_s + self.sys_s
        per_chunk = 1e6 / max(1, self.chunks)
        errors = f", {len(self.errors)} errors: {self.errors[:1]}" if self.errors else ""
        line = (
            f"{self.transport:>3}: {mb_s:7.1f} MB/s {self.chunks / self.wall_s:9.0f} chunks/s | "
            f"client CPU {self.us_per_chunk:5.2f} us/chunk (user {self.user_s * per_chunk:5.2f}"
            f" + sys {self.sys_s * per_chunk:5.2f}), {100 * cpu_s / self.wall_s:3.0f} % of a core"
        )
        if self.server_cpu_s is not None:
            line += (
                f" | server {self.server_cpu_s * per_chunk:5.2f} us/chunk, "
                f"{100 * self.server_cpu_s / self.wall_s:3.0f} %"
            )
        if self.lag_ms is not None:
            steady = self.steady_lag_ms.p99 if self.steady_lag_ms is not None else math.nan
            line += (
                f" | lag p50 {self.lag_ms.p50:5.2f} p99 {self.lag_ms.p99:6.2f} ms "
                f"(steady p99 {steady:6.2f})"
            )
        return line + errors


async def measure(
    transport: str, port: int, streams: int, chunks: int, paced_ms: float | None, server_pid: int
) -> Measurement:
    """Run ``streams`` streams of ``chunks`` chunks (burst, or paced every ``paced_ms``); wall
    and CPU time of this process and of the server."""
    lags: array[int] = array("q")
    tallies = [StreamTally(lags, lag_sampling_stride(streams * chunks)) for _ in range(streams)]
    mode = "burst" if paced_ms is None else f"paced&interval_ms={paced_ms}"
    path = f"/v1/loadtest/{transport}?chunks={chunks}&mode={mode}"
    deadline = asyncio.get_running_loop().time() + 120 + chunks * (paced_ms or 0) / 1000
    server_before = _cpu_s(server_pid)
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if transport == "sse":
        runs = [run_sse_stream("127.0.0.1", port, path, t, deadline) for t in tallies]
    else:
        runs = [run_ws_stream(f"ws://127.0.0.1:{port}{path}", t, deadline) for t in tallies]
    await asyncio.gather(*runs)
    wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF)
    server_cpu_s = _cpu_s(server_pid) - server_before
    errors = [t.error or f"{t.received}/{chunks} chunks" for t in tallies if _failed(t, chunks)]
    received = sum(t.received for t in tallies)
    payload = sum(t.payload_bytes for t in tallies)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    measured = Measurement(
        transport, wall, user, system, received, payload, errors, server_cpu_s=server_cpu_s
    )
    if paced_ms is not None:
        window = steady_window(tallies)
        measured.lag_ms = Percentiles.of(sorted(lag / 1e6 for lag in lags))
        if window is not None:
            steady = lags[window[0] : window[1]]
            measured.steady_lag_ms = Percentiles.of(sorted(lag / 1e6 for lag in steady))
    return measured


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux: /proc)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _failed(tally: StreamTally, chunks: int) -> bool:
    return tally.error is not None or tally.received != chunks or tally.disorder > 0


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--transport", choices=["sse", "ws", "both"], default="both")
    parser.add_argument("--mode", choices=["burst", "paced"], default="burst")
    parser.add_argument("--serve", action="store_true", help="only serve, until interrupted")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="paced mode's interval")
    parser.add_argument("--rounds", type=int, default=3, help="runs per transport")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument(
        "--events-per-write",
        type=int,
        default=4,
        help="SSE events per HTTP chunk (the gateway's burst source yields 4 at a time)",
    )
    parser.add_argument(
        "--tune-gc",
        action="store_true",
        help="tune the client's garbage collector as `airlane serve` does (tune_gc)",
    )
    return parser.parse_args()


async def _measure_all(options: argparse.Namespace, port: int, server_pid: int) -> None:
    """Each transport ``--rounds`` times, then its median round (machines are noisy)."""
    transports = ["sse", "ws"] if options.transport == "both" else [options.transport]
    paced_ms = options.interval_ms if options.mode == "paced" else None
    for transport in transports:
        rounds = []
        for _ in range(options.rounds):
            measured = await measure(
                transport, port, options.streams, options.chunks, paced_ms, server_pid
            )
            rounds.append(measured)
            print(rounds[-1].line())
        rounds.sort(key=lambda m: m.us_per_chunk)
        print(f"median {rounds[len(rounds) // 2].line()}")


def main() -> None:
    """Start the server on one core, then measure the clients on another."""
    options = _options()
    if options.serve:
        serve(options.server_cpu, options.events_per_write, None)
        return
    here, there = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=serve, args=(options.server_cpu, options.events_per_write, there), daemon=True
    )
    server.start()
    try:
        port = here.recv()
        os.sched_setaffinity(0, {options.client_cpu})
        if options.tune_gc:
            tune_gc()
        print(
            f"server on CPU {options.server_cpu}, client on CPU {options.client_cpu}: "
            f"{options.streams} streams x {options.chunks} chunks, {options.mode}"
        )
        assert server.pid is not None
        uvloop.run(_measure_all(options, port, server.pid))
    finally:
        here.send(None)
        server.join(5)
        if server.is_alive():
            server.kill()


if __name__ == "__main__":
    main()
