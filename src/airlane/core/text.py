"""`TextBuffer`: text that grows by appends, in linear time.

A stream's text arrives as thousands of small deltas. Keeping it as one ``str`` and writing
``text += delta`` copies everything so far on every append, because CPython extends a string
in place only when nothing else refers to it (a local variable, never a dict value or an
attribute): a 1 MB answer in 100-byte deltas copies about 5 GB. `TextBuffer` keeps the pieces
and joins them when the text is read, once per read after new appends.
"""

from __future__ import annotations

__all__ = ["TextBuffer"]


class TextBuffer:
    """Appendable text: `append` is O(len(piece)), `str()` joins what was appended since the
    last read. ``len()`` is the length in characters, kept as pieces come."""

    __slots__ = ("_length", "_parts")

    def __init__(self, text: str = "") -> None:
        self._parts: list[str] = [text] if text else []
        self._length = len(text)

    def append(self, piece: str) -> None:
        """Add ``piece`` at the end."""
        if piece:
            self._parts.append(piece)
            self._length += len(piece)

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        parts = self._parts
        if not parts:
            return ""
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # join once; a later read with no appends is free
        return parts[0]

    def __repr__(self) -> str:
        return f"TextBuffer({str(self)!r})"
