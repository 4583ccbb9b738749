"""uvicorn's httptools HTTP/1.1 protocol, handing WebSocket upgrades over already parsed and
letting streaming responses write their body parts in place.

uvicorn parses every request with httptools. For a WebSocket upgrade it then writes the
request back out as bytes and feeds them to the WebSocket protocol, where ``websockets``
parses them a second time, line by line, in Python: about 1,100 of the 13,100 bytecodes a
one-chunk WebSocket stream cost the gateway (opcode count of `airlane serve`, 50
connections), plus uvicorn re-reading the ``Connection`` and ``Upgrade`` headers on each of
three calls. `UpgradingHttpProtocol` builds the ``websockets`` `Request` from what httptools
parsed and gives it to `BatchingWebSocketProtocol.upgrade`.

It does so only for a request ``websockets`` itself would accept as parsed (``GET``,
HTTP/1.1, no body, within its header count and line length limits, names it accepts and
ASCII values); anything else goes the old way, so ``websockets`` answers it exactly as before.

Each HTTP request's scope also gets the ``airlane.http.write_body`` extension (`WRITE_BODY`):
a plain call that writes one part of a started, chunked response body to the transport at
once. An ASGI ``send`` is a coroutine: one coroutine object, its frame and a ``StopIteration``
per part, plus uvicorn's checks and message dict, for what is a single ``transport.write``.
The SSE pump writes through it whenever it can (a paced chunk cost about 65 bytecodes and
6 % of gateway CPU less, see docs/performance.md) and sends through ASGI otherwise:
whenever the response is not in that state, flow control has paused the transport, or the
client has gone, `BodyWriter.write` writes nothing and says so.

Everything else is uvicorn's. This reads uvicorn's per-request attributes (``scope``,
``url``, ``headers``, and the response cycle's state), so uvicorn is pinned below 0.60 in
``pyproject.toml``; the WebSocket and SSE tests all run through it.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from websockets.datastructures import Headers
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS, Request

from airlane.transports.http.ws_protocol import BatchingWebSocketProtocol

__all__ = ["WRITE_BODY", "BodyWriter", "UpgradingHttpProtocol", "parsed_upgrade_request"]

# Request headers that mean a body, which a WebSocket handshake may not have.
_BODY_HEADERS = frozenset((b"content-length", b"transfer-encoding"))

# A header name websockets' request parser accepts (an RFC 9110 token), and a value it reads
# the same in every version: printable ASCII and tabs. (It accepts bytes above 0x7F too, but
# decodes them differently from version 17 on: those requests go as bytes.)
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+").fullmatch
_VALUE = re.compile(rb"[\x09\x20-\x7e]*").fullmatch

# Add a header already checked (as websockets' parser does); older websockets lack it.
_add_checked: Callable[[Headers, str, str], None] = getattr(
    Headers, "set_insecure", Headers.__setitem__
)


def parsed_upgrade_request(
    method: str, http_version: str, target: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> Request | None:
    """The `Request` ``websockets`` would parse from this request, or None when it might
    answer it differently (then the request must go to it as bytes)."""
    if method != "GET" or http_version != "1.1":
        return None
    if len(target) + 15 >= MAX_LINE_LENGTH:  # "GET " + target + " HTTP/1.1\r\n"
        return None
    try:
        path = target.decode("ascii")
    except UnicodeDecodeError:
        return None
    parsed = Headers()
    for count, (name, raw_value) in enumerate(headers, 1):
        value = raw_value.strip(b" \t")
        if (
            count > MAX_NUM_HEADERS
            or name in _BODY_HEADERS
            or len(name) + len(raw_value) + 4 >= MAX_LINE_LENGTH  # name: value\r\n
            or not _TOKEN(name)
            or not _VALUE(value)
        ):
            return None
        _add_checked(parsed, name.decode("ascii"), value.decode("ascii"))
    return Request(path, parsed)


WRITE_BODY = "airlane.http.write_body"
"""Scope extension: a call-back that writes one more part of a chunked response body at
once, if the response can take it without waiting; see `BodyWriter.write`."""


class BodyWriter:
    """Writes body parts of one response straight to the transport (``WRITE_BODY``)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
        # A weak reference: the scope holds this writer, and the cycle holds the scope.
        self._cycle = weakref.ref(cycle)

    def write(self, body: bytes) -> bool:
        """Write ``body`` as the next chunk of a started, chunked, open response whose
        connection takes writes now; False (nothing written) in every other case, where the
        caller sends it as ``http.response.body``, which waits, finishes or drops it."""
        cycle = self._cycle()
        if (
            cycle is None
            or not cycle.chunked_encoding
            or not cycle.response_started
            or cycle.response_complete
            or cycle.disconnected
            or cycle.flow.write_paused
            or not body
        ):
            return False
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
        return True


class UpgradingHttpProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that hands a WebSocket upgrade to `BatchingWebSocketProtocol`
    as a parsed `Request`; pass it as ``uvicorn.Config(http=UpgradingHttpProtocol)``."""

    _upgrade_headers: list[tuple[bytes, bytes]] | None = None
    _upgrade: bool = False

    def _should_upgrade(self) -> bool:
        # uvicorn asks up to three times per request, each time scanning every header.
        headers = self.headers
        if self._upgrade_headers is not headers:
            self._upgrade_headers = headers
            self._upgrade = super()._should_upgrade()
        return self._upgrade

    def on_headers_complete(self) -> None:
        """uvicorn's, plus the ``WRITE_BODY`` extension in the scope of a new request."""
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            extensions[WRITE_BODY] = BodyWriter(cycle).write

    def handle_websocket_upgrade(self) -> None:
        """Switch the connection to the WebSocket protocol (see the module docstring)."""
        try:
            self._hand_over()
        finally:
            # uvicorn drops its parser in connection_lost, which this protocol never gets once
            # the transport has another: the parser holds this protocol's bound methods, a
            # cycle of ~29 objects per connection (the transport's too) that only the garbage
            # collector would free, and `airlane.server.gcpacer` runs it seldom.
            self.parser = None  # type: ignore[assignment]

    def _hand_over(self) -> None:
        ws_class: Any = self.ws_protocol_class
        scope = self.scope
        request = (
            parsed_upgrade_request(
                scope["method"], scope["http_version"], self.url, scope["headers"]
            )
            if isinstance(ws_class, type) and issubclass(ws_class, BatchingWebSocketProtocol)
            else None
        )
        if request is None:
            super().handle_websocket_upgrade()
            return
        self.connections.discard(self)
        protocol = ws_class(
            config=self.config, server_state=self.server_state, app_state=self.app_state
        )
        protocol.upgrade(self.transport, request)
        self.transport.set_protocol(protocol)
