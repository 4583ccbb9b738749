"""RSocket 1.0, sans-I/O: frames (`frames`), the metadata extensions (`metadata`) and the
server side of a connection (`connection.RSocketServerConnection`: setup, credit by request n,
fragments, keep-alive, lease).

What the RSocket transport is built on; no I/O, and time only as the caller's ``now``.
"""

from __future__ import annotations

from airlane.wire.rsocket.frames import (
    ErrorCode,
    Frame,
    FrameReader,
    FrameType,
    RSocketProtocolError,
    decode_frame,
    encode_frame,
    frame_with_length,
    with_length,
)
from airlane.wire.rsocket.metadata import (
    Credentials,
    decode_authentication,
    decode_composite,
    decode_routing,
    encode_authentication,
    encode_composite,
    encode_routing,
)

__all__ = [
    "Credentials",
    "ErrorCode",
    "Frame",
    "FrameReader",
    "FrameType",
    "RSocketProtocolError",
    "decode_authentication",
    "decode_composite",
    "decode_frame",
    "decode_routing",
    "encode_authentication",
    "encode_composite",
    "encode_frame",
    "encode_routing",
    "frame_with_length",
    "with_length",
]
