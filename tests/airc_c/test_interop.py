"""The C connection and the Python one, talking to each other over a simulated network that
loses, repeats and reorders frames: every message arrives once, in order, on both sides.

This is where the C sender is checked (the differential test drives the receiving side):
its window, retransmission timer with backoff, fast retransmit, fragmentation and priority
against Airlane's own codec as the peer. Time is virtual (integer microseconds), so a run
takes milliseconds however long the retransmission timeouts are.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import defaultdict
from typing import Any

import pytest

from airlane.wire.airc.connection import AircConnection
from airlane.wire.airc.events import ConnectionClosed, MessageReceived, SignalReceived
from airlane.wire.airc.frame import FrameDecoder, encode_frame
from airlane.wire.airc.signalling import Cancel, encode_signal

from .binding import E_INVALID, E_WOULD_BLOCK, CConnection, Library
from .differential import CONFIG

LATENCY_US = 2_000
MAX_STEPS = 20_000


class Network:
    """Frames in flight both ways; the first ``lossy`` frames each way meet a random fate."""

    def __init__(self, rng: random.Random, lossy: int) -> None:
        self.rng = rng
        self.lossy = {"to_c": lossy, "to_python": lossy}
        self.queue: list[tuple[int, int, str, bytes]] = []
        self._order = itertools.count()
        self.dropped = self.repeated = self.late = 0

    def send(self, direction: str, data: bytes, now: int) -> None:
        frames, failure = FrameDecoder().decode(data)
        assert failure is None
        for frame in frames:
            raw = encode_frame(frame)
            copies, delay = 1, LATENCY_US
            if self.lossy[direction] > 0:
                self.lossy[direction] -= 1
                roll = self.rng.random()
                if roll < 0.2:
                    copies = 0
                    self.dropped += 1
                elif roll < 0.3:
                    copies = 2
                    self.repeated += 1
                elif roll < 0.5:
                    delay += self.rng.choice((3_000, 20_000, 150_000))
                    self.late += 1
            for _ in range(copies):
                heapq.heappush(self.queue, (now + delay, next(self._order), direction, raw))


def run(library: Library, seed: int, lossy: int) -> dict[str, Any]:
    """One conversation; returns what each side received and the network's tally."""
    rng = random.Random(seed)
    c = CConnection(library, 0)
    python = AircConnection(CONFIG, now=0.0)
    network = Network(rng, lossy)
    # What each side sends: (stream, bytes), in order; 256 bytes is four fragments, the C
    # side's whole window.
    from_c = [(rng.choice((1, 2)), rng.randbytes(rng.randrange(257))) for _ in range(40)]
    from_python = [(rng.choice((1, 3)), rng.randbytes(rng.randrange(300))) for _ in range(40)]
    from_python += [(-1, encode_signal(Cancel(i, 2))) for i in range(3)]
    c_backlog = list(from_c)
    received: dict[str, dict[int, list[bytes]]] = {"c": defaultdict(list), "python": {}}
    received["python"] = defaultdict(list)
    closed: list[Any] = []
    now = 0
    for stream, data in from_python:
        if stream < 0:
            python.send_message(255, data, priority=True)
        else:
            python.send_message(stream, data)

    def c_events(events: list[tuple[Any, ...]]) -> None:
        for event in events:
            if event[0] == "message":
                received["c"][event[1]].append(event[2])
            elif event[0] == "signal":
                received["c"][255].append(event[1])
            elif event[0] == "closed":
                closed.append(("c", event))

    def python_events(events: list[Any]) -> None:
        for event in events:
            if isinstance(event, MessageReceived):
                received["python"][event.stream_id].append(event.data)
            elif isinstance(event, SignalReceived):
                received["python"][255].append(encode_signal(event.message))
            elif isinstance(event, ConnectionClosed):
                closed.append(("python", event))

    for _ in range(MAX_STEPS):
        # The C side sends what its windows take (the rest waits: its window is its queue).
        while c_backlog:
            stream, data = c_backlog[0]
            result = c.send(stream, data, now, priority=stream == 2)
            if result == E_WOULD_BLOCK:
                break
            assert result == 0
            c_backlog.pop(0)
        network.send("to_python", c.output(now), now)
        network.send("to_c", python.data_to_send(now / 1e6), now)
        times = [t for t in (c.next_timer(),) if t is not None]
        python_timer = python.get_timer()
        if python_timer is not None:
            times.append(round(python_timer * 1e6 + 0.5))
        if network.queue:
            times.append(network.queue[0][0])
        if not times or closed:
            break
        now = max(now, min(times))
        while network.queue and network.queue[0][0] <= now:
            _, _, direction, raw = heapq.heappop(network.queue)
            if direction == "to_c":
                c_events(c.receive(raw, now))
            else:
                python_events(python.receive_data(raw, now / 1e6))
        c_timer, python_timer = c.next_timer(), python.get_timer()
        if c_timer is not None and c_timer <= now:
            c_events(c.handle_timer(now))
        if python_timer is not None and python_timer * 1e6 <= now:
            python_events(python.handle_timer(now / 1e6))
    else:
        pytest.fail(f"seed {seed}: no quiet after {MAX_STEPS} steps")
    return {
        "received": received,
        "sent": {"c": from_c, "python": from_python},
        "closed": closed,
        "c_left": [c.stats(), c_backlog, [c.next_timer()]],
        "network": (network.dropped, network.repeated, network.late),
        "now": now,
    }


def by_stream(messages: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = defaultdict(list)
    for stream, data in messages:
        out[255 if stream < 0 else stream].append(data)
    return dict(out)


@pytest.mark.parametrize("seed", range(12))
def test_every_message_arrives_once_in_order_both_ways(library: Library, seed: int) -> None:
    result = run(library, seed, lossy=60)
    assert not result["closed"], result["closed"]
    assert dict(result["received"]["python"]) == by_stream(result["sent"]["c"])
    assert dict(result["received"]["c"]) == by_stream(result["sent"]["python"])
    stats, backlog, timer = result["c_left"]
    assert backlog == [] and timer == [None]  # nothing left in flight
    dropped, repeated, late = result["network"]
    assert dropped and repeated and late  # the network really was hostile
    if seed == 0:
        assert stats.retransmits > 0 and stats.duplicates > 0


def test_a_message_larger_than_the_window_is_refused_not_queued(library: Library) -> None:
    c = CConnection(library, 0)
    window = library.limits["send_window"] * library.limits["tx_payload"]
    assert c.send(1, bytes(window + 1), 0) == E_INVALID
    assert c.send(1, bytes(window), 0) == 0
    assert c.send(1, b"", 0) == E_WOULD_BLOCK  # until the peer acknowledges


def test_a_peer_that_stops_acknowledging_times_the_c_side_out(library: Library) -> None:
    c = CConnection(library, 0)
    assert c.send(1, b"hello", 0) == 0
    assert c.output(0)
    now, events = 0, []
    while not events:
        timer = c.next_timer()
        assert timer is not None
        now = timer
        events = c.handle_timer(now)
        c.output(now)  # the retransmission goes nowhere
    assert events == [("closed", 10, False)]  # ACK_TIMEOUT
    # 1 s, then doubled per retry up to 8 s: 1+2+4+8+8+8 (six retransmissions), then give up.
    assert now == 39_000_000
