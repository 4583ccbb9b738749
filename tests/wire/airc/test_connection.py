"""`AircConnection`: two endpoints joined in memory on a fake clock.

Invariants: every message is delivered whole, in order, exactly once per stream; at most
``send_window`` frames per stream are unacknowledged; priority frames leave before every
other new frame without ever overtaking an earlier frame of their own stream; a lost frame
is resent on a doubling timeout or after three repeated ACKs, and a peer that never
acknowledges ends the connection with ``ACK_TIMEOUT``; anything the peer gets wrong closes
the connection with its `ErrorCode` and a ``GOAWAY``, never an exception, and a closed
connection ignores all further input.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection, SendQueueFull
from airlane.wire.airc.errors import ErrorCode
from airlane.wire.airc.events import (
    Acknowledged,
    AircEvent,
    ClockUpdated,
    ConnectionClosed,
    GapDetected,
    MessageReceived,
    SignalReceived,
)
from airlane.wire.airc.frame import (
    SIGNALLING_STREAM,
    Flags,
    Frame,
    encode_frame,
)
from airlane.wire.airc.receiver import Arrival, ReceiveStream
from airlane.wire.airc.sender import InFlight, SendStream
from airlane.wire.airc.serial import serial_diff
from airlane.wire.airc.signalling import (
    Cancel,
    GoAway,
    TimeRequest,
    TimeResponse,
    decode_signal,
    encode_signal,
)

from ..chunking import SPLITTERS
from .pair import Pair, closes, data_frames, frames_of, messages, split_frames

WRAP_SECONDS = (1 << 32) / 1_000_000  # a u32 of microseconds wraps after ~4295 s
SIGNAL_FLAGS = Flags.EOM | Flags.PRIORITY


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` recognisable bytes."""
    return bytes((seed + i * 7) & 0xFF for i in range(size))


def one_frame(conn: AircConnection, stream_id: int, data: bytes, now: float = 0.0) -> bytes:
    """Send ``data`` on ``stream_id`` and return the one frame that leaves."""
    conn.send_message(stream_id, data)
    out = conn.data_to_send(now)
    assert len(split_frames(out)) == 1
    return out


def goaway_in(data: bytes) -> GoAway:
    """The `GoAway` among the frames of ``data``."""
    signals = [
        decode_signal(frame.payload)
        for frame in frames_of(data)
        if frame.stream_id == SIGNALLING_STREAM and not frame.flags & Flags.ACK
    ]
    goaways = [signal for signal in signals if isinstance(signal, GoAway)]
    assert len(goaways) == 1, signals
    return goaways[0]


# -- delivery and fragmentation ---------------------------------------------------------------


def test_messages_of_every_size_arrive_whole_in_order_once() -> None:
    config = AircConfig()
    size = config.max_frame_payload
    sizes = [0, 1, size, size + 1, 200 * 1024, 3, 0]
    pair = Pair()
    for stream_id in (0, 1, 12):
        for i, n in enumerate(sizes):
            pair.a.send_message(stream_id, payload(n, seed=stream_id + i))
    pair.settle()
    for stream_id in (0, 1, 12):
        expected = [payload(n, seed=stream_id + i) for i, n in enumerate(sizes)]
        assert messages(pair.events_b, stream_id) == expected
    assert pair.a.stats.messages_sent == pair.b.stats.messages_received == 3 * len(sizes)
    assert pair.a.unacknowledged(0) == 0
    assert not closes(pair.events_a + pair.events_b)


