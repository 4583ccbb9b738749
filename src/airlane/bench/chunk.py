"""Reading the head of a load-test chunk without parsing its JSON, and the load client's errors.

Every chunk of ``/v1/loadtest/*`` starts ``{"seq":<int>,"ts":<int>,`` (see
`airlane.backends.synthetic.LoadTestChunk`). The load client only needs those two numbers, so it
reads them by position: parsing 1.2 KB of JSON per chunk would make the client, not the
gateway, the bottleneck.

Whatever the load client refuses is the server's fault, so there is one exception tree, and the
client turns it into a stream's error message (``StreamTally.error``), never a traceback::

    LoadProtocolError          the server under test broke HTTP, SSE or WebSocket framing
     ├── ChunkFormatError      a message that is not a load-test chunk
     └── HandshakeError        the WebSocket upgrade was refused (`airlane.bench.ws_handshake`)
"""

from __future__ import annotations

__all__ = ["MAX_DIGITS", "ChunkFormatError", "LoadProtocolError", "read_seq_ts"]

MAX_DIGITS = 18
"""Digits accepted in ``seq`` and ``ts``: any CLOCK_MONOTONIC time in ns fits in 18 digits (31
years of uptime), and the lag (receive time - ts) must fit the int64 lag array."""

_SEQ = b'{"seq":'
_TS = b'"ts":'


class LoadProtocolError(Exception):
    """The server under test sent something the load client does not accept (its fault)."""


class ChunkFormatError(LoadProtocolError, ValueError):
    """A chunk that does not start with ``{"seq":N,"ts":T,``: the gateway's fault."""


def read_seq_ts(buf: bytes | bytearray, start: int = 0, end: int | None = None) -> tuple[int, int]:
    """``(seq, ts)`` of the chunk at ``buf[start:end]``.

    Raises:
        ChunkFormatError: the chunk has no ``{"seq":N,"ts":T,`` head.
    """
    stop = len(buf) if end is None else end
    if not buf.startswith(_SEQ, start):
        raise ChunkFormatError(f"chunk does not start with {_SEQ!r}: {_head(buf, start)!r}")
    comma = buf.find(b",", start + len(_SEQ), stop)
    ts_at = comma + 1 + len(_TS)
    ts_end = buf.find(b",", ts_at, stop)
    if comma < 0 or ts_end < 0 or not buf.startswith(_TS, comma + 1):
        raise ChunkFormatError(f"chunk has no seq/ts head: {_head(buf, start)!r}")
    seq_text, ts_text = buf[start + len(_SEQ) : comma], buf[ts_at:ts_end]
    if not (_is_number(seq_text) and _is_number(ts_text)):
        raise ChunkFormatError(f"chunk seq/ts are not integers: {_head(buf, start)!r}")
    return int(seq_text), int(ts_text)


def _is_number(text: bytes | bytearray) -> bool:
    # isdigit() on bytes is ASCII-only, unlike int(), which also takes "+1", " 1" and "1_0".
    return 0 < len(text) <= MAX_DIGITS and text.isdigit()


def _head(buf: bytes | bytearray, start: int) -> bytes:
    return bytes(buf[start : start + 40])
