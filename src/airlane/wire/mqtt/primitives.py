"""MQTT's data representations (OASIS MQTT 5.0, section 1.5): integers in network byte order,
variable byte integers, length-prefixed UTF-8 strings and binary data; and `Reader`, which
reads them from one packet and raises `MQTTDecodeError` for anything that runs short or is not
well formed (never `IndexError` or `UnicodeDecodeError`)."""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "MAX_VARINT",
    "MQTTDecodeError",
    "Reader",
    "encode_binary",
    "encode_string",
    "encode_varint",
]

MAX_VARINT: Final = 268_435_455
"""The largest variable byte integer (four bytes of seven bits)."""

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")


class MQTTDecodeError(ValueError):
    """Bytes from the peer that are not a well-formed MQTT packet."""


def encode_varint(value: int) -> bytes:
    """``value`` as a variable byte integer (1 to 4 bytes)."""
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} does not fit a variable byte integer")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_string(text: str) -> bytes:
    """``text`` as a UTF-8 string: its 16-bit byte length, then the bytes."""
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError(f"a string of {len(data)} bytes is longer than MQTT allows (65535)")
    if "\x00" in text:
        raise ValueError("an MQTT string may not hold U+0000")
    return _U16.pack(len(data)) + data


def encode_binary(data: bytes) -> bytes:
    """``data`` as binary data: its 16-bit length, then the bytes."""
    if len(data) > 0xFFFF:
        raise ValueError(f"binary data of {len(data)} bytes is longer than MQTT allows (65535)")
    return _U16.pack(len(data)) + bytes(data)


class Reader:
    """Reads MQTT values from ``data[start:end]`` in order."""

    __slots__ = ("_data", "_end", "_pos")

    def __init__(self, data: bytes | memoryview, start: int = 0, end: int | None = None) -> None:
        self._data = data
        self._pos = start
        self._end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return self._end - self._pos

    def _take(self, n: int) -> int:
        if n > self._end - self._pos:
            raise MQTTDecodeError("the packet ends inside a value")
        pos = self._pos
        self._pos += n
        return pos

    def u8(self) -> int:
        """One byte."""
        return self._data[self._take(1)]

    def u16(self) -> int:
        """A two-byte integer."""
        pos = self._take(2)
        return int(_U16.unpack_from(self._data, pos)[0])

    def u32(self) -> int:
        """A four-byte integer."""
        pos = self._take(4)
        return int(_U32.unpack_from(self._data, pos)[0])

    def varint(self) -> int:
        """A variable byte integer (at most four bytes)."""
        value = 0
        for shift in (0, 7, 14, 21):
            byte = self.u8()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise MQTTDecodeError("a variable byte integer longer than four bytes")

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        pos = self._take(n)
        return bytes(self._data[pos : pos + n])

    def binary(self) -> bytes:
        """Binary data (16-bit length prefix)."""
        return self.take(self.u16())

    def string(self) -> str:
        """A UTF-8 string (16-bit length prefix); ill-formed UTF-8 or U+0000 is an error."""
        raw = self.binary()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MQTTDecodeError("a string that is not well-formed UTF-8") from exc
        if "\x00" in text:
            raise MQTTDecodeError("a string holding U+0000")
        return text

    def rest(self) -> bytes:
        """Everything not read yet."""
        return self.take(self.remaining)

    def sub(self, n: int) -> Reader:
        """A reader over the next ``n`` bytes, which this one skips."""
        pos = self._take(n)
        return Reader(self._data, pos, pos + n)
