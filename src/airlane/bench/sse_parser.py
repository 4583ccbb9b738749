"""`LoadResponseParser`: one HTTP/1.1 load-test response, bytes in, chunk records out.

Sans-I/O: `feed` takes the bytes as they arrive and the time they arrived, and records each
chunk into a `StreamTally`; no sockets, no clock. It understands just what the load client
needs, incrementally:

1. the response head (RFC 9112 sections 4-5): status line and header fields, up to a blank
   line;
2. the body framing (RFC 9112 sections 6-7): ``Transfer-Encoding: chunked`` (chunk-size line,
   chunk data, CRLF, ..., a zero-size chunk and trailer fields), ``Content-Length``, or
   delimited by the connection closing;
3. the event stream inside, read by `airlane.bench.sse_events.ChunkEventReader`.

De-framing does not copy: the chunk data of each received buffer is handed on as views of it,
and only the few bytes of a framing line cut by a read boundary are carried over. The gateway
writes one chunk per few events, so the common case has a fast path (`_whole_chunks`: one
regular-expression match per chunk); a small state machine takes everything else (a chunk cut
by a read, the last chunk and its trailer fields, framing that is valid but unusual).

Everything buffered is bounded: a head over ``max_head_bytes`` or an unterminated event over
``max_event_bytes`` is a `LoadProtocolError`, as is any framing the parser does not accept.
"""

from __future__ import annotations

import enum
import re
from typing import Protocol

from airlane.bench.chunk import LoadProtocolError
from airlane.bench.sse_events import DEFAULT_MAX_EVENT_BYTES, ChunkEventReader
from airlane.bench.tally import StreamTally

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_HEAD_BYTES",
    "BodyReader",
    "LoadProtocolError",
    "LoadResponseParser",
]

DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""A response head larger than this is not from the gateway."""

_MAX_FRAMING_LINE = 1024
"""A chunk-size line or trailer field longer than this is not from the gateway."""

# A chunk-size line as the gateway writes it (hex digits only), and the CRLF that ends a chunk's
# data followed by the next one. Anything else (chunk extensions, a line cut by the read) is
# left to the step-by-step reading.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})\r\n")
_NEXT_SIZE_LINE = re.compile(rb"\r\n([0-9A-Fa-f]{1,15})\r\n")


class _State(enum.Enum):
    HEAD = "head"
    SIZE = "chunk-size line"
    DATA = "chunk data"
    DATA_END = "CRLF after chunk data"
    TRAILER = "trailer fields"
    IDENTITY = "body"
    DONE = "done"


class BodyReader(Protocol):
    """Reads a response body's pieces (de-chunked) and records what they complete."""

    def feed(self, pieces: list[bytes | memoryview], now_ns: int) -> None:
        """Take the next pieces of the body."""
        ...


