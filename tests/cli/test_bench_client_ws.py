"""The bench's sans-I/O WebSocket client (`LoadConnection`: handshake + `FrameReader`), fed
each server transcript whole, split at every byte, one byte at a time, and with bytes after the
close frame; then every kind of broken handshake and framing.

Invariant of every test that splits a transcript: where the reads end changes nothing but the
receive times, so the tally and what the client sends are the same as for the whole transcript.
"""

from __future__ import annotations

import contextlib
import itertools
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.backends.synthetic import LoadTestChunk
from airlane.bench.chunk import ChunkFormatError, LoadProtocolError
from airlane.bench.tally import StreamTally
from airlane.bench.ws_connection import ConnectionState, LoadConnection
from airlane.bench.ws_frames import FrameError, FrameReader, Opcode, client_frame, close_payload
from airlane.bench.ws_handshake import HandshakeError, accept_value

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 section 1.3's example
NOW = 10**15
ENCODER = LoadTestChunk("airlane-loadtest", b"tests")


def chunk(seq: int, *, size: int = 0) -> bytes:
    """A gateway chunk (~1.2 KB; 70 KB with ``size``) or, with ``size=-1``, a tiny one."""
    if size < 0:
        return b'{"seq":%d,"ts":%d,"x":1}' % (seq, 1000 * seq)
    text = ENCODER.encode(seq, 1000 * seq)
    return text[:-1] + b',"pad":"%b"}' % (b"." * size) if size else text


def frame(payload: bytes, opcode: int = Opcode.TEXT, *, fin: bool = True, first: int = 0) -> bytes:
    """A server frame (unmasked), with the shortest length encoding; ``first`` ORs bits into
    the first byte (RSV), for broken frames."""
    head = bytes([(0x80 if fin else 0) | opcode | first])
    size = len(payload)
    if size < 126:
        return head + bytes([size]) + payload
    if size < 1 << 16:
        return head + b"\x7e" + size.to_bytes(2, "big") + payload
    return head + b"\x7f" + size.to_bytes(8, "big") + payload


def response_head(**overrides: str) -> bytes:
    fields = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_value(KEY).decode(),
        **overrides,
    }
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields.items() if value)
    return f"HTTP/1.1 101 Switching Protocols\r\n{lines}\r\n".encode()


CLOSE_1000 = frame(close_payload(1000, "done"), Opcode.CLOSE)


def run(
    transcript: bytes, cuts: list[int] | None = None
) -> tuple[StreamTally, LoadConnection, bytes]:
    """Feed ``transcript`` split at ``cuts``; the tally, the connection, and all it sent."""
    tally = StreamTally(array("q"))
    connection = LoadConnection(tally, "127.0.0.1:1", "/v1/loadtest/ws?chunks=3", key=KEY)
    sent = connection.data_to_send()
    bounds = [0, *(cuts or []), len(transcript)]
    for start, end in itertools.pairwise(bounds):
        connection.receive_data(transcript[start:end], NOW)
        sent += connection.data_to_send()
    return tally, connection, sent


def summary(tally: StreamTally) -> tuple[object, ...]:
    return (tally.received, tally.payload_bytes, tally.disorder, tally.next_seq, list(tally.lags))


def expected(*payloads: bytes) -> tuple[object, ...]:
    count = len(payloads)
    lags = [NOW - 1000 * n for n in range(1, count + 1)]
    return (count, sum(map(len, payloads)), 0, count + 1, lags)


def unmask(frames: bytes) -> list[tuple[int, bytes]]:
    """The client's frames as (opcode, payload); each must be final, masked, and small."""
    out = []
    while frames:
        assert frames[0] & 0x80 and frames[1] & 0x80 and frames[1] & 0x7F < 126
        size, key = frames[1] & 0x7F, frames[2:6]
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(frames[6 : 6 + size]))
        out.append((frames[0] & 0x0F, payload))
        frames = frames[6 + size :]
    return out


def test_request_offers_a_plain_websocket() -> None:
    _, connection, sent = run(b"")
    request = sent.decode()
    assert request.startswith("GET /v1/loadtest/ws?chunks=3 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n")
    assert f"Sec-WebSocket-Key: {KEY.decode()}\r\n" in request
    assert "Sec-WebSocket-Version: 13\r\n" in request and "Upgrade: websocket\r\n" in request
    assert "Extensions" not in request and "Protocol" not in request
    assert connection.state is ConnectionState.CONNECTING
    assert LoadConnection(StreamTally(array("q")), "h:1", "/")._handshake.key != KEY


