"""`PublishSchedule`: how long a home log's writer lets appends gather before a publish.

A broker message costs about the same whatever it carries: the publish and its
acknowledgement in this process, the broker's storing, each follower's reading. While appends
keep coming, the writer waits between two publishes, so the next chunks of paced streams share
a message. How long is a trade: the wait is latency for every reader, the messages it saves
are CPU.

Which side of the trade matters depends on the flow. A light flow (a few streams) makes few
messages whatever the wait, and its readers notice each millisecond; a busy flow (hundreds of
paced streams) makes a message every wait, whose cost then adds up to a sizeable share of a
core, while its readers' latency is already set by the queue for the CPU. So the wait follows
the flow of appended events, measured by the writer itself (no clock of its own, no task):
``light_s`` up to `LIGHT_EVENTS_S` events per second, ``busy_s`` from `BUSY_EVENTS_S` on, in
proportion between. A flow is estimated from what each publish took and the time since the
one before, smoothed over about `FLOW_TAU_S`; a quiet moment drops it at once, so the first
append after one waits for nothing.
"""

from __future__ import annotations

import math

__all__ = ["BUSY_EVENTS_S", "FLOW_TAU_S", "LIGHT_EVENTS_S", "PublishSchedule"]

LIGHT_EVENTS_S = 1_000.0
"""Up to this many events per second, publishes wait ``light_s`` (a score of token streams at
50 tokens a second: latency first)."""
BUSY_EVENTS_S = 5_000.0
"""From this many events per second on, publishes wait ``busy_s`` (a hundred such streams
and more: a message every ``light_s`` costs CPU that their readers' latency does not repay)."""
FLOW_TAU_S = 0.25
"""How long the flow estimate remembers: a change in the flow is followed within about this."""


class PublishSchedule:
    """The wait between two publishes of a home log, from the flow of appends it carries.

    ``took(events, now)`` after each take of queued appends (``now`` on a monotonic clock,
    in seconds); `linger_s` is the least time between the start of the last publish and the
    next one. See the module docstring.
    """

    __slots__ = ("_busy_s", "_flow", "_last", "_light_s", "_publish_s", "_uncounted")

    def __init__(self, light_s: float, busy_s: float) -> None:
        self._light_s = light_s
        self._busy_s = max(light_s, busy_s)
        self._flow = 0.0
        self._last: float | None = None
        self._uncounted = 0  # events taken at the same instant as the last take
        self._publish_s = 0.0

    @property
    def flow(self) -> float:
        """Appended events per second, as estimated at the last take."""
        return self._flow

    @property
    def linger_s(self) -> float:
        """How long the next publish waits after the last one began (seconds)."""
        return self._linger(self._flow)

    @property
    def publish_s(self) -> float:
        """How long a publish takes, from its start to its acknowledgement handled, over the
        last few (seconds): under load, what the wait cannot shorten."""
        return self._publish_s

    def published(self, seconds: float) -> None:
        """A publish took ``seconds``."""
        self._publish_s += 0.2 * (seconds - self._publish_s)

    def flow_at(self, now: float) -> float:
        """The flow as a take of nothing at ``now`` would leave it: what an observer sees.

        The writer needs no such thing (after a silence its next take measures it), but a
        report read during one would otherwise show the last busy flow for as long as the
        silence lasts."""
        last = self._last
        if last is None or now <= last:
            return self._flow
        elapsed = now - last
        weight = 1.0 - math.exp(-elapsed / FLOW_TAU_S)
        return self._flow + weight * (self._uncounted / elapsed - self._flow)

    def linger_at(self, now: float) -> float:
        """The wait `flow_at` ``now`` gives (seconds)."""
        return self._linger(self.flow_at(now))

    def _linger(self, flow: float) -> float:
        share = (flow - LIGHT_EVENTS_S) / (BUSY_EVENTS_S - LIGHT_EVENTS_S)
        if share <= 0:
            return self._light_s
        if share >= 1:
            return self._busy_s
        return self._light_s + share * (self._busy_s - self._light_s)

    def took(self, events: int, now: float) -> None:
        """A publish is about to carry ``events`` appended events (taken at ``now``)."""
        last = self._last
        if last is None:
            self._last = now
            return  # the first take: no interval to measure a flow over
        elapsed = now - last
        if elapsed <= 0:
            self._uncounted += events  # counted with the next take instead
            return
        events += self._uncounted
        self._last, self._uncounted = now, 0
        # Each take weighs by the time it covers: a take after a long quiet moment replaces
        # the estimate, one of a busy writer's many short ones moves it a little.
        weight = 1.0 - math.exp(-elapsed / FLOW_TAU_S)
        self._flow += weight * (events / elapsed - self._flow)
