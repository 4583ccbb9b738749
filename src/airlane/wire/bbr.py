"""`Bbr`: a BBR-style congestion controller for QUIC, sans-I/O (time comes in as ``now``).

Loss-based controllers (Reno, CUBIC: aioquic's choices) halve their window at every loss. On a
link that drops packets at random (a phone's radio, 5-12 % loss) that is the wrong signal: the
window collapses though the path is not congested, and a 5 MB transfer that TCP with BBR moves
in 2 s takes over a minute. BBR instead models the path: the bottleneck's bandwidth (the best
delivery rate seen over the last ten round trips) and its propagation delay (the lowest RTT
seen over ten seconds). It keeps about one bandwidth-delay product (BDP) in flight, which fills
the link without building a queue, and treats random loss as what it is: lost packets, resent.

Phases, after the BBR draft (draft-cardwell-iccrg-bbr-congestion-control), simplified:

- **Startup**: the window grows by what is acknowledged (doubling per round trip) until the
  bandwidth estimate stops growing by 25 % for three rounds: the pipe is full.
- **Drain**: pacing at 1/2.885 of the bandwidth until what is in flight is one BDP: the queue
  startup built is gone.
- **ProbeBW**: a cycle of eight round trips at gains 1.25, 0.75, 1, 1, 1, 1, 1, 1 of the BDP:
  one round looks for more bandwidth, the next drains what that queued.
- **ProbeRTT**: when the lowest RTT has not been seen again for ten seconds, four packets in
  flight for 200 ms, so that queues drain and the propagation delay is measured afresh.

The host (aioquic, `airlane.runtime.quic_congestion`) paces at ``window / smoothed RTT`` and
has no other knob, so the window is ``gain x bandwidth x smoothed RTT``: that paces at ``gain x
bandwidth``, which is BBR's pacing, and keeps the queue bounded the way BBR does, by the gain
cycle (what the 1.25 round adds, the 0.75 round drains) and ProbeRTT. Sized by the *minimum*
RTT instead, the window starves wherever acknowledgements come late (a receiver's delayed
ACKs, a busy host): each round trip would deliver less than the last.
Random loss does not shrink it. Congestion does, as two signals that random loss does not
give, both tied to a queue:

- a round losing more than `LOSS_CEILING` of what it delivered while the RTT shows a queue
  (above 1.5 x the minimum): the window is capped at what was in flight and the bandwidth
  estimate cut to `CONGESTION_BACKOFF`;
- a gain cycle whose smoothed RTT never came back near the minimum (`SHARED_QUEUE_RTT_FACTOR`):
  a loss-based flow (TCP CUBIC) keeps a queue standing that this flow's draining round cannot
  empty. Left alone, BBR takes most of such a bottleneck (measured: 86 % beside one CUBIC
  flow), because CUBIC backs off at every overflow and BBR does not; here a rate `ceiling`
  steps down 15 % per such cycle and back up 5 % per clear one (measured: 54 %).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

__all__ = ["Bbr", "BbrMode"]

STARTUP_GAIN = 2.885
"""2/ln 2: the gain that doubles the delivery rate each round trip."""
PROBE_GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
BW_WINDOW_ROUNDS = 10
MIN_RTT_WINDOW_S = 10.0
PROBE_RTT_S = 0.2
FULL_BW_GROWTH = 1.25
FULL_BW_ROUNDS = 3
MIN_WINDOW_PACKETS = 4
BATCH_S = 0.010
"""The window is never below this much of the bandwidth estimate (up to `BATCH_PACKETS`):
where the RTT is tiny (a LAN, loopback), a one-BDP window is a few packets and per-packet work
(one ACK per two packets, a loop turn each) caps the rate far below what the path takes."""
BATCH_PACKETS = 32
INITIAL_WINDOW_PACKETS = 10
LOSS_CEILING = 0.02
"""A round losing more than this share of what it delivered, with a queue, is congestion."""
CONGESTION_BACKOFF = 0.7
"""What the bandwidth estimate keeps after a congested round (CUBIC's multiplicative
decrease)."""
QUEUE_RTT_FACTOR = 1.5
SHARED_QUEUE_RTT_FACTOR = 1.15
"""A gain cycle whose lowest smoothed RTT stays above this many minimum RTTs saw a queue that
stood through its draining round: another flow's."""
SHARED_QUEUE_BACKOFF = 0.85
"""The rate ceiling after such a cycle, of what it was (or of the bandwidth estimate)."""
CEILING_GROWTH = 1.05
"""The ceiling after a cycle without one: it rises slower than it falls, so that two flows
settle near their shares instead of taking turns."""


