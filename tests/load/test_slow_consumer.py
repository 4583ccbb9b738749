"""A slow SSE reader costs the gateway bounded memory and still ends with the exact text.

The stream is a named stream the test publishes to as fast as the gateway accepts: many small
``delta`` events (3 characters each), so the per-event SSE framing is ~30x the text it
carries. (Not a synthetic generation: the synthetic text ends at a seeded random sentence end,
about 50 tokens on average, so ``max_tokens`` cannot make it megabytes long.)

A raw-socket reader with a 4 KiB receive buffer drains it slowly. With flow control (`SSEPump`
awaiting ASGI ``send``) the reader's cursor falls behind, behind retention (256 events), and
each write it gets is the text it lacks (folded history sent as one delta, never the whole text
again) plus a coalesced tail; without it, the server would have to hold every frame the reader
has not taken yet.

Memory bound, justified with the numbers of this test (``EVENTS`` deltas of 3 characters):

* unavoidable: the text itself (about 1.8 MB) is kept for snapshots; a snapshot for the
  lagging reader is the text joined (1x), JSON-encoded (1x), SSE-framed (1x) and queued in the
  transport's write buffer (1x), a few of them alive at once while the next is built: about
  5x the text, ~10 MB, plus allocator slack;
* unbounded buffering: every frame written but not yet read; the frames of the whole stream
  are computed below (``frame_bytes``), over 50 MB of ``bytes`` alone, before any object
  overhead.

``RSS_BOUND`` (30 MiB over a warmed-up baseline) lies between the two. Observed on a 2-core
machine: baseline ~60 MB, growth ~5 MB, ~1.9 MB read by the client (each character once).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import httpx
import orjson
import psutil

from airlane.core import Event
from airlane.wire.event_json import event_to_json
from airlane.wire.sse import SSEDecoder, encode_event
from tests.load.rawhttp import ChunkedDecoder
from tests.servers import ServerProcess, run_server

EVENTS = 600_000
"""Deltas published to the slow reader's stream."""
BATCH = 1000
"""Events per publish request (the API's limit)."""
RSS_BOUND = 30 * 1024 * 1024
"""Most the server's RSS may grow over its warmed-up baseline while the slow reader reads."""
READ_DEADLINE_S = 40.0
"""Upper bound on the whole slow read, publishing included."""
SLOW_RECV = 4096
SLOW_SLEEP_S = 0.002
"""The slow reader's pause after each read: real time on purpose, the reader must be slower
than the gateway writes for flow control to hold the gateway back."""
WARMUP_EVENTS = 60_000

CONFIG = """
[retention]
max_events = 256
max_bytes = 32768
"""


def token(i: int) -> str:
    """The text of delta number ``i`` (0-based): three characters that change with ``i``."""
    return f"{i % 4096:03x}"


def publish_deltas(client: httpx.Client, stream_id: str, count: int) -> None:
    """Publish ``count`` deltas (``token(0..count-1)``) in batches, then ``done``."""
    for start in range(0, count, BATCH):
        events = [
            {"kind": "delta", "text": token(i)} for i in range(start, min(count, start + BATCH))
        ]
        response = client.post(f"/v1/streams/{stream_id}/events", json={"events": events})
        assert response.status_code == 200, response.text
    response = client.post(
        f"/v1/streams/{stream_id}/events", json={"kind": "done", "finish_reason": "stop"}
    )
    assert response.status_code == 200, response.text


def frame_bytes(epoch: str, count: int) -> int:
    """SSE bytes of ``count`` single-delta frames, seq 1..count, as the gateway frames them
    (``id: <epoch>:<seq>`` + native JSON): what an uncoalesced, unbounded writer would queue.
    Exact: a frame's length depends only on the digits of its seq (texts are 3 characters)."""
    total = 0
    digits = 1
    while 10 ** (digits - 1) <= count:
        first, last = 10 ** (digits - 1), min(count, 10**digits - 1)
        event = Event.delta("abc")
        event.seq = first
        frame = encode_event(event_to_json(event), id=f"{epoch}:{first}")
        total += len(frame) * (last - first + 1)
        digits += 1
    return total


@dataclass
class RssSampler:
    """Samples a process's RSS from a thread every ``period_s``."""

    pid: int
    period_s: float = 0.02
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._process = psutil.Process(self.pid)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + READ_DEADLINE_S + 10
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.samples.append(self._process.memory_info().rss)
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def holds_nothing(client: httpx.Client, timeout: float = 10.0) -> None:
    """Return once the gateway's ``/metrics`` show no stream, no cursor and no streaming
    connection: what an earlier stream and its reader held is let go. Each check is a request
    (the state of another process; the release is expected within a request or two)."""
    wanted = ("airlane_streams ", "airlane_subscribers ", "airlane_stream_connections{")
    deadline = time.monotonic() + timeout
    while True:
        lines = [
            line for line in client.get("/metrics").text.splitlines() if line.startswith(wanted)
        ]
        if lines and all(float(line.rsplit(" ", 1)[1]) == 0 for line in lines):
            return
        assert time.monotonic() < deadline, f"the gateway still holds: {lines}"


def read_fast(server: ServerProcess, stream_id: str) -> str:
    """Read a whole stream with httpx (fast reader) and return its content text."""
    text = ""
    decoder = SSEDecoder(max_line_bytes=64 << 20, max_event_bytes=64 << 20)
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("GET", f"/v1/streams/{stream_id}/events") as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_raw():
            for message in decoder.feed(chunk):
                text = apply(text, orjson.loads(message.data))
    return text