def test_fragments_carry_eom_on_the_last_only() -> None:
    size = AircConfig().max_frame_payload
    conn = AircConnection(now=0.0)
    for n in (0, 1, size, size + 1, 200 * 1024):
        conn.send_message(1, payload(n))
    frames = frames_of(conn.data_to_send(0.0))
    counts = [1, 1, 1, 2, -(-200 * 1024 // size)]
    assert len(frames) == sum(counts)
    assert [frame.seq for frame in frames] == list(range(1, len(frames) + 1))
    assert [bool(frame.flags & Flags.EOM) for frame in frames] == [
        i == count - 1 for count in counts for i in range(count)
    ]
    assert all(len(frame.payload) <= size for frame in frames)


def test_streams_are_independent_in_both_directions() -> None:
    pair = Pair()
    pair.a.send_message(3, b"from a")
    pair.b.send_message(3, b"from b")
    pair.settle()
    assert messages(pair.events_b) == [b"from a"]
    assert messages(pair.events_a) == [b"from b"]


def test_send_message_rejects_bad_stream_ids() -> None:
    conn = AircConnection(now=0.0)
    for stream_id in (-1, 0xFFFF, 0x10000):
        with pytest.raises(ValueError):
            conn.send_message(stream_id, b"x")


# -- send window and ACKs -------------------------------------------------------------------


def test_send_window_limits_unacknowledged_frames() -> None:
    pair = Pair(AircConfig(send_window=4))
    a, b = pair.a, pair.b
    for i in range(10):
        a.send_message(1, bytes([i]))
    a.send_message(2, b"other")
    assert a.can_send(3) and not a.can_send(1)

    sent = data_frames(a.data_to_send(0.0))
    assert [(f.stream_id, f.seq) for f in sent] == [(1, 1), (2, 1), (1, 2), (1, 3), (1, 4)]
    assert a.unacknowledged(1) == 4 and a.unacknowledged(2) == 1
    assert not a.can_send(1)  # window full (and fragments still queued)
    assert a.can_send(2)
    assert a.data_to_send(0.0) == b""  # nothing more until an ACK

    events = b.receive_data(encode_all(sent), 0.0)
    assert messages(events) == [b"\x00", b"other", b"\x01", b"\x02", b"\x03"]
    assert b.data_to_send(0.0) == b""  # the ACK waits for ack_delay
    acks = b.data_to_send(b.config.ack_delay)
    assert sorted((f.stream_id, f.seq) for f in frames_of(acks)) == [(1, 4), (2, 1)]
    events = a.receive_data(acks, 0.01)
    assert set(events) == {Acknowledged(1, 4), Acknowledged(2, 1)}
    assert a.unacknowledged(1) == 0
    assert [f.seq for f in data_frames(a.data_to_send(0.01))] == [5, 6, 7, 8]


def test_can_send_opens_again_after_acknowledged() -> None:
    pair = Pair(AircConfig(send_window=4))
    for i in range(4):
        pair.a.send_message(1, bytes([i]))
    pair.exchange()
    assert not pair.a.can_send(1)  # four in flight, no ACK yet (it is delayed)
    pair.advance(pair.b.config.ack_delay)
    assert Acknowledged(1, 4) in pair.events_a
    assert pair.a.can_send(1)


def encode_all(frames: list[Frame]) -> bytes:
    return b"".join(map(encode_frame, frames))


def test_delayed_ack_waits_for_ack_delay() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    b.receive_data(one_frame(a, 1, b"x"), 0.0)
    assert b.data_to_send(0.0) == b""
    assert b.get_timer() == pytest.approx(0.01)
    assert b.data_to_send(0.0099) == b""
    assert b.handle_timer(0.01) == []
    assert frames_of(b.data_to_send(0.01)) == [Frame(1, 1, 10_000, b"", Flags.ACK)]
    assert b.get_timer() is None


def test_delayed_ack_goes_at_once_after_ack_every_frames() -> None:
    a = AircConnection(now=0.0)
    b = AircConnection(AircConfig(ack_every=4), now=0.0)
    for i in range(7):
        a.send_message(1, bytes([i]))
    frames = split_frames(a.data_to_send(0.0))
    b.receive_data(b"".join(frames[:3]), 0.0)
    assert b.data_to_send(0.0) == b""
    b.receive_data(frames[3], 0.001)
    assert acks_in(b.data_to_send(0.001)) == [(1, 4)]
    b.receive_data(b"".join(frames[4:]), 0.002)  # three more: the count starts again
    assert b.data_to_send(0.002) == b""
    assert acks_in(b.data_to_send(0.013)) == [(1, 7)]


def acks_in(data: bytes) -> list[tuple[int, int]]:
    frames = frames_of(data)
    assert all(frame.flags == Flags.ACK and frame.payload == b"" for frame in frames)
    return sorted((frame.stream_id, frame.seq) for frame in frames)


def test_one_ack_per_stream_covers_everything_delivered() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    for stream_id in (1, 2, 1, 2, 1):
        a.send_message(stream_id, b"m")
    b.receive_data(a.data_to_send(0.0), 0.0)
    acks = frames_of(b.data_to_send(1.0))
    assert sorted((f.stream_id, f.seq) for f in acks) == [(1, 3), (2, 2)]
    assert all(f.flags == Flags.ACK and f.payload == b"" for f in acks)


# -- priority -------------------------------------------------------------------------------


def test_priority_frames_leave_first() -> None:
    config = AircConfig(max_frame_payload=100)
    conn = AircConnection(config, now=0.0)
    conn.send_message(1, payload(250, 1))  # three normal fragments
    conn.send_message(2, b"normal")
    conn.send_signal(Cancel(7, 2))
    conn.send_message(3, payload(150, 3), priority=True)  # two priority fragments
    frames = frames_of(conn.data_to_send(0.0))
    order = [(f.stream_id, f.seq) for f in frames]
    # Priority first (streams interleaved a frame at a time), then the rest.
    assert order == [(255, 1), (3, 1), (3, 2), (1, 1), (2, 1), (1, 2), (1, 3)]
    assert [bool(f.flags & Flags.PRIORITY) for f in frames] == [True] * 3 + [False] * 4


def test_priority_never_overtakes_its_own_stream() -> None:
    conn = AircConnection(now=0.0)
    conn.send_message(1, b"first, normal")
    conn.send_message(2, b"other, normal")
    conn.send_message(1, b"second, priority", priority=True)
    frames = frames_of(conn.data_to_send(0.0))
    # All three are ready now, so all three leave now; stream 1 keeps its order.
    assert [(f.stream_id, f.payload) for f in frames] == [
        (1, b"first, normal"),
        (2, b"other, normal"),
        (1, b"second, priority"),
    ]


def test_priority_is_reported_to_the_receiver() -> None:
    pair = Pair()
    pair.a.send_message(4, b"urgent", priority=True)
    pair.a.send_message(4, b"later")
    pair.settle()
    received = [e for e in pair.events_b if isinstance(e, MessageReceived)]
    assert [(e.data, e.priority) for e in received] == [(b"urgent", True), (b"later", False)]


def test_acks_leave_before_priority_frames() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    b.receive_data(one_frame(a, 1, b"x"), 0.0)
    b.send_signal(Cancel(1, 1))
    frames = frames_of(b.data_to_send(0.02))
    assert [(f.stream_id, f.flags) for f in frames] == [(1, Flags.ACK), (255, SIGNAL_FLAGS)]


# -- retransmission -------------------------------------------------------------------------


def retransmit_times(conn: AircConnection, limit: int = 20) -> tuple[list[float], AircEvent]:
    """Run ``conn``'s timers with a peer that never answers: the times its first frame went
    out again, and the event that ended it."""
    times: list[float] = []
    for _ in range(limit):
        now = conn.get_timer()
        assert now is not None
        events = conn.handle_timer(now)
        if events:
            return times, events[0]
        assert [f.seq for f in frames_of(conn.data_to_send(now))] == [1]
        times.append(now)
    raise AssertionError("never gave up")


def test_retransmission_doubles_the_timeout_then_gives_up() -> None:
    a = AircConnection(now=0.0)
    first = one_frame(a, 1, b"hello")
    assert a.get_timer() == 1.0  # initial_rto
    times, event = retransmit_times(a)
    # RTO 1 s doubling per retry (2, 4, 8) and capped at max_rto = 8 s.
    assert times == [1.0, 3.0, 7.0, 15.0, 23.0, 31.0]
    assert a.stats.retransmits == a.config.max_retransmits == 6
    assert isinstance(event, ConnectionClosed)
    assert (event.code, event.by_peer) == (ErrorCode.ACK_TIMEOUT, False)
    assert a.closed == event
    assert a.get_timer() is None

    # The GoAway it sent tells the peer why.
    goodbye = a.data_to_send(39.0)
    assert goaway_in(goodbye).code is ErrorCode.ACK_TIMEOUT
    b = AircConnection(now=0.0)
    b.receive_data(first, 0.0)
    events = b.receive_data(goodbye, 39.0)
    assert events == [ConnectionClosed(ErrorCode.ACK_TIMEOUT, event.reason, by_peer=True)]
    assert b.closed is not None and b.data_to_send(39.0) == b""
    assert a.receive_data(b"anything", 40.0) == []


def test_retransmitted_bytes_are_the_original_ones() -> None:
    a = AircConnection(now=0.0)
    first = one_frame(a, 1, b"hello", now=0.5)
    a.handle_timer(1.5)
    assert a.data_to_send(1.5) == first  # same seq, same timestamp, same CRC


def test_rtt_samples_lower_the_timeout() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    latency = 0.005
    now = 0.0
    for i in range(4):
        b.receive_data(one_frame(a, 1, bytes([i]), now), now + latency)
        ack_at = b.get_timer()
        assert ack_at is not None
        acks = b.data_to_send(ack_at)
        assert a.receive_data(acks, ack_at + latency) == [Acknowledged(1, i + 1)]
        now = ack_at + latency + 1.0
    # The round trip is ~20 ms (10 ms each way plus the ACK delay), so the timeout falls to
    # min_rto instead of the 1 s used before any sample.
    one_frame(a, 1, b"next", now)
    assert a.get_timer() == pytest.approx(now + a.config.min_rto)


def test_retransmitted_frames_give_no_rtt_sample() -> None:
    # Karn's rule: an ACK for a frame that was sent twice cannot say which copy it answers.
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    frame = one_frame(a, 1, b"x")
    a.handle_timer(1.0)
    assert a.data_to_send(1.0) == frame
    b.receive_data(frame, 1.001)
    a.receive_data(b.data_to_send(1.011), 1.012)
    one_frame(a, 1, b"y", 2.0)
    assert a.get_timer() == pytest.approx(3.0)  # still the initial 1 s


def test_fast_retransmit_after_three_repeated_acks() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    for i in range(5):
        a.send_message(1, bytes([i]))
    frames = split_frames(a.data_to_send(0.0))
    lost, rest = frames[0], frames[1:]
    for i, frame in enumerate(rest[:3]):
        events = b.receive_data(frame, 0.001)
        assert events == ([GapDetected(1, 1, 2)] if i == 0 else [])
        acks = b.data_to_send(0.001)  # a gap is reported at once
        assert frames_of(acks) == [Frame(1, 0, 1000, b"", Flags.ACK)]
        assert a.receive_data(acks, 0.002) == []
        resent = a.data_to_send(0.002)
        assert resent == (lost if i == 2 else b"")  # the third repeated ACK resends, no timer
    assert a.stats.retransmits == 1
    events = b.receive_data(resent + rest[3], 0.003)
    assert messages(events) == [bytes([i]) for i in range(5)]


def test_duplicates_are_dropped_and_acknowledged_at_once() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    frame = one_frame(a, 1, b"once")
    assert messages(b.receive_data(frame, 0.0)) == [b"once"]
    assert b.receive_data(frame, 0.0) == []
    assert b.receive_data(frame + frame, 0.0) == []
    assert b.stats.duplicates == 3
    assert frames_of(b.data_to_send(0.0)) == [Frame(1, 1, 0, b"", Flags.ACK)]


def test_gap_is_reported_once_and_filled_in_order() -> None:
    a, b = AircConnection(now=0.0), AircConnection(now=0.0)
    for i in range(8):
        a.send_message(1, bytes([i]))
    f = split_frames(a.data_to_send(0.0))
    events = []
    for index in (0, 2, 3, 4, 1, 5, 7, 6):  # two separate gaps: seq 2, later seq 7
        events += b.receive_data(f[index], 0.0)
    assert [e for e in events if isinstance(e, GapDetected)] == [
        GapDetected(1, 2, 3),
        GapDetected(1, 7, 8),
    ]
    assert messages(events) == [bytes([i]) for i in range(8)]
    assert b.stats.gaps == 2


def test_frames_beyond_the_reorder_window_are_dropped_then_recovered() -> None:
    pair = Pair(config_b=AircConfig(reorder_window=2))
    a, b = pair.a, pair.b
    for i in range(6):
        a.send_message(1, bytes([i]))
    frames = split_frames(a.data_to_send(0.0))
    for frame in frames[1:]:  # seq 1 is lost; seq 2 is held; 3..6 are too far ahead
        pair.events_b += b.receive_data(frame, 0.0)
        pair.events_a += a.receive_data(b.data_to_send(0.0), 0.0)
    assert b.stats.beyond_window == 4
    assert messages(pair.events_b) == []
    pair.settle()  # a fast retransmit, then timeouts, resend the rest
    assert messages(pair.events_b) == [bytes([i]) for i in range(6)]
    assert a.unacknowledged(1) == 0 and not closes(pair.events_a + pair.events_b)


# -- protocol violations --------------------------------------------------------------------


def _sent_one_frame_on_stream_1(conn: AircConnection) -> None:
    one_frame(conn, 1, b"x")


def _nothing(conn: AircConnection) -> None:
    pass


def _signal(data: bytes, seq: int = 1) -> bytes:
    return encode_frame(Frame(SIGNALLING_STREAM, seq, 0, data, SIGNAL_FLAGS))


GOOD = encode_frame(Frame(1, 1, 0, b"fine", Flags.EOM))

VIOLATIONS: dict[str, tuple[AircConfig, Callable[[AircConnection], None], bytes, ErrorCode]] = {
    "message-too-large-one-frame": (
        AircConfig(max_message_size=100),
        _nothing,
        encode_frame(Frame(1, 1, 0, b"x" * 101, Flags.EOM)),
        ErrorCode.MESSAGE_TOO_LARGE,
    ),
    "message-too-large-fragments": (
        AircConfig(max_message_size=100),
        _nothing,
        encode_frame(Frame(1, 1, 0, b"x" * 60)) + encode_frame(Frame(1, 2, 0, b"x" * 41)),
        ErrorCode.MESSAGE_TOO_LARGE,
    ),
    "receive-buffer-partial-messages": (
        # 3 streams x 40 bytes of unfinished messages: within each stream's bound, over the
        # connection's.
        AircConfig(max_receive_buffer=100),
        _nothing,
        b"".join(encode_frame(Frame(s, 1, 0, b"x" * 40)) for s in (1, 2, 3)),
        ErrorCode.FLOW_CONTROL,
    ),
    "receive-buffer-held-frames": (
        AircConfig(max_receive_buffer=100),
        _nothing,
        b"".join(encode_frame(Frame(1, seq, 0, b"x" * 40, Flags.EOM)) for seq in (2, 3, 4)),
        ErrorCode.FLOW_CONTROL,
    ),
    "too-many-streams": (
        AircConfig(max_streams=2),
        _nothing,
        b"".join(encode_frame(Frame(s, 1, 0, b"m", Flags.EOM)) for s in (1, 2, 3)),
        ErrorCode.TOO_MANY_STREAMS,
    ),
    "ack-with-payload": (
        AircConfig(),
        _sent_one_frame_on_stream_1,
        encode_frame(Frame(1, 1, 0, b"?", Flags.ACK)),
        ErrorCode.BAD_LENGTH,
    ),
    "ack-on-unused-stream": (
        AircConfig(),
        _nothing,
        encode_frame(Frame(1, 0, 0, b"", Flags.ACK)),
        ErrorCode.FLOW_CONTROL,
    ),
    "ack-for-unsent-seq": (
        AircConfig(),
        _sent_one_frame_on_stream_1,
        encode_frame(Frame(1, 2, 0, b"", Flags.ACK)),
        ErrorCode.FLOW_CONTROL,
    ),
    "unknown-signal": (AircConfig(), _nothing, _signal(b"\xee"), ErrorCode.UNKNOWN_SIGNAL),
    "truncated-signal": (
        AircConfig(),
        _nothing,
        _signal(encode_signal(TimeRequest(5))[:-1]),
        ErrorCode.BAD_SIGNALLING,
    ),
    "empty-signal": (AircConfig(), _nothing, _signal(b""), ErrorCode.BAD_SIGNALLING),
    "bad-magic": (AircConfig(), _nothing, b"HTTP" + GOOD[4:], ErrorCode.BAD_MAGIC),
    "bad-version": (AircConfig(), _nothing, GOOD[:4] + b"\x01" + GOOD[5:], ErrorCode.BAD_VERSION),
    "reserved-flags": (
        AircConfig(),
        _nothing,
        GOOD[:5] + bytes([GOOD[5] | 0x80]) + GOOD[6:],
        ErrorCode.RESERVED_FLAGS,
    ),
    "bad-crc": (AircConfig(), _nothing, GOOD[:-1] + b"!", ErrorCode.BAD_CRC),
    "oversize": (
        AircConfig(max_receive_payload=100),
        _nothing,
        encode_frame(Frame(1, 1, 0, b"x" * 101, Flags.EOM)),
        ErrorCode.OVERSIZE,
    ),
}


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize(
    ("config", "setup", "data", "code"), VIOLATIONS.values(), ids=VIOLATIONS.keys()
)
def test_violation_closes_with_its_code(
    config: AircConfig,
    setup: Callable[[AircConnection], None],
    data: bytes,
    code: ErrorCode,
    split: Callable[[bytes], list[bytes]],
) -> None:
    conn = AircConnection(config, now=0.0)
    setup(conn)
    events: list[AircEvent] = []
    for chunk in split(data):
        events += conn.receive_data(chunk, 0.5)
    closed = closes(events)
    assert len(closed) == 1 and events[-1] == closed[0]
    assert (closed[0].code, closed[0].by_peer) == (code, False)
    assert conn.closed == closed[0]
    assert goaway_in(conn.data_to_send(0.5)).code is code
    # Closed for good: input is ignored, nothing more is sent, no timer runs.
    assert conn.receive_data(GOOD, 0.6) == []
    assert conn.receive_data(data, 0.6) == []
    assert conn.data_to_send(10.0) == b""
    assert conn.get_timer() is None and conn.handle_timer(10.0) == []


def test_goaway_reaches_a_peer_that_already_read_earlier_signals() -> None:
    pair = Pair()
    pair.a.send_signal(Cancel(1, 1))
    pair.settle()
    pair.a.send_signal(Cancel(2, 2))  # queued, not yet sent: it must precede the GoAway
    pair.a.close(ErrorCode.NO_ERROR, "done")
    pair.exchange()
    signals = [e.message for e in pair.events_b if isinstance(e, SignalReceived)]
    assert signals == [Cancel(1, 1), Cancel(2, 2)]
    assert pair.events_b[-1] == ConnectionClosed(ErrorCode.NO_ERROR, "done", by_peer=True)
    assert pair.a.closed == ConnectionClosed(ErrorCode.NO_ERROR, "done", by_peer=False)


def test_nothing_is_processed_after_a_goaway() -> None:
    # GoAway (seq 1) and a broken signal (seq 2) are delivered by one frame: the connection
    # ends with the GoAway and never looks at what follows.
    conn = AircConnection(now=0.0)
    goaway = _signal(encode_signal(GoAway(ErrorCode.NO_ERROR, "bye")))
    events = conn.receive_data(_signal(b"\xee", seq=2) + goaway, 0.0)
    assert events == [
        GapDetected(SIGNALLING_STREAM, 1, 2),
        ConnectionClosed(ErrorCode.NO_ERROR, "bye", by_peer=True),
    ]
    assert conn.data_to_send(0.0) == b""  # no GoAway back to a peer that said goodbye


def test_send_after_close_is_ignored() -> None:
    conn = AircConnection(now=0.0)
    conn.close(ErrorCode.INTERNAL_ERROR, "oops")
    conn.close()  # idempotent
    conn.send_message(1, b"late")
    assert goaway_in(conn.data_to_send(0.0)) == GoAway(ErrorCode.INTERNAL_ERROR, "oops")
    assert conn.data_to_send(0.0) == b""


# -- queue limits ---------------------------------------------------------------------------


def test_send_queue_full() -> None:
    conn = AircConnection(AircConfig(max_queued_bytes=1000, send_window=1), now=0.0)
    conn.send_message(1, b"x" * 600)
    conn.send_message(2, b"x" * 400)
    assert conn.queued_bytes == 1000
    assert not conn.can_send(3)
    with pytest.raises(SendQueueFull):
        conn.send_message(3, b"y")
    assert conn.queued_bytes == 1000  # nothing of the refused message was kept
    conn.data_to_send(0.0)  # one frame per stream leaves (window 1): the queue empties
    assert conn.queued_bytes == 0
    assert conn.can_send(3)
    conn.send_message(3, b"y")


def test_a_peers_time_request_never_raises_send_queue_full() -> None:
    # Our queue is full of our own data when the peer asks for the time: the answer is
    # best effort and is dropped, rather than SendQueueFull escaping receive_data.
    conn = AircConnection(AircConfig(max_queued_bytes=100, send_window=1), now=0.0)
    conn.send_message(1, b"x" * 100)
    events = conn.receive_data(_signal(encode_signal(TimeRequest(1))), 0.0)
    assert events == [] and conn.closed is None


def test_signalling_is_not_counted_against_max_streams() -> None:
    pair = Pair(AircConfig(max_streams=1), AircConfig(max_streams=1))
    pair.a.send_message(1, b"data")
    pair.b.request_clock_sync()  # a must answer on stream 255 although it uses stream 1
    pair.a.request_clock_sync()
    pair.settle()
    assert messages(pair.events_b) == [b"data"]
    assert len(clock_updates(pair.events_a)) == len(clock_updates(pair.events_b)) == 1
    assert not closes(pair.events_a + pair.events_b)


# -- clock ----------------------------------------------------------------------------------


def clock_updates(events: list[AircEvent]) -> list[ClockUpdated]:
    return [event for event in events if isinstance(event, ClockUpdated)]


def test_clock_sync_between_equal_clocks() -> None:
    pair = Pair()
    nonce = pair.a.request_clock_sync()
    assert nonce == 1
    pair.settle()
    assert clock_updates(pair.events_a) == [ClockUpdated(0.0, 0)]
    assert not clock_updates(pair.events_b)  # only the side that asked learns the offset


@pytest.mark.parametrize("earlier", [0.25, 3.0, 1000.0])
def test_clock_offset_is_peer_minus_ours(earlier: float) -> None:
    # The peer started ``earlier`` seconds before us, so its clock reads that much more:
    # offset = server (peer) clock - client (our) clock = +earlier.
    pair = Pair(b_started_earlier=earlier)
    pair.advance(1.0)
    pair.a.request_clock_sync()
    pair.settle()
    (update,) = clock_updates(pair.events_a)
    assert update.offset_us == pytest.approx(earlier * 1e6, abs=1)
    assert 0 <= update.delay_us <= 1


def test_clock_offset_with_latency_and_the_other_sign() -> None:
    # Here b asks (b is the client), a (started later, clock behind) answers: the offset is
    # negative. 3 ms each way; a holds the request for 2 ms.
    a = AircConnection(now=5.0)
    b = AircConnection(now=0.0)
    b.request_clock_sync()
    a.receive_data(b.data_to_send(10.0), 10.003)
    answer = a.data_to_send(10.005)
    (update,) = clock_updates(b.receive_data(answer, 10.008))
    assert update.offset_us == pytest.approx(-5_000_000, abs=1)
    assert update.delay_us == pytest.approx(6000, abs=2)


@pytest.mark.parametrize("start", [WRAP_SECONDS - 0.004, WRAP_SECONDS - 0.5, WRAP_SECONDS + 1])
def test_clock_sync_across_the_timestamp_wrap(start: float) -> None:
    # The peer's clock runs 2 s ahead: somewhere in the exchange one or both u32 clocks
    # wrap, and the offset still comes out as +2 s.
    a = AircConnection(now=0.0)
    b = AircConnection(now=-2.0)
    a.request_clock_sync()
    request = a.data_to_send(start)
    b.receive_data(request, start + 0.003)
    events = a.receive_data(b.data_to_send(start + 0.004), start + 0.007)
    (update,) = clock_updates(events)
    assert update.offset_us == pytest.approx(2_000_000, abs=1)
    assert update.delay_us == pytest.approx(6000, abs=4)  # four truncations to whole us


def test_unsolicited_time_response_is_ignored() -> None:
    pair = Pair()
    pair.b.request_clock_sync()
    pair.settle()
    assert clock_updates(pair.events_b) and not clock_updates(pair.events_a)
    # A stray answer (wrong nonce) from a misbehaving peer is dropped quietly.
    conn = AircConnection(now=0.0)
    conn.request_clock_sync()
    conn.data_to_send(0.0)
    stray = encode_signal(TimeResponse(0, 0, 0))  # nonce 0: never issued
    assert conn.receive_data(_signal(stray), 0.0) == []


def test_frame_timestamps_wrap() -> None:
    pair = Pair()
    pair.advance(WRAP_SECONDS - 0.001)  # idle: nothing pending
    pair.a.send_message(1, b"before")
    pair.exchange()
    pair.advance(0.002)
    pair.a.send_message(1, b"after")
    stamp = pair.a.timestamp(pair.now)
    pair.settle()
    before, after = (e for e in pair.events_b if isinstance(e, MessageReceived))
    assert before.timestamp > 0xFFFF_0000 and after.timestamp == stamp < 2000
    assert serial_diff(after.timestamp, before.timestamp) == pytest.approx(2000, abs=1)


def test_sequence_numbers_wrap() -> None:
    # 2**32 frames on one stream take too long to send; start both halves near the wrap.
    sender = SendStream(window=8)
    sender.next_seq = 0xFFFFFFFE
    seqs = [sender.take_seq() for _ in range(4)]
    assert seqs == [0xFFFFFFFE, 0xFFFFFFFF, 0, 1]
    receiver = ReceiveStream(window=8, max_message=100)
    receiver.expected = 0xFFFFFFFE
    out: list[tuple[bytes, int, bool]] = []
    arrivals = [
        receiver.accept(Frame(1, seq, 0, bytes([i]), Flags.EOM), out)
        for i, seq in reversed(list(enumerate(seqs)))
    ]
    assert arrivals == [Arrival.AHEAD, Arrival.AHEAD, Arrival.AHEAD, Arrival.IN_ORDER]
    assert [data for data, _, _ in out] == [b"\x00", b"\x01", b"\x02", b"\x03"]
    assert receiver.cumulative_ack == 1
    assert receiver.accept(Frame(1, 0xFFFFFFFF, 0, b"", Flags.EOM), out) == Arrival.DUPLICATE
    # The sender releases every frame up to the ACK, across the wrap.
    for seq in seqs:
        sender.in_flight.append(InFlight(seq, b"", 0.0, 1.0))
    assert [f.seq for f in sender.acknowledge(1, 0)] == [0xFFFFFFFE, 0xFFFFFFFF, 0]
    assert [f.seq for f in sender.in_flight] == [1]


def test_frames_before_a_corrupt_one_are_delivered_however_the_bytes_were_split() -> None:
    good = encode_frame(Frame(7, 1, 0, b"kept", Flags.EOM))
    data = good + b"AIRC\x02\x00" + bytes(14)  # a header whose CRC cannot match
    for split in (len(data), len(good) + 3, 3):
        conn = AircConnection(now=0.0)
        events = conn.receive_data(data[:split], 0.0) + conn.receive_data(data[split:], 0.0)
        message, closed = events
        assert isinstance(message, MessageReceived) and message.data == b"kept"
        assert isinstance(closed, ConnectionClosed) and closed.code is ErrorCode.BAD_CRC


def test_a_retransmission_acknowledged_before_it_left_stays_home() -> None:
    conn = AircConnection(now=0.0)
    conn.send_message(1, b"once")
    assert conn.data_to_send(0.0)
    # Three repeated ACKs start a fast retransmit; the ACK for the frame follows at once.
    dup_ack = encode_frame(Frame(1, 0, 0, b"", Flags.ACK))
    ack = encode_frame(Frame(1, 1, 0, b"", Flags.ACK))
    events = conn.receive_data(dup_ack * 3 + ack, 0.01)
    assert events == [Acknowledged(1, 1)]
    assert conn.stats.retransmits == 1
    assert conn.data_to_send(0.01) == b""
