"""HTTP/1.1 for the upstream client, sans-I/O: request bytes out, response events in.

`encode_request` writes one request (RFC 9112 sections 3 and 5), its body framed by
``Content-Length`` (section 6.2). `ResponseParser` turns the bytes one connection receives into
events; it has no socket and no clock::

    ResponseHead   the status line and header fields (interim 1xx responses are skipped)
    bytes          a piece of the body, with the transfer framing already removed (plain
                   bytes, not wrapped: a streaming response yields one per upstream read)
    ResponseEnd    the body is complete; ``keep_alive`` says whether the connection may carry
                   another request

Message framing (RFC 9112 section 6.3: chunked, ``Content-Length``, or up to the end of the
connection) is done by llhttp through httptools, the C parser uvicorn uses: it is fast,
incremental and long tested, so it is not rewritten here. Two things it leaves to its caller
are done here: a bound on the size of the response head (llhttp buffers header lines without
limit), and the end of a body delimited by the connection closing, which the caller reports
with `ResponseParser.receive_eof`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

import httptools

from airlane.backends.upstream_errors import UpstreamDisconnected, UpstreamProtocolError

__all__ = [
    "DEFAULT_MAX_HEAD_BYTES",
    "ResponseEnd",
    "ResponseEvent",
    "ResponseHead",
    "ResponseParser",
    "encode_request",
]

DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""Largest response head (status line and header fields) accepted: 64 KiB, four times what
common servers send at most, and far below what would hurt when 1,000 streams start at once."""

# RFC 9110 section 5.6.2: a token (method, field name) is one or more of these characters.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A request target or field value must not hold CR, LF or NUL (RFC 9110 section 5.5).
_UNSAFE = re.compile(r"[\r\n\0]")
_NO_BODY_STATUSES = (204, 304)


