"""`LoadResponseParser`: one HTTP/1.1 load-test response, bytes in, chunk records out.

Sans-I/O: `feed` takes the bytes as they arrive and the time they arrived, and records each
chunk into a `StreamTally`; no sockets, no clock. It understands just what the load client
needs, incrementally:

1. the response head (RFC 9112 section 4-5): status line and header fields, up to a blank line;
2. the body framing (RFC 9112 section 6-7): ``Transfer-Encoding: chunked`` (chunk-size line,
   chunk data, CRLF, ..., a zero-size chunk and trailer fields), ``Content-Length``, or
   delimited by the connection closing;
3. the event stream inside (WHATWG HTML 9.2.5): events end at a blank line; of each event only
   the ``data:`` line matters, and of that only the ``seq`` and ``ts`` at its start
   (`airlane.bench.chunk`). Comments (``: ping``) are skipped. Lines end with LF, as the
   gateway writes them.

Everything buffered is bounded: a head over ``max_head_bytes`` or an unterminated event over
``max_event_bytes`` is a `LoadProtocolError`, as is any framing the parser does not accept.
"""

from __future__ import annotations

import enum

from airlane.bench.chunk import ChunkFormatError, read_seq_ts
from airlane.bench.tally import StreamTally

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_HEAD_BYTES",
    "LoadProtocolError",
    "LoadResponseParser",
]

DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""A response head larger than this is not from the gateway."""
DEFAULT_MAX_EVENT_BYTES = 1 << 20
"""A load-test event is ~1.2 KB; 1 MiB without an event end means a broken stream."""

_MAX_SIZE_LINE = 1024
_DATA = b"data: "
_LINE_DATA = b"\ndata: "


class LoadProtocolError(Exception):
    """The response is not a well-formed load-test event stream (the server's fault)."""


class _State(enum.Enum):
    HEAD = "head"
    SIZE = "chunk-size line"
    DATA = "chunk data"
    DATA_END = "CRLF after chunk data"
    TRAILER = "trailer fields"
    IDENTITY = "body to the end of the connection"
    DONE = "done"


class LoadResponseParser:
    """Parses one response; see the module docstring."""

    def __init__(
        self,
        tally: StreamTally,
        *,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._tally = tally
        self._max_head = max_head_bytes
        self._max_event = max_event_bytes
        self._state = _State.HEAD
        self._raw = bytearray()  # received, not yet de-framed
        self._body = bytearray()  # de-framed event stream, not yet split into events
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
        if self._state is _State.DONE:
            if data:
                raise LoadProtocolError("bytes after the end of the response")
            return
        self._raw += data
        if self._state is _State.HEAD and not self._parse_head():
            return
        self._deframe()
        self._split_events(now_ns)

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

    def _parse_head(self) -> bool:
        raw = self._raw
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            if len(raw) > self._max_head:
                raise LoadProtocolError(f"response head exceeds {self._max_head} bytes")
            return False
        lines = bytes(raw[:end]).split(b"\r\n")
        del raw[: end + 4]
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise LoadProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        if self.status != 200:
            raise LoadProtocolError(f"the gateway answered {lines[0].decode('latin-1')[:120]}")
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        self._choose_framing(fields)
        return True

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
            self._state = _State.IDENTITY
        else:
            self._state = _State.IDENTITY

    # -- framing ----------------------------------------------------------------------------

    def _deframe(self) -> None:
        if self._state is _State.IDENTITY:
            self._take_identity()
            return
        raw, pos, end = self._raw, 0, len(self._raw)
        while pos < end and self._state is not _State.DONE:
            state = self._state
            if state is _State.DATA:
                take = min(self._remaining, end - pos)
                self._body += raw[pos : pos + take]
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._state = _State.DATA_END
            elif state is _State.DATA_END:
                if end - pos < 2:
                    break
                if raw[pos : pos + 2] != b"\r\n":
                    raise LoadProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._state = _State.SIZE
            else:
                line_end = raw.find(b"\r\n", pos)
                if line_end < 0:
                    if end - pos > _MAX_SIZE_LINE:
                        raise LoadProtocolError(f"{state.value} longer than {_MAX_SIZE_LINE} bytes")
                    break
                self._line(bytes(raw[pos:line_end]))
                pos = line_end + 2
        del raw[:pos]
        if self._state is _State.DONE and raw:
            raise LoadProtocolError("bytes after the end of the response")

    def _line(self, line: bytes) -> None:
        if self._state is _State.TRAILER:
            if not line:
                self._state = _State.DONE
            return
        size_text = line.partition(b";")[0].strip()  # chunk extensions are ignored
        try:
            size = int(size_text, 16)
        except ValueError:
            raise LoadProtocolError(f"invalid chunk-size line {line[:40]!r}") from None
        if size < 0:
            raise LoadProtocolError(f"invalid chunk-size line {line[:40]!r}")
        self._remaining = size
        self._state = _State.DATA if size else _State.TRAILER

    def _take_identity(self) -> None:
        raw = self._raw
        if self._length_delimited:
            take = min(self._remaining, len(raw))
            self._body += raw[:take]
            self._remaining -= take
            if len(raw) > take:
                raise LoadProtocolError("bytes beyond content-length")
            if not self._remaining:
                self._state = _State.DONE
        else:
            self._body += raw
        raw.clear()

    # -- events -----------------------------------------------------------------------------

    def _split_events(self, now_ns: int) -> None:
        body, tally, pos = self._body, self._tally, 0
        while (end := body.find(b"\n\n", pos)) >= 0:
            if body.startswith(_DATA, pos):
                data_at = pos + len(_DATA)
            else:
                line = body.find(_LINE_DATA, pos, end)
                if line < 0:  # a comment, or an event without data
                    pos = end + 2
                    continue
                data_at = line + len(_LINE_DATA)
            data_end = body.find(b"\n", data_at, end)
            if data_end < 0:
                data_end = end
            try:
                seq, ts = read_seq_ts(body, data_at, data_end)
            except ChunkFormatError as exc:
                raise LoadProtocolError(str(exc)) from None
            tally.chunk(seq, ts, data_end - data_at, now_ns)
            pos = end + 2
        if pos:
            del body[:pos]
        if len(body) > self._max_event:
            raise LoadProtocolError(f"an event exceeds {self._max_event} bytes")
