"""Idle connections: the gateway's memory per idle SSE and WebSocket subscription, heartbeats on.

A gateway is spawned with a short heartbeat period (``[http] sse_ping_s`` and ``ws_ping_s``,
2 s by default) so that heartbeats really flow. Named streams are created (they never produce
anything), a few connections of each kind are opened and closed to warm the gateway up, and its
memory is measured: the baseline. Then ``--sse`` idle SSE subscriptions
(``GET /v1/streams/{id}/events``) and ``--ws`` idle WebSocket subscriptions (``/v1/ws``, one
``subscribe`` each) are opened, memory is measured after each kind, and all of them are held
for ``--hold-s`` seconds while every connection's heartbeats are timed: ``: ping`` comment
lines on SSE, WebSocket Ping frames (answered with Pong) on ``/v1/ws``.

Reported: memory per connection (RSS delta / connections, in KB = 1024 bytes; PSS alike),
per transport and overall, against the 30 KB target; whether every connection stayed open and
heard a heartbeat at least every two periods; the gateway's CPU idle without and with the
connections.

    .venv/bin/python benchmarks/idle_connections.py --json bench-results/idle.json  # 10k, ~1 min
    .venv/bin/python benchmarks/idle_connections.py --sse 20 --ws 20 --hold-s 3 --ping-s 1

The client is this one process with lean asyncio protocols over sans-I/O parsers (h11 for
HTTP/1.1, the ``websockets`` sans-I/O client), all from 127.0.0.1. The named streams are
created before the baseline, so the delta is the connections' cost alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import h11
import httpx
import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from airlane import __version__
from airlane.bench.chunk import read_seq_ts
from airlane.bench.memory import (
    ProcessGone,
    ProcessWatch,
    ResourceSample,
    ResourceSampler,
    describe_host,
    raise_fd_limit,
)
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_client, pin_process

TARGET_KB_PER_CONNECTION = 20.0
"""The target to compare against: 20 KB of gateway memory per connection."""
DEFAULT_PING_S = 2.0
"""Heartbeat period given to the gateway: short, so that a 30 s hold sees about 15 of them."""
DEFAULT_STREAMS = 100
"""Named streams the connections are spread over (round robin)."""
WARMUP_CONNECTIONS = 50
"""Connections of each kind opened and closed before the baseline: first-use costs (imports,
caches, code paths) belong to the baseline, not to the measured connections."""
OPEN_CONCURRENCY = 200
"""Connections being opened at once: well under the gateway's listen backlog (4096)."""
DEFAULT_SETTLE_S = 1.0
"""Pause before a memory reading, so that work started by the last opening has finished."""
CPU_WINDOW_S = 3.0
"""How long the gateway's CPU is measured with no connections."""
SILENCE_PERIODS = 2.0
"""A connection may go at most this many heartbeat periods without one."""
MAX_LINE_BYTES = 16 * 1024
"""Longest SSE line buffered: an idle stream sends only ``retry:`` and ``: ping`` lines."""
MAX_FAILURE_SAMPLES = 5
"""Distinct failure messages kept."""
LATENESS_CAP_S = 60.0
"""Heartbeat lateness is counted in 1 ms buckets up to this."""
PER_SOURCE = 20_000
"""Connections per loopback source address: a (source, destination) pair has about 28,000
ephemeral ports, so 100,000 connections come from several 127.x.y.z addresses."""


_PAYLOAD = b'"payload":'


class SubscribeError(Exception):
    """The gateway refused or broke a subscription (its fault, or a misconfiguration)."""


