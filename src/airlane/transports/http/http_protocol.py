"""uvicorn's httptools HTTP/1.1 protocol, handing WebSocket upgrades over already parsed.

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
Everything else is uvicorn's. This reads uvicorn's per-request attributes (``scope``,
``url``, ``headers``), so uvicorn is pinned below 0.60 in ``pyproject.toml``; the WebSocket
tests all run through it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from websockets.datastructures import Headers
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS, Request

from airlane.transports.http.ws_protocol import BatchingWebSocketProtocol

__all__ = ["UpgradingHttpProtocol", "parsed_upgrade_request"]

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

    def handle_websocket_upgrade(self) -> None:
        """Switch the connection to the WebSocket protocol (see the module docstring)."""
        try:
            self._hand_over()
        finally:
            # uvicorn drops its parser in connection_lost, which this protocol never gets once
            # the transport has another: the parser holds this protocol's bound methods, a
            # cycle of ~29 objects per connection (the transport's too) that only the garbage
            # collector would free, and `airlane.gcpacer` runs it seldom.
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
