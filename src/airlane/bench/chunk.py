"""Reading the head of a load-test chunk without parsing its JSON.

Every chunk of ``/v1/loadtest/*`` starts ``{"seq":<int>,"ts":<int>,`` (see
`airlane.backends.synthetic.LoadTestChunk`). The load client only needs those two numbers, so it
reads them by position: parsing 1.2 KB of JSON per chunk would make the client, not the
gateway, the bottleneck.
"""

from __future__ import annotations

__all__ = ["ChunkFormatError", "read_seq_ts"]

_SEQ = b'{"seq":'
_TS = b'"ts":'


class ChunkFormatError(ValueError):
    """A chunk that does not start with ``{"seq":N,"ts":T,``: the gateway's fault."""


def read_seq_ts(buf: bytes | bytearray, start: int = 0, end: int | None = None) -> tuple[int, int]:
    """``(seq, ts)`` of the chunk at ``buf[start:end]``."""
    stop = len(buf) if end is None else end
    if not buf.startswith(_SEQ, start):
        raise ChunkFormatError(
            f"chunk does not start with {_SEQ!r}: {bytes(buf[start : start + 40])!r}"
        )
    comma = buf.find(b",", start + len(_SEQ), stop)
    ts_at = comma + 1 + len(_TS)
    ts_end = buf.find(b",", ts_at, stop)
    if comma < 0 or ts_end < 0 or not buf.startswith(_TS, comma + 1):
        raise ChunkFormatError(f"chunk has no seq/ts head: {bytes(buf[start : start + 40])!r}")
    try:
        return int(buf[start + len(_SEQ) : comma]), int(buf[ts_at:ts_end])
    except ValueError:
        raise ChunkFormatError(
            f"chunk seq/ts are not integers: {bytes(buf[start : start + 40])!r}"
        ) from None


def _head(buf: bytes | bytearray, start: int) -> bytes:
    return bytes(buf[start : start + 40])
