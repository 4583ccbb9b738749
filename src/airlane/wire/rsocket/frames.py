"""RSocket 1.0 frames: encode and decode, sans-I/O.

Every frame starts with a 6-byte header (network byte order)::

    0               4        6
    | stream id     | type+flags | frame-specific fields ...
      u32 (31 bits)   6 + 10 bits

The flags common to all frames are I (0x200: a receiver that does not know the frame may ignore
it) and M (0x100: metadata present). Where a frame carries metadata and data, the metadata is
preceded by its 24-bit length and the data is the rest of the frame; METADATA_PUSH and LEASE
carry metadata without a length (the rest of the frame). Over a byte stream (TCP) each frame is
preceded by its own 24-bit length (`FrameReader`); over WebSocket one binary message is one
frame.

`decode_frame` refuses anything malformed with `RSocketProtocolError`, carrying the connection
error code to answer with, so a reader never raises anything else on hostile bytes.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "MAX_FRAME",
    "ErrorCode",
    "Frame",
    "FrameReader",
    "FrameType",
    "RSocketProtocolError",
    "decode_frame",
    "encode_frame",
    "frame_with_length",
    "payload_frame",
    "resumable",
    "with_length",
]

MAX_FRAME = (1 << 24) - 1
"""The largest frame a 24-bit length prefix can announce."""
MAX_U31 = (1 << 31) - 1
MAX_U63 = (1 << 63) - 1

FLAG_IGNORE = 0x200
FLAG_METADATA = 0x100
FLAG_FOLLOWS = 0x80
"""REQUEST_* and PAYLOAD: more fragments of this message follow."""
FLAG_RESUME = 0x80
"""SETUP: the client may resume; KEEPALIVE: respond (the same bit)."""
FLAG_RESPOND = 0x80
FLAG_LEASE = 0x40
"""SETUP: the client honours LEASE."""
FLAG_COMPLETE = 0x40
"""PAYLOAD, REQUEST_CHANNEL: the sender's side of the stream is complete."""
FLAG_NEXT = 0x20
"""PAYLOAD: it carries a payload (a complete without one has no N)."""

_HEADER = struct.Struct(">IH")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class FrameType(enum.IntEnum):
    """The frame types of RSocket 1.0."""

    SETUP = 0x01
    LEASE = 0x02
    KEEPALIVE = 0x03
    REQUEST_RESPONSE = 0x04
    REQUEST_FNF = 0x05
    REQUEST_STREAM = 0x06
    REQUEST_CHANNEL = 0x07
    REQUEST_N = 0x08
    CANCEL = 0x09
    PAYLOAD = 0x0A
    ERROR = 0x0B
    METADATA_PUSH = 0x0C
    RESUME = 0x0D
    RESUME_OK = 0x0E
    EXT = 0x3F


class ErrorCode(enum.IntEnum):
    """ERROR frame codes (stream 0: the connection's; others: a stream's)."""

    INVALID_SETUP = 0x001
    UNSUPPORTED_SETUP = 0x002
    REJECTED_SETUP = 0x003
    REJECTED_RESUME = 0x004
    CONNECTION_ERROR = 0x101
    CONNECTION_CLOSE = 0x102
    APPLICATION_ERROR = 0x201
    REJECTED = 0x202
    CANCELED = 0x203
    INVALID = 0x204