class Lateness:
    """How late heartbeats came, for all connections of a kind: the gap between two of a
    connection's heartbeats minus the period, in 1 ms buckets (bounded: what is later than
    `LATENESS_CAP_S` counts in the last)."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.buckets = [0] * (int(LATENESS_CAP_S * 1000) + 1)
        self.count = 0

    def add(self, gap_s: float) -> None:
        """One gap between consecutive heartbeats."""
        late_ms = max(0, int((gap_s - self.period_s) * 1000))
        self.buckets[min(late_ms, len(self.buckets) - 1)] += 1
        self.count += 1

    def percentile_ms(self, pct: float) -> int | None:
        """The ``pct`` percentile of lateness, in ms (None without a gap)."""
        if not self.count:
            return None
        rank, seen = pct / 100 * self.count, 0
        for late_ms, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                return late_ms
        return len(self.buckets) - 1


class HeartbeatLog:
    """When one connection heard heartbeats; times on the event loop's clock."""

    __slots__ = ("count", "last", "lateness", "longest_silence")

    def __init__(self) -> None:
        self.lateness: Lateness | None = None
        """Where the gaps between this connection's heartbeats go, once timed (`reset`)."""
        self.count = 0
        """Heartbeats since `reset`."""
        self.last = 0.0
        """When the latest one came (or when the log was reset)."""
        self.longest_silence = 0.0
        """The longest time without a heartbeat since `reset`."""

    def reset(self, now: float) -> None:
        """Start counting afresh at ``now``."""
        self.count, self.last, self.longest_silence = 0, now, 0.0

    def beat(self, now: float) -> None:
        """One heartbeat arrived at ``now``."""
        if self.count and self.lateness is not None:  # a gap between two heartbeats
            self.lateness.add(now - self.last)
        self.count += 1
        self.longest_silence = max(self.longest_silence, now - self.last)
        self.last = now

    def finish(self, now: float) -> None:
        """The measurement ends at ``now``: the silence since the last heartbeat counts too."""
        self.longest_silence = max(self.longest_silence, now - self.last)


