"""`ChunkEventReader`: load-test chunks out of an SSE event stream, a buffer at a time.

Sans-I/O: bytes of the event stream (already de-framed from HTTP) and the time they arrived go
in; chunks are recorded into a `StreamTally`. The format (WHATWG HTML 9.2.6, "interpreting an
event stream"): lines end with LF (as every server under test writes them), a blank line
dispatches the event, a line starting with ``:`` is a comment, a field is ``name:value`` with
one optional space before the value, and an event's data is its ``data`` lines joined by LF.
On ``/v1/loadtest/sse`` each event with data carries one chunk; events without data (or with
empty data) are skipped, an ``error`` event is the stream's failure (raised with its code and
message), and data that is not a chunk is the server's fault.

Speed is the point of this module, so each buffer is read whole. It is cut after its last
blank line: the complete events before the cut are read now, the unfinished event after it is
carried to the next buffer (bounded by ``max_event_bytes``). The complete events are first
split by one regular expression matching ``data: {"seq":N,"ts":T,...`` lines (C speed, no
Python per event). If the pieces between the matches show that the events are exactly
``data: <chunk>`` back to back, which is what the gateway sends, the matches give every seq and
ts at once. Anything else (comments, ``id:``/``event:``/``retry:`` lines, events without data,
data over several lines, a malformed chunk) sends those events to `_read_lines`, a plain
line-by-line reader of the spec, which is slower but exact.
"""

from __future__ import annotations

import json
import re

from airlane.bench.chunk import MAX_DIGITS, LoadProtocolError, read_seq_ts
from airlane.bench.tally import StreamTally

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "ChunkEventReader", "failure_text"]

DEFAULT_MAX_EVENT_BYTES = 1 << 20
"""A load-test event is ~1.2 KB; 1 MiB without an event end means a broken stream."""

# A data line holding a chunk, anchored at a line start by the LF that ends the line before;
# the groups are the chunk's seq and ts digits. ``.*`` runs to the end of the line (``.`` is
# anything but LF), so the text left between two matches is exactly what separates the two data
# lines.
_CHUNK_LINE = re.compile(
    rb'\ndata: \{"seq":(\d{1,%d}),"ts":(\d{1,%d}),.*' % (MAX_DIGITS, MAX_DIGITS)
)
_EVENT_END = b"\n\n"
# Per chunk event "data: " + LF + the blank line's LF.
_EVENT_FRAMING = 8
# What a chunk event starts with, and what follows its seq and its ts (`feed_event`).
_CHUNK_START = b'data: {"seq":'
_AFTER_SEQ = b',"ts":'
_AFTER_TS = b","


class ChunkEventReader:
    """Reads one event stream into a tally; see the module docstring."""

    __slots__ = ("_max_event", "_tail", "_tally")

    def __init__(self, tally: StreamTally, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES):
        self._tally = tally
        self._max_event = max_event_bytes
        # The unfinished event, after the LF that ended the event before it (at the start of
        # the stream, a stand-in LF), so that every line in the buffer follows an LF.
        self._tail = b"\n"

    def feed(self, pieces: list[bytes | memoryview], now_ns: int) -> None:
        """Read the next bytes of the stream (in pieces, as HTTP de-framing leaves them),
        arrived at ``now_ns``.

        Raises:
            LoadProtocolError: an event is not a chunk, or is longer than ``max_event_bytes``.
        """
        body = b"".join((self._tail, *pieces))
        cut = body.rfind(_EVENT_END)
        if cut < 0:
            if len(body) > self._max_event:
                raise LoadProtocolError(f"an event exceeds {self._max_event} bytes")
            self._tail = body
            return
        end = cut + len(_EVENT_END)
        self._tail = body[end - 1 :]
        if len(self._tail) > self._max_event:
            raise LoadProtocolError(f"an event exceeds {self._max_event} bytes")
        # A view, not a copy: the regular expression reads any buffer and returns bytes.
        self._read_events(body if end == len(body) else memoryview(body)[:end], now_ns)

    def feed_event(self, data: bytes, start: int, stop: int, now_ns: int) -> bool:
        """Record ``data[start:stop]`` if it is exactly one ``data: <chunk>`` event and nothing
        is carried over (a paced stream's read); False, with nothing taken, if it is anything
        else (then `feed` it). What it accepts, `feed` would read the same way; it only takes
        fewer steps (a few finds and no copy of the chunk)."""
        if self._tail != b"\n" or not data.startswith(_CHUNK_START, start):
            return False
        # One line (no LF before the blank line's), ending the event.
        if not data.endswith(_EVENT_END, start, stop) or data.find(b"\n", start, stop - 2) >= 0:
            return False
        seq_start = start + len(_CHUNK_START)
        seq_end = data.find(_AFTER_SEQ, seq_start, seq_start + MAX_DIGITS + len(_AFTER_SEQ))
        ts_start = seq_end + len(_AFTER_SEQ)
        ts_end = data.find(_AFTER_TS, ts_start, ts_start + MAX_DIGITS + 1)
        if seq_end < 0 or ts_end < 0:
            return False
        seq, ts = data[seq_start:seq_end], data[ts_start:ts_end]
        if not (seq.isdigit() and ts.isdigit()):  # ASCII digits, as the expression's \d
            return False
        self._tally.chunk(int(seq), int(ts), stop - start - _EVENT_FRAMING, now_ns)
        return True

    def _read_events(self, events: bytes | memoryview, now_ns: int) -> None:
        """Record the chunks of ``events``: LF, then whole events, the last ending in LF LF."""
        parts = _CHUNK_LINE.split(events)
        between = parts[0::3]
        count = len(between) - 1
        # Exactly "data: <chunk>" events back to back: nothing before the first data line,
        # one LF after each (the end of its line; the next match starts at the blank line's
        # LF), and LF LF after the last. Then each event's size is known without looking.
        if (
            count
            and not between[0]
            and between[-1] == _EVENT_END
            and between.count(b"\n") == count - 1
        ):
            payload = len(events) - 1 - _EVENT_FRAMING * count
            self._tally.record(parts[1::3], parts[2::3], payload, now_ns)
        else:
            self._read_lines(bytes(events), now_ns)

    def _read_lines(self, events: bytes, now_ns: int) -> None:
        """The spec's line-by-line reading of ``events`` (see `_read_events`)."""
        data: list[bytes] = []
        kind = b""
        # Without the leading LF (the end of the event before) and the last LF, every line is
        # an item; the last item is the blank line that ends the last event.
        for line in events[1:-1].split(b"\n"):
            if not line:
                if data:
                    self._dispatch(kind, b"\n".join(data), now_ns)
                    data = []
                kind = b""
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"data":  # a comment has an empty name; id and retry do not matter
                data.append(value)
            elif name == b"event":
                kind = value

    def _dispatch(self, kind: bytes, data: bytes, now_ns: int) -> None:
        if kind == b"error":
            raise LoadProtocolError(f"the stream failed: {failure_text(data)}")
        if data:
            seq, ts = read_seq_ts(data)
            self._tally.chunk(seq, ts, len(data), now_ns)


def failure_text(data: bytes) -> str:
    """``<code>: <message>`` of a load-test stream's error event (``{"code", "message"}``
    JSON), or its first 200 bytes as they came if it is not that."""
    try:
        error = json.loads(data)
        return f"{error['code']}: {str(error['message'])[:200]}"
    except (ValueError, TypeError, KeyError):
        return repr(data[:200])