@pytest.mark.parametrize("size", [-1, 0, 70_000], ids=["7-bit", "16-bit", "64-bit"])
def test_split_at_every_byte(size: int) -> None:
    payloads = [chunk(n, size=size) for n in (1, 2, 3)]
    transcript = response_head() + b"".join(map(frame, payloads)) + CLOSE_1000
    tally, connection, sent = run(transcript)
    assert summary(tally) == expected(*payloads)
    assert connection.state is ConnectionState.CLOSED and connection.close == (1000, "done")
    assert unmask(sent[sent.index(b"\r\n\r\n") + 4 :]) == [(Opcode.CLOSE, close_payload(1000))]
    step = 1 if size <= 0 else 997
    for cut in range(1, len(transcript), step):
        again = run(transcript, [cut])
        assert summary(again[0]) == summary(tally) and again[2][-8:-6] == sent[-8:-6], cut


def test_one_byte_at_a_time_with_bytes_after_the_close() -> None:
    payloads = [chunk(1), chunk(2, size=-1)]
    transcript = response_head() + b"".join(map(frame, payloads)) + CLOSE_1000 + b"junk"
    tally, connection, _ = run(transcript, list(range(1, len(transcript))))
    assert summary(tally) == expected(*payloads)
    assert connection.state is ConnectionState.CLOSED


def test_fragments_with_a_ping_between_them() -> None:
    """RFC 6455 section 5.4: a message in fragments, a control frame between them."""
    whole = chunk(2)
    fragments = (
        frame(whole[:10], fin=False)
        + frame(whole[10:700], Opcode.CONTINUATION, fin=False)
        + frame(b"are you there?", Opcode.PING)
        + frame(whole[700:], Opcode.CONTINUATION)
    )
    transcript = (
        response_head()
        + frame(chunk(1))
        + fragments
        + frame(b"", Opcode.PONG)
        + frame(chunk(3))
        + CLOSE_1000
    )
    for cuts in ([], list(range(1, len(transcript), 3))):
        tally, _, sent = run(transcript, cuts)
        assert summary(tally) == expected(chunk(1), whole, chunk(3))
        replies = unmask(sent[sent.index(b"\r\n\r\n") + 4 :])
        assert replies == [(Opcode.PONG, b"are you there?"), (Opcode.CLOSE, close_payload(1000))]


def test_frames_in_the_same_read_as_the_head() -> None:
    tally, connection, _ = run(response_head() + frame(chunk(1)) + CLOSE_1000)
    assert tally.received == 1 and connection.state is ConnectionState.CLOSED


@pytest.mark.parametrize(
    ("payload", "close"),
    [
        (close_payload(1011, "boom"), (1011, "boom")),
        (close_payload(4000), (4000, "")),
        (b"", (1005, "")),
    ],
)
def test_other_close_codes_are_reported(payload: bytes, close: tuple[int, str]) -> None:
    _, connection, sent = run(response_head() + frame(chunk(1)) + frame(payload, Opcode.CLOSE))
    assert connection.state is ConnectionState.CLOSED and connection.close == close
    echo = b"" if close[0] == 1005 else close_payload(close[0])
    assert unmask(sent[sent.index(b"\r\n\r\n") + 4 :]) == [(Opcode.CLOSE, echo)]