class CommentLineCounter:
    """Counts SSE comment lines (``:`` first, WHATWG HTML 9.2.6) in a de-framed event stream;
    sans-I/O. Lines end with LF, as the gateway writes them."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._partial = b""
        self._max_line = max_line_bytes

    def feed(self, data: bytes) -> int:
        """Comment lines completed by ``data``.

        Raises:
            SubscribeError: a line longer than the limit (not an idle stream).
        """
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > self._max_line:
            raise SubscribeError(f"an SSE line longer than {self._max_line} bytes")
        return sum(1 for line in lines if line.startswith(b":"))


class _IdleSubscriber(asyncio.Protocol):
    """What both kinds share: the transport, the opened future, heartbeats, the close."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        """Resolves once the gateway confirmed the subscription."""
        self.heartbeats = HeartbeatLog()
        """Heartbeats heard."""
        self.lost: str | None = None
        """Why the connection ended, if it did before we closed it."""
        self.transport: asyncio.Transport | None = None
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request_bytes())

    def request_bytes(self) -> bytes:
        """The bytes that open the subscription."""
        raise NotImplementedError

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}" if exc else "the gateway closed the connection")

    def close(self) -> None:
        """Close the connection (ours: not counted as lost)."""
        self._closing = True
        if not self.opened.done():
            self.opened.cancel()  # nobody waits any more; a failure now would go unheard
        if self.transport is not None:
            self.transport.close()

    def _fail(self, reason: str) -> None:
        if not self._closing and self.lost is None:
            self.lost = reason
        if not self.opened.done():
            self.opened.set_exception(SubscribeError(reason))
        if self.transport is not None:
            self.transport.close()


class IdleSseSubscriber(_IdleSubscriber):
    """``GET /v1/streams/{id}/events`` held open; counts ``: ping`` comments."""

    def __init__(self, authority: str, stream: str) -> None:
        super().__init__()
        self._http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_LINE_BYTES)
        self._target = f"/v1/streams/{stream}/events"
        self._authority = authority
        self._comments = CommentLineCounter()

    def request_bytes(self) -> bytes:
        headers = [
            ("Host", self._authority),
            ("Accept", "text/event-stream"),
            ("User-Agent", "airlane-bench-idle"),
        ]
        request = h11.Request(method="GET", target=self._target, headers=headers)
        return (self._http.send(request) or b"") + (self._http.send(h11.EndOfMessage()) or b"")

    def data_received(self, data: bytes) -> None:
        self._http.receive_data(data)
        try:
            self._drain()
        except (h11.RemoteProtocolError, SubscribeError) as exc:
            self._fail(f"{type(exc).__name__}: {exc}")

    def eof_received(self) -> bool:
        self._http.receive_data(b"")
        with contextlib.suppress(h11.RemoteProtocolError, SubscribeError):
            self._drain()
        self._fail("the gateway ended the response")
        return False

    def _drain(self) -> None:
        while True:
            event = self._http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise SubscribeError(f"HTTP {event.status_code}")
                if not self.opened.done():
                    self.opened.set_result(None)
            elif isinstance(event, h11.Data):
                self._on_data(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                self._on_end()

    def _on_data(self, data: bytes) -> None:
        now = self.loop.time()
        for _ in range(self._comments.feed(data)):
            self.heartbeats.beat(now)

    def _on_end(self) -> None:
        raise SubscribeError("the gateway ended the response")


class PacedSseSubscriber(IdleSseSubscriber):
    """``GET /v1/streams/{id}/events`` of a paced load-test generation: counts its chunks and
    times each one that was produced after the connection opened (its ``ts`` is the
    gateway's monotonic clock, this machine's)."""

    def __init__(self, authority: str, stream: str, lags_ns: list[int]) -> None:
        super().__init__(authority, stream)
        self._lags_ns = lags_ns
        self._joined_ns = time.monotonic_ns()
        self._partial = b""
        self.chunks = 0
        self.ended = False

    def _on_data(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > MAX_LINE_BYTES:
            raise SubscribeError(f"an SSE line longer than {MAX_LINE_BYTES} bytes")
        now_ns = time.monotonic_ns()
        for line in lines:
            if line.startswith(b":"):
                self.heartbeats.beat(self.loop.time())
            elif line.startswith(b"data: "):
                at = line.find(_PAYLOAD)
                if at >= 0:
                    _, ts = read_seq_ts(line, at + len(_PAYLOAD))
                    self.chunks += 1
                    if ts >= self._joined_ns:
                        self._lags_ns.append(now_ns - ts)

    def _on_end(self) -> None:
        self.ended = True  # the generation is over: what a paced reader waits for


class IdleWsSubscriber(_IdleSubscriber):
    """One ``/v1/ws`` connection subscribed to one stream; counts (and answers) Pings."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__()
        self._ws = ClientProtocol(parse_uri(url), subprotocols=[Subprotocol("airlane.v1.json")])
        self._subscribe = orjson.dumps({"op": "subscribe", "stream": stream})

    def request_bytes(self) -> bytes:
        self._ws.send_request(self._ws.connect())
        return b"".join(self._ws.data_to_send())

    def data_received(self, data: bytes) -> None:
        self._ws.receive_data(data)
        try:
            for event in self._ws.events_received():
                self._handle(event)
        except SubscribeError as exc:
            self._fail(str(exc))
        self._flush()

    def eof_received(self) -> bool:
        self._ws.receive_eof()
        self._flush()
        self._fail(f"the gateway closed the WebSocket ({self._ws.close_code})")
        return False

    def _handle(self, event: Request | Response | Frame) -> None:
        if isinstance(event, Response):
            if self._ws.handshake_exc is not None:
                raise SubscribeError(f"handshake failed: {self._ws.handshake_exc}")
            self._ws.send_text(self._subscribe)
        elif isinstance(event, Request):  # only a server receives requests
            raise SubscribeError("a handshake request from the gateway")
        elif event.opcode is Opcode.PING:  # the pong is already queued by the protocol
            self.heartbeats.beat(self.loop.time())
        elif event.opcode is Opcode.TEXT:
            self._reply(event.data)
        elif event.opcode is Opcode.CLOSE:
            raise SubscribeError(f"the gateway closed the WebSocket ({self._ws.close_code})")

    def _reply(self, data: bytes | bytearray | memoryview) -> None:
        try:
            message = orjson.loads(bytes(data))
        except orjson.JSONDecodeError:
            raise SubscribeError("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise SubscribeError("a message that is not a JSON object")
        if message.get("op") == "subscribed" and not self.opened.done():
            self.opened.set_result(None)
        elif message.get("op") == "error":
            raise SubscribeError(f"{message.get('code')}: {message.get('message')}")

    def _flush(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        for chunk in self._ws.data_to_send():
            if chunk:
                self.transport.write(chunk)
            elif self.transport.can_write_eof():  # SEND_EOF: half-close (RFC 6455 7.1.1)
                self.transport.write_eof()


@dataclass
class OpenedSet:
    """The connections of one kind that opened, and why the others did not."""

    transport: str
    requested: int
    subscribers: list[_IdleSubscriber] = field(default_factory=list)
    failures: int = 0
    failure_samples: list[str] = field(default_factory=list)
    open_s: float = 0.0
    """How long opening them all took (connect, request, the gateway's confirmation)."""
    lateness: Lateness | None = None
    """How late their heartbeats came during the hold."""

    def failed(self, reason: str) -> None:
        """One connection could not be opened."""
        self.failures += 1
        if reason not in self.failure_samples and len(self.failure_samples) < MAX_FAILURE_SAMPLES:
            self.failure_samples.append(reason)

    def close(self) -> None:
        """Close every connection."""
        for subscriber in self.subscribers:
            subscriber.close()


async def open_subscribers(
    transport: str,
    make: Callable[[int], _IdleSubscriber],
    count: int,
    port: int,
    deadline: float,
    first: int = 0,
) -> OpenedSet:
    """Open ``count`` subscribers (``make(index)``), `OPEN_CONCURRENCY` at a time, each
    waited on until the gateway confirms it; give up on those not open by ``deadline``.
    ``first``: how many connections were opened before (it picks their source addresses)."""
    opened = OpenedSet(transport, count)
    indexes = iter(range(count))
    started = time.monotonic()

    async def worker() -> None:
        for index in indexes:
            subscriber = make(index)
            try:
                await _connect(subscriber, port, deadline, source_address(first + index))
            except (OSError, TimeoutError, SubscribeError) as exc:
                subscriber.close()
                opened.failed(f"{type(exc).__name__}: {exc}")
            else:
                opened.subscribers.append(subscriber)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(OPEN_CONCURRENCY, count)):
            group.create_task(worker())
    opened.open_s = time.monotonic() - started
    return opened


def source_address(index: int) -> str:
    """The loopback address connection ``index`` comes from: `PER_SOURCE` per address,
    127.1.0.1 on (any 127.x.y.z is this machine's on Linux, no set-up needed)."""
    block = index // PER_SOURCE
    return f"127.1.{block // 254}.{block % 254 + 1}"


async def _connect(subscriber: _IdleSubscriber, port: int, deadline: float, source: str) -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout_at(deadline):
        await loop.create_connection(lambda: subscriber, "127.0.0.1", port, local_addr=(source, 0))
        await subscriber.opened


async def create_streams(base_url: str, names: Sequence[str]) -> None:
    """Create the named streams (``POST /v1/streams``), a few requests at a time.

    Raises:
        SubscribeError: the gateway refused one.
    """
    pending = iter(names)
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30.0) as client:

        async def worker() -> None:
            for name in pending:
                response = await client.post("/v1/streams", json={"name": name, "exist_ok": True})
                if response.status_code >= 300:
                    raise SubscribeError(f"creating {name}: HTTP {response.status_code}")

        async with asyncio.TaskGroup() as group:
            for _ in range(8):
                group.create_task(worker())


