"""Numbers in text a client sends: ASCII decimal digits only.

``str.isdigit()`` is true for any script's digits ("٣") and for superscripts ("²"), and
``int()`` takes the first kind (as 3) and refuses the second; a check with one and a parse with
the other accepts what it should refuse, or fails where it promised to succeed.
"""

from __future__ import annotations

__all__ = ["decimal"]


def decimal(text: str, max_digits: int = 19) -> int | None:
    """``text`` as a non-negative integer written in at most ``max_digits`` ASCII decimal
    digits; None for anything else (a sign, spaces, other scripts' digits, nothing)."""
    if not text or len(text) > max_digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)
