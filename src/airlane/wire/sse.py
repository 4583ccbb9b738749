"""Server-sent events: the ``text/event-stream`` format, encoder and sans-I/O decoder.

Everything here follows WHATWG HTML section 9.2 "Server-sent events": the grammar of section
9.2.5 "Parsing an event stream" and the field semantics of section 9.2.6 "Interpreting an
event stream". An event is a block of ``field: value`` lines ended by a blank line::

    event: delta
    id: 42
    data: {"text": "Hel"}

The encoder writes one ``data:`` line per line of the payload, so any text survives. The
decoder is fed bytes as they arrive and returns the events that a blank line completed. It
keeps what the spec keeps on the ``EventSource``: the last event ID (sent back as
``Last-Event-ID`` when reconnecting, section 9.2.4) and the reconnection time.

Decoding works on bytes and decodes only field values. That is equivalent to decoding the
whole stream first (section 9.2.5 says "UTF-8 decode"): CR and LF never occur inside a UTF-8
multi-byte sequence, so a character is never split between lines, and a sequence cut short by a
line end is replaced by U+FFFD either way. Chunk boundaries are invisible: a character split
across two ``feed`` calls simply waits in the partial line.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.errors import SSEError

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEDecoder",
    "SSEMessage",
    "encode_comment",
    "encode_event",
    "encode_numbered_event",
    "encode_retry",
    "event_id_prefix",
]

DEFAULT_MAX_LINE_BYTES = 1 << 20
"""Longest line the decoder buffers: 1 MiB.

A token delta is tens of bytes and a snapshot a few hundred kilobytes, sent as one ``data:``
line of JSON; 1 MiB leaves room for that and stops a peer that never sends a newline.
"""

DEFAULT_MAX_EVENT_BYTES = 4 << 20
"""Most ``data`` bytes one event may accumulate before its blank line: 4 MiB."""

_BOM = b"\xef\xbb\xbf"
_LF = 0x0A
_CR = 0x0D
_DATA_PREFIX = b"data: "
_DATA_SEPARATOR = b"\ndata: "
_EVENT_END = b"\n\n"
_MAX_RETRY_DIGITS = 15


# -- encoding ------------------------------------------------------------------------------


def encode_event(
    data: bytes | str,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """Encode one event: optional ``id``/``event``/``retry`` fields, then the data lines.

    ``data`` may hold line breaks (CRLF, CR or LF); each line gets its own ``data:`` field, and
    a decoder joins them with LF (section 9.2.6), so CR and CRLF come back as LF. An empty
    ``id`` tells the client to forget its last event ID.

    Raises:
        ValueError: if ``event`` or ``id`` contains CR, LF or NUL (they would end the field
            early, or make the client ignore the ``id``), or if ``retry`` is negative.
    """
    payload = data.encode() if isinstance(data, str) else data
    multiline = _LF in payload or _CR in payload
    if event is None and id is None and retry is None and not multiline:
        # Fast path: the common token event is a single copy.
        return b"".join((_DATA_PREFIX, payload, _EVENT_END))
    parts: list[bytes] = []
    if id is not None:
        parts += (b"id: ", _field_value("id", id), b"\n")
    if event is not None:
        parts += (b"event: ", _field_value("event", event), b"\n")
    if retry is not None:
        parts.append(b"retry: %d\n" % _check_retry(retry))
    parts.append(_DATA_PREFIX)
    parts.append(_DATA_SEPARATOR.join(_split_lines(payload)) if multiline else payload)
    parts.append(_EVENT_END)
    return b"".join(parts)


def event_id_prefix(prefix: str) -> bytes:
    """``prefix``, checked and encoded, as the start of the ``id`` fields that
    `encode_numbered_event` completes with a number.

    Raises:
        ValueError: if ``prefix`` contains CR, LF or NUL.
    """
    return _field_value("id", prefix)


def encode_numbered_event(id_prefix: bytes, seq: int, line: bytes) -> bytes:
    """``encode_event(line, id=prefix + str(seq))`` for a payload that is one line, such as
    compact JSON (which escapes every line break), and a prefix from `event_id_prefix`:
    nothing is scanned or checked per event, which a stream's every frame would pay."""
    return b"id: %b%d\ndata: %b\n\n" % (id_prefix, seq, line)


