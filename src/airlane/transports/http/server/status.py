"""Response heads: status lines, the ``date`` header, and the server's own small responses
(400, 414, 431, 500, 503) for what never reaches the application."""

from __future__ import annotations

import http
import re
import time
from email.utils import formatdate

__all__ = [
    "INVALID_HEADER_NAME",
    "INVALID_HEADER_VALUE",
    "DateHeader",
    "plain_response",
    "status_line",
]


def _phrase(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_STATUS_LINES = {
    status: b"HTTP/1.1 %d %b\r\n" % (status, _phrase(status)) for status in range(100, 600)
}

INVALID_HEADER_NAME = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9a-zA-Z]").search
"""Finds a byte that no header name (an RFC 9110 token) may hold."""
INVALID_HEADER_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]").search
"""Finds a byte that no header value may hold (controls but tab, CR and LF among them)."""


def status_line(status: int) -> bytes:
    """``HTTP/1.1 <status> <phrase>\\r\\n``; a status outside 100-599 is a `ValueError`."""
    line = _STATUS_LINES.get(status)
    if line is None:
        raise ValueError(f"{status!r} is not an HTTP status code")
    return line


class DateHeader:
    """The ``date`` header line, formatted at most once a second (it has one-second
    resolution, and formatting it per response would cost more than the rest of the head)."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    @property
    def line(self) -> bytes:
        """``date: <IMF-fixdate>\\r\\n`` for now."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._line = b"date: %b\r\n" % formatdate(now, usegmt=True).encode()
        return self._line


def plain_response(
    status: int, text: str, date: bytes, *, extra: bytes = b"", head_only: bool = False
) -> bytes:
    """A whole ``text/plain`` response that closes the connection: what the server answers
    itself (a malformed request, a failed application). ``extra`` is more header lines."""
    body = text.encode()
    head = b"%b%bcontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n%b" % (
        status_line(status),
        date,
        len(body),
        extra,
    )
    return b"%bconnection: close\r\n\r\n%b" % (head, b"" if head_only else body)
