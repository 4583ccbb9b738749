"""SSE encoding, and the encoder/decoder round trip.

Invariant: whatever events are encoded, a decoder fed the bytes in any chunks delivers the
same events, with line breaks normalised to LF and IDs persisting as section 9.2.6 says.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.sse import (
    SSEDecoder,
    SSEMessage,
    encode_comment,
    encode_event,
    encode_numbered_event,
    encode_retry,
    event_id_prefix,
)

from .chunking import PROPERTY, chunkings


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"data": b"hello"}, b"data: hello\n\n"),
        ({"data": "h\u00e9"}, "data: h\u00e9\n\n".encode()),
        ({"data": b""}, b"data: \n\n"),
        ({"data": " lead"}, b"data:  lead\n\n"),
        ({"data": "a\nb"}, b"data: a\ndata: b\n\n"),
        ({"data": b"a\r\nb\rc\n"}, b"data: a\ndata: b\ndata: c\ndata: \n\n"),
        ({"data": "x", "event": "delta"}, b"event: delta\ndata: x\n\n"),
        ({"data": "x", "id": "42"}, b"id: 42\ndata: x\n\n"),
        ({"data": "x", "id": ""}, b"id: \ndata: x\n\n"),
        ({"data": "x", "retry": 0}, b"retry: 0\ndata: x\n\n"),
        (
            {"data": "x\ny", "event": "e", "id": "1", "retry": 3000},
            b"id: 1\nevent: e\nretry: 3000\ndata: x\ndata: y\n\n",
        ),
    ],
)
def test_encode_event(kwargs: dict[str, object], expected: bytes) -> None:
    assert encode_event(**kwargs) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["event", "id"])
@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b", "\n"])
def test_encode_event_rejects_line_breaks_and_nul_in_fields(field: str, bad: str) -> None:
    with pytest.raises(ValueError, match=field):
        encode_event("x", **{field: bad})  # type: ignore[arg-type]


def test_encode_event_rejects_negative_retry() -> None:
    with pytest.raises(ValueError):
        encode_event("x", retry=-1)
    with pytest.raises(ValueError):
        encode_retry(-1)


def test_encode_comment_and_retry() -> None:
    assert encode_comment("ping") == b": ping\n\n"
    assert encode_comment() == b":\n\n"
    assert encode_comment("a\nb") == b": a\n: b\n\n"
    assert encode_retry(1000) == b"retry: 1000\n\n"


def test_comment_and_retry_blocks_dispatch_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(encode_comment("ping") + encode_retry(500) + encode_comment()) == []
    assert decoder.retry == 500


# -- round trip ----------------------------------------------------------------------------

FIELD_TEXT = st.text(st.characters(exclude_characters="\r\n\0", exclude_categories=["Cs"]))
EVENTS = st.lists(
    st.tuples(
        st.one_of(st.text(), st.text().map(str.encode)),
        st.none() | FIELD_TEXT,  # event
        st.none() | FIELD_TEXT,  # id
        st.none() | st.integers(0, 10**12),  # retry
    ),
    max_size=8,
)


def expected_messages(
    events: list[tuple[str | bytes, str | None, str | None, int | None]],
) -> list[SSEMessage]:
    """What section 9.2.6 says a client sees for these events."""
    messages = []
    last_id, retry = "", None
    for data, event, id, event_retry in events:
        text = data.decode() if isinstance(data, bytes) else data
        last_id = last_id if id is None else id
        retry = retry if event_retry is None else event_retry
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        messages.append(SSEMessage(text, event or "message", last_id or None, retry))
    return messages


@PROPERTY
@given(st.data(), EVENTS, st.booleans())
def test_round_trip(
    data: st.DataObject,
    events: list[tuple[str | bytes, str | None, str | None, int | None]],
    bom: bool,
) -> None:
    """Invariant: decode(encode(events)) == events, under any chunking of the byte stream."""
    stream = b"\xef\xbb\xbf" if bom else b""
    for payload, event, id, retry in events:
        stream += encode_event(payload, event=event, id=id, retry=retry)
        stream += encode_comment("keep-alive")
    decoder = SSEDecoder()
    received = [m for chunk in data.draw(chunkings(stream)) for m in decoder.feed(chunk)]
    assert received + decoder.close() == expected_messages(events)


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)),
        max_size=12,
    ),
    st.integers(min_value=0, max_value=2**63),
    st.binary(max_size=64).filter(lambda b: b"\n" not in b and b"\r" not in b),
)
def test_numbered_event_is_encode_event_for_one_line(prefix: str, seq: int, line: bytes) -> None:
    framed = encode_numbered_event(event_id_prefix(prefix), seq, line)
    assert framed == encode_event(line, id=f"{prefix}{seq}")


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b"])
def test_event_id_prefix_refuses_what_would_break_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match="CR, LF or NUL"):
        event_id_prefix(bad)