class LoadResponseParser:
    """Parses one response; see the module docstring."""

    __slots__ = (
        "_carry",
        "_events",
        "_length_delimited",
        "_max_head",
        "_remaining",
        "_sse",
        "_state",
        "status",
    )

    def __init__(
        self,
        tally: StreamTally,
        *,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        body: BodyReader | None = None,
    ) -> None:
        # The body's reader: SSE events by default; gRPC-Web frames for that load client.
        self._events: BodyReader = body or ChunkEventReader(tally, max_event_bytes=max_event_bytes)
        # The SSE reader, whose one-event path the paced case takes (see `feed`).
        self._sse = self._events if isinstance(self._events, ChunkEventReader) else None
        self._max_head = max_head_bytes
        self._state = _State.HEAD
        self._carry = b""  # an unfinished head or framing line
        self._remaining = 0  # bytes left in the current chunk (or Content-Length body)
        self._length_delimited = False
        self.status = 0
        """The response status, once the head was parsed."""

    @property
    def done(self) -> bool:
        """True once the whole response was parsed."""
        return self._state is _State.DONE

    def feed(self, data: bytes, now_ns: int) -> None:
        """Parse bytes that arrived at ``now_ns``; record the chunks they complete.

        Raises:
            LoadProtocolError: the response is not what the load client accepts.
        """
        if self._carry:
            data, self._carry = self._carry + data, b""
        state = self._state
        if state is _State.SIZE and self._sse is not None:
            # A paced stream's read: one HTTP chunk holding one event, the whole buffer (the
            # gateway writes each paced chunk alone). Recorded in a few C calls, not through
            # the general de-framing below, which costs the client more than the gateway
            # spends sending it; anything else falls through to it.
            line = _SIZE_LINE.match(data)
            if line is not None:
                start = line.end()
                stop = start + int(line[1], 16)
                if (
                    stop + 2 == len(data)
                    and data.endswith(b"\r\n")
                    and self._sse.feed_event(data, start, stop, now_ns)
                ):
                    return
        if state is _State.HEAD:
            data = self._parse_head(data)
            state = self._state
            if state is _State.HEAD:
                return
        if state is _State.DONE:
            if data:
                raise LoadProtocolError("bytes after the end of the response")
            return
        pieces = self._take_identity(data) if state is _State.IDENTITY else self._dechunk(data)
        if pieces:
            self._events.feed(pieces, now_ns)

    def eof(self) -> None:
        """The connection closed.

        Raises:
            LoadProtocolError: the response was cut short.
        """
        if self._state is _State.IDENTITY and not self._length_delimited:
            self._state = _State.DONE
        if self._state is not _State.DONE:
            raise LoadProtocolError(f"connection closed in the {self._state.value}")

    # -- head -------------------------------------------------------------------------------

    def _parse_head(self, data: bytes) -> bytes:
        """Parse the head if ``data`` completes it; the bytes after it."""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > self._max_head:
                raise LoadProtocolError(f"response head exceeds {self._max_head} bytes")
            self._carry = data
            return b""
        lines = data[:end].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise LoadProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        if self.status != 200:
            # The body (as much as arrived with the head) says why.
            why = data[end + 4 : end + 304].decode("latin-1").strip()
            raise LoadProtocolError(
                f"the gateway answered {lines[0].decode('latin-1')[:120]}: {why}"
            )
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        self._choose_framing(fields)
        return data[end + 4 :]

    def _choose_framing(self, fields: dict[bytes, bytes]) -> None:
        coding = fields.get(b"transfer-encoding")
        if coding is not None:
            if coding != b"chunked":
                raise LoadProtocolError(f"unsupported transfer-encoding {coding!r}")
            self._state = _State.SIZE
        elif b"content-length" in fields:
            if not fields[b"content-length"].isdigit():
                raise LoadProtocolError("invalid content-length")
            self._remaining, self._length_delimited = int(fields[b"content-length"]), True
            self._state = _State.DONE if not self._remaining else _State.IDENTITY
        else:
            self._state = _State.IDENTITY

    # -- framing ----------------------------------------------------------------------------

    def _take_identity(self, data: bytes) -> list[bytes | memoryview]:
        if not self._length_delimited:
            return [data]
        if len(data) > self._remaining:
            raise LoadProtocolError("bytes beyond content-length")
        self._remaining -= len(data)
        if not self._remaining:
            self._state = _State.DONE
        return [data]

    def _dechunk(self, data: bytes) -> list[bytes | memoryview]:
        """The chunk data in ``data``, as views; framing cut short is carried over."""
        pieces: list[bytes | memoryview] = []
        view, pos = memoryview(data), 0
        while pos < len(data):
            state = self._state
            if state is _State.DATA:
                pos = self._chunk_data(view, pos, pieces)
            elif state is _State.DATA_END:
                pos = self._data_end(data, pos)
            elif state is _State.SIZE and (after := self._whole_chunks(data, pos, pieces)) > pos:
                pos = after
            else:
                pos = self._framing_line(data, pos)
        return pieces

    def _whole_chunks(self, data: bytes, pos: int, pieces: list[bytes | memoryview]) -> int:
        """Take the whole chunks from the chunk-size line at ``pos`` on, one regular-expression
        match per chunk (the gateway writes a chunk per few events, so this runs per event);
        where the step-by-step reading must take over."""
        view, end = memoryview(data), len(data)
        append, next_size_line = pieces.append, _NEXT_SIZE_LINE.match
        line = _SIZE_LINE.match(data, pos)
        while line is not None:
            start = line.end()
            stop = start + int(line[1], 16)
            if not start < stop <= end:
                return line.start(1)  # the last chunk, or one cut by the read
            append(view[start:stop])
            line = next_size_line(data, stop)
            if line is None:
                self._state = _State.DATA_END
                return stop
        return pos

    # Each step below reads from ``data[pos:]`` and returns where the next step starts; one
    # that needs more bytes carries the rest over and returns ``len(data)``.

    def _chunk_data(self, view: memoryview, pos: int, pieces: list[bytes | memoryview]) -> int:
        stop = pos + self._remaining
        if stop > len(view):
            pieces.append(view[pos:])
            self._remaining = stop - len(view)
            return len(view)
        pieces.append(view[pos:stop])
        self._state = _State.DATA_END
        return stop

    def _data_end(self, data: bytes, pos: int) -> int:
        if len(data) - pos < 2:
            self._carry = data[pos:]
            return len(data)
        if not data.startswith(b"\r\n", pos):
            raise LoadProtocolError("chunk data not followed by CRLF")
        self._state = _State.SIZE
        return pos + 2

    def _framing_line(self, data: bytes, pos: int) -> int:
        state = self._state
        if state is _State.DONE:
            raise LoadProtocolError("bytes after the end of the response")
        line_end = data.find(b"\r\n", pos, pos + _MAX_FRAMING_LINE)
        if line_end < 0:
            if len(data) - pos >= _MAX_FRAMING_LINE:
                raise LoadProtocolError(f"{state.value} too long")
            self._carry = data[pos:]
            return len(data)
        line = data[pos:line_end]
        if state is _State.SIZE:
            self._chunk_size(line)
        elif not line:  # the blank line after the trailer fields, which are ignored
            self._state = _State.DONE
        return line_end + 2

    def _chunk_size(self, line: bytes) -> None:
        size_text = line.partition(b";")[0].strip()  # chunk extensions are ignored
        # int(x, 16) would also take "0x1f", "+1f" and "1_f"; RFC 9112 allows hex digits only.
        if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
            raise LoadProtocolError(f"invalid chunk-size line {line[:40]!r}")
        self._remaining = int(size_text, 16)
        self._state = _State.DATA if self._remaining else _State.TRAILER
