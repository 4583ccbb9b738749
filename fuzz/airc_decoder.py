"""Fuzz target: AIRC's `FrameDecoder` and `AircConnection.receive_data` on arbitrary bytes.

Invariants, for every input:

1. `FrameDecoder.feed` raises nothing but `AircProtocolError`; fed whole or in two pieces
   (split at an input-derived point) it reaches the same verdict: the same frames, or the
   same `ErrorCode`; every frame it returns re-encodes to exactly the bytes it came from;
   after every feed it holds at most ``HEADER_SIZE + max_payload`` bytes.
2. `AircConnection.receive_data`, `handle_timer` and `data_to_send` raise nothing at all,
   whatever the peer sends: a violation becomes one `ConnectionClosed`, the last event, and
   a closed connection returns no events.
3. The connection stays within its configured bounds after every call: decoder buffer,
   StreamIDs, frames held ahead of a gap, partial message size, queued bytes, frames in flight.

The connection is fed the raw input (which rarely gets past the CRC), and the same input
read as a list of frame fields and encoded with valid CRCs, so that the fuzzer reaches the
state machine: ACKs, gaps, duplicates, reassembly, signalling.

    .venv/bin/python fuzz/airc_decoder.py -runs=100000
    .venv/bin/python fuzz/airc_decoder.py -max_total_time=600 corpus/   # keeps what it finds

Importable without atheris (tests/wire/airc/test_fuzz_target.py runs `TestOneInput` on a
hypothesis corpus); running it needs ``pip install -e '.[fuzz]'``.
"""

from __future__ import annotations

import contextlib
import sys

try:
    import atheris
except ImportError:  # the target stays importable (and testable) without the fuzzer
    atheris = None

# Coverage guidance only for the code under test: instrumenting all that ``airlane`` imports
# (asyncio, uvicorn, ...) would take half a minute and steer the fuzzer nowhere useful.
_instrumented = (
    atheris.instrument_imports(include=["airlane.wire.airc"])
    if atheris is not None
    else contextlib.nullcontext()
)
with _instrumented:
    from airlane.wire.airc.config import AircConfig
    from airlane.wire.airc.connection import AircConnection
    from airlane.wire.airc.errors import AircProtocolError, ErrorCode
    from airlane.wire.airc.events import AircEvent, ConnectionClosed
    from airlane.wire.airc.frame import (
        HEADER_SIZE,
        SIGNALLING_STREAM,
        Flags,
        Frame,
        FrameDecoder,
        encode_frame,
    )
    from airlane.wire.airc.signalling import TimeRequest

# Small limits, so that the fuzzer can reach every one of them with short inputs.
CONFIG = AircConfig(
    max_frame_payload=64,
    max_receive_payload=300,
    max_message_size=1000,
    send_window=4,
    max_queued_bytes=512,
    reorder_window=4,
    max_streams=4,
    ack_every=3,
    max_receive_buffer=1500,
)
_STREAMS = (0, 1, 2, 3, 4, 5, SIGNALLING_STREAM, 0xFFFF)
_MAX_FRAMES = 64


def TestOneInput(data: bytes) -> None:  # the name atheris and libFuzzer expect
    """Check every invariant of the module docstring on ``data``."""
    split = int.from_bytes(data[:2], "big") % (len(data) + 1) if data else 0
    check_decoder(data, split, CONFIG.max_receive_payload)
    check_decoder(data, split, 0)
    check_connection(data, split)
    framed = structured_frames(data)
    check_connection(framed, len(framed) // 2)


# -- the decoder ------------------------------------------------------------------------------


def check_decoder(data: bytes, split: int, max_payload: int) -> None:
    """Invariant 1."""
    whole = _decode([data], max_payload)
    pieces = _decode([data[:split], data[split:]], max_payload)
    if whole[1] is None:
        assert pieces == whole, (whole, pieces)
        frames, _, left = whole
        assert b"".join(map(encode_frame, frames)) == data[: len(data) - left]
    else:
        assert pieces[1] is whole[1], (whole[1], pieces[1])


def _decode(chunks: list[bytes], max_payload: int) -> tuple[list[Frame], ErrorCode | None, int]:
    decoder = FrameDecoder(max_payload)
    frames: list[Frame] = []
    for chunk in chunks:
        try:
            frames += decoder.feed(chunk)
        except AircProtocolError as exc:
            assert decoder.buffered == 0
            return frames, exc.code, 0
        assert decoder.buffered <= HEADER_SIZE + max_payload
    return frames, None, decoder.buffered


# -- the connection ---------------------------------------------------------------------------


def check_connection(data: bytes, split: int) -> None:
    """Invariants 2 and 3: ``data`` from the peer in two pieces, timers in between."""
    conn = AircConnection(CONFIG, now=0.0)
    # Something in flight on stream 1 and on stream 255, so that ACKs can be valid.
    for size in (10, 100, 30):
        conn.send_message(1, bytes(size))
    conn.send_signal(TimeRequest(1))
    conn.data_to_send(0.0)
    events: list[AircEvent] = []
    for now, chunk in ((0.001, data[:split]), (0.5, data[split:])):
        events += conn.receive_data(chunk, now)
        _check_bounds(conn)
        conn.data_to_send(now)
        timer = conn.get_timer()
        if timer is not None:
            events += conn.handle_timer(max(timer, now))
            conn.data_to_send(max(timer, now))
            _check_bounds(conn)
    closed = [event for event in events if isinstance(event, ConnectionClosed)]
    assert len(closed) <= 1, events
    if closed:
        assert events[-1] is closed[0] and conn.closed == closed[0]
        assert conn.receive_data(data, 1.0) == []
        assert conn.get_timer() is None


def _check_bounds(conn: AircConnection) -> None:
    config = conn.config
    # The connection's private state is what the bounds are about; a test harness may look.
    assert conn._decoder.buffered <= HEADER_SIZE + config.max_receive_payload
    assert len(conn._receive) <= config.max_streams + 1  # stream 255 comes on top
    for stream in conn._receive.values():
        assert stream.held <= config.reorder_window
        assert len(stream._partial) <= config.max_message_size
    assert conn.queued_bytes <= config.max_queued_bytes
    if conn.closed is None:  # the frame that broke the bound closed the connection
        assert conn._received_bytes <= config.max_receive_buffer
    assert conn._received_bytes == sum(s.buffered for s in conn._receive.values())
    assert len(conn._send) <= config.max_streams + 1
    for send in conn._send.values():
        assert len(send.in_flight) <= config.send_window
    assert len(conn._time_requests) <= 16


def structured_frames(data: bytes) -> bytes:
    """``data`` read as frame fields (flags, stream, seq, length: a byte each, then the
    payload) and encoded with valid CRCs; at most `_MAX_FRAMES` frames."""
    out: list[bytes] = []
    offset = 0
    while offset + 4 <= len(data) and len(out) < _MAX_FRAMES:
        flags, stream, seq, length = data[offset : offset + 4]
        payload = data[offset + 4 : offset + 4 + length]
        offset += 4 + length
        frame = Frame(
            _STREAMS[stream % len(_STREAMS)],
            seq if seq < 0xF0 else 0xFFFFFFFF - (seq & 0x0F),  # a few near the wrap
            seq * 1000,
            payload,
            Flags(flags & 0x07),
        )
        out.append(encode_frame(frame))
    return b"".join(out)


def main() -> None:
    """Run the fuzzer (libFuzzer's flags, e.g. ``-runs=100000``, pass through)."""
    if atheris is None:
        sys.exit("atheris is not installed: pip install -e '.[fuzz]'")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
