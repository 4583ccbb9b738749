"""The client side of `benchmarks/idle_connections.py`: idle SSE and WebSocket subscribers,
readers of paced generations, and the processes that hold them.

One process can hold as many connections as its descriptor limit allows (20,000 on some
machines, where raising the hard limit is not allowed). `ClientProcesses` splits the
connections over several processes, each running this module (``python idle_clients.py``)
and taking commands as JSON lines on its standard input: open, start the hold, end it (and
report), close. `LocalClients` does the same in the calling process. Both hand back
`KindResult`-shaped dictionaries that merge by adding up, so the report is the same however
many processes held the connections.

The subscribers are lean asyncio protocols over sans-I/O parsers (h11 for HTTP/1.1, the
``websockets`` sans-I/O client). Connections come from 127.1.x.y source addresses,
`PER_SOURCE` each: one source and destination pair has only about 28,000 ephemeral ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import h11
import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from airlane.bench.chunk import read_seq_ts

OPEN_CONCURRENCY = 200
"""Connections being opened at once (per process): well under the gateway's listen backlog."""
MAX_LINE_BYTES = 16 * 1024
"""Longest SSE line buffered: an idle stream sends only ``retry:`` and ``: ping`` lines."""
MAX_FAILURE_SAMPLES = 5
"""Distinct failure messages kept."""
LATENESS_CAP_S = 60.0
"""Heartbeat lateness is counted in 1 ms buckets up to this."""
LAG_BUCKET_NS = 100_000
"""Paced readers' lag is counted in 0.1 ms buckets."""
PER_SOURCE = 10_000
"""Connections per loopback source address: a (source, destination) pair has about 28,000
ephemeral ports (fewer while an earlier run's closed connections wait in TIME_WAIT), so
100,000 connections come from several 127.x.y.z addresses."""
ANSWER_LIMIT = 64 << 20
"""Longest answer line a client process may send (its connections' numbers)."""
PER_PROCESS = 18_000
"""Connections one client process holds at most (under a 20,000-descriptor limit)."""

_PAYLOAD = b'"payload":'
_THIS_FILE = str(Path(__file__).resolve())
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux 4.2


class SubscribeError(Exception):
    """The gateway refused or broke a subscription (its fault, or a misconfiguration)."""


class Lateness:
    """How late heartbeats came, for all connections of a kind: the gap between two of a
    connection's heartbeats minus the period, counted in 1 ms buckets (bounded: what is later
    than `LATENESS_CAP_S` counts in the last); `percentile_of` reads them."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.buckets: dict[int, int] = {}
        """Lateness in whole ms -> gaps that late."""

    def add(self, gap_s: float) -> None:
        """One gap between consecutive heartbeats."""
        late_ms = min(max(0, int((gap_s - self.period_s) * 1000)), int(LATENESS_CAP_S * 1000))
        self.buckets[late_ms] = self.buckets.get(late_ms, 0) + 1


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
                return  # (h11 repeats ConnectionClosed for ever)

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

    def __init__(self, authority: str, stream: str, lags: dict[int, int]) -> None:
        super().__init__(authority, stream)
        self._lags = lags
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
                        bucket = (now_ns - ts) // LAG_BUCKET_NS
                        self._lags[bucket] = self._lags.get(bucket, 0) + 1

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
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # The port is picked at connect, for the 4-tuple: a bind to port 0 would look for
            # one free for the address alone, slower with every socket the address holds.
            sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", port))
        except BaseException:
            sock.close()
            raise
        await loop.create_connection(lambda: subscriber, sock=sock)
        await subscriber.opened


def make_subscriber(
    kind: str, port: int, names: Sequence[str], lags: dict[int, int]
) -> Callable[[int], _IdleSubscriber]:
    """Subscribers of ``kind`` (``sse``, ``ws`` or ``paced``) to ``names`` (round robin)."""
    authority = f"127.0.0.1:{port}"
    if kind == "sse":
        return lambda i: IdleSseSubscriber(authority, names[i % len(names)])
    if kind == "ws":
        return lambda i: IdleWsSubscriber(f"ws://{authority}/v1/ws", names[i % len(names)])
    return lambda i: PacedSseSubscriber(authority, names[i % len(names)], lags)


def kind_result(opened: OpenedSet) -> dict[str, Any]:
    """What a report needs of one kind's connections, in a form that merges by adding up."""
    logs = [s.heartbeats for s in opened.subscribers]
    lateness = opened.lateness
    return {
        "transport": opened.transport,
        "requested": opened.requested,
        "opened": len(opened.subscribers),
        "failures": opened.failures,
        "failure_samples": opened.failure_samples,
        "open_s": opened.open_s,
        "counts": [log.count for log in logs],
        "silences": [round(log.longest_silence, 4) for log in logs],
        "still_open": sum(1 for s in opened.subscribers if s.lost is None),
        "lost": sorted({s.lost for s in opened.subscribers if s.lost is not None}),
        "lateness": {} if lateness is None else {str(k): n for k, n in lateness.buckets.items()},
        "chunks": [s.chunks for s in opened.subscribers if isinstance(s, PacedSseSubscriber)],
        "ended": sum(1 for s in opened.subscribers if getattr(s, "ended", False)),
    }


