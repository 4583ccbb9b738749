"""Stop sequences on streamed text: nothing at or after a stop sequence is ever emitted.

Text arrives in pieces, and a stop sequence may span pieces, so the tail of the text that could
still be the start of a stop sequence is held back until the next piece says whether it is.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feeds text through, holding back what might begin a stop sequence."""

    __slots__ = ("_held", "_stops", "stopped")

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""
        self.stopped = False
        """True once a stop sequence appeared: `feed` returns nothing more."""

    def feed(self, text: str) -> str:
        """The part of ``text`` (after what was held) that is certainly not in a stop
        sequence."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        text = self._held + text
        cut = min((found for stop in self._stops if (found := text.find(stop)) >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = self._longest_stop_prefix_at_end(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, at the end of the text (it did not become a stop sequence)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _longest_stop_prefix_at_end(self, text: str) -> int:
        """How many characters at the end of ``text`` are a proper prefix of a stop."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