def apply(text: str, event: dict) -> str:
    """A reader's state after ``event``: a snapshot replaces it, a content delta extends it."""
    if event["kind"] == "snapshot":
        return event["text"]["content"]
    if event["kind"] == "delta" and event["channel"] == "content":
        return text + event["text"]
    return text


def open_slow_socket(server: ServerProcess, path: str) -> socket.socket:
    """A connected socket with a 4 KiB receive buffer (set before connect, so the TCP window
    stays small) that has sent ``GET path``."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
        "Connection: close\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


def test_slow_consumer_bounded_memory_exact_text() -> None:
    with (
        run_server(config=CONFIG) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        # Warm-up: the same path (publish, lagging read with snapshots) at a tenth of the size,
        # so that imports, caches and allocator arenas are in place before the baseline.
        assert client.post("/v1/streams", json={"name": "warmup"}).status_code == 201
        publish_deltas(client, "warmup", WARMUP_EVENTS)
        assert read_fast(server, "warmup") == "".join(token(i) for i in range(WARMUP_EVENTS))
        assert client.delete("/v1/streams/warmup").status_code == 204
        holds_nothing(client)  # the warm-up's stream and reader are gone: the baseline
        baseline = max(rss(server.pid) for _ in range(3))

        created = client.post("/v1/streams", json={"name": "slow/1"})
        assert created.status_code == 201, created.text
        epoch = created.json()["epoch"]
        expected = "".join(token(i) for i in range(EVENTS))
        unbounded = frame_bytes(epoch, EVENTS)

        sock = open_slow_socket(server, "/v1/streams/slow/1/events")
        publisher_error: list[BaseException] = []

        def publish() -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=30) as pub:
                    publish_deltas(pub, "slow/1", EVENTS)
            except BaseException as exc:  # reported by the test thread
                publisher_error.append(exc)

        publisher = threading.Thread(target=publish, daemon=True)
        received: list[bytes] = []
        start = time.monotonic()
        with RssSampler(server.pid) as sampler:
            publisher.start()
            chunked = ChunkedDecoder()
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(SLOW_RECV)
            head, _, rest = head.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            assert b"transfer-encoding: chunked" in head.lower(), head
            received.append(chunked.feed(rest))
            wire_bytes = len(rest)
            # Slow while the producer runs; the rest (a snapshot and a tail) at the same pace.
            while not chunked.done and time.monotonic() - start < READ_DEADLINE_S:
                data = sock.recv(SLOW_RECV)
                if not data:
                    break
                wire_bytes += len(data)
                received.append(chunked.feed(data))
                time.sleep(SLOW_SLEEP_S)  # slow on purpose: see SLOW_SLEEP_S
            elapsed = time.monotonic() - start
        sock.close()
        publisher.join(10)
        assert not publisher_error, publisher_error
        assert chunked.done, f"response not finished after {elapsed:.1f}s ({wire_bytes} bytes)"
        peak = max(sampler.samples)
        growth = peak - baseline
        print(
            f"\nslow consumer: {EVENTS} deltas, text {len(expected)} B, uncoalesced SSE "
            f"{unbounded / 1e6:.1f} MB; read {wire_bytes / 1e6:.1f} MB in {elapsed:.1f}s; "
            f"RSS baseline {baseline / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB "
            f"(+{growth / 1e6:.1f} MB, bound {RSS_BOUND / 1e6:.1f} MB, "
            f"{len(sampler.samples)} samples)"
        )
        assert unbounded > 1.5 * RSS_BOUND, "make the stream bigger: the bound would not tell"
        assert growth < RSS_BOUND, f"server RSS grew {growth / 1e6:.1f} MB over its baseline"

        decoder = SSEDecoder(max_line_bytes=64 << 20, max_event_bytes=64 << 20)
        messages = decoder.feed(b"".join(received)) + decoder.close()
        events = [orjson.loads(m.data) for m in messages]
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs)), "frames out of order or repeated"
        assert events[-1]["kind"] == "done" and events[-1]["seq"] == EVENTS + 1
        assert messages[-1].id == f"{epoch}:{EVENTS + 1}"
        # The reader's own usage counts every token it was given, and so does the ledger.
        usage = events[-1]["usage"]
        assert usage["subscriber_tokens"] == EVENTS
        assert usage["delivered_tokens"]["anonymous"] == EVENTS
        text = ""
        for event in events:
            text = apply(text, event)
        snapshot = client.get("/v1/streams/slow/1/snapshot")
        assert snapshot.status_code == 200
        assert snapshot.json()["text"]["content"] == expected
        assert text == expected
        snapshots = sum(e["kind"] == "snapshot" for e in events)
        print(f"slow consumer: {len(events)} SSE events ({snapshots} snapshots) for {EVENTS}")
        # Coalesced: a tiny fraction of the deltas went out as frames of their own, and a live
        # reader that only missed text is never sent the whole text again.
        assert snapshots == 0
        assert len(events) < EVENTS // 20
        assert sum(len(chunk) for chunk in received) < 2 * len(expected.encode())
        info = client.get("/v1/streams/slow/1").json()
        assert info["ended"] and info["retained_events"] <= 256
        assert info["first_retained_seq"] > EVENTS - 256
        assert server.process.poll() is None