class BbrMode(enum.Enum):
    """Where the controller is in its cycle."""

    STARTUP = "startup"
    DRAIN = "drain"
    PROBE_BW = "probe_bw"
    PROBE_RTT = "probe_rtt"


@dataclass(slots=True)
class _Sent:
    """What the controller knew when a packet left: the delivery rate sample's start."""

    size: int
    sent_time: float
    delivered: int
    delivered_time: float


class Bbr:
    """The controller (see the module docstring). Packets are named by any hashable ``key``
    the host gives them; the host tells it of sends, acknowledgements, losses and RTT samples
    and reads `window`."""

    def __init__(self, mss: int, now: float = 0.0) -> None:
        self.mss = mss
        self.mode = BbrMode.STARTUP
        self.window = INITIAL_WINDOW_PACKETS * mss
        """Bytes the host may have in flight (and, divided by its RTT, its pacing rate)."""
        self.bandwidth = 0.0
        """The bottleneck bandwidth estimate, bytes per second (0: none yet)."""
        self.min_rtt: float | None = None
        """The propagation delay estimate, seconds."""
        self.in_flight = 0
        self._sent: dict[object, _Sent] = {}
        self._delivered = 0
        self._delivered_time = now
        self._round = 0
        self._next_round_delivered = 0
        self._round_lost = 0
        self._round_delivered = 0
        self._bw_samples: deque[tuple[int, float]] = deque()  # (round, best rate that round)
        self._min_rtt_stamp = now
        self._latest_rtt = 0.0
        self._full_bw = 0.0
        self._full_bw_rounds = 0
        self._filled = False
        self._cycle = 0
        self._cycle_stamp = now
        self._cycle_srtt = float("inf")  # the lowest smoothed RTT of the current gain cycle
        self.ceiling: float | None = None
        """The sending rate's ceiling while sharing a queue with a loss-based flow, bytes per
        second (None: none)."""
        self._probe_rtt_done: float | None = None
        self._probe_min = float("inf")  # the lowest RTT seen during ProbeRTT
        self._cap: int | None = None  # the window's ceiling after congestion, lifted by probing
        self._srtt: float | None = None  # smoothed RTT, as the host's pacer computes it

    # -- events from the host ---------------------------------------------------------------

    def on_sent(self, key: object, size: int, now: float) -> None:
        """A packet of ``size`` bytes counting against the window left at ``now``."""
        if not self._sent:  # the flow restarts after idle: time deliveries from now
            self._delivered_time = now
        self._sent[key] = _Sent(size, now, self._delivered, self._delivered_time)
        self.in_flight += size

    def on_acked(self, key: object, now: float) -> None:
        """The packet named ``key`` was acknowledged at ``now``."""
        sent = self._sent.pop(key, None)
        if sent is None:
            return
        self.in_flight = max(0, self.in_flight - sent.size)
        self._delivered += sent.size
        self._round_delivered += sent.size
        self._delivered_time = now
        if sent.delivered >= self._next_round_delivered:
            self._new_round()
        interval = now - sent.delivered_time
        if interval > 0 and (self.min_rtt is None or interval >= self.min_rtt / 2):
            self._sample_bandwidth((self._delivered - sent.delivered) / interval)
        self._update(now, acked=sent.size)

    def on_lost(self, key: object, now: float) -> None:
        """The packet named ``key`` was declared lost (it will be resent as new data)."""
        sent = self._sent.pop(key, None)
        if sent is not None:
            self.in_flight = max(0, self.in_flight - sent.size)
            self._round_lost += sent.size

    def forget(self, key: object) -> None:
        """The packet named ``key`` no longer counts (its packet number space was dropped)."""
        sent = self._sent.pop(key, None)
        if sent is not None:
            self.in_flight = max(0, self.in_flight - sent.size)

    def on_rtt(self, rtt: float, now: float) -> None:
        """An RTT sample."""
        self._latest_rtt = rtt
        self._srtt = rtt if self._srtt is None else 0.875 * self._srtt + 0.125 * rtt
        if self.min_rtt is None or rtt <= self.min_rtt:
            self.min_rtt = rtt
            self._min_rtt_stamp = now
        if self.mode is BbrMode.PROBE_RTT:
            self._probe_min = min(self._probe_min, rtt)
        self._cycle_srtt = min(self._cycle_srtt, self._srtt)
        self._update(now, acked=0)

    def on_persistent_congestion(self, now: float) -> None:
        """Nothing got through for several PTOs: start again from the minimum window."""
        self.window = MIN_WINDOW_PACKETS * self.mss
        self._cap = None

    # -- the model --------------------------------------------------------------------------

    @property
    def bdp(self) -> int:
        """The bandwidth-delay product, bytes (the initial window before any estimate)."""
        if not self.bandwidth or self.min_rtt is None:
            return INITIAL_WINDOW_PACKETS * self.mss
        return int(self.bandwidth * self.min_rtt)

    def _new_round(self) -> None:
        self._round += 1
        self._next_round_delivered = self._delivered
        congested = (
            self._round_delivered
            and self._round_lost > LOSS_CEILING * self._round_delivered
            and self.min_rtt is not None
            and self._latest_rtt > QUEUE_RTT_FACTOR * self.min_rtt
        )
        if congested:
            self._cap = max(self.in_flight, MIN_WINDOW_PACKETS * self.mss)
            self._scale_bandwidth(CONGESTION_BACKOFF)
        self._round_lost = self._round_delivered = 0
        if not self._filled and self.bandwidth:
            if self.bandwidth >= self._full_bw * FULL_BW_GROWTH:
                self._full_bw, self._full_bw_rounds = self.bandwidth, 0
            else:
                self._full_bw_rounds += 1
                self._filled = self._full_bw_rounds >= FULL_BW_ROUNDS

    def _sample_bandwidth(self, rate: float) -> None:
        samples = self._bw_samples
        if samples and samples[-1][0] == self._round:
            if rate > samples[-1][1]:
                samples[-1] = (self._round, rate)
        else:
            samples.append((self._round, rate))
        while samples and samples[0][0] <= self._round - BW_WINDOW_ROUNDS:
            samples.popleft()
        self.bandwidth = max(best for _, best in samples)

    def _update(self, now: float, acked: int) -> None:
        mode = self.mode
        if mode is BbrMode.STARTUP and self._filled:
            mode = self.mode = BbrMode.DRAIN
        if mode is BbrMode.DRAIN and self.in_flight <= self.bdp:
            mode = self._enter_probe_bw(now)
        if mode is BbrMode.PROBE_BW:
            self._advance_cycle(now)
        # (Only once there is a minimum to age: a host's clock does not start at the
        # controller's, and an acknowledgement comes before its RTT sample.)
        stale = self.min_rtt is not None and now - self._min_rtt_stamp > MIN_RTT_WINDOW_S
        if mode is not BbrMode.PROBE_RTT and stale:
            mode = self.mode = BbrMode.PROBE_RTT
            self._probe_rtt_done = now + max(PROBE_RTT_S, self.min_rtt or 0.0)
            self._probe_min = float("inf")
        if mode is BbrMode.PROBE_RTT:
            assert self._probe_rtt_done is not None
            if now >= self._probe_rtt_done:
                # The minimum measured with the queue drained replaces the expired one (the
                # path may have changed), and stands for the next ten seconds.
                if self._probe_min != float("inf"):
                    self.min_rtt = self._probe_min
                self._min_rtt_stamp = now
                mode = self._enter_probe_bw(now) if self._filled else self._enter_startup()
        self.window = self._target(mode, acked)

    def _enter_probe_bw(self, now: float) -> BbrMode:
        self.mode = BbrMode.PROBE_BW
        self._cycle, self._cycle_stamp = 2, now  # start at gain 1: the queue just drained
        return self.mode

    def _enter_startup(self) -> BbrMode:
        self.mode = BbrMode.STARTUP
        return self.mode

    def _advance_cycle(self, now: float) -> None:
        if self.min_rtt is not None and now - self._cycle_stamp > self.min_rtt:
            self._cycle = (self._cycle + 1) % len(PROBE_GAINS)
            self._cycle_stamp = now
            if self._cycle == 0:
                self._end_of_cycle()
            if PROBE_GAINS[self._cycle] > 1.0:
                self._cap = None  # probing for bandwidth may go past a congestion cap

    def _end_of_cycle(self) -> None:
        """A whole gain cycle whose smoothed RTT never came back near the minimum found a
        standing queue that is not this flow's (alone, the 0.75 round drains what the 1.25
        round queued): a loss-based flow's, which fills any buffer and backs off only on
        loss, which this controller does not take as a signal. Holding the rate would take
        the bottleneck from it, so the rate ceiling steps down; cycles without such a
        queue lift it again, more slowly, until it no longer binds."""
        assert self.min_rtt is not None
        if self._cycle_srtt > SHARED_QUEUE_RTT_FACTOR * self.min_rtt:
            ceiling = self.bandwidth if self.ceiling is None else min(self.ceiling, self.bandwidth)
            self.ceiling = ceiling * SHARED_QUEUE_BACKOFF
        elif self.ceiling is not None:
            self.ceiling *= CEILING_GROWTH
            if self.ceiling > self.bandwidth * PROBE_GAINS[0]:
                self.ceiling = None
        self._cycle_srtt = float("inf")

    def _scale_bandwidth(self, factor: float) -> None:
        self._bw_samples = deque((r, rate * factor) for r, rate in self._bw_samples)
        if self._bw_samples:
            self.bandwidth = max(best for _, best in self._bw_samples)

    def _target(self, mode: BbrMode, acked: int) -> int:
        if mode is BbrMode.PROBE_RTT:
            return MIN_WINDOW_PACKETS * self.mss
        batch = min(self.bandwidth * BATCH_S, BATCH_PACKETS * self.mss)
        floor = max(MIN_WINDOW_PACKETS * self.mss, int(batch))
        if mode is BbrMode.STARTUP:
            # Slow-start-like growth by what was acknowledged, up to the startup gain's target
            # once there is an estimate to aim at.
            # The target is of the minimum RTT's BDP, not the smoothed RTT's: startup's own
            # queue inflates the smoothed RTT, and a target that grew with it would never stop.
            grown = self.window + acked
            target = int(STARTUP_GAIN * self.bdp) if self.bandwidth else grown
            return max(floor, min(grown, max(target, self.window)))
        # The host paces at window / smoothed RTT: a window of gain x bandwidth x smoothed RTT
        # paces at gain x bandwidth, BBR's pacing, and lets that much be in flight. Drain
        # paces below the bandwidth until what startup queued is gone; ProbeBW cycles.
        gain = 1 / STARTUP_GAIN if mode is BbrMode.DRAIN else PROBE_GAINS[self._cycle]
        window = max(floor, int(gain * self._per_rtt()))
        return window if self._cap is None else max(floor, min(window, self._cap))

    def _per_rtt(self) -> float:
        """What the bandwidth estimate delivers in one smoothed RTT, bytes."""
        rtt = self._srtt if self._srtt is not None else (self.min_rtt or 0.0)
        bandwidth = self.bandwidth if self.ceiling is None else min(self.bandwidth, self.ceiling)
        return bandwidth * rtt
