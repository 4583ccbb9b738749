"""Exceptions raised by the sans-I/O wire layer.

One tree, rooted at `WireError` (an `airlane.core.errors.AirlaneError`, ``invalid_message``)::

    WireError                 the bytes on the wire cannot be turned into values (or back)
    ├── SSEError              an event stream broke a limit (line or event too long)
    ├── FrameTooLarge         a length prefix announced more than the decoder accepts
    ├── DecodeError           undecodable payload: bad JSON/MessagePack, invalid UTF-8,
    │                         corrupt or oversized compressed data
    ├── EncodeError           a value that the chosen codec cannot represent
    └── UnknownCodec          a codec name nobody registered

Whose fault is it? `SSEError`, `FrameTooLarge` and `DecodeError` mean the *peer* sent
something we will not decode: a transport turns them into a close code or an error frame and
never sends the traceback back. `EncodeError` is raised while *we* encode, so it points at our
own caller. `UnknownCodec` is either, depending on where the name came from (a client's query
parameter, or our own configuration).

Plain misuse of an API (a negative size, a CR in an SSE ``id`` we were asked to write) raises
the built-in `ValueError`, not a `WireError`: it is a bug in the calling code, not in the peer.
"""

from __future__ import annotations

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "DecodeError",
    "EncodeError",
    "FrameTooLarge",
    "SSEError",
    "UnknownCodec",
    "WireError",
]


class WireError(AirlaneError):
    """Base class of every error the wire layer raises about data on the wire."""

    code = ErrorCode.INVALID_MESSAGE


class SSEError(WireError):
    """A server-sent event stream exceeded a line or event size limit."""


class FrameTooLarge(WireError):
    """A length-prefixed frame announced a payload larger than the decoder accepts."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        """The payload length the peer announced."""
        self.limit = limit
        """The largest payload the decoder accepts."""


class DecodeError(WireError):
    """Bytes from the peer could not be decoded (codec, UTF-8 or decompression)."""


class EncodeError(WireError):
    """A value could not be encoded by the chosen codec."""

    code = ErrorCode.INTERNAL_ERROR


class UnknownCodec(WireError):
    """No codec is registered under the requested name."""

    code = ErrorCode.INVALID_REQUEST
