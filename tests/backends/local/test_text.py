"""Whole characters from token ids, and stop sequences across pieces (no model needed: a
byte-level tokenizer's ids are stood in for by the bytes themselves)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from airlane.backends.local.detokenize import IncrementalDetokenizer
from airlane.backends.local.stops import StopMatcher


def decode(ids: Sequence[int]) -> str:
    """What a byte-level tokenizer does with byte tokens: join the bytes, decode leniently."""
    return bytes(ids).decode("utf-8", "replace")


def stream(ids: Sequence[int]) -> list[str]:
    detokenizer = IncrementalDetokenizer(decode)
    pieces = [detokenizer.push(token) for token in ids]
    return [*pieces, detokenizer.flush()]


@given(st.text(max_size=60))
def test_valid_text_comes_out_whole_character_by_character(text: str) -> None:
    pieces = stream(list(text.encode()))
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces) or "\ufffd" in text


@given(st.binary(max_size=60))
def test_any_bytes_come_out_as_the_whole_decode(data: bytes) -> None:
    assert "".join(stream(list(data))) == decode(list(data))


def test_a_multi_byte_character_waits_for_its_last_byte() -> None:
    detokenizer = IncrementalDetokenizer(decode)
    euro = "€".encode()  # three bytes
    assert [detokenizer.push(b) for b in euro] == ["", "", "€"]
    assert detokenizer.flush() == ""


def feed_all(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(piece) for piece in pieces) + matcher.flush()
    return out, matcher.stopped


@given(st.text(max_size=40), st.text(min_size=1, max_size=5), st.data())
def test_nothing_from_a_stop_sequence_on_is_emitted(
    text: str, stop: str, data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out, stopped = feed_all([stop], pieces)
    if stop in text:
        assert stopped and out == text[: text.index(stop)]
    else:
        assert not stopped and out == text


def test_the_earliest_of_several_stops_wins_across_pieces() -> None:
    assert feed_all(["END", "st"], ["fir", "st E", "ND"]) == ("fir", True)
    assert feed_all(["END", "ST"], ["fir", "st E", "ND"]) == ("first ", True)
    assert feed_all(["\n\n"], ["a\n", "\nb"]) == ("a", True)
    assert feed_all([], ["a", "b"]) == ("ab", False)
