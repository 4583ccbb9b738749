"""`LoadResponseParser` (the bench's sans-I/O HTTP/SSE reader), the chunk head reader and
`StreamTally.record`, fed each response whole, split at every byte, one byte at a time, and with
trailing data.

Invariant of every test that splits a response: where the reads end changes nothing but the
receive times, so the tally (chunks, bytes, order, lags at one clock) is the same as for the
whole response.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.backends.synthetic import LoadTestChunk
from airlane.bench.chunk import ChunkFormatError, LoadProtocolError, read_seq_ts
from airlane.bench.sse_events import ChunkEventReader, failure_text
from airlane.bench.sse_parser import LoadResponseParser
from airlane.bench.tally import StreamTally

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
NOW = 10**15
ENCODER = LoadTestChunk("airlane-loadtest", b"tests")


def chunk(seq: int, ts: int, *, real: bool = True) -> bytes:
    """A gateway chunk (~1.2 KB) or a tiny one with the same head."""
    if real:
        return ENCODER.encode(seq, ts)
    return b'{"seq":%d,"ts":%d,"id":"x","padding":"...."}' % (seq, ts)


def events(count: int, *, real: bool = True, first: int = 1) -> bytes:
    return b"".join(
        b"data: " + chunk(n, 1000 * n, real=real) + b"\n\n" for n in range(first, first + count)
    )


def chunked(body: bytes, size: int = 700, extension: bytes = b"") -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x%b\r\n%b\r\n" % (len(p), extension, p) for p in pieces)
    return HEAD + b"transfer-encoding: chunked\r\n\r\n" + framed + b"0\r\nx-trailer: 1\r\n\r\n"


def feed(response: bytes, cuts: list[int] | None = None) -> tuple[StreamTally, LoadResponseParser]:
    """Feed ``response`` split at ``cuts`` (whole if None), every read at the same time."""
    tally = StreamTally(array("q"))
    parser = LoadResponseParser(tally)
    bounds = [0, *(cuts or []), len(response)]
    for start, end in itertools.pairwise(bounds):
        parser.feed(response[start:end], NOW)
    return tally, parser


def summary(tally: StreamTally) -> tuple[object, ...]:
    return (
        tally.received,
        tally.payload_bytes,
        tally.disorder,
        tally.next_seq,
        tally.first_ts,
        tally.last_ts,
        list(tally.lags),
    )


def expected(count: int, *, real: bool = True) -> tuple[object, ...]:
    size = sum(len(chunk(n, 1000 * n, real=real)) for n in range(1, count + 1))
    lags = [NOW - 1000 * n for n in range(1, count + 1)]
    return (count, size, 0, count + 1, 1000, 1000 * count, lags)


@pytest.mark.parametrize("real", [True, False])
@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_every_chunk_is_recorded(framing: str, real: bool) -> None:
    body = b": ping\n\n" + events(12, real=real)
    if framing == "chunked":
        response = chunked(body)
    elif framing == "length":
        response = HEAD + b"content-length: %d\r\n\r\n" % len(body) + body
    else:
        response = HEAD + b"\r\n" + body
    tally, parser = feed(response)
    if framing == "close":
        assert not parser.done
        parser.eof()
    assert parser.done and parser.status == 200
    assert summary(tally) == expected(12, real=real)


@pytest.mark.parametrize("framing", ["chunked", "extensions", "close"])
def test_split_at_every_byte(framing: str) -> None:
    body = events(3)
    if framing == "close":
        response = HEAD + b"\r\n" + body
    else:  # extensions (RFC 9112 7.1.1) are ignored, but only by the step-by-step reading
        response = chunked(body, size=500, extension=b";a=1" if framing == "extensions" else b"")
    whole = summary(feed(response)[0])
    assert whole == expected(3)
    for cut in range(1, len(response)):
        assert summary(feed(response, [cut])[0]) == whole, cut


def test_one_byte_at_a_time() -> None:
    response = chunked(b": ping\n\nid: 1\n\n" + events(4, real=False), size=13, extension=b";x")
    tally, parser = feed(response, list(range(1, len(response))))
    assert parser.done and summary(tally) == expected(4, real=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=20_000), max_size=12), st.integers(1, 3000))
def test_any_split_any_framing_size(cuts: list[int], size: int) -> None:
    response = chunked(events(8), size=size)
    cuts = sorted({c for c in cuts if c < len(response)})
    tally, parser = feed(response, cuts)
    assert parser.done and summary(tally) == expected(8)


def test_other_fields_comments_and_events_without_data() -> None:
    """WHATWG HTML 9.2.6: comments, id/event/retry fields and events without data are not
    chunks; a data line without the space after the colon, or with other fields before or
    after it in the same event, still is one."""
    one, two, three, four = (chunk(n, 1000 * n) for n in range(1, 5))
    body = (
        b": ping\n\nretry: 1000\n\nevent: chunk\nid: 7\ndata: %b\n\n" % one
        + b"data:%b\nid: 8\n\n" % two
        + b"event: empty\n\n\n\ndata:\n\n"
        + b"data: %b\n: a comment inside the event\n\n" % three
        + b"data: %b\n\n" % four
    )
    tally, _ = feed(HEAD + b"\r\n" + body)
    assert summary(tally) == expected(4)
    for cut in range(1, len(body), 97):
        assert summary(feed(HEAD + b"\r\n" + body, [len(HEAD) + 2 + cut])[0]) == expected(4)


def test_out_of_order_chunks_are_counted() -> None:
    body = b"".join(b"data: " + chunk(n, 0) + b"\n\n" for n in (1, 2, 4, 3, 3, 5))
    tally, _ = feed(HEAD + b"\r\n" + body)
    # Each seq is compared with the one after its predecessor: 4 (not 3), 3 (not 5), 3 (not
    # 4) and 5 (not 4) are out of order.
    assert tally.received == 6 and tally.disorder == 4 and tally.next_seq == 6


def test_lags_are_sampled_every_stride_th_seq() -> None:
    tally = StreamTally(array("q"), stride=3)
    parser = LoadResponseParser(tally)
    parser.feed(HEAD + b"\r\n" + events(5), NOW)
    parser.feed(events(6, first=6), NOW + 1)
    assert list(tally.lags) == [NOW - 3000, NOW + 1 - 6000, NOW + 1 - 9000]
    assert tally.first_ns == NOW and tally.last_ns == NOW + 1 and tally.last_ts == 11000


def test_trailing_data_is_refused() -> None:
    with pytest.raises(LoadProtocolError, match="after the end"):
        feed(chunked(events(2)) + b"junk")
    _, parser = feed(chunked(events(2)))
    with pytest.raises(LoadProtocolError, match="after the end"):
        parser.feed(b"x", NOW)


def test_a_cut_response_is_an_error() -> None:
    response = chunked(events(5))
    _, parser = feed(response[: len(response) // 2])
    with pytest.raises(LoadProtocolError, match="closed in the chunk"):
        parser.eof()


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", "answered HTTP/1.1 404"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (HEAD + b"transfer-encoding: gzip\r\n\r\n", "unsupported transfer-encoding"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n", "invalid chunk-size"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n0x1f\r\n", "invalid chunk-size"),
        (HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabcXY", "not followed by CRLF"),
        (HEAD + b"content-length: 1x\r\n\r\n", "invalid content-length"),
        (HEAD + b"content-length: 2\r\n\r\nabc", "beyond content-length"),
        (HEAD + b"\r\ndata: {not a chunk}\n\n", "does not start with"),
        (HEAD + b'\r\ndata: {"seq":1,"ts":x,}\n\n', "not integers"),
        (HEAD + b'\r\ndata: {"seq":1,"ts":%b,}\n\n' % (b"9" * 19), "not integers"),
    ],
)
def test_malformed_responses_are_the_servers_fault(response: bytes, message: str) -> None:
    with pytest.raises(LoadProtocolError, match=message):
        feed(response)


def test_an_error_event_is_the_streams_failure_with_its_code() -> None:
    """``/v1/loadtest/sse`` ends a failed stream with ``event: error`` (its data the error's
    JSON): the chunks before it are recorded, and the failure says the code and message,
    however the bytes were split."""
    failure = (
        b'event: error\ndata: {"message":"JetStream does not answer","code":"hub_unavailable"}\n\n'
    )
    response = chunked(events(3) + failure)
    for cut in (None, [len(response) - 40], [len(HEAD) + 30]):
        tally = StreamTally(array("q"))
        parser = LoadResponseParser(tally)
        with pytest.raises(LoadProtocolError) as raised:
            for start, end in itertools.pairwise([0, *(cut or []), len(response)]):
                parser.feed(response[start:end], NOW)
        assert str(raised.value) == (
            "the stream failed: hub_unavailable: JetStream does not answer"
        )
        assert tally.received == 3


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b'{"code":"x","message":"why"}', "x: why"),
        (b"not json", "b'not json'"),
        (b'["a list"]', "b'[\"a list\"]'"),
        (b'{"code":"x"}', 'b\'{"code":"x"}\''),
        (b'{"code":"x","message":"%b"}' % (b"m" * 300), "x: " + "m" * 200),
    ],
)
def test_failure_text_says_code_and_message_or_shows_the_bytes(data: bytes, text: str) -> None:
    assert failure_text(data) == text


def test_buffers_are_bounded() -> None:
    tally = StreamTally(array("q"))
    parser = LoadResponseParser(tally, max_head_bytes=100, max_event_bytes=100)
    with pytest.raises(LoadProtocolError, match="head exceeds"):
        parser.feed(b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 50, 0)
    parser = LoadResponseParser(tally, max_event_bytes=100)
    parser.feed(HEAD + b"\r\n", 0)
    with pytest.raises(LoadProtocolError, match="event exceeds"):
        parser.feed(b"data: " + b"x" * 200, 0)
    parser = LoadResponseParser(tally)
    parser.feed(HEAD + b"transfer-encoding: chunked\r\n\r\n", 0)
    with pytest.raises(LoadProtocolError, match="too long"):
        parser.feed(b"1" * 2000, 0)


def test_chunk_heads() -> None:
    assert read_seq_ts(chunk(7, 123456789)) == (7, 123456789)
    assert read_seq_ts(b"xx" + chunk(3, 9), 2) == (3, 9)
    bad = (
        b'{"id":1}',
        b'{"seq":1,"x":2,',
        b'{"seq":a,"ts":1,',
        b'{"seq":1,"ts":2',
        b'{"seq":+1,"ts":2,',
    )
    for text in bad:
        with pytest.raises(ChunkFormatError):
            read_seq_ts(text)


def test_record_matches_chunk_by_chunk() -> None:
    """`StreamTally.record` (a buffer at once) counts exactly as `StreamTally.chunk` does."""
    seqs = [1, 2, 3, 7, 8, 8, 2, 3, 10]
    batched, single = StreamTally(array("q"), stride=2), StreamTally(array("q"), stride=2)
    for part in (seqs[:3], seqs[3:5], seqs[5:]):
        digits = [b"%d" % s for s in part]
        batched.record(digits, [b"%d" % (s * 10) for s in part], 5 * len(part), NOW)
        for seq in part:
            single.chunk(seq, seq * 10, 5, NOW)
    assert summary(batched) == summary(single)
    assert batched.disorder == 4 and list(batched.lags) == [NOW - s * 10 for s in (2, 8, 8, 2, 10)]


def test_the_gateways_stream_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``data: <chunk>`` events back to back, in any framing and split anywhere, never reach
    the line-by-line reader (whose cost per event would make the client the bottleneck)."""

    def slow(*args: object) -> None:
        raise AssertionError("the line-by-line reader was used")

    monkeypatch.setattr(ChunkEventReader, "_read_lines", slow)
    response = chunked(events(6), size=3000)
    for cut in range(1, len(response), 101):
        assert summary(feed(response, [cut])[0]) == expected(6)