@pytest.mark.parametrize(
    ("frames", "error", "code"),
    [
        (frame(chunk(1))[:1] + b"\xfe" + frame(chunk(1))[2:], "masked", 1002),
        (frame(chunk(1), first=0x40), "RSV", 1002),
        (frame(chunk(1), Opcode.BINARY), "binary", 1003),
        (frame(chunk(1), Opcode.CONTINUATION), "continuation", 1002),
        (frame(b"{", fin=False) + frame(chunk(1)), "before the fragmented", 1002),
        (frame(b"x" * 126, Opcode.PING), "control frame", 1002),
        (frame(b"x", Opcode.PING, fin=False), "control frame", 1002),
        (frame(b"x", 0x3), "reserved opcode", 1002),
        (frame(b"x", 0xB), "reserved opcode", 1002),
        (b"\x81\x7f\x80" + b"\x00" * 7, "top bit", 1002),
        (b"\x81\x7f" + (2 << 20).to_bytes(8, "big"), "over", 1009),
        (
            frame(b"{" * 600_000, fin=False) + frame(b"x" * 600_000, Opcode.CONTINUATION),
            "message over",
            1009,
        ),
        (frame(b"\x03", Opcode.CLOSE), "1-byte", 1002),
        (frame(close_payload(1006), Opcode.CLOSE), "no endpoint may send", 1002),
        (frame(b"not a chunk"), "does not start with", 1002),
        (frame(b'{"seq":1,"ts":2}' + b" " * 200), "no seq/ts head", 1002),
    ],
)
def test_broken_framing_fails_the_connection(frames: bytes, error: str, code: int) -> None:
    tally = StreamTally(array("q"))
    connection = LoadConnection(tally, "h:1", "/", key=KEY)
    connection.receive_data(response_head(), NOW)
    with pytest.raises(LoadProtocolError, match=error) as caught:
        connection.receive_data(frames, NOW)
    if not isinstance(caught.value, ChunkFormatError):
        assert isinstance(caught.value, FrameError) and caught.value.code == code
    assert unmask(connection.failure_frame(caught.value)) == [(Opcode.CLOSE, close_payload(code))]
    assert connection.state is ConnectionState.CLOSED
    assert connection.failure_frame(caught.value) == b""