def encode_request(
    method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
) -> bytes:
    """One request: the request line, ``headers`` (which must include ``Host``), a
    ``Content-Length`` for ``body``, then ``body``.

    Raises:
        ValueError: a method or field name that is not a token, a target with a space, or a
            target or field value with CR, LF or NUL (it would split the request).
    """
    if not _TOKEN.fullmatch(method):
        raise ValueError(f"invalid HTTP method {method!r}")
    if not target or " " in target or _UNSAFE.search(target):
        raise ValueError(f"invalid request target {target!r}")
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _UNSAFE.search(value):
            raise ValueError(f"invalid header field {name!r}: {value!r}")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}\r\n\r\n")
    return "\r\n".join(lines).encode("latin-1") + body


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """The status line and header fields of a final (non-1xx) response."""

    status: int
    """The status code."""
    reason: str
    """The reason phrase (may be empty)."""
    headers: tuple[tuple[str, str], ...]
    """Field names in lower case, values as sent, in order."""

    def header(self, name: str) -> str | None:
        """The value of the first field called ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ResponseEnd:
    """The response is complete."""

    keep_alive: bool
    """True if the connection may carry another request."""


ResponseEvent = ResponseHead | bytes | ResponseEnd
"""What `ResponseParser` returns: a head, a piece of the body, or the end."""


class _State(enum.Enum):
    HEAD = "reading the response head"
    BODY = "reading the response body"
    DONE = "the response is complete"
    FAILED = "the response was malformed"


# The states as globals: the parser tests them per read and per body piece, and on Python 3.11
# a member read off its enum class costs three times a global's lookup.
_IN_HEAD, _IN_BODY, _DONE, _FAILED = _State.HEAD, _State.BODY, _State.DONE, _State.FAILED


class ResponseParser:
    """Parses the one response to one request; see the module docstring.

    Feed every byte the connection receives to `receive_data`, and call `receive_eof` when the
    peer closes it. Once `ResponseEnd` was returned, further bytes are the peer's mistake (no
    second request was sent): they are dropped and the connection is marked not reusable.

    Raises `UpstreamProtocolError` for a malformed response or an oversized head, and
    `UpstreamDisconnected` when the connection ends before the response does. The parser is
    then spent: it raises the same error again.
    """

    def __init__(self, *, max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES) -> None:
        if max_head_bytes < 1:
            raise ValueError(f"max_head_bytes must be >= 1, not {max_head_bytes}")
        # Calls the on_* methods below, so it holds this parser and this parser holds it: a
        # reference cycle until `close` (the connection calls it when it is done with it).
        self._llhttp: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self._max_head_bytes = max_head_bytes
        self._state = _IN_HEAD
        self._head_bytes = 0
        self._reason = bytearray()
        self._headers: list[tuple[str, str]] = []
        self._interim = False  # the head being read is a 1xx response
        self._until_eof = False  # the body ends when the connection does
        self._keep_alive = False
        self._events: list[ResponseEvent] = []
        self._error: UpstreamProtocolError | UpstreamDisconnected | None = None
        self.reusable = True
        """False once the peer sent bytes after the response (the connection is spoiled)."""

    @property
    def complete(self) -> bool:
        """True once `ResponseEnd` was returned."""
        return self._state is _DONE

    def receive_data(self, data: bytes) -> list[ResponseEvent]:
        """The events completed by ``data``, in order."""
        state = self._state
        if state is _DONE:
            self.reusable = self.reusable and not data
            return []
        if self._error is not None:
            raise self._error
        if state is _IN_HEAD:
            # Counted before parsing, so that a head that never ends is stopped after at most
            # one read past the limit; bytes of the body read along with the head count too.
            self._head_bytes += len(data)
        llhttp = self._llhttp
        assert llhttp is not None  # set until close(), which leaves the state DONE or FAILED
        try:
            llhttp.feed_data(data)
        except httptools.HttpParserUpgrade:
            error = UpstreamProtocolError("upstream switched protocols unasked")
            raise self._failed(error) from None
        except httptools.HttpParserError as exc:
            if self._state is not _DONE:
                raise self._failed(_malformed(exc)) from None
            # Garbage after a complete response spoils the connection, not the response.
            self.reusable = False
        if self._state is _IN_HEAD and self._head_bytes > self._max_head_bytes:
            limit = self._max_head_bytes
            raise self._failed(
                UpstreamProtocolError(f"response head longer than the limit of {limit} bytes")
            )
        events, self._events = self._events, []
        return events

    def receive_eof(self) -> list[ResponseEvent]:
        """The peer closed the connection: the end of a body delimited by that, or else an
        `UpstreamDisconnected` error."""
        if self._state is _DONE:
            return []
        if self._error is not None:
            raise self._error
        if self._state is _IN_BODY and self._until_eof:
            self._state = _DONE
            return [ResponseEnd(keep_alive=False)]
        where = "head" if self._state is _IN_HEAD else "body"
        raise self._failed(
            UpstreamDisconnected(f"upstream closed the connection in the middle of the {where}")
        )

    def close(self) -> None:
        """Let go of llhttp, which holds this parser's call-backs: without this, the two form
        a reference cycle that only the cyclic collector frees (one per request). A parser
        closed before its response was complete is spent, as if the connection had ended."""
        if self._llhttp is None:
            return
        self._llhttp = None
        if self._state is _IN_HEAD or self._state is _IN_BODY:
            self._failed(UpstreamDisconnected("the response parser was closed"))

    # -- llhttp callbacks (through httptools) ----------------------------------------------

    def on_message_begin(self) -> None:
        """A response starts: a second one after ours means the peer sent stray bytes."""
        if self._state is _DONE:
            self.reusable = False

    def on_status(self, reason: bytes) -> None:
        """A piece of the reason phrase."""
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header field, complete."""
        self._headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        """The head is complete: emit it, unless it is an interim 1xx response."""
        if self._state is _DONE:
            return
        llhttp = self._llhttp
        assert llhttp is not None  # called from within feed_data
        status = llhttp.get_status_code()
        if 100 <= status < 200:
            # RFC 9110 section 15.2: interim responses precede the final one; none of them
            # matters to a client that sent no Expect header.
            self._interim = True
        else:
            head = ResponseHead(status, self._reason.decode("latin-1"), tuple(self._headers))
            self._events.append(head)
            self._state = _IN_BODY
            self._keep_alive = llhttp.should_keep_alive()
            self._until_eof = _delimited_by_close(head)
        self._reason.clear()
        self._headers = []

    def on_body(self, body: bytes) -> None:
        """A piece of the body."""
        if self._state is _IN_BODY:
            self._events.append(body)

    def on_message_complete(self) -> None:
        """The response (or an interim one) is complete."""
        if self._interim:
            self._interim = False
        elif self._state is _IN_BODY:
            self._state = _DONE
            self._events.append(ResponseEnd(self._keep_alive and self.reusable))

    def _failed(
        self, error: UpstreamProtocolError | UpstreamDisconnected
    ) -> UpstreamProtocolError | UpstreamDisconnected:
        """Spend the parser on ``error``; return it, for the caller to raise."""
        self._state = _FAILED
        self._error = error
        self._events = []
        return error


def _malformed(exc: httptools.HttpParserError) -> UpstreamProtocolError:
    """Our error for llhttp's, or the error one of our callbacks raised inside it."""
    if isinstance(exc.__context__, UpstreamProtocolError):
        return exc.__context__
    return UpstreamProtocolError(f"upstream sent a malformed HTTP response: {exc}")


def _delimited_by_close(head: ResponseHead) -> bool:
    """True if the body of ``head`` lasts until the connection closes (RFC 9112 section 6.3,
    rule 8): no ``Transfer-Encoding``, no ``Content-Length``, and a status that has a body."""
    if head.status in _NO_BODY_STATUSES:
        return False
    return head.header("transfer-encoding") is None and head.header("content-length") is None