class RSocketProtocolError(Exception):
    """The peer sent what RSocket does not allow; answer ``code`` on stream 0 and close."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.CONNECTION_ERROR) -> None:
        super().__init__(message)
        self.code = code


_REQUESTS = (FrameType.REQUEST_RESPONSE, FrameType.REQUEST_FNF)
_WITH_N = (FrameType.REQUEST_STREAM, FrameType.REQUEST_CHANNEL)
_ON_STREAM_ZERO = (
    FrameType.SETUP,
    FrameType.LEASE,
    FrameType.KEEPALIVE,
    FrameType.METADATA_PUSH,
    FrameType.RESUME,
    FrameType.RESUME_OK,
)


@dataclass(slots=True)
class Frame:
    """One frame. Fields a frame type does not use keep their defaults."""

    type: FrameType
    stream_id: int = 0
    flags: int = 0
    metadata: bytes | None = None
    """None when the M flag is clear."""
    data: bytes = b""
    request_n: int = 0
    """REQUEST_STREAM / REQUEST_CHANNEL (initial) and REQUEST_N."""
    error_code: int = 0
    """ERROR."""
    version: tuple[int, int] = (1, 0)
    """SETUP and RESUME."""
    keepalive_ms: int = 0
    """SETUP: time between KEEPALIVE frames; LEASE: the lease's time to live."""
    lifetime_ms: int = 0
    """SETUP: how long without a KEEPALIVE before the peer is taken for gone."""
    resume_token: bytes | None = None
    """SETUP (with the R flag) and RESUME."""
    metadata_mime: str = ""
    data_mime: str = ""
    """SETUP: the connection's MIME types."""
    lease_requests: int = 0
    """LEASE: requests allowed in the TTL."""
    position: int = 0
    """KEEPALIVE: last received position; RESUME: last received server position;
    RESUME_OK: last received client position."""
    first_position: int = 0
    """RESUME: first available client position."""
    extended_type: int = 0
    """EXT."""
    size: int = 0
    """Decoded frames: the frame's length on the wire, without the TCP length prefix (what
    resumption counts positions in)."""

    def has(self, flag: int) -> bool:
        """Whether ``flag`` is set."""
        return bool(self.flags & flag)


# -- encoding ----------------------------------------------------------------------------------


def _u24(value: int) -> bytes:
    if not 0 <= value <= MAX_FRAME:
        raise ValueError(f"{value} does not fit 24 bits")
    return value.to_bytes(3, "big")


def _metadata_and_data(frame: Frame, *, length_prefixed: bool = True) -> bytes:
    if frame.metadata is None:
        return frame.data
    prefix = _u24(len(frame.metadata)) if length_prefixed else b""
    return prefix + frame.metadata + frame.data


def _ascii_u8(text: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) > 0xFF:
        raise ValueError("a MIME type name holds at most 255 bytes")
    return bytes((len(raw),)) + raw


def encode_frame(frame: Frame) -> bytes:
    """The bytes of ``frame`` (without the TCP length prefix)."""
    if not 0 <= frame.stream_id <= MAX_U31:
        raise ValueError("a stream id is 31 bits")
    flags = frame.flags & 0x3FF
    if frame.metadata is not None:
        flags |= FLAG_METADATA
    else:
        flags &= ~FLAG_METADATA
    kind = frame.type
    if kind is FrameType.SETUP:
        if frame.resume_token is not None:
            flags |= FLAG_RESUME
        body = (
            _U16.pack(frame.version[0])
            + _U16.pack(frame.version[1])
            + _U32.pack(frame.keepalive_ms & MAX_U31)
            + _U32.pack(frame.lifetime_ms & MAX_U31)
            + (
                _U16.pack(len(frame.resume_token)) + frame.resume_token
                if frame.resume_token is not None
                else b""
            )
            + _ascii_u8(frame.metadata_mime)
            + _ascii_u8(frame.data_mime)
            + _metadata_and_data(frame)
        )
    elif kind is FrameType.LEASE:
        body = (
            _U32.pack(frame.keepalive_ms & MAX_U31)
            + _U32.pack(frame.lease_requests & MAX_U31)
            + (frame.metadata or b"")
        )
    elif kind is FrameType.KEEPALIVE:
        body = _U64.pack(frame.position & MAX_U63) + frame.data
    elif kind in _REQUESTS or kind is FrameType.PAYLOAD:
        body = _metadata_and_data(frame)
    elif kind in _WITH_N:
        body = _U32.pack(frame.request_n & MAX_U31) + _metadata_and_data(frame)
    elif kind is FrameType.REQUEST_N:
        body = _U32.pack(frame.request_n & MAX_U31)
    elif kind is FrameType.CANCEL:
        body = b""
    elif kind is FrameType.ERROR:
        body = _U32.pack(frame.error_code) + frame.data
    elif kind is FrameType.METADATA_PUSH:
        flags |= FLAG_METADATA
        body = frame.metadata or b""
    elif kind is FrameType.RESUME:
        token = frame.resume_token or b""
        body = (
            _U16.pack(frame.version[0])
            + _U16.pack(frame.version[1])
            + _U16.pack(len(token))
            + token
            + _U64.pack(frame.position & MAX_U63)
            + _U64.pack(frame.first_position & MAX_U63)
        )
    elif kind is FrameType.RESUME_OK:
        body = _U64.pack(frame.position & MAX_U63)
    else:  # EXT
        body = _U32.pack(frame.extended_type) + _metadata_and_data(frame)
    return _HEADER.pack(frame.stream_id, (int(kind) << 10) | flags) + body


