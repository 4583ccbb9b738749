"""Two `AircConnection` objects over a simulated network that loses, repeats and reorders.

The network carries whole frames: each ``data_to_send`` output is cut into its frames, and
hypothesis decides the fate of each one, in both directions: delivered after the base
latency, delivered late (so later frames overtake it), delivered twice, or dropped. After
the drawn fates run out the network is perfect, so retransmission can finish.

Invariant: once the network is quiet, every message sent on every stream (signalling
included) has been received exactly once, in order, with identical bytes; each clock
exchange produced exactly one `ClockUpdated` whose offset is within half its delay of the
true offset; no connection closed; and neither side has anything left in flight or queued.
The same holds on a perfect network fed one byte at a time.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from dataclasses import dataclass, field, replace

from hypothesis import event as note_event
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection
from airlane.wire.airc.events import AircEvent, ClockUpdated, MessageReceived, SignalReceived
from airlane.wire.airc.signalling import Cancel, SignalMessage

from .pair import closes, split_frames

LATENCY = 0.002
LATE = (0.0, 0.003, 0.02, 0.15)  # extra delay of a late frame: a little to a lot
MAX_STEPS = 5000  # events in one simulation; a correct run needs a few hundred
NETWORK = settings(max_examples=150, deadline=None)

# max_retransmits is out of reach: with the drawn losses bounded, the run must never give up.
CONFIG = AircConfig(
    max_frame_payload=256,
    send_window=8,
    reorder_window=8,
    ack_every=4,
    ack_delay=0.005,
    initial_rto=0.1,
    min_rto=0.02,
    max_rto=0.8,
    max_retransmits=1000,
)


@dataclass(frozen=True)
class Fate:
    """What the network does to one frame."""

    copies: int  # 0: dropped, 1: delivered, 2: duplicated
    late: int  # an index into LATE


fates = st.lists(
    st.builds(Fate, st.sampled_from([0, 1, 1, 2]), st.integers(0, len(LATE) - 1)),
    max_size=60,
)
SIGNAL = -1  # a stream number in a plan that means "send a Cancel signal"
plans = st.lists(
    st.tuples(
        st.integers(0, 30),  # when, in ms
        st.sampled_from([0, 1, 12, SIGNAL]),
        st.binary(max_size=900),  # up to four frames of 256 bytes
    ),
    max_size=10,
)


@dataclass
class Link:
    """One direction of the network."""

    fates: list[Fate]
    bytewise: bool = False
    in_transit: list[tuple[float, int, bytes]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)
    _used: int = 0

    def send(self, data: bytes, now: float) -> None:
        for frame in split_frames(data):
            fate = self.fates[self._used] if self._used < len(self.fates) else Fate(1, 0)
            self._used += 1
            for copy in range(fate.copies):
                at = now + LATENCY + LATE[fate.late] + copy * 0.001
                heapq.heappush(self.in_transit, (at, next(self._order), frame))

    @property
    def next_arrival(self) -> float | None:
        return self.in_transit[0][0] if self.in_transit else None

    def arrivals(self, now: float) -> list[bytes]:
        out = []
        while self.in_transit and self.in_transit[0][0] <= now:
            frame = heapq.heappop(self.in_transit)[2]
            out += [frame[i : i + 1] for i in range(len(frame))] if self.bytewise else [frame]
        return out


@dataclass
class Side:
    """One endpoint: its connection, its plan, and what it saw."""

    conn: AircConnection
    plan: list[tuple[float, int, bytes]]
    syncs: int
    events: list[AircEvent] = field(default_factory=list)

    def send_due(self, now: float) -> None:
        while self.plan and self.plan[0][0] <= now:
            _, stream_id, data = self.plan.pop(0)
            if stream_id == SIGNAL:
                self.conn.send_signal(signal_for(data))
            else:
                self.conn.send_message(stream_id, data)
        if self.syncs and now >= 0.01:
            self.syncs -= 1
            self.conn.request_clock_sync()

    def next_send(self) -> float | None:
        if self.plan:
            return self.plan[0][0]
        return 0.01 if self.syncs else None


def signal_for(data: bytes) -> SignalMessage:
    """A signalling message that carries something of ``data``."""
    return Cancel(len(data), int.from_bytes(data[:2].ljust(2, b"\0"), "big"))


def schedule(plan: list[tuple[int, int, bytes]]) -> list[tuple[float, int, bytes]]:
    return sorted(((ms / 1000, stream, data) for ms, stream, data in plan), key=lambda p: p[0])


def expected_deliveries(plan: list[tuple[int, int, bytes]]) -> dict[int, list[object]]:
    expected: dict[int, list[object]] = defaultdict(list)
    for _, stream_id, data in schedule(plan):
        expected[stream_id].append(signal_for(data) if stream_id == SIGNAL else data)
    return expected


def deliveries(events: list[AircEvent]) -> dict[int, list[object]]:
    seen: dict[int, list[object]] = defaultdict(list)
    for event in events:
        if isinstance(event, MessageReceived):
            seen[event.stream_id].append(event.data)
        elif isinstance(event, SignalReceived):
            seen[SIGNAL].append(event.message)
    return seen


def simulate(a: Side, b: Side, to_b: Link, to_a: Link) -> float:
    """Run until nothing is pending anywhere; return the time it took."""
    now = 0.0
    routes = ((a, to_b, b), (b, to_a, a))
    for _ in range(MAX_STEPS):
        for side, link, _peer in routes:
            side.send_due(now)
            link.send(side.conn.data_to_send(now), now)
        pending = [
            t
            for t in (
                a.conn.get_timer(),
                b.conn.get_timer(),
                to_b.next_arrival,
                to_a.next_arrival,
                a.next_send(),
                b.next_send(),
            )
            if t is not None
        ]
        if not pending:
            return now
        now = max(now, min(pending))
        for _side, link, peer in routes:
            for chunk in link.arrivals(now):
                peer.events += peer.conn.receive_data(chunk, now)
        for side in (a, b):
            timer = side.conn.get_timer()
            if timer is not None and timer <= now:
                side.events += side.conn.handle_timer(now)
    raise AssertionError(f"the network never settled (t = {now:.3f} s)")


def check(
    a: Side, b: Side, plan_a: list[tuple[int, int, bytes]], plan_b: list[tuple[int, int, bytes]]
) -> None:
    assert not closes(a.events + b.events)
    assert a.conn.closed is None and b.conn.closed is None
    assert deliveries(b.events) == expected_deliveries(plan_a)
    assert deliveries(a.events) == expected_deliveries(plan_b)
    for side in (a, b):
        assert side.conn.queued_bytes == 0
        assert side.conn._received_bytes == 0  # nothing held once everything is delivered
        assert all(side.conn.unacknowledged(s) == 0 for s in (0, 1, 12, 255))


def check_clock(side: Side, syncs: int, true_offset_us: float) -> None:
    updates = [e for e in side.events if isinstance(e, ClockUpdated)]
    assert len(updates) == syncs
    for update in updates:
        # ClockUpdated reports the best sample so far; its error is at most half its delay,
        # plus a microsecond or two of timestamp truncation.
        assert abs(update.offset_us - true_offset_us) <= update.delay_us / 2 + 2


@NETWORK
@given(
    plan_a=plans,
    plan_b=plans,
    fates_ab=fates,
    fates_ba=fates,
    reorder_window=st.sampled_from([2, 4, 8]),
    syncs=st.integers(0, 2),
    b_earlier=st.sampled_from([0.0, 0.5, 30.0]),
)
def test_lossy_network_delivers_everything_once_in_order(
    plan_a: list[tuple[int, int, bytes]],
    plan_b: list[tuple[int, int, bytes]],
    fates_ab: list[Fate],
    fates_ba: list[Fate],
    reorder_window: int,
    syncs: int,
    b_earlier: float,
) -> None:
    # b may hold fewer frames ahead of a gap than a sends at once: those beyond are dropped
    # and must come back by retransmission.
    config_b = replace(CONFIG, reorder_window=reorder_window)
    a = Side(AircConnection(CONFIG, now=0.0), schedule(plan_a), syncs)
    b = Side(AircConnection(config_b, now=-b_earlier), schedule(plan_b), 0)
    simulate(a, b, Link(fates_ab), Link(fates_ba))
    check(a, b, plan_a, plan_b)
    check_clock(a, syncs, b_earlier * 1e6)
    for name in ("retransmits", "duplicates", "gaps", "beyond_window"):  # what was exercised
        if getattr(a.conn.stats, name) + getattr(b.conn.stats, name):
            note_event(name)


@settings(max_examples=15, deadline=None)
@given(plan_a=plans, plan_b=plans)
def test_perfect_network_fed_byte_by_byte(
    plan_a: list[tuple[int, int, bytes]], plan_b: list[tuple[int, int, bytes]]
) -> None:
    a = Side(AircConnection(CONFIG, now=0.0), schedule(plan_a), 1)
    b = Side(AircConnection(CONFIG, now=0.0), schedule(plan_b), 1)
    simulate(a, b, Link([], bytewise=True), Link([], bytewise=True))
    check(a, b, plan_a, plan_b)
    check_clock(a, 1, 0.0)
    check_clock(b, 1, 0.0)
    assert a.conn.stats.retransmits == b.conn.stats.retransmits == 0
    assert a.conn.stats.duplicates == b.conn.stats.duplicates == 0