def encode_comment(text: str = "") -> bytes:
    """Encode a comment block, e.g. ``b": ping\\n\\n"``; clients ignore it (section 9.2.6).

    Comments keep idle connections and proxies alive. A multi-line ``text`` becomes one comment
    line per line. The closing blank line dispatches nothing, since no data was sent.
    """
    if not text:
        return b":\n\n"
    lines = _split_lines(text.encode())
    return b"".join([b": " + line + b"\n" for line in lines]) + b"\n"


def encode_retry(ms: int) -> bytes:
    """Encode a block that sets the client's reconnection time to ``ms`` milliseconds.

    Raises:
        ValueError: if ``ms`` is negative (the field only admits ASCII digits).
    """
    return b"retry: %d\n\n" % _check_retry(ms)


def _check_retry(ms: int) -> int:
    if ms < 0:
        raise ValueError(f"retry must be >= 0 milliseconds, got {ms}")
    return ms


def _field_value(name: str, value: str) -> bytes:
    if "\r" in value or "\n" in value or "\0" in value:
        raise ValueError(f"SSE {name} must not contain CR, LF or NUL: {value!r}")
    return value.encode()


def _split_lines(payload: bytes) -> list[bytes]:
    # Section 9.2.5: CRLF, lone CR and lone LF all end a line. Unlike bytes.splitlines(), a
    # trailing line break yields a final empty line, which the decoder turns back into "\n".
    return payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")


# -- decoding ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SSEMessage:
    """One dispatched event, as an ``EventSource`` would deliver it (section 9.2.6)."""

    data: str
    """The data lines joined with LF."""
    event: str = "message"
    """The event type; ``"message"`` when the block set none (or set it empty)."""
    id: str | None = None
    """The last event ID in effect after this event, which persists across events until the
    server sends a new ``id``; ``None`` while it is the empty string."""
    retry: int | None = None
    """The reconnection time in milliseconds in effect, or ``None`` if the stream set none."""