@pytest.mark.parametrize(
    ("head", "error"),
    [
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", "answered HTTP/1.1 404 Not Found"),
        (b"HTTP/1.1 200 OK\r\n\r\n", "instead of 101"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (response_head(Upgrade=""), "Upgrade: websocket"),
        (response_head(Connection="keep-alive"), "Connection: Upgrade"),
        (response_head(**{"Sec-WebSocket-Accept": "x"}), "Sec-WebSocket-Accept"),
        (response_head(**{"Sec-WebSocket-Extensions": "permessage-deflate"}), "not offered"),
        (response_head(**{"Sec-WebSocket-Protocol": "chat"}), "not offered"),
        (b"HTTP/1.1 101 Switching Protocols\r\nbroken\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 101 Switching Protocols\r\n" + b"x: y\r\n" * 20_000, "exceeds"),
    ],
)
def test_refused_or_broken_handshakes(head: bytes, error: str) -> None:
    connection = LoadConnection(StreamTally(array("q")), "h:1", "/", key=KEY)
    with pytest.raises(HandshakeError, match=error) as caught:
        connection.receive_data(head, NOW)
    assert connection.failure_frame(caught.value) == b""  # no WebSocket to close yet


def test_connection_header_is_a_token_list() -> None:
    head = response_head(Connection="keep-alive, Upgrade", Upgrade="WebSocket")
    _, connection, _ = run(head + CLOSE_1000)
    assert connection.state is ConnectionState.CLOSED


def test_client_frames_are_masked_and_bounded() -> None:
    framed = client_frame(Opcode.PING, b"hello")
    assert unmask(framed) == [(Opcode.PING, b"hello")]
    assert client_frame(Opcode.PING, b"hello")[2:6] != framed[2:6]  # a fresh key each time
    assert unmask(client_frame(Opcode.CLOSE, b"")) == [(Opcode.CLOSE, b"")]
    with pytest.raises(ValueError):
        client_frame(Opcode.TEXT, b"x" * 126)


def test_the_gateways_frames_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole text frames with 16-bit lengths, split anywhere, are read a buffer at a time:
    only the close frame (and a frame cut by the read boundary) go frame by frame."""
    calls: list[int] = []
    read_frame = FrameReader._read_frame

    def counted(self: FrameReader, buf: bytes, pos: int, now_ns: int) -> int | None:
        calls.append(pos)
        return read_frame(self, buf, pos, now_ns)

    monkeypatch.setattr(FrameReader, "_read_frame", counted)
    payloads = [chunk(n) for n in range(1, 9)]
    transcript = response_head() + b"".join(map(frame, payloads)) + CLOSE_1000
    for cut in range(len(transcript) // 3, len(transcript), 211):
        calls.clear()
        tally, _, _ = run(transcript, [cut])
        assert summary(tally) == expected(*payloads) and len(calls) <= 3


def test_a_read_of_one_frame_is_recorded_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A paced stream's reads, one whole chunk frame each, are recorded by `feed` itself;
    a read of anything else (two frames, a cut frame, a head that is not a chunk's) goes the
    general way, with the same tally."""
    payloads = [chunk(n) for n in range(1, 7)]
    frames = [frame(p) for p in payloads]
    transcript = response_head() + b"".join(frames) + CLOSE_1000
    reads = list(itertools.accumulate([len(response_head()), *map(len, frames)]))
    whole = run(transcript)
    tally = StreamTally(array("q"))
    connection = LoadConnection(tally, "127.0.0.1:1", "/v1/loadtest/ws?chunks=3", key=KEY)
    connection.receive_data(response_head(), NOW)
    monkeypatch.setattr(FrameReader, "_read_chunk_frames", _never)
    for one in frames:  # one frame per read
        connection.receive_data(one, NOW)
    monkeypatch.undo()
    connection.receive_data(CLOSE_1000, NOW)
    assert summary(tally) == summary(whole[0]) == expected(*payloads)
    assert connection.state is ConnectionState.CLOSED
    odd = frame(b'{"seq":x,"ts":1}')  # not a chunk: refused the general way
    for cuts in ([reads[0], reads[2], reads[2] + 3], [reads[0], reads[1] + 100]):
        assert summary(run(transcript, cuts)[0]) == expected(*payloads)
    with pytest.raises(ChunkFormatError):
        run(response_head() + odd, [len(response_head())])


def _never(*args: object) -> int:
    raise AssertionError("a one-frame read went the general way")


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_fragmentation_pings_and_reads(data: st.DataObject) -> None:
    """Property: however the server fragments messages, interleaves pings and the reads cut
    the bytes, every chunk is recorded once, in order, and every ping gets its pong."""
    draw = data.draw
    payloads = [chunk(n, size=draw(st.sampled_from([-1, 0, 200]))) for n in range(1, 6)]
    frames, pings = [], []
    for payload in payloads:
        cuts = sorted(draw(st.sets(st.integers(1, len(payload) - 1), max_size=2)))
        parts = [payload[a:b] for a, b in itertools.pairwise([0, *cuts, len(payload)])]
        for index, part in enumerate(parts):
            opcode = Opcode.TEXT if index == 0 else Opcode.CONTINUATION
            frames.append(frame(part, opcode, fin=index == len(parts) - 1))
            if draw(st.booleans()):
                pings.append(b"p%d" % len(pings))
                frames.append(frame(pings[-1], Opcode.PING))
    transcript = response_head() + b"".join(frames) + CLOSE_1000
    reads = draw(st.sets(st.integers(1, len(transcript) - 1), max_size=15))
    tally, _, sent = run(transcript, sorted(reads))
    assert summary(tally) == expected(*payloads)
    replies = unmask(sent[sent.index(b"\r\n\r\n") + 4 :])
    assert replies == [(Opcode.PONG, p) for p in pings] + [(Opcode.CLOSE, close_payload(1000))]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([b"", b"\x81\x05", b"\x01\x7e\x00", b"\x88"]))
def test_garbage_raises_only_load_protocol_errors(garbage: bytes, prefix: bytes) -> None:
    """Fuzz: whatever follows a valid 101, the connection records chunks, answers, closes or
    raises `LoadProtocolError`, nothing else (which would escape the load client)."""
    connection = LoadConnection(StreamTally(array("q")), "h:1", "/", key=KEY)
    connection.receive_data(response_head(), NOW)
    try:
        connection.receive_data(prefix + garbage, NOW)
        connection.receive_data(garbage, NOW)
    except LoadProtocolError as exc:
        connection.failure_frame(exc)
    connection.data_to_send()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([b"", b"HTTP/1.1 101 x\r\n", response_head()]))
def test_garbage_handshakes_raise_only_handshake_errors(garbage: bytes, prefix: bytes) -> None:
    """Fuzz: any response head is a 101 or a `LoadProtocolError`, nothing else."""
    connection = LoadConnection(StreamTally(array("q")), "h:1", "/", key=KEY)
    with contextlib.suppress(LoadProtocolError):
        connection.receive_data(prefix + garbage + b"\r\n\r\n", NOW)
