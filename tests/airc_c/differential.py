"""The differential check: one byte stream, fed to the C library and to the Python codec,
must give the same result.

- Decoder: the same frames, then the same error code (or none), holding the same number of
  bytes, whole or split at any point.
- Connection (both sides start alike: messages in flight on stream 1 and a clock request on
  stream 255, so that the peer's ACKs can be valid): after each piece of input, the same
  events, the same counters, the same frames to send (per stream in seq order; streams may
  interleave differently, and a GOAWAY's reason text is the implementation's own), and the
  same next timer (to the microsecond: C keeps time in integer microseconds).

`structured` turns arbitrary bytes into frames with valid CRCs, so that most inputs get past
the CRC check to the state machine (ACKs, gaps, duplicates, reassembly, signalling).
"""

from __future__ import annotations

from typing import Any

from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection
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
    ACK_BIT,
    SIGNALLING_STREAM,
    Frame,
    FrameDecoder,
    encode_frame,
)
from airlane.wire.airc.signalling import (
    Cancel,
    Close,
    Error,
    GoAway,
    Open,
    SignalType,
    TimeRequest,
    TimeResponse,
    encode_signal,
)

from .binding import FUZZ_PROFILE, CConnection, CDecoder, Library

CONFIG = AircConfig(
    max_frame_payload=FUZZ_PROFILE["AIRC_TX_PAYLOAD"],
    max_receive_payload=FUZZ_PROFILE["AIRC_RX_PAYLOAD"],
    max_message_size=FUZZ_PROFILE["AIRC_MAX_MESSAGE"],
    send_window=FUZZ_PROFILE["AIRC_SEND_WINDOW"],
    reorder_window=FUZZ_PROFILE["AIRC_REORDER_WINDOW"],
    max_streams=FUZZ_PROFILE["AIRC_MAX_STREAMS"],
    ack_every=FUZZ_PROFILE["AIRC_ACK_EVERY"],
    max_receive_buffer=FUZZ_PROFILE["AIRC_MAX_RECEIVE_BUFFER"],
)
"""The Python side of `FUZZ_PROFILE`."""

TICK_US = 15_625
"""Times are multiples of 1/64 s: exact both as float seconds and as integer microseconds."""


# -- the decoder ------------------------------------------------------------------------------


def python_decode(chunks: list[bytes], max_payload: int) -> tuple[list[Any], int, int]:
    """Frames, error code (0: none) and held bytes of the Python decoder over ``chunks``."""
    decoder = FrameDecoder(max_payload)
    frames: list[Any] = []
    for chunk in chunks:
        got, failure = decoder.decode(chunk)
        frames += [(f.stream_id, f.seq, f.timestamp, f.payload, f.flags) for f in got]
        if failure is not None:
            return frames, int(failure.goaway), decoder.buffered
    return frames, 0, decoder.buffered


def c_decode(library: Library, chunks: list[bytes], max_payload: int) -> tuple[list[Any], int, int]:
    """The same, from the C decoder."""
    decoder = CDecoder(library, max_payload)
    frames: list[Any] = []
    error = buffered = 0
    for chunk in chunks:
        got, error, buffered = decoder.decode(chunk)
        frames += got
        if error:
            break
    return frames, error, buffered


def check_decoder(library: Library, data: bytes, split: int, max_payload: int) -> None:
    """The two decoders agree on ``data``, whole and split at ``split``."""
    whole = python_decode([data], max_payload)
    for chunks in ([data], [data[:split], data[split:]]):
        python = python_decode(chunks, max_payload)
        assert python == whole, (whole, python)
        c = c_decode(library, chunks, max_payload)
        assert c == python, (python, c)


# -- the connection ---------------------------------------------------------------------------


def normalize_event(event: AircEvent) -> tuple[Any, ...]:
    """A Python event as the binding reports the C library's."""
    if isinstance(event, MessageReceived):
        return ("message", event.stream_id, event.data, event.timestamp, event.priority)
    if isinstance(event, SignalReceived):
        return ("signal", encode_signal(event.message), event.timestamp)
    if isinstance(event, GapDetected):
        return ("gap", event.stream_id, event.expected, event.received)
    if isinstance(event, Acknowledged):
        return ("ack", event.stream_id, event.seq)
    if isinstance(event, ClockUpdated):
        return ("clock", int(event.offset_us * 2), event.delay_us)
    assert isinstance(event, ConnectionClosed)
    return ("closed", int(event.code), event.by_peer)


def normalize_output(data: bytes) -> dict[tuple[int, bool], list[tuple[Any, ...]]]:
    """Frames to send, per (stream, is-ACK), in order; a GOAWAY as its code only."""
    frames, failure = FrameDecoder().decode(data)
    assert failure is None, failure
    streams: dict[tuple[int, bool], list[tuple[Any, ...]]] = {}
    for frame in frames:
        payload: Any = frame.payload
        if frame.stream_id == SIGNALLING_STREAM and payload[:1] == bytes([SignalType.GOAWAY]):
            payload = ("goaway", int.from_bytes(payload[1:3], "big"))
        key = (frame.stream_id, bool(frame.flags & ACK_BIT))
        streams.setdefault(key, []).append((frame.seq, frame.timestamp, frame.flags, payload))
    return streams


