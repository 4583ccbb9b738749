"""`ClientHandshake`: the client side of the WebSocket opening handshake, sans I/O.

RFC 6455 section 4.1: the client sends an HTTP/1.1 GET with ``Upgrade: websocket``, a random
16-byte ``Sec-WebSocket-Key`` (base64) and ``Sec-WebSocket-Version: 13``; the server must answer
``101 Switching Protocols`` with ``Upgrade: websocket``, ``Connection: Upgrade`` and
``Sec-WebSocket-Accept`` = base64(SHA-1(key + the RFC's GUID)). The load client offers no
extension (no permessage-deflate: compressing would measure zlib), so a response that selects
one fails the handshake (section 4.1, "the client MUST _Fail the WebSocket Connection_").
By default it offers no subprotocol either, and a response that selects one fails too; with
``subprotocol`` (AIRC's ``airc.v1.2``) it offers exactly that one, and the server must select it.
"""

from __future__ import annotations

import base64
import hashlib
import os

from airlane.bench.chunk import LoadProtocolError

__all__ = ["DEFAULT_MAX_HEAD_BYTES", "ClientHandshake", "HandshakeError", "accept_value"]

DEFAULT_MAX_HEAD_BYTES = 64 * 1024
"""A 101 response head larger than this is not from a WebSocket server."""

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3


class HandshakeError(LoadProtocolError):
    """The server refused the upgrade (its status is in the message) or answered it wrongly."""


def accept_value(key: bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``Sec-WebSocket-Key: key``."""
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())


class ClientHandshake:
    """One opening handshake: `request` to send, then `receive_data` until it says done."""

    __slots__ = ("_authority", "_head", "_max_head", "_target", "key", "subprotocol")

    def __init__(
        self,
        authority: str,
        target: str,
        *,
        key: bytes | None = None,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        subprotocol: str | None = None,
    ) -> None:
        self.key = key if key is not None else base64.b64encode(os.urandom(16))
        """The ``Sec-WebSocket-Key``, random per connection (section 4.1, item 7)."""
        self.subprotocol = subprotocol
        """The one subprotocol offered, which the server must select; None: offer none."""
        self._authority = authority
        self._target = target
        self._max_head = max_head_bytes
        self._head = b""

    def request(self) -> bytes:
        """The upgrade request for ``target`` (path and query) at ``authority`` (host:port)."""
        protocol = f"Sec-WebSocket-Protocol: {self.subprotocol}\r\n" if self.subprotocol else ""
        return (
            f"GET {self._target} HTTP/1.1\r\nHost: {self._authority}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {self.key.decode('ascii')}\r\nSec-WebSocket-Version: 13\r\n"
            f"{protocol}User-Agent: airlane-bench\r\n\r\n"
        ).encode("ascii")

    def receive_data(self, data: bytes) -> bytes | None:
        """Read response bytes; None while the head is incomplete, then the bytes after it
        (the server's first frames).

        Raises:
            HandshakeError: the response is not a valid 101 for this request.
        """
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > self._max_head:
                raise HandshakeError(f"response head exceeds {self._max_head} bytes")
            self._head = head
            return None
        self._check(head[:end].decode("latin-1").split("\r\n"))
        return head[end + 4 :]

    def _check(self, lines: list[str]) -> None:
        status = lines[0].split(" ", 2)
        if len(status) < 2 or not status[0].startswith("HTTP/1."):
            raise HandshakeError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        if status[1] != "101":
            raise HandshakeError(f"the server answered {lines[0][:120]} instead of 101")
        fields = _fields(lines[1:])
        if fields.get("upgrade", "").lower() != "websocket":
            raise HandshakeError("101 response without Upgrade: websocket")
        if "upgrade" not in _tokens(fields.get("connection", "")):
            raise HandshakeError("101 response without Connection: Upgrade")
        if fields.get("sec-websocket-accept", "").encode("latin-1") != accept_value(self.key):
            raise HandshakeError("wrong or missing Sec-WebSocket-Accept")
        if "sec-websocket-extensions" in fields:
            value = fields["sec-websocket-extensions"]
            raise HandshakeError(
                f"the server selected sec-websocket-extensions {value!r}, not offered"
            )
        selected = fields.get("sec-websocket-protocol")
        if self.subprotocol is None:
            if selected is not None:
                raise HandshakeError(
                    f"the server selected sec-websocket-protocol {selected!r}, not offered"
                )
        elif selected != self.subprotocol:
            got = "none" if selected is None else repr(selected)
            raise HandshakeError(f"the server selected subprotocol {got}, not {self.subprotocol!r}")


def _fields(lines: list[str]) -> dict[str, str]:
    """Header fields by lower-case name; repeated fields joined by commas (RFC 9110 5.3)."""
    fields: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise HandshakeError(f"malformed header field {line[:80]!r}")
        key = name.strip().lower()
        fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    return fields


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",")}
