"""Token ids in, text out, one token at a time, never splitting a character.

A byte-level tokenizer's tokens are byte sequences: one token may hold half of a multi-byte
UTF-8 character, and decoding one token alone may also lose a leading space that only the
token before it explains. So the text of new tokens is read as the difference between two
decodes of a short window that starts a little before them: the window's text minus the text
it had before the new tokens. A difference that ends in U+FFFD (the replacement character an
incomplete UTF-8 sequence decodes to) is held until the next token completes it; `flush` gives
whatever is held at the end. The concatenation of everything returned is the decode of all the
ids, as a non-streamed generation would print it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["IncrementalDetokenizer"]

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Text deltas from token ids, whole characters only."""

    __slots__ = ("_decode", "_ids", "_prefix", "_read")

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0  # where the decoding window starts
        self._read = 0  # ids before this were returned as text

    @property
    def ids(self) -> list[int]:
        """Every id pushed so far."""
        return self._ids

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes ('' while a character is unfinished)."""
        self._ids.append(token_id)
        return self._advance(final=False)

    def flush(self) -> str:
        """The text still held (an unfinished character at the very end decodes as U+FFFD)."""
        return self._advance(final=True)

    def _advance(self, *, final: bool) -> str:
        ids = self._ids
        before = self._decode(ids[self._prefix : self._read])
        after = self._decode(ids[self._prefix :])
        if len(after) <= len(before) or (after.endswith(_REPLACEMENT) and not final):
            return ""
        self._prefix, self._read = self._read, len(ids)
        return after[len(before) :]