_PAYLOAD_HEADER = struct.Struct(">IIH")  # 24-bit length in the first word's low bytes


def payload_frame(stream_id: int, flags: int, data: bytes, *, framed: bool) -> bytes:
    """A PAYLOAD without metadata, built directly (the per-event path: no `Frame` object);
    with ``framed``, preceded by its 24-bit length. The same bytes as `encode_frame` makes."""
    header = (int(FrameType.PAYLOAD) << 10) | (flags & 0x3FF & ~FLAG_METADATA)
    if framed:
        # The length's 24 bits, then the stream id and the type+flags: one pack of 10 bytes
        # whose first byte is dropped.
        return _PAYLOAD_HEADER.pack(6 + len(data), stream_id, header)[1:] + data
    return _HEADER.pack(stream_id, header) + data


_RESUMABLE = frozenset({*_REQUESTS, *_WITH_N, FrameType.REQUEST_N, FrameType.CANCEL,
                        FrameType.PAYLOAD, FrameType.ERROR})  # fmt: skip


def resumable(kind: FrameType, stream_id: int) -> bool:
    """Whether a frame counts in a resumable session's positions (and is kept for
    retransmission): requests, REQUEST_N, CANCEL, PAYLOAD and a stream's ERROR."""
    return stream_id != 0 and kind in _RESUMABLE


def frame_with_length(frame: Frame) -> bytes:
    """``frame`` preceded by its 24-bit length, as on TCP."""
    return with_length(encode_frame(frame))


def with_length(encoded: bytes) -> bytes:
    """An encoded frame preceded by its 24-bit length, as on TCP."""
    return _u24(len(encoded)) + encoded


# -- decoding ----------------------------------------------------------------------------------


