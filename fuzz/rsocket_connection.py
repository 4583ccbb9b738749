"""Fuzz target: RSocket's `FrameReader` and `RSocketServerConnection` on arbitrary bytes.

Invariants, for every input:

1. `FrameReader.feed` raises nothing but `RSocketProtocolError`; fed whole or in two pieces
   (split at an input-derived point) it reaches the same verdict: the same frames, or an
   error; every frame it returns encodes to bytes that decode to the same frame; it never
   holds more than a length prefix and ``max_frame`` bytes after a feed.
2. `RSocketServerConnection.receive_data`, `receive_frame`, `handle_timer`, `data_to_send` and
   `send_payload` (refused only with `NoCredit`) raise nothing else, whatever the peer sends:
   a violation becomes one `ConnectionClosed`, the last event, and a closed connection returns
   no events.
3. The connection stays within its bounds after every call: the reader's buffer, the open
   streams, a message arriving in fragments, the frames kept for resumption; no stream is sent
   more payloads than it was granted.

The connection is fed the raw input (which rarely gets past a SETUP), and the same input read
as frame fields after a valid SETUP, so that the fuzzer reaches the state machine: the four
models, credit, fragments, keep-alive, lease, cancel and errors.

    .venv/bin/python fuzz/rsocket_connection.py -runs=100000
    .venv/bin/python fuzz/rsocket_connection.py -max_total_time=600 corpus/rsocket

Importable without atheris (tests/wire/test_rsocket_fuzz_target.py runs `TestOneInput` on a
hypothesis corpus); running it needs ``pip install -e '.[fuzz]'``.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace

try:
    import atheris
except ImportError:  # the target stays importable (and testable) without the fuzzer
    atheris = None

_instrumented = (
    atheris.instrument_imports(include=["airlane.wire.rsocket"])
    if atheris is not None
    else contextlib.nullcontext()
)
with _instrumented:
    from airlane.wire.rsocket.connection import (
        ConnectionClosed,
        NoCredit,
        RequestN,
        RequestReceived,
        RSocketEvent,
        RSocketServerConnection,
    )
    from airlane.wire.rsocket.frames import (
        Frame,
        FrameReader,
        FrameType,
        RSocketProtocolError,
        decode_frame,
        encode_frame,
        frame_with_length,
    )

# Small limits, so that the fuzzer can reach every one of them with short inputs.
MAX_FRAME = 128
MAX_MESSAGE = 300
MAX_STREAMS = 4
MAX_RETAINED = 400
UNBOUNDED = (1 << 31) - 1
_TYPES = [kind for kind in FrameType if kind is not FrameType.SETUP]
_STREAMS = (0, 1, 2, 3, 5, 7, 9, 0x7FFFFFFF)
_MAX_FRAMES = 48
SETUP = Frame(FrameType.SETUP, flags=0x80 | 0x40, keepalive_ms=1000, lifetime_ms=2000,
              resume_token=b"fuzz-token-0123456", metadata_mime="m", data_mime="d")  # fmt: skip


def TestOneInput(data: bytes) -> None:  # the name atheris and libFuzzer expect
    """Check every invariant of the module docstring on ``data``."""
    split = int.from_bytes(data[:2], "big") % (len(data) + 1) if data else 0
    check_reader(data, split)
    check_connection(data, split, framed=True)
    framed = structured_frames(data)
    check_connection(frame_with_length(SETUP) + framed, split, framed=True)
    check_messages(data)


# -- the reader --------------------------------------------------------------------------------


def check_reader(data: bytes, split: int) -> None:
    """Invariant 1."""
    whole = _read([data])
    pieces = _read([data[:split], data[split:]])
    assert (whole[1] is None) == (pieces[1] is None), (whole, pieces)
    if whole[1] is None:
        assert whole[0] == pieces[0]
        for frame in whole[0]:
            if frame.type is FrameType.EXT and frame.extended_type == -1:
                continue  # an unknown type the peer marked ignorable: nothing to re-encode
            again = decode_frame(encode_frame(frame))
            assert replace(again, size=frame.size) == frame, (frame, again)


def _read(chunks: list[bytes]) -> tuple[list[Frame], str | None]:
    reader = FrameReader(MAX_FRAME)
    frames: list[Frame] = []
    for chunk in chunks:
        try:
            frames += reader.feed(chunk)
        except RSocketProtocolError as exc:
            return frames, str(exc)
        assert len(reader._buffer) <= 3 + MAX_FRAME
    return frames, None


# -- the connection ---------------------------------------------------------------------------


def check_connection(data: bytes, split: int, *, framed: bool) -> None:
    """Invariants 2 and 3: ``data`` from the peer in two pieces, answers and timers between."""
    conn = _connection(framed)
    events: list[RSocketEvent] = []
    allowed: dict[int, int] = {}
    for now, chunk in ((0.001, data[:split]), (0.5, data[split:])):
        new = conn.receive_data(chunk, now)
        events += new
        _answer(conn, new, allowed)
        _check_bounds(conn)
        conn.data_to_send()
        timer = conn.get_timer()
        if timer is not None:
            events += conn.handle_timer(max(timer, now))
            conn.data_to_send()
    _check_closed(conn, events, data)


def check_messages(data: bytes) -> None:
    """The same, one WebSocket message at a time: the input cut into pieces by its bytes."""
    conn = _connection(framed=False)
    conn.receive_frame(encode_frame(SETUP), 0.0)
    events: list[RSocketEvent] = []
    offset = 0
    while offset < len(data) and len(events) < 64:
        size = data[offset] % 40
        events += conn.receive_frame(data[offset + 1 : offset + 1 + size], 0.1)
        offset += 1 + size
        _check_bounds(conn)
        conn.data_to_send()
    _check_closed(conn, events, data)


def _connection(framed: bool) -> RSocketServerConnection:
    return RSocketServerConnection(
        framed=framed, max_frame=MAX_FRAME, max_message=MAX_MESSAGE, max_streams=MAX_STREAMS,
        max_retained=MAX_RETAINED,
    )  # fmt: skip


def _answer(
    conn: RSocketServerConnection, events: list[RSocketEvent], allowed: dict[int, int]
) -> None:
    """Send as the layer above would, as much as `send_payload` takes: never more, in all,
    than the stream was granted (a request-response: one)."""
    for event in events:
        if isinstance(event, RequestReceived):
            allowed[event.stream_id] = max(1, event.initial_n)
        elif isinstance(event, RequestN):
            allowed[event.stream_id] = allowed.get(event.stream_id, 0) + event.n
        else:
            continue
        stream = event.stream_id
        for sent in range(64):
            try:
                conn.send_payload(stream, b"p" * (sent % 3 * 100))
            except NoCredit:
                break
            allowed[stream] -= 1
            assert allowed[stream] >= 0 or allowed[stream] + sent >= UNBOUNDED, allowed


def _check_bounds(conn: RSocketServerConnection) -> None:
    # The connection's private state is what the bounds are about; a test harness may look.
    assert len(conn._reader._buffer) <= 3 + MAX_FRAME
    assert len(conn._streams) <= MAX_STREAMS
    for partial in conn._partials.values():
        assert len(partial.metadata) + len(partial.data) <= MAX_MESSAGE
    assert conn._retained_bytes <= MAX_RETAINED


def _check_closed(conn: RSocketServerConnection, events: list[RSocketEvent], data: bytes) -> None:
    closed = [event for event in events if isinstance(event, ConnectionClosed)]
    assert len(closed) <= 1, events
    if closed:
        assert events[-1] is closed[0] and conn.closed == closed[0]
        assert conn.receive_data(data, 1.0) == []
        assert conn.get_timer() is None


def structured_frames(data: bytes) -> bytes:
    """``data`` read as frame fields (type, stream, flags, request n, length: a byte each,
    then the data) and encoded as valid frames; at most `_MAX_FRAMES` frames."""
    out: list[bytes] = []
    offset = 0
    while offset + 5 <= len(data) and len(out) < _MAX_FRAMES:
        kind, stream, flags, n, length = data[offset : offset + 5]
        body = data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        frame_type = _TYPES[kind % len(_TYPES)]
        stream_id = _STREAMS[stream % len(_STREAMS)]
        frame = Frame(frame_type, stream_id, (flags << 2) & 0x2FF, data=body,
                      metadata=body[:3] if flags & 1 else None, request_n=n or 1,
                      error_code=0x201 + n % 4, position=n, keepalive_ms=n,
                      lease_requests=n, resume_token=body[:4])  # fmt: skip
        try:
            out.append(frame_with_length(frame))
        except (ValueError, RSocketProtocolError):
            continue
    return b"".join(out)


def main() -> None:
    """Run the fuzzer (libFuzzer's flags, e.g. ``-runs=100000``, pass through)."""
    if atheris is None:
        sys.exit("atheris is not installed: pip install -e '.[fuzz]'")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
