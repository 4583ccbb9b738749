"""The AIRC v1.2 frame: a 20-byte header, then up to 65535 bytes of payload.

Network byte order::

    0       4   5   6      8        12        16     18     20
    | magic | v | f | stream | seq    | time   | len  | crc  | payload (len bytes)
      u32    u8  u8    u16     u32      u32      u16    u16

- magic ``0x41495243`` ("AIRC"); version ``0x02`` (v1.2);
- flags: bit 0 ACK, bit 1 EOM (last fragment of a message), bit 2 PRIORITY; bits 3-7 are
  reserved and must be zero;
- seq: per stream, monotonic (wrapping, compared with `airlane.wire.airc.serial`);
- time: microseconds since the sender's session start, wrapping every ~71.6 minutes;
- crc: CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF) over the header with this field zeroed,
  then the payload.

The seed white paper calls this header 16 bytes, but its own fields add up to 20, and names
the CRC "IEEE-802.3", which is a CRC-32; DESIGN.md section 5 records both corrections.
"""

from __future__ import annotations

import binascii
import enum
import struct
from dataclasses import dataclass

from airlane.wire.airc.errors import AircProtocolError, ErrorCode

__all__ = [
    "ANY_STREAM",
    "AUDIO_STREAMS",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_PAYLOAD",
    "SIGNALLING_STREAM",
    "VERSION",
    "VIDEO_STREAMS",
    "Flags",
    "Frame",
    "FrameDecoder",
    "crc16",
    "encode_frame",
]

MAGIC = 0x41495243
"""``b"AIRC"`` as a big-endian u32."""
VERSION = 0x02
"""The version byte of AIRC v1.2."""
HEADER_SIZE = 20
"""Bytes before the payload."""
MAX_PAYLOAD = 0xFFFF
"""The largest payload a u16 length can announce."""
SIGNALLING_STREAM = 255
"""The stream that carries `airlane.wire.airc.signalling` messages."""
ANY_STREAM = 0xFFFF
"""In a request for a stream: "the server picks"."""
AUDIO_STREAMS = range(0, 10)
"""StreamIDs for audio."""
VIDEO_STREAMS = range(10, 20)
"""StreamIDs for video."""

_HEADER = struct.Struct(">IBBHIIHH")
_MAGIC_BYTES = MAGIC.to_bytes(4, "big")
_CRC_INIT = 0xFFFF
_ZERO_CRC = b"\x00\x00"


class Flags(enum.IntFlag):
    """The flag bits of a frame."""

    ACK = 0x01
    """An acknowledgement: ``seq`` is the cumulative seq acknowledged on ``stream_id``."""
    EOM = 0x02
    """The last fragment of a message."""
    PRIORITY = 0x04
    """Sent before every frame without this flag."""


# Plain ints on purpose: ``~`` on an IntFlag complements within its defined members only
# (Python 3.11+), which would make this mask 0 and let every reserved bit through.
_RESERVED = 0xFF & ~int(Flags.ACK | Flags.EOM | Flags.PRIORITY)
_NO_FLAGS = Flags(0)


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame, decoded or to be encoded."""

    stream_id: int
    seq: int
    timestamp: int
    payload: bytes = b""
    flags: Flags = _NO_FLAGS


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE of ``data`` (the check value of ``b"123456789"`` is 0x29B1)."""
    return binascii.crc_hqx(data, _CRC_INIT)


def encode_frame(frame: Frame) -> bytes:
    """The bytes of ``frame``, with its length and CRC filled in.

    Raises:
        ValueError: a field does not fit its width (a caller's bug, not the peer's).
    """
    payload = frame.payload
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    if frame.flags & _RESERVED:
        raise ValueError(f"reserved flag bits set: {int(frame.flags):#04x}")
    try:
        header = _HEADER.pack(
            MAGIC,
            VERSION,
            frame.flags,
            frame.stream_id,
            frame.seq,
            frame.timestamp,
            len(payload),
            0,
        )
    except struct.error as exc:
        raise ValueError(f"frame field out of range: {exc}") from None
    crc = binascii.crc_hqx(payload, binascii.crc_hqx(header, _CRC_INIT))
    return header[:-2] + crc.to_bytes(2, "big") + payload


class FrameDecoder:
    """Frames from a byte stream fed in arbitrary pieces.

    Holds at most one incomplete frame (header plus ``max_payload`` bytes). The first problem
    raises `AircProtocolError`; after that the decoder refuses further input, because a byte
    stream cannot be resynchronised safely once a frame boundary is in doubt.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        if not 0 <= max_payload <= MAX_PAYLOAD:
            raise ValueError(f"max_payload must be in 0..{MAX_PAYLOAD}")
        self.max_payload = max_payload
        """The largest payload accepted; a longer announced length is `ErrorCode.OVERSIZE`."""
        self._buffer = bytearray()
        self._failed: AircProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        """Add ``data``; return every frame it completes, in order."""
        if self._failed is not None:
            raise self._failed
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        offset = 0
        end = len(buffer)
        try:
            while end - offset >= 4:
                if buffer[offset : offset + 4] != _MAGIC_BYTES:
                    raise AircProtocolError(
                        ErrorCode.BAD_MAGIC,
                        f"expected magic 'AIRC', got {bytes(buffer[offset : offset + 4])!r}",
                    )
                if end - offset < HEADER_SIZE:
                    break
                _, version, flags, stream_id, seq, timestamp, length, crc = _HEADER.unpack_from(
                    buffer, offset
                )
                self._check_header(version, flags, length)
                total = HEADER_SIZE + length
                if end - offset < total:
                    break
                header = memoryview(buffer)[offset : offset + HEADER_SIZE - 2]
                header_crc = binascii.crc_hqx(_ZERO_CRC, binascii.crc_hqx(header, _CRC_INIT))
                header.release()
                payload = bytes(buffer[offset + HEADER_SIZE : offset + total])
                if binascii.crc_hqx(payload, header_crc) != crc:
                    raise AircProtocolError(
                        ErrorCode.BAD_CRC,
                        f"CRC mismatch on stream {stream_id} seq {seq}",
                    )
                frames.append(Frame(stream_id, seq, timestamp, payload, Flags(flags)))
                offset += total
        except AircProtocolError as exc:
            self._failed = exc
            buffer.clear()
            raise
        del buffer[:offset]
        return frames

    def _check_header(self, version: int, flags: int, length: int) -> None:
        if version != VERSION:
            raise AircProtocolError(
                ErrorCode.BAD_VERSION, f"unsupported version {version:#04x}; expected 0x02"
            )
        if flags & _RESERVED:
            raise AircProtocolError(
                ErrorCode.RESERVED_FLAGS, f"reserved flag bits set: {flags:#04x}"
            )
        if length > self.max_payload:
            raise AircProtocolError(
                ErrorCode.OVERSIZE,
                f"payload of {length} bytes exceeds the limit of {self.max_payload}",
            )
