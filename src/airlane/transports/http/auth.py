"""Who a request is: its ``?ticket=``, its bearer token (``?access_token=`` only where
``[http] query_tokens`` allows it), or its TLS client certificate, through the gateway."""

from __future__ import annotations

import functools

from airlane.gateway import Gateway, Principal, RequestFacts
from airlane.transports.http.asgi import Request
from airlane.transports.http.config import HttpConfig

__all__ = ["authenticate", "request_facts"]


def authenticate(gateway: Gateway, config: HttpConfig, request: Request) -> Principal:
    """The request's principal, or the gateway's `Unauthenticated`."""
    bearer = request.bearer
    if bearer is None and config.query_tokens:
        bearer = request.query.get("access_token")
    client = request.scope.get("client")
    return gateway.authenticate(
        bearer,
        request.peer,
        ticket=request.query.get("ticket"),
        origin=str(client[0]) if client else None,
        request=functools.partial(request_facts, request),
    )


def request_facts(request: Request) -> RequestFacts:
    """What a policy rule can match of an HTTP request or WebSocket handshake."""
    wire = "ws" if request.scope.get("type") == "websocket" else "http"
    pairs = ((name.decode("latin-1"), value.decode("latin-1")) for name, value in
             request.headers.items())  # fmt: skip
    return RequestFacts.of(wire, pairs, request.method, request.path)
