"""Unsigned varints (LEB128, as multiformats and Protobuf write them) and the
varint-length-prefixed messages that libp2p protocols exchange on a stream.

Every decoder here is bounded: a varint longer than `MAX_VARINT_BYTES`, or a message longer
than the reader's limit, is a `DecodeError` / `FrameTooLarge` before anything is buffered for it.
"""

from __future__ import annotations

from airlane.wire.errors import DecodeError, FrameTooLarge

__all__ = ["MAX_VARINT_BYTES", "PrefixedReader", "decode_uvarint", "encode_uvarint", "prefixed"]

MAX_VARINT_BYTES = 10
"""Enough for any 64-bit value; a longer varint is refused."""


def encode_uvarint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as an unsigned varint."""
    if not 0 <= value < 1 << 64:
        raise ValueError(f"varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[int, int] | None:
    """The varint at ``offset`` and the offset after it; None when ``data`` ends inside it.

    Raises:
        DecodeError: longer than `MAX_VARINT_BYTES`, or not minimal (a trailing zero byte,
            which multiformats forbids so that every value has one encoding).
    """
    value = 0
    shift = 0
    end = len(data)
    for index in range(offset, min(end, offset + MAX_VARINT_BYTES)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and index > offset:
                raise DecodeError("varint is not minimally encoded")
            if value >= 1 << 64:
                raise DecodeError("varint exceeds 64 bits")
            return value, index + 1
        shift += 7
    if end - offset >= MAX_VARINT_BYTES:
        raise DecodeError(f"varint longer than {MAX_VARINT_BYTES} bytes")
    return None


def prefixed(message: bytes) -> bytes:
    """``message`` behind its varint length."""
    return encode_uvarint(len(message)) + message


class PrefixedReader:
    """Splits a byte stream into varint-length-prefixed messages of at most ``limit`` bytes."""

    __slots__ = ("_buffer", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """The longest message accepted."""
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet make a whole message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Take ``data``; return the messages it completes, in order.

        Raises:
            FrameTooLarge: a length prefix announces more than ``limit``.
            DecodeError: a malformed length prefix.
        """
        buffer = self._buffer
        buffer += data
        messages: list[bytes] = []
        offset = 0
        while True:
            head = decode_uvarint(buffer, offset)
            if head is None:
                break
            size, start = head
            if size > self.limit:
                raise FrameTooLarge(size, self.limit)
            if len(buffer) - start < size:
                break
            messages.append(bytes(buffer[start : start + size]))
            offset = start + size
        if offset:
            del buffer[:offset]
        return messages

    def take_rest(self) -> bytes:
        """Whatever is buffered, removed (bytes after a handshake that belong to the next
        layer)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