def merge_results(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One kind's results from several processes as one (opened at once: the longest open
    time is the kind's)."""
    merged = dict(parts[0])
    for key in ("counts", "silences", "chunks"):
        merged[key] = [x for part in parts for x in part[key]]
    for key in ("requested", "opened", "failures", "still_open", "ended"):
        merged[key] = sum(part[key] for part in parts)
    merged["open_s"] = max(part["open_s"] for part in parts)
    merged["failure_samples"] = sorted({x for p in parts for x in p["failure_samples"]})[
        :MAX_FAILURE_SAMPLES
    ]
    merged["lost"] = sorted({x for p in parts for x in p["lost"]})
    lateness: dict[str, int] = {}
    for part in parts:
        for late, n in part["lateness"].items():
            lateness[late] = lateness.get(late, 0) + n
    merged["lateness"] = lateness
    return merged


def percentile_of(histogram: dict[str, int], pct: float) -> int | None:
    """The ``pct`` percentile bucket of a sparse histogram ``{bucket: count}``."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = pct / 100 * total, 0
    for bucket in sorted(histogram, key=int):
        seen += histogram[bucket]
        if seen >= rank:
            return int(bucket)
    return None


def heartbeat_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Heartbeat counts and lateness of one kind's merged results."""
    counts = result["counts"]
    late = result["lateness"]
    return {
        "heartbeats_min": min(counts, default=None),
        "heartbeats_median": statistics.median(counts) if counts else None,
        "longest_silence_s": round(max(result["silences"], default=0.0), 3),
        "heartbeat_lateness_ms": {
            "p50": percentile_of(late, 50),
            "p99": percentile_of(late, 99),
            "max": max((int(k) for k in late), default=None),
            "gaps": sum(late.values()),
        },
    }


class LocalClients:
    """The connections held in this process: what `ClientProcesses` does, in one process."""

    def __init__(self) -> None:
        self.sets: dict[str, OpenedSet] = {}
        self.lags: dict[int, int] = {}
        """Paced readers' lag: 0.1 ms bucket -> count."""

    async def open(
        self, kind: str, port: int, names: Sequence[str], count: int, first: int, timeout_s: float
    ) -> dict[str, Any]:
        """Open ``count`` connections of ``kind``; their result so far."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        make = make_subscriber(kind, port, names, self.lags)
        opened = await open_subscribers(kind, make, count, port, deadline, first)
        self.sets[kind] = opened
        return kind_result(opened)

    def hold_start(self, ping_s: float) -> None:
        """Time heartbeats from now on."""
        now = asyncio.get_running_loop().time()
        for opened in self.sets.values():
            opened.lateness = Lateness(ping_s)
            for subscriber in opened.subscribers:
                subscriber.heartbeats.reset(now)
                subscriber.heartbeats.lateness = opened.lateness

    def hold_end(self) -> dict[str, Any]:
        """Stop timing; every kind's result, and the paced readers' lag histogram."""
        now = asyncio.get_running_loop().time()
        for opened in self.sets.values():
            for subscriber in opened.subscribers:
                subscriber.heartbeats.finish(now)
        kinds = {kind: kind_result(opened) for kind, opened in self.sets.items()}
        return {"kinds": kinds, "lags": {str(k): n for k, n in self.lags.items()}}

    def close(self) -> None:
        """Close every connection."""
        for opened in self.sets.values():
            opened.close()


class ClientProcesses:
    """``count`` processes of this module holding the connections between them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._children: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        """Start the processes."""
        for _ in range(self.count):
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                _THIS_FILE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=ANSWER_LIMIT,  # an answer carries a number per connection
            )
            self._children.append(child)

    async def _ask_all(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        async def ask(child: asyncio.subprocess.Process, command: dict[str, Any]) -> Any:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(orjson.dumps(command) + b"\n")
            await child.stdin.drain()
            line = await child.stdout.readline()
            if not line:
                raise SubscribeError(f"a client process exited ({await child.wait()})")
            return orjson.loads(line)

        # Every child answers (or fails) before this returns: a question left pending would
        # collide with the next one on its pipe.
        answers = await asyncio.gather(*map(ask, self._children, commands), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return list(answers)

    async def open(
        self, kind: str, port: int, names: Sequence[str], count: int, first: int, timeout_s: float
    ) -> dict[str, Any]:
        """Open ``count`` connections of ``kind``, split over the processes."""
        commands, offset = [], first
        for index in range(self.count):
            share = count // self.count + (1 if index < count % self.count else 0)
            commands.append({"cmd": "open", "kind": kind, "port": port, "names": list(names),
                             "count": share, "first": offset, "timeout_s": timeout_s})  # fmt: skip
            offset += share
        return merge_results(await self._ask_all(commands))

    async def hold_start(self, ping_s: float) -> None:
        await self._ask_all([{"cmd": "hold_start", "ping_s": ping_s}] * self.count)

    async def hold_end(self) -> dict[str, Any]:
        parts = await self._ask_all([{"cmd": "hold_end"}] * self.count)
        kinds = {
            kind: merge_results([part["kinds"][kind] for part in parts])
            for kind in parts[0]["kinds"]
        }
        lags: dict[str, int] = {}
        for part in parts:
            for bucket, n in part["lags"].items():
                lags[bucket] = lags.get(bucket, 0) + n
        return {"kinds": kinds, "lags": lags}

    async def close(self) -> None:
        with contextlib.suppress(SubscribeError, OSError):
            await self._ask_all([{"cmd": "close"}] * self.count)
        for child in self._children:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


async def _serve_commands() -> None:
    """A client process: commands on stdin, one JSON answer line each on stdout."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    clients = LocalClients()
    while line := await reader.readline():
        command = json.loads(line)
        answer: Any = {"ok": True}
        if command["cmd"] == "open":
            answer = await clients.open(
                command["kind"], command["port"], command["names"], command["count"],
                command["first"], command["timeout_s"],
            )  # fmt: skip
        elif command["cmd"] == "hold_start":
            clients.hold_start(command["ping_s"])
        elif command["cmd"] == "hold_end":
            answer = clients.hold_end()
        elif command["cmd"] == "close":
            clients.close()
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.flush()
        if command["cmd"] == "close":
            return


if __name__ == "__main__":
    from airlane.bench.memory import raise_fd_limit
    from airlane.bench.runner import run_on_fast_loop

    raise_fd_limit()
    run_on_fast_loop(_serve_commands())