@dataclass
class Readings:
    """Memory readings of the gateway at each phase, and its CPU."""

    baseline: ResourceSample | None = None
    after_open: dict[str, ResourceSample] = field(default_factory=dict)
    """Once each kind's connections are open (SSE first, then WebSocket)."""
    end_of_hold: ResourceSample | None = None
    after_close: ResourceSample | None = None
    idle_cpu_pct: float | None = None
    held_cpu_pct: float | None = None
    hold_samples: list[ResourceSample] = field(default_factory=list)


async def measure(args: argparse.Namespace, gateway: LocalGateway) -> dict[str, Any]:
    """The phases (module docstring); returns the JSON document."""
    assert gateway.url is not None
    port = int(gateway.url.rsplit(":", 1)[1])
    watch = ProcessWatch(gateway.pid)
    readings = Readings()
    names = [f"idle/{i}" for i in range(args.streams)]
    await create_streams(gateway.url, names)
    makers = _makers(port, names)
    await _warm_up(makers, port, args.ping_s)
    readings.baseline = await _settled(watch, args.settle_s)
    readings.idle_cpu_pct = await _cpu_over(watch, min(CPU_WINDOW_S, args.hold_s))
    sets: list[OpenedSet] = []
    paced = Paced()
    first = 0
    try:
        for kind, count in (("sse", args.sse), ("ws", args.ws)):
            deadline = asyncio.get_running_loop().time() + args.open_timeout_s
            opened = await open_subscribers(kind, makers[kind], count, port, deadline, first)
            sets.append(opened)
            first += count
            readings.after_open[kind] = await _settled(watch, args.settle_s)
        readers = round((args.sse + args.ws) * args.paced_pct / 100)
        if readers:
            paced = await _start_paced(args, gateway.url, port, readers, first)
            sets.append(paced.opened)
        await _hold(args.hold_s, watch, sets, readings, args.ping_s)
    finally:
        for opened in sets:
            opened.close()
    readings.after_close = await _settled(watch, args.settle_s)
    return _document(args, gateway, readings, sets, paced)