class SSEDecoder:
    """Sans-I/O ``text/event-stream`` parser: bytes in, `SSEMessage` values out.

    Call `feed` with each chunk as it arrives and `close` when the stream ends. A decoder may
    then be fed the next stream of the same ``EventSource`` (after a reconnect): the last event
    ID and reconnection time carry over, as they do in a browser.

    Memory is bounded: a line longer than ``max_line_bytes`` or an event whose data exceeds
    ``max_event_bytes`` raises `SSEError`. The stream cannot be trusted after that, so `feed`
    keeps raising until `close`.
    """

    __slots__ = (
        "_bom_pending",
        "_data",
        "_data_bytes",
        "_event_type",
        "_failed",
        "_id_buffer",
        "_last_event_id",
        "_line",
        "_max_event_bytes",
        "_max_line_bytes",
        "_retry",
        "_skip_lf",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        last_event_id: str = "",
    ) -> None:
        """Create a decoder; ``last_event_id`` resumes the state of an earlier connection."""
        if max_line_bytes < 1 or max_event_bytes < 1:
            raise ValueError("max_line_bytes and max_event_bytes must be positive")
        self._max_line_bytes = max_line_bytes
        self._max_event_bytes = max_event_bytes
        # State of the EventSource, kept across streams (section 9.2.2).
        self._last_event_id = last_event_id
        self._retry: int | None = None
        self._begin_stream()

    def _begin_stream(self) -> None:
        # State of one stream (section 9.2.6). The last event ID buffer starts from the last
        # event ID string, as browsers do, so an event without ``id`` keeps the resumed ID.
        self._bom_pending: bytes | None = b""  # None once the start of stream was examined
        self._line = bytearray()  # a line whose end has not arrived yet
        self._skip_lf = False  # the previous chunk ended with CR: an LF now ends no line
        self._failed = False
        self._data: list[str] = []
        self._data_bytes = 0
        self._event_type = ""
        self._id_buffer = self._last_event_id

    @property
    def last_event_id(self) -> str:
        """The last event ID string: what to send as ``Last-Event-ID`` when reconnecting."""
        return self._last_event_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds set by the server, or ``None``."""
        return self._retry

    def feed(self, data: bytes) -> list[SSEMessage]:
        """Parse a chunk; return the events it completed, in order.

        Raises:
            SSEError: if a line or an event exceeds its limit, or the decoder failed before.
        """
        if self._failed:
            raise SSEError("the event stream already exceeded a limit; close the decoder")
        if self._bom_pending is not None:
            data = self._strip_bom(self._bom_pending + data)
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
            self._skip_lf = False
        if not data:
            return []
        lines = data.splitlines(keepends=True)
        partial = lines.pop() if lines and lines[-1][-1] not in (_LF, _CR) else b""
        # A chunk that ends in CR may be followed by the LF of a CRLF.
        self._skip_lf = not partial and data[-1] == _CR
        messages: list[SSEMessage] = []
        for raw in lines:
            line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            if self._line:  # only the first line can have begun in an earlier chunk
                self._line += line
                line = bytes(self._line)
                self._line.clear()
            self._check(len(line) <= self._max_line_bytes, "line")
            self._process_line(line, messages)
        if partial:
            self._check(len(self._line) + len(partial) <= self._max_line_bytes, "line")
            self._line += partial
        return messages

    def close(self) -> list[SSEMessage]:
        """End the stream and return the events it completed.

        That list is always empty: an event is dispatched by its blank line, and a block
        still open at the end of the stream is discarded (section 9.2.6). The decoder is then
        ready to parse a new stream of the same source.
        """
        self._begin_stream()
        return []

    def _strip_bom(self, head: bytes) -> bytes:
        # Section 9.2.5: one leading U+FEFF BYTE ORDER MARK is ignored, only at stream start.
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._bom_pending = head  # can't tell yet
            return b""
        self._bom_pending = None
        return head[len(_BOM) :] if head.startswith(_BOM) else head

    def _check(self, within_limit: bool, what: str) -> None:
        if within_limit:
            return
        self._failed = True
        self._line = bytearray()
        self._data = []
        limit = self._max_line_bytes if what == "line" else self._max_event_bytes
        raise SSEError(f"SSE {what} longer than the limit of {limit} bytes")

    def _process_line(self, line: bytes, messages: list[SSEMessage]) -> None:
        # Section 9.2.6: a blank line dispatches, a line starting with ":" is a comment, a
        # line without ":" is a field name with an empty value, and one space after the colon
        # is not part of the value. Field names are compared as bytes: all four are ASCII.
        if not line:
            self._dispatch(messages)
            return
        name, colon, value = line.partition(b":")
        if not name and colon:
            return
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data_bytes += len(value) + 1
            self._check(self._data_bytes <= self._max_event_bytes, "event")
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event_type = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id_buffer = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():  # bytes.isdigit(): ASCII digits only
            digits = value.lstrip(b"0") or b"0"
            # More digits than any real delay (and than int() parses by default): ignored.
            if len(digits) <= _MAX_RETRY_DIGITS:
                self._retry = int(digits)

    def _dispatch(self, messages: list[SSEMessage]) -> None:
        # Section 9.2.6 "dispatch the event": the ID takes effect even if nothing is dispatched;
        # no data lines means no event; joining the lines with LF drops the trailing LF.
        self._last_event_id = self._id_buffer
        if self._data:
            messages.append(
                SSEMessage(
                    data="\n".join(self._data),
                    event=self._event_type or "message",
                    id=self._last_event_id or None,
                    retry=self._retry,
                )
            )
            self._data = []
            self._data_bytes = 0
        self._event_type = ""
