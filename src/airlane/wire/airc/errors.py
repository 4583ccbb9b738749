"""AIRC's error codes and its one exception.

Everything a peer can get wrong becomes an `AircProtocolError` carrying an `ErrorCode`: the
connection reports it in a ``GOAWAY`` signalling message (the code travels as a u16) and a
transport closes with it (`ErrorCode.ws_close_code` over WebSocket).
"""

from __future__ import annotations

import enum

from airlane.wire.errors import WireError

__all__ = ["AircError", "AircProtocolError", "ErrorCode"]


class ErrorCode(enum.IntEnum):
    """Why an AIRC connection ended; the value is carried in ``GOAWAY``."""

    NO_ERROR = 0
    BAD_MAGIC = 1
    BAD_VERSION = 2
    RESERVED_FLAGS = 3
    BAD_CRC = 4
    BAD_LENGTH = 5
    OVERSIZE = 6
    BAD_SIGNALLING = 7
    UNKNOWN_SIGNAL = 8
    MESSAGE_TOO_LARGE = 9
    ACK_TIMEOUT = 10
    TOO_MANY_STREAMS = 11
    FLOW_CONTROL = 12
    INTERNAL_ERROR = 13
    PEER_GOAWAY = 14
    AUTH_FAILED = 15

    @property
    def ws_close_code(self) -> int:
        """The WebSocket close code for this reason: 1000 for a clean end, else 4000 + code
        (the private-use range of RFC 6455 section 7.4.2)."""
        return 1000 if self is ErrorCode.NO_ERROR else 4000 + self.value


class AircError(WireError):
    """Base class of AIRC's errors."""


class AircProtocolError(AircError):
    """The peer broke the protocol; the connection must close with ``goaway``. (Its
    `airlane.core.errors.ErrorCode` is ``invalid_message``, as every undecodable input's.)"""

    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.goaway = code
        """What kind of violation, as sent in ``GOAWAY``."""
        self.reason = reason
        """A human-readable explanation."""
