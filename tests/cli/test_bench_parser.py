"""`LoadResponseParser` (the bench's sans-I/O HTTP/SSE reader) and the chunk head reader,
fed each response whole, one byte at a time, and with trailing data."""

from __future__ import annotations

from array import array

import pytest

from airlane.bench.chunk import ChunkFormatError, read_seq_ts
from airlane.bench.sse_parser import LoadProtocolError, LoadResponseParser
from airlane.bench.tally import StreamTally

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


def chunk(seq: int, ts: int) -> bytes:
    return b'{"seq":%d,"ts":%d,"id":"x","padding":"...."}' % (seq, ts)


def events(count: int) -> bytes:
    body = b"".join(b"data: " + chunk(n, 1000 * n) + b"\n\n" for n in range(1, count + 1))
    return b": ping\n\n" + body


def chunked(body: bytes, size: int = 37) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    framed = b"".join(b"%x;ext=1\r\n%b\r\n" % (len(p), p) for p in pieces)
    return HEAD + b"transfer-encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


def parse(response: bytes, step: int | None = None) -> tuple[StreamTally, LoadResponseParser]:
    tally = StreamTally(array("q"))
    parser = LoadResponseParser(tally)
    step = step or len(response)
    for i in range(0, len(response), step):
        parser.feed(response[i : i + step], now_ns=10**9)
    return tally, parser


@pytest.mark.parametrize("step", [None, 1, 7])
@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_every_chunk_is_recorded(step: int | None, framing: str) -> None:
    body = events(12)
    if framing == "chunked":
        response = chunked(body)
    elif framing == "length":
        response = HEAD + b"content-length: %d\r\n\r\n" % len(body) + body
    else:
        response = HEAD + b"\r\n" + body
    tally, parser = parse(response, step)
    if framing == "close":
        assert not parser.done
        parser.eof()
    assert parser.done and parser.status == 200
    assert tally.received == 12 and tally.disorder == 0
    assert tally.payload_bytes == sum(len(chunk(n, 1000 * n)) for n in range(1, 13))
    assert list(tally.lags) == [10**9 - 1000 * n for n in range(1, 13)]


def test_trailing_data_is_refused() -> None:
    with pytest.raises(LoadProtocolError):
        parse(chunked(events(2)) + b"junk")


def test_a_cut_response_is_an_error() -> None:
    response = chunked(events(5))
    _, parser = parse(response[: len(response) // 2])
    with pytest.raises(LoadProtocolError):
        parser.eof()


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        HEAD + b"transfer-encoding: gzip\r\n\r\n",
        HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n",
        HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabcXY",
        HEAD + b"\r\ndata: {not a chunk}\n\n",
    ],
)
def test_malformed_responses_are_the_servers_fault(response: bytes) -> None:
    with pytest.raises(LoadProtocolError):
        parse(response)


def test_buffers_are_bounded() -> None:
    tally = StreamTally(array("q"))
    parser = LoadResponseParser(tally, max_head_bytes=100, max_event_bytes=100)
    with pytest.raises(LoadProtocolError):
        parser.feed(b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 50, 0)
    parser = LoadResponseParser(tally, max_event_bytes=100)
    parser.feed(HEAD + b"\r\n", 0)
    with pytest.raises(LoadProtocolError):
        parser.feed(b"data: " + b"x" * 200, 0)


def test_chunk_heads() -> None:
    assert read_seq_ts(chunk(7, 123456789)) == (7, 123456789)
    assert read_seq_ts(b"xx" + chunk(3, 9), 2) == (3, 9)
    for bad in (b'{"id":1}', b'{"seq":1,"x":2,', b'{"seq":a,"ts":1,', b'{"seq":1,"ts":2'):
        with pytest.raises(ChunkFormatError):
            read_seq_ts(bad)


def test_out_of_order_chunks_are_counted() -> None:
    body = b"".join(b"data: " + chunk(n, 0) + b"\n\n" for n in (1, 2, 4, 3))
    tally, _ = parse(HEAD + b"\r\n" + body)
    assert tally.received == 4 and tally.disorder == 2