def paced(events_: list[bytes]) -> tuple[bytes, list[int]]:
    """A paced response (each event its own HTTP chunk) and the cuts that make each HTTP
    chunk its own read, as a paced gateway's writes arrive."""
    head = HEAD + b"transfer-encoding: chunked\r\n\r\n"
    framed = [b"%x\r\n%b\r\n" % (len(e), e) for e in events_]
    response = head + b"".join(framed) + b"0\r\n\r\n"
    return response, list(itertools.accumulate([len(head), *map(len, framed)]))


def test_a_paced_read_is_recorded_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One HTTP chunk holding one chunk event per read goes by `ChunkEventReader.feed_event`,
    never through the general de-framing, with the same tally as the whole response."""
    response, cuts = paced([b"data: " + chunk(n, 1000 * n) + b"\n\n" for n in range(1, 7)])

    def general(*args: object) -> None:
        raise AssertionError("a paced read went the general way")

    whole = summary(feed(response)[0])
    tally = StreamTally(array("q"))
    parser = LoadResponseParser(tally)
    parser.feed(response[: cuts[0]], NOW)  # the head
    monkeypatch.setattr(LoadResponseParser, "_dechunk", general)
    for start, end in itertools.pairwise(cuts):
        parser.feed(response[start:end], NOW)
    monkeypatch.undo()
    parser.feed(response[cuts[-1] :], NOW)  # the last chunk, the general way
    assert parser.done and summary(tally) == whole == expected(6)


@pytest.mark.parametrize(
    "odd",
    [
        b"id: 2\ndata: %b\n\n",  # another field first
        b"data: %b\n\ndata: {}\n\n",  # two events in one HTTP chunk
        b"data: %b\n: note\n\n",  # a comment inside the event
        b"data:%b\n\n",  # no space after the colon (still a chunk, read the general way)
        b"data: %b\n",  # the event ends in the next HTTP chunk
    ],
)
def test_paced_reads_of_anything_else_go_the_general_way(odd: bytes) -> None:
    """Whatever the one-event path declines is read by the general path: the same tally as
    when the response is read whole."""
    texts = [b"data: " + chunk(n, 1000 * n) + b"\n\n" for n in range(1, 5)]
    texts[1] = odd % chunk(2, 2000)
    if odd.endswith(b"%b\n"):
        texts[2] = b"\n" + texts[2]
    response, cuts = paced(texts)
    with contextlib.suppress(ChunkFormatError):
        whole = summary(feed(response)[0])
        assert summary(feed(response, cuts)[0]) == whole
        return
    with pytest.raises(ChunkFormatError):
        feed(response, cuts)


def test_paced_reads_check_seq_and_ts_digits() -> None:
    """The one-event path takes ASCII digits only; a chunk with others is refused as the
    general path refuses it."""
    for bad in (b'{"seq":1x,"ts":5,"a":1}', b'{"seq":1,"ts":-5,"a":1}', b'{"seq":,"ts":5,"a":1}'):
        response, cuts = paced([b"data: " + bad + b"\n\n"])
        with pytest.raises(ChunkFormatError):
            feed(response, cuts)


CLIENT_MODULES = (
    "chunk",
    "tally",
    "sse_events",
    "sse_parser",
    "sse_load",
    "airc_load",
    "ws_frames",
    "ws_handshake",
    "ws_connection",
    "ws_load",
)


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_exported_names_exist_and_are_documented(module: str) -> None:
    loaded = importlib.import_module(f"airlane.bench.{module}")
    assert loaded.__doc__ and loaded.__all__
    for name in loaded.__all__:
        value = getattr(loaded, name)
        if callable(value):
            assert value.__doc__, f"{module}.{name} has no docstring"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([b"", b"5\r\n", b"data: ", b'{"seq":1,']))
def test_garbage_raises_only_load_protocol_errors(garbage: bytes, prefix: bytes) -> None:
    """Fuzz: whatever follows a valid head, the parser records chunks or raises
    `LoadProtocolError`, nothing else (which would escape the load client)."""
    for framing in (b"transfer-encoding: chunked\r\n", b""):
        parser = LoadResponseParser(StreamTally(array("q")), max_event_bytes=200)
        with contextlib.suppress(LoadProtocolError):
            parser.feed(HEAD + framing + b"\r\n" + prefix + garbage, NOW)
            parser.feed(garbage, NOW)
            parser.eof()
