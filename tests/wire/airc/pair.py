"""Two `AircConnection` objects joined in memory, on one fake clock (STYLE.md section 7).

`Pair` moves whatever one side's ``data_to_send`` returns into the other's ``receive_data``
at the same instant (a zero-latency, loss-free link) and runs ``handle_timer`` when
``get_timer`` says so. Tests that need latency, loss or a hand-crafted byte drive the
connections themselves; `frames_of` and `split_frames` help them look inside the bytes.
"""

from __future__ import annotations

from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection
from airlane.wire.airc.events import AircEvent, ConnectionClosed, MessageReceived
from airlane.wire.airc.frame import HEADER_SIZE, Flags, Frame, FrameDecoder

_MAX_ROUNDS = 1000  # a conversation that has not settled by then is a livelock


def frames_of(data: bytes) -> list[Frame]:
    """The frames in ``data`` (which must hold only whole frames)."""
    decoder = FrameDecoder()
    frames = decoder.feed(data)
    assert decoder.buffered == 0, "data ends inside a frame"
    return frames


def split_frames(data: bytes) -> list[bytes]:
    """``data`` cut into the bytes of each frame, by the header's length field."""
    pieces = []
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset + 16 : offset + 18], "big")
        pieces.append(data[offset : offset + HEADER_SIZE + length])
        offset += HEADER_SIZE + length
    return pieces


def data_frames(data: bytes) -> list[Frame]:
    """The frames in ``data`` that are not pure ACKs."""
    return [frame for frame in frames_of(data) if not frame.flags & Flags.ACK]


class Pair:
    """``a`` and ``b`` on a perfect link; ``events_a`` / ``events_b`` collect what each saw."""

    def __init__(
        self,
        config_a: AircConfig | None = None,
        config_b: AircConfig | None = None,
        *,
        b_started_earlier: float = 0.0,
    ) -> None:
        self.now = 0.0
        self.a = AircConnection(config_a, now=0.0)
        # A connection created X seconds earlier has a clock X seconds ahead.
        self.b = AircConnection(config_b, now=-b_started_earlier)
        self.events_a: list[AircEvent] = []
        self.events_b: list[AircEvent] = []
        self.wire_ab: list[bytes] = []
        """Every chunk ``a`` sent, in order."""

    def exchange(self) -> None:
        """Move bytes both ways at the current time until neither side has more to say."""
        for _ in range(_MAX_ROUNDS):
            to_b = self.a.data_to_send(self.now)
            if to_b:
                self.wire_ab.append(to_b)
                self.events_b += self.b.receive_data(to_b, self.now)
            to_a = self.b.data_to_send(self.now)
            if to_a:
                self.events_a += self.a.receive_data(to_a, self.now)
            if not to_a and not to_b:
                return
        raise AssertionError("the connections never stopped talking")

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, running each timer at its deadline and exchanging after."""
        target = self.now + seconds
        for _ in range(_MAX_ROUNDS):
            due = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
            if not due or min(due) > target:
                break
            self.now = max(self.now, min(due))
            self._run_timers()
            self.exchange()
        else:
            raise AssertionError("timers kept firing")
        self.now = target
        self.exchange()

    def settle(self, limit: float = 60.0) -> None:
        """Exchange and run timers until nothing is pending (at most ``limit`` seconds)."""
        self.exchange()
        deadline = self.now + limit
        while self.a.get_timer() is not None or self.b.get_timer() is not None:
            assert self.now < deadline, "still busy after the limit"
            due = min(t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None)
            self.now = max(self.now, due)
            self._run_timers()
            self.exchange()

    def _run_timers(self) -> None:
        for conn, events in ((self.a, self.events_a), (self.b, self.events_b)):
            timer = conn.get_timer()
            if timer is not None and timer <= self.now:
                events.extend(conn.handle_timer(self.now))


def messages(events: list[AircEvent], stream_id: int | None = None) -> list[bytes]:
    """The data of every `MessageReceived` (on ``stream_id`` if given), in order."""
    return [
        event.data
        for event in events
        if isinstance(event, MessageReceived) and stream_id in (None, event.stream_id)
    ]


def closes(events: list[AircEvent]) -> list[ConnectionClosed]:
    """Every `ConnectionClosed` in ``events``."""
    return [event for event in events if isinstance(event, ConnectionClosed)]
