"""SSEDecoder against WHATWG HTML section 9.2 (examples of 9.2.6 included).

Invariant: the messages a stream yields do not depend on how it is cut into chunks.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import SSEError, WireError
from airlane.wire.sse import SSEDecoder, SSEMessage

from .chunking import PROPERTY, SPLITTERS, chunkings

M = SSEMessage

FIXTURES: dict[str, tuple[bytes, list[SSEMessage]]] = {
    # Section 9.2.6 examples.
    "spec-stock-ticker": (b"data: YHOO\ndata: +2\ndata: 10\n\n", [M("YHOO\n+2\n10")]),
    "spec-ids": (
        b": test stream\n\ndata: first event\nid: 1\n\n"
        b"data:second event\nid\n\ndata:  third event\n\n",
        [M("first event", id="1"), M("second event"), M(" third event")],
    ),
    "spec-empty-and-newline": (b"data\n\ndata\ndata\n\ndata:", [M(""), M("\n")]),
    "spec-space-optional": (b"data:test\n\ndata: test\n\n", [M("test"), M("test")]),
    "spec-event-types": (
        b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\n",
        [M("73857293", event="add"), M("2153", event="remove")],
    ),
    # Line endings (section 9.2.5): CRLF, lone CR, lone LF, mixed.
    "crlf": (b"data: a\r\ndata: b\r\n\r\n", [M("a\nb")]),
    "cr-only": (b"data: a\rdata: b\r\rdata: c\r\r", [M("a\nb"), M("c")]),
    "mixed-endings": (b"data: a\r\ndata: b\rdata: c\n\r\n", [M("a\nb\nc")]),
    "cr-then-lf-is-one-break": (b"data: a\r\n\r\ndata: b\r\r", [M("a"), M("b")]),
    # A BOM is skipped once at the start of the stream, and only there.
    "bom": (b"\xef\xbb\xbfdata: x\n\n", [M("x")]),
    "second-bom-is-data": (
        b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: \xef\xbb\xbfy\n\n",
        [M("\ufeffy")],
    ),
    # Fields.
    "field-names-without-colon": (b"data\ndata\nevent\n\n", [M("\n")]),
    "only-one-space-stripped": (b"data:  two\nevent:   e\n\n", [M(" two", event="  e")]),
    "empty-event-type-is-message": (b"event:\ndata: x\n\n", [M("x")]),
    "unknown-field-ignored": (b"foo: bar\ndata: x\nDATA: y\n\n", [M("x")]),
    "comment-lines": (b":\n: hi\ndata: x\n:data: y\n\n", [M("x")]),
    "colon-in-value": (b"data: a: b:c\n\n", [M("a: b:c")]),
    "no-data-no-dispatch": (b"event: e\nid: 9\n\ndata: x\n\n", [M("x", id="9")]),
    "event-type-resets": (b"event: e\ndata: 1\n\ndata: 2\n\n", [M("1", event="e"), M("2")]),
    "id-persists": (b"id: 1\ndata: a\n\ndata: b\n\n", [M("a", id="1"), M("b", id="1")]),
    "id-with-nul-ignored": (b"id: 1\n\nid: 2\x003\ndata: a\n\n", [M("a", id="1")]),
    "id-reset-by-empty": (b"id: 1\ndata: a\n\nid:\ndata: b\n\n", [M("a", id="1"), M("b")]),
    "retry": (b"retry: 1500\ndata: a\n\n", [M("a", retry=1500)]),
    "retry-invalid-ignored": (
        b"retry: 10\n\nretry: 1a\nretry:\nretry: -5\nretry:  7\nretry: 1.5\ndata: a\n\n",
        [M("a", retry=10)],
    ),
    "retry-leading-zeros": (b"retry: " + b"0" * 5000 + b"42\ndata: a\n\n", [M("a", retry=42)]),
    "retry-absurd-ignored": (b"retry: 1" + b"0" * 5000 + b"\ndata: a\n\n", [M("a")]),
    # UTF-8: decoded per field value; invalid bytes become U+FFFD.
    "utf8": ("data: h\u00e9llo \u4e16\u754c \U0001f600\n\n".encode(), [M("h\u00e9llo 世界 😀")]),
    "invalid-utf8-replaced": (b"data: a\xffb\xe2\x82\n\n", [M("a\ufffdb\ufffd")]),
    "truncated-at-eof": (b"data: never\n", []),
}


def decode(chunks: list[bytes], decoder: SSEDecoder | None = None) -> list[SSEMessage]:
    decoder = decoder or SSEDecoder()
    messages = [message for chunk in chunks for message in decoder.feed(chunk)]
    return messages + decoder.close()


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize(("stream", "expected"), FIXTURES.values(), ids=FIXTURES.keys())
def test_fixture(stream: bytes, expected: list[SSEMessage], split: object) -> None:
    assert callable(split)
    assert decode(split(stream)) == expected


@pytest.mark.parametrize(("stream", "expected"), FIXTURES.values(), ids=FIXTURES.keys())
@pytest.mark.parametrize("trailing", [b"data: partial", b"data: x\nid: 5\n", b"event: e\r"])
def test_fixture_with_trailing_partial_event(
    stream: bytes, expected: list[SSEMessage], trailing: bytes
) -> None:
    # A complete stream followed by the start of an event that never finishes.
    decoder = SSEDecoder()
    assert decoder.feed(stream + trailing) == expected
    assert decoder.close() == []


def test_cr_at_chunk_end_then_lf_is_one_line_break() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # the LF of CRLF, not a blank line
    assert decoder.feed(b"data: b\r") == []
    assert decoder.feed(b"\r") == [M("a\nb")]
    assert decoder.feed(b"\n\n") == []  # CRLF, then an empty block: nothing to dispatch


def test_event_dispatches_as_soon_as_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\r") == [M("a")]  # no waiting for a possible LF


def test_multibyte_character_split_across_feeds() -> None:
    decoder = SSEDecoder()
    encoded = "data: \u20ac\U0001f600\n\n".encode()
    messages = [
        message for i in range(len(encoded)) for message in decoder.feed(encoded[i : i + 1])
    ]
    assert messages == [M("\u20ac\U0001f600")]


def test_bom_split_across_feeds_and_bom_prefix_only() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"\xbb") == []
    assert decoder.feed(b"\xbfdata: x\n\n") == [M("x")]
    # Something that only starts like a BOM is kept as data.
    assert decode([b"\xef", b"\xbbdata: x\n\n"]) == []  # the field name is then not "data"
    assert decode([b"\xef\xbb"]) == []


def test_last_event_id_and_retry_properties() -> None:
    decoder = SSEDecoder()
    assert decoder.last_event_id == ""
    assert decoder.retry is None
    decoder.feed(b"id: 7\nretry: 250\n")
    assert decoder.retry == 250  # takes effect at once
    assert decoder.last_event_id == ""  # only when the block is dispatched
    decoder.feed(b"\n")
    assert decoder.last_event_id == "7"


def test_close_discards_open_event_and_keeps_source_state() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 3\nretry: 100\ndata: a\n\ndata: lost\nid: 4\n") == [
        M("a", id="3", retry=100)
    ]
    assert decoder.close() == []
    # The next stream of the same source (a reconnect): a BOM is allowed again, and the
    # last event ID and reconnection time carry over.
    assert decoder.last_event_id == "3"
    assert decoder.feed(b"\xef\xbb\xbfdata: b\n\n") == [M("b", id="3", retry=100)]


def test_resume_with_last_event_id() -> None:
    decoder = SSEDecoder(last_event_id="41")
    assert decoder.feed(b"data: a\n\nid: 42\ndata: b\n\n") == [M("a", id="41"), M("b", id="42")]


def test_line_limit_partial_line() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    decoder.feed(b"data: " + b"x" * 10)
    with pytest.raises(SSEError, match="line longer than the limit of 16 bytes"):
        decoder.feed(b"x")
    with pytest.raises(SSEError):  # unusable until closed
        decoder.feed(b"\n\n")
    decoder.close()
    assert decoder.feed(b"data: ok\n\n") == [M("ok")]


def test_line_limit_complete_line_and_exact_fit() -> None:
    assert SSEDecoder(max_line_bytes=8).feed(b"data: ab\n\n") == [M("ab")]
    with pytest.raises(SSEError):
        SSEDecoder(max_line_bytes=8).feed(b"data: abc\n\n")
    with pytest.raises(SSEError):  # a prefix from an earlier chunk counts too
        decoder = SSEDecoder(max_line_bytes=8)
        decoder.feed(b"data:")
        decoder.feed(b" abc\n")


def test_event_limit() -> None:
    decoder = SSEDecoder(max_event_bytes=10)
    assert decoder.feed(b"data: 1234\ndata: 1234\n\n") == [M("1234\n1234")]
    with pytest.raises(SSEError, match="event longer than the limit of 10 bytes") as info:
        decoder.feed(b"data: 1234\ndata: 12345\n")
    assert isinstance(info.value, WireError)


def test_invalid_limits_rejected() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=0)


# -- properties --------------------------------------------------------------------------


# Pieces of the grammar, so that random streams are mostly meaningful.
TOKENS = st.sampled_from(
    [
        *(b"data", b"id", b"event", b"retry", b":", b" ", b"\r", b"\n", b"\r\n", b"x", b"7"),
        *(b"\0", b"\xef\xbb\xbf", "\u20ac".encode(), b"\xff", b"\xe2\x82"),
    ]
)
STREAMS = st.one_of(st.binary(max_size=200), st.lists(TOKENS, max_size=80).map(b"".join))


@PROPERTY
@given(st.data(), STREAMS)
def test_any_bytes_decode_the_same_however_chunked(data: st.DataObject, stream: bytes) -> None:
    """Invariant: chunking is invisible, and arbitrary bytes never raise (within limits)."""
    expected = decode([stream])
    assert decode(data.draw(chunkings(stream))) == expected


@PROPERTY
@given(st.data(), STREAMS)
def test_oversized_input_raises_sse_error_only(data: st.DataObject, stream: bytes) -> None:
    """Invariant: with tiny limits, the decoder either decodes or raises SSEError."""
    decoder = SSEDecoder(max_line_bytes=8, max_event_bytes=12)
    try:
        for chunk in data.draw(chunkings(stream)):
            decoder.feed(chunk)
    except SSEError:
        pass


def reference_decode(stream: bytes) -> list[SSEMessage]:
    """A literal reading of section 9.2.5/9.2.6: decode the whole stream, then split lines."""
    text = stream.decode("utf-8", "replace").removeprefix("\ufeff")
    *lines, _unterminated = re.split(r"\r\n|\r|\n", text)
    messages: list[SSEMessage] = []
    data, event_type, id_buffer, last_id, retry = "", "", "", "", None
    for line in lines:
        if not line:
            last_id = id_buffer
            if data:
                messages.append(M(data[:-1], event_type or "message", last_id or None, retry))
            data, event_type = "", ""
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data += value + "\n"
        elif name == "event":
            event_type = value
        elif name == "id" and "\0" not in value:
            id_buffer = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            retry = int(value)
    return messages


@PROPERTY
@given(STREAMS)
def test_matches_reference_reading_of_the_spec(stream: bytes) -> None:
    """Invariant: bytewise line parsing equals decoding the whole stream first."""
    assert decode([stream]) == reference_decode(stream)
