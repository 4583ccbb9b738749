"""The one exception the server raises into an application: `ClientDisconnected`."""

from __future__ import annotations

__all__ = ["ClientDisconnected"]


class ClientDisconnected(ConnectionResetError):
    """A WebSocket message was sent on a connection that is closing or gone.

    The peer going is normal, so this is an `OSError` (as the ASGI specification asks of a
    send on a closed connection), which the application's writers already treat as the end
    of their socket; the server never logs it when it ends an application. Sending
    ``websocket.close`` on such a connection is not an error: the close has begun already,
    and the message does nothing. HTTP responses are different: a response part sent after
    the client went is dropped without a word (as other ASGI servers do), and the
    application learns of it from ``http.disconnect``.
    """