@dataclass
class Paced:
    """The readers of paced generations (1 % of the connections by default)."""

    opened: OpenedSet | None = None
    generations: int = 0
    chunks_each: int = 0
    lags_ns: list[int] = field(default_factory=list)


async def _start_paced(
    args: argparse.Namespace, base_url: str, port: int, readers: int, first: int
) -> Paced:
    """Start paced load-test generations that last the hold, ten readers each, and open
    their readers (SSE)."""
    paced = Paced(generations=max(1, readers // 10))
    # Over within the hold (4/5 of it), so that a reader has every chunk by its end.
    paced.chunks_each = max(1, int(args.hold_s * 800 / args.paced_interval_ms))
    spec = {"chunks": paced.chunks_each, "mode": "paced", "interval_ms": args.paced_interval_ms}
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30.0) as client:
        ids = []
        for _ in range(paced.generations):
            response = await client.post("/v1/streams", json={"loadtest": spec})
            if response.status_code >= 300:
                raise SubscribeError(f"starting a generation: HTTP {response.status_code}")
            ids.append(response.json()["id"])
    authority = f"127.0.0.1:{port}"

    def make(index: int) -> _IdleSubscriber:
        return PacedSseSubscriber(authority, ids[index % len(ids)], paced.lags_ns)

    deadline = asyncio.get_running_loop().time() + args.open_timeout_s
    paced.opened = await open_subscribers("paced", make, readers, port, deadline, first)
    return paced


def _makers(port: int, names: Sequence[str]) -> dict[str, Callable[[int], _IdleSubscriber]]:
    authority = f"127.0.0.1:{port}"
    return {
        "sse": lambda i: IdleSseSubscriber(authority, names[i % len(names)]),
        "ws": lambda i: IdleWsSubscriber(f"ws://{authority}/v1/ws", names[i % len(names)]),
    }


async def _warm_up(
    makers: dict[str, Callable[[int], _IdleSubscriber]], port: int, ping_s: float
) -> None:
    """Open a few connections of each kind, let a heartbeat pass, close them."""
    deadline = asyncio.get_running_loop().time() + 30.0
    warm = [
        await open_subscribers(kind, make, WARMUP_CONNECTIONS, port, deadline)
        for kind, make in makers.items()
    ]
    await asyncio.sleep(ping_s + 0.5)
    for opened in warm:
        opened.close()


async def _settled(watch: ProcessWatch, settle_s: float) -> ResourceSample:
    await asyncio.sleep(settle_s)
    return watch.sample()


async def _cpu_over(watch: ProcessWatch, seconds: float) -> float:
    """The gateway's CPU over the next ``seconds``, % of one core."""
    started, cpu = time.monotonic(), watch.cpu_seconds()
    await asyncio.sleep(seconds)
    return 100.0 * (watch.cpu_seconds() - cpu) / (time.monotonic() - started)


async def _hold(
    hold_s: float,
    watch: ProcessWatch,
    sets: Iterable[OpenedSet],
    readings: Readings,
    ping_s: float,
) -> None:
    """Hold every connection ``hold_s`` seconds, timing heartbeats and sampling memory."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    subscribers = []
    for opened in sets:
        opened.lateness = Lateness(ping_s)
        for subscriber in opened.subscribers:
            subscriber.heartbeats.reset(now)
            subscriber.heartbeats.lateness = opened.lateness
            subscribers.append(subscriber)
    started, cpu = time.monotonic(), watch.cpu_seconds()
    async with ResourceSampler(watch, interval_s=1.0) as sampler:
        await asyncio.sleep(hold_s)
    readings.held_cpu_pct = 100.0 * (watch.cpu_seconds() - cpu) / (time.monotonic() - started)
    now = loop.time()
    for subscriber in subscribers:
        subscriber.heartbeats.finish(now)
    readings.hold_samples = sampler.samples
    readings.end_of_hold = sampler.samples[-1] if sampler.samples else watch.sample()


def _per_connection_kb(
    before: ResourceSample | None, after: ResourceSample | None, n: int
) -> dict[str, float | None]:
    """RSS and PSS growth per connection, in KB (1024 bytes)."""
    if before is None or after is None or n == 0:
        return {"rss_kb": None, "pss_kb": None}
    pss = None
    if before.pss_bytes is not None and after.pss_bytes is not None:
        pss = round((after.pss_bytes - before.pss_bytes) / n / 1024, 2)
    return {"rss_kb": round((after.rss_bytes - before.rss_bytes) / n / 1024, 2), "pss_kb": pss}


def _heartbeat_report(opened: OpenedSet, ping_s: float) -> dict[str, Any]:
    logs = [s.heartbeats for s in opened.subscribers]
    limit = SILENCE_PERIODS * ping_s
    still_open = sum(1 for s in opened.subscribers if s.lost is None)
    lost = sorted({s.lost for s in opened.subscribers if s.lost is not None})
    return {
        "transport": opened.transport,
        "requested": opened.requested,
        "opened": len(opened.subscribers),
        "open_failures": opened.failures,
        "open_failure_samples": opened.failure_samples,
        "open_at_end": still_open,
        "lost_samples": lost[:MAX_FAILURE_SAMPLES],
        "heartbeats_min": min((log.count for log in logs), default=None),
        "heartbeats_median": statistics.median(log.count for log in logs) if logs else None,
        "longest_silence_s": round(max((log.longest_silence for log in logs), default=0.0), 3),
        "silence_limit_s": limit,
        "silent_connections": sum(1 for log in logs if log.longest_silence > limit),
        "heartbeat_lateness_ms": None
        if opened.lateness is None
        else {
            "p50": opened.lateness.percentile_ms(50),
            "p99": opened.lateness.percentile_ms(99),
            "max": opened.lateness.percentile_ms(100),
            "gaps": opened.lateness.count,
        },
        "open_s": round(opened.open_s, 2),
        "accepted_per_s": round(len(opened.subscribers) / opened.open_s) if opened.open_s else None,
    }


def _document(
    args: argparse.Namespace,
    gateway: LocalGateway,
    readings: Readings,
    sets: list[OpenedSet],
    paced: Paced,
) -> dict[str, Any]:
    sse, ws = sets[:2]
    total = sum(len(opened.subscribers) for opened in sets)
    # The idle kinds; paced readers get data, not heartbeats, and have their own report.
    transports = [_heartbeat_report(opened, args.ping_s) for opened in (sse, ws)]
    all_held = all(
        t["opened"] == t["requested"] and t["open_at_end"] == t["opened"] for t in transports
    )
    heartbeats_ok = all(t["silent_connections"] == 0 for t in transports)
    overall = _per_connection_kb(readings.baseline, readings.end_of_hold, total)
    after_sse = readings.after_open.get("sse")
    return {
        "benchmark": "idle_connections",
        "airlane_version": __version__,
        "gateway_pid": gateway.pid,
        "config": {
            "sse": args.sse,
            "ws": args.ws,
            "streams": args.streams,
            "ping_s": args.ping_s,
            "hold_s": args.hold_s,
            "paced_pct": args.paced_pct,
            "paced_interval_ms": args.paced_interval_ms,
            "sources": len({source_address(i) for i in range(0, max(total, 1), PER_SOURCE)}),
        },
        "target_kb_per_connection": TARGET_KB_PER_CONNECTION,
        "memory_per_connection": {
            "sse": _per_connection_kb(readings.baseline, after_sse, len(sse.subscribers)),
            "ws": _per_connection_kb(after_sse, readings.after_open.get("ws"), len(ws.subscribers)),
            "all": overall,
        },
        "within_target": overall["rss_kb"] is not None
        and overall["rss_kb"] <= TARGET_KB_PER_CONNECTION,
        "connections": transports,
        "paced": _paced_report(paced),
        "every_connection_held": all_held,
        "heartbeats_ok": heartbeats_ok,
        "gateway_cpu_pct": {
            "idle_without_connections": _round(readings.idle_cpu_pct),
            "idle_with_connections": _round(readings.held_cpu_pct),
        },
        "samples": {
            name: None if sample is None else sample.to_dict()
            for name, sample in (
                ("baseline", readings.baseline),
                ("after_sse", after_sse),
                ("after_ws", readings.after_open.get("ws")),
                ("end_of_hold", readings.end_of_hold),
                ("after_close", readings.after_close),
            )
        },
        "hold_samples": [sample.to_dict() for sample in readings.hold_samples],
    }


def _paced_report(paced: Paced) -> dict[str, Any] | None:
    """What the readers of paced generations got: every chunk, and how late."""
    if paced.opened is None:
        return None
    readers = [s for s in paced.opened.subscribers if isinstance(s, PacedSseSubscriber)]
    lags = sorted(paced.lags_ns)
    return {
        "generations": paced.generations,
        "readers": len(readers),
        "chunks_expected": paced.chunks_each * len(readers),
        "chunks_received": sum(r.chunks for r in readers),
        "readers_at_the_end": sum(1 for r in readers if r.ended),
        "lag_ms": {
            "p50": round(lags[len(lags) // 2] / 1e6, 2),
            "p99": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))] / 1e6, 2),
            "samples": len(lags),
        }
        if lags
        else None,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def print_report(document: dict[str, Any]) -> None:
    """The human summary of a run."""
    samples, memory = document["samples"], document["memory_per_connection"]
    baseline = samples["baseline"]
    print(
        f"baseline: RSS {_mb(baseline['rss_bytes'])}, PSS {_mb(baseline['pss_bytes'])}, "
        f"{baseline['open_fds']} fds"
    )
    for report in document["connections"]:
        kind = report["transport"]
        per = memory[kind]
        print(
            f"{kind:>3}: {report['opened']:,}/{report['requested']:,} opened, "
            f"{report['open_at_end']:,} open at the end; {_kb(per['rss_kb'])} RSS "
            f"({_kb(per['pss_kb'])} PSS) per connection; heartbeats min "
            f"{report['heartbeats_min']} median {report['heartbeats_median']}, longest silence "
            f"{report['longest_silence_s']:.2f} s (limit {report['silence_limit_s']:g} s)"
        )
        for reason in report["open_failure_samples"] + report["lost_samples"]:
            print(f"     failure: {reason}")
    paced = document["paced"]
    if paced is not None:
        lag = paced["lag_ms"] or {}
        print(
            f"paced: {paced['readers']:,} readers of {paced['generations']} generations got "
            f"{paced['chunks_received']:,} of {paced['chunks_expected']:,} chunks; lag p50 "
            f"{lag.get('p50')} ms, p99 {lag.get('p99')} ms"
        )
    for report in document["connections"]:
        late = report["heartbeat_lateness_ms"] or {}
        print(
            f"{report['transport']:>3}: opened at {report['accepted_per_s']:,}/s; heartbeat "
            f"lateness p50 {late.get('p50')} ms, p99 {late.get('p99')} ms, max "
            f"{late.get('max')} ms over {late.get('gaps', 0):,} gaps"
        )
    overall, target = memory["all"], document["target_kb_per_connection"]
    cpu = document["gateway_cpu_pct"]
    print(
        f"all: {_kb(overall['rss_kb'])} RSS ({_kb(overall['pss_kb'])} PSS) per connection, "
        f"target {target:g} KB: {'within' if document['within_target'] else 'OVER'}"
    )
    print(
        f"every connection held: {'yes' if document['every_connection_held'] else 'NO'}; "
        f"heartbeats on every connection: {'yes' if document['heartbeats_ok'] else 'NO'}"
    )
    print(
        f"gateway CPU: {cpu['idle_without_connections']} % without connections, "
        f"{cpu['idle_with_connections']} % holding them (heartbeats only)"
    )
    print(f"RSS after closing them all: {_mb(samples['after_close']['rss_bytes'])}")


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MB"


def _kb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} KB"


def _gateway_config(directory: str, ping_s: float) -> Path:
    path = Path(directory) / "idle.toml"
    path.write_text(f"[http]\nsse_ping_s = {ping_s}\nws_ping_s = {ping_s}\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    args = _parser().parse_args(argv)
    host = describe_host()  # before pinning narrows this process's CPU affinity
    connections = round((args.sse + args.ws) * (1 + args.paced_pct / 100))
    needed = connections + 2 * WARMUP_CONNECTIONS + 1024
    fd_limit = raise_fd_limit(needed)  # before spawning: the gateway inherits it
    if fd_limit < needed:
        print(
            f"error: {needed:,} file descriptors needed, the limit is {fd_limit:,} "
            "(raising it past the hard limit takes root: run as root, or lower the hard "
            "limit's ceiling with 'ulimit -Hn' / limits.conf)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as directory:
        config = _gateway_config(directory, args.ping_s)
        try:
            with LocalGateway(["--config", str(config)]) as gateway:
                server_cpus, pinning = pin_client()
                if server_cpus is not None:
                    pin_process(gateway.pid, server_cpus)
                document = run_on_fast_loop(measure(args, gateway))
        except (GatewayStartError, ProcessGone) as exc:
            print(f"error: the gateway: {exc}", file=sys.stderr)
            return 1
    document.update(host=host, fd_limit=fd_limit, cpu_pinning=pinning)
    print_report(document)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"results written to {args.json}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Examples are in the module docstring of benchmarks/idle_connections.py.",
    )
    add = parser.add_argument
    add("--sse", type=_count, default=5000, help="idle SSE subscriptions (default: 5000)")
    add("--ws", type=_count, default=5000, help="idle WebSocket subscriptions (default: 5000)")
    add("--hold-s", type=_seconds, default=30.0, help="how long to hold them (default: 30)")
    add(
        "--ping-s",
        type=_seconds,
        default=DEFAULT_PING_S,
        help="the gateway's heartbeat period (default: %(default)s)",
    )
    add(
        "--streams",
        type=_positive,
        default=DEFAULT_STREAMS,
        help="named streams the connections are spread over (default: %(default)s)",
    )
    add(
        "--open-timeout-s",
        type=_seconds,
        default=120.0,
        help="time limit for opening each kind's connections (default: %(default)s)",
    )
    add(
        "--settle-s",
        type=_seconds,
        default=DEFAULT_SETTLE_S,
        help="pause before each memory reading (default: %(default)s)",
    )
    add(
        "--paced-pct",
        type=float,
        default=1.0,
        help="connections (%% of the idle ones) that read paced generations (default: 1)",
    )
    add(
        "--paced-interval-ms",
        type=int,
        default=20,
        help="the paced generations' interval between chunks (default: %(default)s)",
    )
    add("--json", type=Path, help="write the results here")
    return parser


def _count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError("between 0 and 100000")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError("between 1 and 100000")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("between 0 and 3600 seconds")
    return value


if __name__ == "__main__":
    # A SIGTERM (a CI time limit, say) unwinds like Ctrl-C does, so the gateway is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
