"""The few Protobuf rules libp2p and Waku messages need, written out: varint, 64-bit,
length-delimited and 32-bit fields, zigzag integers, and packed repeated varints.

Messages are plain dataclasses with ``encode``/``decode`` next to them (`airlane.wire.libp2p`,
`airlane.wire.waku`), which keeps every size bound visible where the field is read. Unknown
fields are skipped, as Protobuf requires; a truncated field, a wrong wire type for a known
field, or a group (wire types 3 and 4, long deprecated) is a `DecodeError`.
"""

from __future__ import annotations

from collections.abc import Iterator

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.varint import decode_uvarint, encode_uvarint

__all__ = [
    "BYTES",
    "FIXED32",
    "FIXED64",
    "VARINT",
    "Writer",
    "fields",
    "packed_varints",
    "text",
    "zigzag_decode",
    "zigzag_encode",
]

VARINT = 0
FIXED64 = 1
BYTES = 2
FIXED32 = 5


def zigzag_encode(value: int) -> int:
    """A signed 64-bit integer as ``sint64`` writes it."""
    return ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)


def zigzag_decode(value: int) -> int:
    """A ``sint64`` read back."""
    return (value >> 1) ^ -(value & 1)


def _uvarint(data: bytes, offset: int) -> tuple[int, int]:
    head = decode_uvarint(data, offset)
    if head is None:
        raise DecodeError("protobuf message ends inside a varint")
    return head


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(number, wire_type, value)`` for each field of a message: ints for varint and fixed
    fields (unsigned), bytes for length-delimited ones."""
    offset = 0
    end = len(data)
    while offset < end:
        key, offset = _uvarint(data, offset)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise DecodeError("protobuf field number 0")
        if wire_type == VARINT:
            value, offset = _uvarint(data, offset)
            yield number, wire_type, value
        elif wire_type == BYTES:
            size, offset = _uvarint(data, offset)
            if size > end - offset:
                raise DecodeError("protobuf length-delimited field runs past the message")
            yield number, wire_type, data[offset : offset + size]
            offset += size
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            if width > end - offset:
                raise DecodeError("protobuf fixed-width field runs past the message")
            yield number, wire_type, int.from_bytes(data[offset : offset + width], "little")
            offset += width
        else:
            raise DecodeError(f"protobuf wire type {wire_type} is not supported")


def packed_varints(data: bytes) -> list[int]:
    """The values of a packed repeated varint field."""
    values = []
    offset = 0
    while offset < len(data):
        value, offset = _uvarint(data, offset)
        values.append(value)
    return values


def text(value: int | bytes, what: str) -> str:
    """A ``string`` field's value: UTF-8, or a `DecodeError` naming the field."""
    if not isinstance(value, bytes):
        raise DecodeError(f"{what}: expected a length-delimited field")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise DecodeError(f"{what} is not UTF-8") from None


class Writer:
    """Builds one message, field by field, in the order written."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def varint(self, number: int, value: int) -> Writer:
        """A varint field (``uint32``, ``uint64``, ``bool``, ``enum``; negative ``int64``
        values as their two's complement)."""
        self._out += encode_uvarint(number << 3 | VARINT)
        self._out += encode_uvarint(value & ((1 << 64) - 1))
        return self

    def sint64(self, number: int, value: int) -> Writer:
        """A ``sint64`` field (zigzag)."""
        return self.varint(number, zigzag_encode(value))

    def data(self, number: int, value: bytes) -> Writer:
        """A length-delimited field: bytes, or an encoded sub-message."""
        self._out += encode_uvarint(number << 3 | BYTES)
        self._out += encode_uvarint(len(value))
        self._out += value
        return self

    def string(self, number: int, value: str) -> Writer:
        """A ``string`` field."""
        return self.data(number, value.encode())

    def finish(self) -> bytes:
        """The message's bytes."""
        return bytes(self._out)
