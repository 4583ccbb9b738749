"""Length-prefixed framing: a 4-byte big-endian payload length, then the payload.

This is the framing of Airlane's binary streams over byte-stream transports (TCP, a QUIC
stream), where message boundaries are not preserved. The length counts the payload only and is
in network byte order (RFC 1700 "Data Notations"), so a frame holds at most 2**32 - 1 bytes;
the decoder accepts far less (`DEFAULT_MAX_FRAME`).
"""

from __future__ import annotations

import struct

from airlane.wire.errors import FrameTooLarge

__all__ = ["DEFAULT_MAX_FRAME", "HEADER_SIZE", "FrameDecoder", "encode_frame"]

HEADER_SIZE = 4
"""Bytes in the length prefix."""

DEFAULT_MAX_FRAME = 16 << 20
"""Largest payload accepted by default: 16 MiB.

Token and event payloads are a few kilobytes; 16 MiB still fits a large snapshot or a model
shard chunk while keeping one hostile length prefix from reserving gigabytes.
"""

_LENGTH = struct.Struct(">I")
_MAX_ENCODABLE = (1 << 32) - 1


def encode_frame(payload: bytes) -> bytes:
    """Return ``payload`` preceded by its 4-byte big-endian length.

    Raises:
        ValueError: if the payload is longer than a 32-bit length can express.
    """
    if len(payload) > _MAX_ENCODABLE:
        raise ValueError(f"payload of {len(payload)} bytes does not fit a 32-bit length")
    return _LENGTH.pack(len(payload)) + payload


class FrameDecoder:
    """Sans-I/O decoder: feed bytes as they arrive, get back whole payloads.

    Memory is bounded by ``max_frame`` plus the header and one fed chunk: a length above
    ``max_frame`` raises `FrameTooLarge` as soon as the 4-byte prefix has arrived, before any
    of the payload is buffered. The stream cannot be resynchronised after that, so the decoder
    refuses further input.
    """

    __slots__ = ("_buffer", "_error", "_max_frame", "_offset")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if not 0 <= max_frame <= _MAX_ENCODABLE:
            raise ValueError(f"max_frame must be in [0, 2**32 - 1], got {max_frame}")
        self._max_frame = max_frame
        # Unconsumed input is self._buffer[self._offset:]. Consumed bytes are dropped only when
        # they outnumber the rest, so each byte is moved O(1) times on average instead of the
        # buffer being copied once per frame.
        self._buffer = bytearray()
        self._offset = 0
        self._error: FrameTooLarge | None = None

    @property
    def max_frame(self) -> int:
        """The largest payload this decoder accepts."""
        return self._max_frame

    @property
    def pending(self) -> int:
        """Bytes received but not yet returned as a frame (a partial header or payload)."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every payload completed by them, in order.

        Raises:
            FrameTooLarge: if a frame announces more than ``max_frame`` bytes. The decoder is
                unusable afterwards and raises again on every call; frames completed earlier in
                the same chunk are dropped with the connection.
        """
        if self._error is not None:
            raise FrameTooLarge(self._error.size, self._error.limit)
        self._buffer += data
        frames: list[bytes] = []
        with memoryview(self._buffer) as view:
            while len(view) - self._offset >= HEADER_SIZE:
                (size,) = _LENGTH.unpack_from(view, self._offset)
                if size > self._max_frame:
                    self._error = FrameTooLarge(size, self._max_frame)
                    break
                start = self._offset + HEADER_SIZE
                if len(view) - start < size:
                    break
                frames.append(view[start : start + size].tobytes())
                self._offset = start + size
        if self._error is not None:
            self._buffer = bytearray()
            self._offset = 0
            raise self._error
        self._compact()
        return frames

    def _compact(self) -> None:
        if self._offset and self._offset >= len(self._buffer) - self._offset:
            del self._buffer[: self._offset]
            self._offset = 0