class _Cursor:
    """Reads fields off a frame's bytes; `RSocketProtocolError` when they run out."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise RSocketProtocolError("a frame ends inside its fields")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def u16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def u31(self) -> int:
        return int(_U32.unpack(self.take(4))[0]) & MAX_U31

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def u63(self) -> int:
        return int(_U64.unpack(self.take(8))[0]) & MAX_U63

    def ascii_u8(self) -> str:
        size = self.take(1)[0]
        try:
            return self.take(size).decode("ascii")
        except UnicodeDecodeError:
            raise RSocketProtocolError(
                "a MIME type is not ASCII", ErrorCode.INVALID_SETUP
            ) from None

    def rest(self) -> bytes:
        chunk = self.data[self.offset :]
        self.offset = len(self.data)
        return chunk

    def metadata_and_data(self, flags: int) -> tuple[bytes | None, bytes]:
        if not flags & FLAG_METADATA:
            return None, self.rest()
        size = int.from_bytes(self.take(3), "big")
        return self.take(size), self.rest()


def decode_frame(data: bytes) -> Frame:
    """The frame ``data`` holds (one whole frame, no length prefix); `RSocketProtocolError`
    for anything malformed. An unknown type with the I flag comes back as EXT with
    ``extended_type`` -1, for the caller to ignore."""
    if len(data) < _HEADER.size:
        raise RSocketProtocolError("a frame is shorter than its 6-byte header")
    raw_stream, type_flags = _HEADER.unpack_from(data)
    if raw_stream > MAX_U31:
        raise RSocketProtocolError("the stream id's reserved bit is set")
    flags = type_flags & 0x3FF
    try:
        kind = FrameType(type_flags >> 10)
    except ValueError:
        if flags & FLAG_IGNORE:
            return Frame(FrameType.EXT, raw_stream, flags, extended_type=-1)
        raise RSocketProtocolError(f"unknown frame type {type_flags >> 10:#x}") from None
    anywhere = kind in (FrameType.ERROR, FrameType.EXT)
    if not anywhere and (kind in _ON_STREAM_ZERO) != (raw_stream == 0):
        where = "stream 0" if kind in _ON_STREAM_ZERO else "a stream other than 0"
        raise RSocketProtocolError(f"{kind.name} belongs on {where}")
    frame = Frame(kind, raw_stream, flags, size=len(data))
    _read_fields(frame, _Cursor(data, _HEADER.size))
    # M says whether metadata is there: on a type that carries none it means nothing, and
    # METADATA_PUSH and LEASE read theirs as the rest of the frame.
    if frame.metadata is None:
        frame.flags &= ~FLAG_METADATA
    else:
        frame.flags |= FLAG_METADATA
    if kind in _WITH_N and frame.request_n == 0:
        raise RSocketProtocolError(f"{kind.name} with an initial request of 0")
    return frame


def _read_fields(frame: Frame, cursor: _Cursor) -> None:
    """The fields of ``frame``'s type, after the header."""
    kind, flags = frame.type, frame.flags
    if kind is FrameType.SETUP:
        frame.version = (cursor.u16(), cursor.u16())
        frame.keepalive_ms, frame.lifetime_ms = cursor.u31(), cursor.u31()
        if flags & FLAG_RESUME:
            frame.resume_token = cursor.take(cursor.u16())
        frame.metadata_mime, frame.data_mime = cursor.ascii_u8(), cursor.ascii_u8()
        frame.metadata, frame.data = cursor.metadata_and_data(flags)
    elif kind is FrameType.LEASE:
        frame.keepalive_ms, frame.lease_requests = cursor.u31(), cursor.u31()
        frame.metadata = cursor.rest() if flags & FLAG_METADATA else None
    elif kind is FrameType.KEEPALIVE:
        frame.position, frame.data = cursor.u63(), cursor.rest()
    elif kind in _REQUESTS or kind is FrameType.PAYLOAD:
        frame.metadata, frame.data = cursor.metadata_and_data(flags)
    elif kind in _WITH_N:
        frame.request_n = cursor.u31()
        frame.metadata, frame.data = cursor.metadata_and_data(flags)
    elif kind is FrameType.REQUEST_N:
        frame.request_n = cursor.u31()
        if frame.request_n == 0:
            raise RSocketProtocolError("REQUEST_N of 0")
    elif kind is FrameType.ERROR:
        frame.error_code, frame.data = cursor.u32(), cursor.rest()
    elif kind is FrameType.METADATA_PUSH:
        frame.metadata = cursor.rest()
    elif kind is FrameType.RESUME:
        frame.version = (cursor.u16(), cursor.u16())
        frame.resume_token = cursor.take(cursor.u16())
        frame.position, frame.first_position = cursor.u63(), cursor.u63()
    elif kind is FrameType.RESUME_OK:
        frame.position = cursor.u63()
    elif kind is FrameType.EXT:
        frame.extended_type = cursor.u32()
        frame.metadata, frame.data = cursor.metadata_and_data(flags)


class FrameReader:
    """Splits a byte stream into frames by their 24-bit length prefix (TCP). Bounded: a frame
    longer than ``max_frame`` is refused as soon as its length is read."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes, decoded; `RSocketProtocolError` for a bad one (the
        connection cannot go on after it)."""
        self._buffer += data
        frames = []
        try:
            while len(self._buffer) >= 3:
                size = int.from_bytes(self._buffer[:3], "big")
                if size > self.max_frame:
                    raise RSocketProtocolError(f"a frame of {size} bytes is over {self.max_frame}")
                if len(self._buffer) < 3 + size:
                    break
                raw = bytes(self._buffer[3 : 3 + size])
                del self._buffer[: 3 + size]
                frames.append(decode_frame(raw))
        except RSocketProtocolError:
            self._buffer.clear()  # nothing after a bad frame can be read: hold none of it
            raise
        return frames
