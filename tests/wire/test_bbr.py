"""`Bbr` on a simulated path: a bottleneck of known rate behind a propagation delay, with
random loss. The controller must find the rate, keep the window near one bandwidth-delay
product (no queue that grows without bound), ride out random loss instead of collapsing as a
loss-based controller does, back off when loss comes with a queue or when another flow keeps a
queue standing, and probe the RTT again.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from airlane.wire.bbr import Bbr, BbrMode

MSS = 1200


@dataclass
class Path:
    """A sender and a bottleneck: ``rate`` bytes/s, one-way ``delay`` s, ``loss`` dropped."""

    rate: float
    delay: float
    loss: float = 0.0
    seed: int = 1
    standing: float = 0.0
    """Queueing delay another flow keeps on the bottleneck, seconds (added to every packet)."""
    bbr: Bbr = field(init=False)
    now: float = 0.0
    delivered: int = 0
    sent: int = 0
    max_queue: float = 0.0
    _free_at: float = 0.0
    _events: list[tuple[float, int, str]] = field(default_factory=list)
    _next: int = 0

    def __post_init__(self) -> None:
        self.bbr = Bbr(MSS)
        self._rng = random.Random(self.seed)

    def run(self, until: float, *, loss_after: float | None = None) -> None:
        """Send whatever the window allows and process acknowledgements and losses until
        ``until`` (simulated seconds)."""
        self._send()
        while self._events and self._events[0][0] <= until:
            self.now, key, kind = heapq.heappop(self._events)
            if kind == "send":
                self._send_scheduled = False
            elif kind == "ack":
                self.bbr.on_rtt(self.now - self._sent_at.pop(key), self.now)
                self.bbr.on_acked(key, self.now)
                self.delivered += MSS
            else:
                self._sent_at.pop(key)
                self.bbr.on_lost(key, self.now)
            self._send()
        self.now = until

    _sent_at: dict[int, float] = field(default_factory=dict)
    _next_send: float = 0.0
    _send_scheduled: bool = False

    def _send(self) -> None:
        # As aioquic does: within the window, and paced at window / smoothed RTT (a packet
        # every MSS / rate seconds; the next one is scheduled as an event when it falls due).
        bbr = self.bbr
        if self.now < self._next_send:
            return
        while bbr.in_flight + MSS <= bbr.window:
            srtt = bbr._srtt
            if srtt is not None:
                gap = MSS * srtt / bbr.window
                if self.now < self._next_send:
                    if not self._send_scheduled:
                        self._send_scheduled = True
                        heapq.heappush(self._events, (self._next_send, 0, "send"))
                    return
                self._next_send = self.now + gap
            key = self._next = self._next + 1
            self._sent_at[key] = self.now
            self.bbr.on_sent(key, MSS, self.now)
            self.sent += MSS
            if self._rng.random() < self.loss:  # noticed about one RTT later, as QUIC does
                heapq.heappush(self._events, (self.now + 2.25 * self.delay, key, "lost"))
                continue
            start = max(self.now + self.delay, self._free_at)
            self.max_queue = max(self.max_queue, (start - self.now - self.delay) * self.rate)
            self._free_at = start + MSS / self.rate
            heapq.heappush(self._events, (self._free_at + self.delay + self.standing, key, "ack"))


def test_it_finds_the_bottleneck_and_keeps_the_queue_near_one_bdp() -> None:
    path = Path(rate=1.25e6, delay=0.025)  # 10 Mbit/s, 50 ms RTT: BDP 62.5 kB
    path.run(5.0)
    bbr = path.bbr
    assert bbr.mode is BbrMode.PROBE_BW
    assert 0.9 * path.rate <= bbr.bandwidth <= 1.1 * path.rate
    assert abs(bbr.min_rtt - 0.05) < 0.002  # type: ignore[operator]
    before = path.delivered
    path.run(9.0)
    goodput = (path.delivered - before) / 4.0
    assert goodput > 0.9 * path.rate  # the link stays full
    bdp = path.rate * 0.05
    assert bbr.window <= 1.6 * bdp and path.max_queue < 3 * bdp  # startup's queue, drained


def test_a_host_clock_far_from_zero_starts_in_startup_not_probe_rtt() -> None:
    # aioquic's clock is the loop's (thousands of seconds), and it reports an acknowledgement
    # before that packet's RTT sample: the first ack must not look like a ten-second-old
    # minimum RTT (that sent the controller to ProbeRTT, then on at a few KB/s).
    bbr = Bbr(MSS)
    start = 12_345.0
    for key in range(10):
        bbr.on_sent(key, MSS, start)
    bbr.on_acked(0, start + 0.05)
    bbr.on_rtt(0.05, start + 0.05)
    assert bbr.mode is BbrMode.STARTUP
    path = Path(rate=1.25e6, delay=0.025)
    path.now = path._free_at = start
    path.bbr = Bbr(MSS, now=0.0)
    path.run(start + 3.0)
    assert path.bbr.bandwidth >= 0.9 * path.rate
    assert BbrMode.PROBE_RTT is not path.bbr.mode


def test_random_loss_does_not_collapse_the_window() -> None:
    path = Path(rate=1.25e6, delay=0.025, loss=0.10)
    path.run(10.0)
    bdp = path.rate * 0.05
    # What was delivered is the link's rate less the lost tenth; a loss-based controller
    # halving per loss would deliver a few percent of it here.
    assert path.delivered / 10.0 > 0.75 * path.rate * 0.9
    assert path.bbr.window >= bdp


def test_loss_with_a_queue_caps_the_window() -> None:
    # A queue shows in the RTT and lost bytes pass the ceiling: congestion. The window stops at
    # what was in flight until the next probe lifts the cap.
    bbr = Bbr(MSS)
    now = 0.0
    bbr.min_rtt, bbr.bandwidth, bbr.mode = 0.05, 1.25e6, BbrMode.PROBE_BW
    for key in range(100):
        bbr.on_sent(key, MSS, now)
    bbr.on_rtt(0.2, now)  # four times the propagation delay: a standing queue
    for key in range(60):
        bbr.on_lost(key, now)
    for key in range(60, 100):
        bbr.on_acked(key, now + 0.1)
    bbr._new_round()
    assert bbr._cap is not None and bbr._cap <= 100 * MSS


def test_the_rtt_is_probed_again_after_ten_seconds() -> None:
    path = Path(rate=1.25e6, delay=0.025)
    path.run(2.0)
    path.delay = 0.035  # the route changed: every RTT from now on is 20 ms longer
    modes = []
    for step in range(600):  # 12 s in 20 ms steps
        path.run(2.0 + (step + 1) * 0.02)
        modes.append(path.bbr.mode)
    assert BbrMode.PROBE_RTT in modes and path.bbr.mode is BbrMode.PROBE_BW
    assert abs(path.bbr.min_rtt - 0.07) < 0.003  # type: ignore[operator]


def test_a_queue_another_flow_keeps_standing_lowers_the_rate_ceiling() -> None:
    path = Path(rate=1.25e6, delay=0.025, loss=0.05)
    path.run(3.0)
    assert path.bbr.ceiling is None  # alone, random loss or not, nothing stands
    path.standing = 0.02  # a loss-based flow's queue: 20 ms on every packet, drain or not
    path.run(6.0)
    low = path.bbr.ceiling
    assert low is not None and low < 0.8 * path.rate
    path.standing = 0.0  # it left
    path.run(8.0)
    assert path.bbr.ceiling is None or path.bbr.ceiling > low
