"""UTF-8 boundaries: cut and reassemble byte strings without splitting a character.

A transport that splits text into chunks (frames, datagrams, SSE events of bounded size) must
cut between characters, or the peer sees U+FFFD. The cut is found on the *bytes*: in UTF-8
(RFC 3629 section 3) every byte of the form ``0b10xxxxxx`` continues a sequence, every other
byte starts one, and a sequence is at most four bytes long. Counting ``str`` code points, as
the seed's example did, gives byte offsets that are wrong for any non-ASCII text.

The receiving side uses `Utf8Reassembler`, which holds back the (at most three) bytes of a
character that has not fully arrived yet.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

from airlane.wire.errors import DecodeError

__all__ = ["Utf8Reassembler", "chunk_utf8", "utf8_safe_cut"]

# The longest UTF-8 sequence is four bytes (RFC 3629 section 3), so a boundary is never more
# than three bytes before any position in valid UTF-8.
_MAX_SEQUENCE = 4


def _sequence_length(lead: int) -> int:
    """How many bytes a sequence starting with ``lead`` claims (0 for a continuation byte)."""
    if lead < 0x80:
        return 1
    if lead < 0xC0:
        return 0
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4


def utf8_safe_cut(data: bytes, limit: int) -> int:
    """Return the largest index ``<= limit`` at which ``data`` can be cut between characters.

    ``data[:result]`` then ends on a character boundary. For valid UTF-8 the result is at most
    three bytes below ``limit``. For invalid input (stray continuation bytes), where no
    character could be split anyway, ``limit`` itself is returned.

    Raises:
        ValueError: if ``limit`` is negative.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if limit >= len(data):
        return len(data)
    start = limit
    # Walk back over at most three continuation bytes to the byte that starts the sequence.
    while start > 0 and limit - start < _MAX_SEQUENCE - 1 and 0x80 <= data[start] < 0xC0:
        start -= 1
    if start == limit:
        return limit
    # Cut before the sequence only if it really extends past the limit.
    if start + _sequence_length(data[start]) > limit:
        return start
    return limit


def chunk_utf8(data: bytes, size: int) -> Iterator[bytes]:
    """Split ``data`` into pieces of at most ``size`` bytes, each ending on a character boundary.

    Joining the pieces gives back ``data``. If ``data`` ends inside a character, the last
    piece ends there too: the function cuts, it does not validate.

    Raises:
        ValueError: if ``size`` is below 4, the length of the longest UTF-8 sequence, so a
            piece could not always hold a whole character.
    """
    if size < _MAX_SEQUENCE:
        raise ValueError(f"size must be at least {_MAX_SEQUENCE} bytes, got {size}")
    start = 0
    while start < len(data):
        # utf8_safe_cut steps back at most three bytes, so each piece is non-empty.
        end = utf8_safe_cut(data, start + size)
        yield data[start:end]
        start = end


class Utf8Reassembler:
    """Turn a stream of byte chunks into text, holding back split characters.

    Each `feed` returns only complete characters; the bytes of a character cut by a chunk
    boundary (at most three) wait inside for the rest. Decoding is strict: unlike a browser's
    event stream parser, which substitutes U+FFFD, invalid UTF-8 here is the peer's error and
    raises `DecodeError`. After an error the reassembler is reset and can be reused.
    """

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")

    @property
    def pending(self) -> int:
        """Number of bytes held back because their character is incomplete (0 to 3)."""
        buffered, _flag = self._decoder.getstate()
        return len(buffered)

    def feed(self, data: bytes) -> str:
        """Decode ``data`` and return every character completed so far.

        Raises:
            DecodeError: if the bytes are not valid UTF-8.
        """
        return self._decode(data, final=False)

    def flush(self) -> str:
        """End the stream: return what is left and reset.

        Raises:
            DecodeError: if the stream ended in the middle of a character.
        """
        return self._decode(b"", final=True)

    def _decode(self, data: bytes, *, final: bool) -> str:
        try:
            return self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            self._decoder.reset()
            raise DecodeError(f"invalid UTF-8: {exc.reason}") from exc
