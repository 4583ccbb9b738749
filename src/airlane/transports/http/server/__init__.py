"""Airlane's own HTTP/1.1 and WebSocket server for its ASGI app, on public APIs only.

The gateway's server used to be uvicorn with subclasses of its private protocol classes;
this package replaces it with a small server built on two documented interfaces: httptools'
`HttpRequestParser` call-backs for HTTP/1.1 and ``websockets``' sans-I/O `ServerProtocol` for
WebSocket. It serves `AirlaneApp` as any ASGI server would (the app stays plain ASGI and
mountable anywhere), plus the three extensions the streaming paths write through without a
coroutine per chunk (``airlane.http.write_body``, ``airlane.websocket.send_many`` and
``airlane.websocket.write_now``).

One concept per module:

- `settings`: `ServerSettings`, every limit and timer;
- `state`: `ServerState`, what a server's connections share, and the task ownership;
- `server`: `HttpServer`, the listener, start-up and the graceful shutdown;
- `lifespan`: the ASGI lifespan protocol;
- `cycle`: `RequestCycle`, one request's ASGI ``receive`` and ``send``, and `BodyWriter`;
- `flow`: `WriteFlow`, the write side of flow control;
- `handshake`: the WebSocket handshake request made from the parsed HTTP request;
- `target`, `status`: the request target and addresses; response heads;
- `errors`: `ClientDisconnected`.

The connection protocols live beside the app they serve:
`airlane.transports.http.http_protocol.HttpProtocol` (HTTP/1.1, httptools) and
`airlane.transports.http.ws_protocol.WebSocketProtocol` (WebSocket, ``websockets``).


The names below are imported on first use (`airlane.runtime.lazy`): the connection protocols
import this package's modules, and `HttpServer` imports the protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from airlane.transports.http.server.errors import ClientDisconnected
    from airlane.transports.http.server.lifespan import LifespanFailed
    from airlane.transports.http.server.server import HttpServer
    from airlane.transports.http.server.settings import ServerSettings

_HOMES = {
    "airlane.transports.http.server.errors": ("ClientDisconnected",),
    "airlane.transports.http.server.lifespan": ("LifespanFailed",),
    "airlane.transports.http.server.server": ("HttpServer",),
    "airlane.transports.http.server.settings": ("ServerSettings",),
}

__all__ = ["ClientDisconnected", "HttpServer", "LifespanFailed", "ServerSettings"]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
