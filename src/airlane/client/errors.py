"""Errors raised by Airlane's Python clients.

One tree; a caller that wants "anything went wrong with the gateway" catches the root::

    ClientError
    ├── ClientClosed          local misuse: the client was used after (or before) its lifetime
    ├── ConnectFailed         the gateway could not be reached
    ├── ConnectionLost        the connection dropped while a request awaited its reply
    ├── ResumeFailed          a dropped stream could not be resumed within the retry budget
    ├── RequestRejected       the gateway refused a request (HTTP status, or a WebSocket
    │   │                     ``error`` reply); carries ``status`` and ``code``
    │   ├── StreamNotFound    no such stream (404 / ``stream_not_found``)
    │   └── GatewayOverloaded too busy to start it (``overloaded``): nothing was started
    ├── StreamFailed          the stream itself ended with an ``error`` event
    └── ProtocolViolation     the gateway sent something this client cannot parse

Exceptions of httpx and websockets never escape the clients: they are translated here, with
the original chained as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ClientClosed",
    "ClientError",
    "ConnectFailed",
    "ConnectionLost",
    "GatewayOverloaded",
    "ProtocolViolation",
    "RequestRejected",
    "ResumeFailed",
    "StreamFailed",
    "StreamNotFound",
]


class ClientError(Exception):
    """Base of every error an Airlane client raises."""


class ClientClosed(ClientError):
    """The client was used outside its lifetime (not connected, or already closed)."""


class ConnectFailed(ClientError):
    """The gateway could not be reached (refused, unreachable, handshake failed)."""


class ConnectionLost(ClientError):
    """The connection dropped while a request awaited its reply: whether the gateway acted on
    the request is unknown (a ``generate`` may have started a stream)."""


class ResumeFailed(ClientError):
    """The connection dropped and every reconnection attempt within the budget failed."""


class RequestRejected(ClientError):
    """The gateway answered a request with an error.

    ``status`` is the HTTP status (0 for a WebSocket ``error`` reply), ``code`` the gateway's
    machine-readable error code when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s
        """How long the gateway asked the client to wait before trying again (HTTP
        ``Retry-After``), when it said."""


class StreamNotFound(RequestRejected):
    """The stream does not exist on this gateway (never did, was deleted, or was lost)."""


class GatewayOverloaded(RequestRejected):
    """The gateway was too busy to start the request (code ``overloaded``: its set-up waited
    past the gateway's admission bound). Nothing was started, so sending the same request
    again is safe; `AirlaneClient.chat_stream` does so by itself within its `RetryPolicy`."""


class StreamFailed(ClientError):
    """The stream ended with an ``error`` event: the producer failed, not the connection."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ProtocolViolation(ClientError):
    """The gateway sent bytes this client cannot interpret (the peer's fault)."""


def rejected(
    message: str,
    *,
    status: int = 0,
    code: str | None = None,
    retry_after_s: float | None = None,
) -> RequestRejected:
    """The `RequestRejected` subclass that fits ``status`` / ``code``."""
    if status == 404 or code == "stream_not_found":
        return StreamNotFound(message, status=status, code=code, retry_after_s=retry_after_s)
    if code == "overloaded":
        return GatewayOverloaded(message, status=status, code=code, retry_after_s=retry_after_s)
    return RequestRejected(message, status=status, code=code, retry_after_s=retry_after_s)
