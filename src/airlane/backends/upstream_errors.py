"""Errors of the upstream HTTP client (`airlane.backends.upstream_http`).

One tree, rooted at `UpstreamHTTPError`. Each one is the fault of the upstream or of the network
between us, never of the caller: misuse of the client (a bad URL, a closed pool) raises
`ValueError` or `RuntimeError` instead::

    UpstreamHTTPError           the request to the upstream failed
    ├── UpstreamConnectError    no connection could be made: refused, unreachable, unknown
    │                           name, TLS handshake failed
    ├── UpstreamTimeout         a deadline passed; ``phase`` says which (`TimeoutPhase`)
    ├── UpstreamDisconnected    the connection closed or broke before the response ended
    └── UpstreamProtocolError   the upstream's bytes are not an HTTP/1.1 response, or a response
                                broke a size limit

The backend turns each into an ``error`` event with its own code (see
`airlane.backends.openai`); none of them escapes into the gateway.
"""

from __future__ import annotations

import enum

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "TimeoutPhase",
    "UpstreamConnectError",
    "UpstreamDisconnected",
    "UpstreamHTTPError",
    "UpstreamProtocolError",
    "UpstreamTimeout",
]


class UpstreamHTTPError(AirlaneError):
    """Base class: a request to the upstream failed."""

    code = ErrorCode.UPSTREAM_CONNECTION_ERROR


class UpstreamConnectError(UpstreamHTTPError):
    """No connection to the upstream could be made."""

    code = ErrorCode.UPSTREAM_UNAVAILABLE


class TimeoutPhase(enum.Enum):
    """Which deadline of `airlane.backends.upstream_http.UpstreamTimeouts` passed; the value
    completes "timed out ..." in a message."""

    POOL = "waiting for a free connection to"
    CONNECT = "connecting to"
    WRITE = "sending the request to"
    FIRST_BYTE = "waiting for the first byte from"
    IDLE = "waiting for data from"


class UpstreamTimeout(UpstreamHTTPError):
    """A deadline passed before the upstream answered (or before a connection was free)."""

    code = ErrorCode.UPSTREAM_TIMEOUT

    def __init__(self, phase: TimeoutPhase, where: str) -> None:
        super().__init__(f"timed out {phase.value} upstream {where}")
        self.phase = phase
        """Which deadline passed."""


class UpstreamDisconnected(UpstreamHTTPError):
    """The connection closed or broke before the response was complete."""


class UpstreamProtocolError(UpstreamHTTPError):
    """The upstream sent something that is not a valid HTTP/1.1 response, or too much of it."""

    code = ErrorCode.UPSTREAM_PROTOCOL_ERROR