class Pair:
    """The Python connection and the C one, driven alike and compared after every step."""

    def __init__(self, library: Library) -> None:
        self.python = AircConnection(CONFIG, now=0.0)
        self.c = CConnection(library, 0)
        for size in (10, 100, 30):
            self.python.send_message(1, bytes(range(size)))
            assert self.c.send(1, bytes(range(size)), 0) == 0
        self.python.request_clock_sync()
        assert self.c.request_clock(0) == 0
        self.events: list[tuple[Any, ...]] = []
        self.flush(0)

    def flush(self, now_us: int) -> None:
        """Both sides' output at ``now_us`` must match."""
        python = normalize_output(self.python.data_to_send(now_us / 1e6))
        c = normalize_output(self.c.output(now_us))
        assert python == c, (python, c)

    def receive(self, data: bytes, now_us: int) -> None:
        """Feed ``data`` to both, then fire each side's timer once; compare throughout."""
        python = [normalize_event(event) for event in self.python.receive_data(data, now_us / 1e6)]
        c = self.c.receive(data, now_us)
        assert python == c, (python, c)
        self.events += python
        self.compare_state()
        self.flush(now_us)
        python_timer, c_timer = self.python.get_timer(), self.c.next_timer()
        assert (python_timer is None) == (c_timer is None), (python_timer, c_timer)
        if python_timer is None or c_timer is None:
            return
        assert abs(python_timer * 1e6 - c_timer) < 2, (python_timer, c_timer)
        at = max(c_timer, now_us)
        python = [normalize_event(e) for e in self.python.handle_timer(max(python_timer, at / 1e6))]
        c = self.c.handle_timer(at)
        assert python == c, (python, c)
        self.events += python
        self.compare_state()
        self.flush(at)

    def compare_state(self) -> None:
        """Counters and the decoder's held bytes."""
        closed = any(event[0] == "closed" for event in self.events)
        assert (self.python.closed is not None) == closed
        # Once closed, neither reads on: what the decoders hold then no longer matters (the
        # Python one decodes a whole piece before the connection looks at its frames).
        python = {**self.python.stats.as_dict(), "buffered": 0}
        c = {**self.c.stats().__dict__, "buffered": 0}
        if not closed:
            python["buffered"] = self.python._decoder.buffered
            c["buffered"] = self.c.stats().buffered
        assert python == c, (python, c)


def check_connection(library: Library, data: bytes, split: int) -> list[tuple[Any, ...]]:
    """Feed ``data`` to a `Pair` in two pieces, a tick and half a second in; return the
    events (the same on both sides)."""
    pair = Pair(library)
    pair.receive(data[:split], TICK_US)
    pair.receive(data[split:], 32 * TICK_US)
    return pair.events


# -- structured inputs --------------------------------------------------------------------------

_STREAMS = (0, 1, 2, 3, 4, 5, SIGNALLING_STREAM)
_MAX_FRAMES = 48
_MAX_TIME_REQUESTS = 2
"""More clock requests than the signalling window holds answers for would make the Python
side queue an answer where the C side (whose window is its queue) drops it."""


def structured(data: bytes) -> bytes:
    """``data`` read as a list of frame fields, encoded with valid CRCs: a quarter of them
    ACKs, the rest data and signalling with small seqs (in order, ahead, repeated)."""
    out = []
    at = 0
    time_requests = 0
    while at + 5 <= len(data) and len(out) < _MAX_FRAMES:
        kind, stream_byte, seq_byte, flag_byte, size = data[at : at + 5]
        at += 5
        stream = _STREAMS[stream_byte % len(_STREAMS)]
        payload = data[at : at + size]
        at += size
        flags = flag_byte & 0x06  # EOM, PRIORITY
        if flag_byte & 0x18 == 0:
            flags |= ACK_BIT
            stream = (1, SIGNALLING_STREAM, stream)[stream_byte % 3]
            seq = seq_byte % 6
            if flag_byte & 0xE0:  # an ACK carries no payload, except in one of eight
                payload = b""
        else:
            seq = seq_byte % 8
        if seq_byte >= 0xF8:
            seq = 0xFFFFFFFF - (seq_byte & 0x07)  # just before the wrap (RFC 1982)
        if stream == SIGNALLING_STREAM and not flags & ACK_BIT and flags & 0x02:
            # Mostly well-formed signalling; sometimes raw bytes (malformed or unknown).
            signal = _signal(kind, seq % 8, payload, time_requests < _MAX_TIME_REQUESTS)
            if isinstance(signal, bytes):
                payload = signal  # truncated
            elif signal is not None:
                time_requests += isinstance(signal, TimeRequest)
                payload = encode_signal(signal)
        out.append(encode_frame(Frame(stream, seq, kind * 1000, payload, flags)))
    return b"".join(out)


def _signal(kind: int, seq: int, payload: bytes, may_ask_time: bool) -> Any:
    text = payload[:24].decode("utf-8", "replace")  # multi-byte characters now and then
    choice = kind % 8
    if choice == 0:
        return TimeRequest(kind) if may_ask_time else Cancel(kind, 1)
    if choice == 1:
        return TimeResponse(1, kind, kind * 3)
    if choice == 2:
        return Cancel(kind, seq)
    if choice == 3:
        return GoAway(ErrorCode(kind % 16), text)
    if choice == 4:
        return Error(kind, "stream_not_found", text)
    if choice == 5:
        return Open(kind, 0xFFFF, text, "", seq)
    if choice == 6:
        return Close(seq, kind) if kind & 1 else encode_signal(Close(seq, kind))[:-1]
    return None  # the raw payload: malformed or unknown, mostly
