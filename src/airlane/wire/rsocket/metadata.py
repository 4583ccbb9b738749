"""RSocket metadata extensions: composite metadata, routing and authentication.

Composite metadata (``message/x.rsocket.composite-metadata.v0``) is a sequence of entries, each
a MIME type and a value: the type either a well-known id (one byte with the high bit set) or its
name (one byte of length minus one, then ASCII), then the value's 24-bit length and the value.
Routing (``message/x.rsocket.routing.v0``) is a list of tags, each one length byte and UTF-8.
Authentication (``message/x.rsocket.authentication.v0``) names its type the same way (0 simple,
1 bearer): simple is a 16-bit username length, the username and the password; bearer is the
token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airlane.wire.rsocket.frames import ErrorCode, RSocketProtocolError

__all__ = [
    "AUTHENTICATION",
    "COMPOSITE",
    "ROUTING",
    "Credentials",
    "decode_authentication",
    "decode_composite",
    "decode_routing",
    "encode_authentication",
    "encode_composite",
    "encode_routing",
]

COMPOSITE = "message/x.rsocket.composite-metadata.v0"
ROUTING = "message/x.rsocket.routing.v0"
AUTHENTICATION = "message/x.rsocket.authentication.v0"

WELL_KNOWN = {
    0x05: "application/json",
    0x06: "application/octet-stream",
    0x09: "application/vnd.google.protobuf",
    0x21: "text/plain",
    0x7A: "message/x.rsocket.mime-type.v0",
    0x7B: "message/x.rsocket.accept-mime-types.v0",
    0x7C: AUTHENTICATION,
    0x7D: "message/x.rsocket.tracing-zipkin.v0",
    0x7E: ROUTING,
    0x7F: COMPOSITE,
}
"""The well-known MIME ids Airlane reads and writes (the rest are written by name)."""
_IDS = {name: id_ for id_, name in WELL_KNOWN.items()}
_AUTH_TYPES = {0x00: "simple", 0x01: "bearer"}


def _bad(message: str) -> RSocketProtocolError:
    return RSocketProtocolError(message, ErrorCode.INVALID)


def _type_name(data: bytes, offset: int, known: dict[int, str]) -> tuple[str, int]:
    if offset >= len(data):
        raise _bad("metadata ends before its type")
    first = data[offset]
    if first & 0x80:
        name = known.get(first & 0x7F)
        return (name or f"well-known:{first & 0x7F:#x}"), offset + 1
    size = first + 1
    raw = data[offset + 1 : offset + 1 + size]
    if len(raw) != size:
        raise _bad("metadata ends inside a type name")
    try:
        return raw.decode("ascii"), offset + 1 + size
    except UnicodeDecodeError:
        raise _bad("a metadata type name is not ASCII") from None


def _encode_type(name: str, known: dict[str, int]) -> bytes:
    id_ = known.get(name)
    if id_ is not None:
        return bytes((0x80 | id_,))
    raw = name.encode("ascii")
    if not 1 <= len(raw) <= 128:
        raise ValueError("a type name holds 1 to 128 bytes")
    return bytes((len(raw) - 1,)) + raw


def decode_composite(data: bytes) -> list[tuple[str, bytes]]:
    """The (MIME type, value) entries of composite metadata; `RSocketProtocolError` (INVALID)
    for malformed ones."""
    entries = []
    offset = 0
    while offset < len(data):
        name, offset = _type_name(data, offset, WELL_KNOWN)
        if offset + 3 > len(data):
            raise _bad("composite metadata ends inside an entry's length")
        size = int.from_bytes(data[offset : offset + 3], "big")
        value = data[offset + 3 : offset + 3 + size]
        if len(value) != size:
            raise _bad("composite metadata ends inside an entry")
        entries.append((name, value))
        offset += 3 + size
    return entries


def encode_composite(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """Composite metadata of ``entries``."""
    out = bytearray()
    for name, value in entries:
        out += _encode_type(name, _IDS) + len(value).to_bytes(3, "big") + value
    return bytes(out)


def decode_routing(data: bytes) -> list[str]:
    """The tags of routing metadata."""
    tags = []
    offset = 0
    while offset < len(data):
        size = data[offset]
        raw = data[offset + 1 : offset + 1 + size]
        if len(raw) != size:
            raise _bad("routing metadata ends inside a tag")
        try:
            tags.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise _bad("a route is not UTF-8") from None
        offset += 1 + size
    return tags


def encode_routing(tags: Iterable[str]) -> bytes:
    """Routing metadata of ``tags`` (each at most 255 bytes of UTF-8)."""
    out = bytearray()
    for tag in tags:
        raw = tag.encode("utf-8")
        if len(raw) > 0xFF:
            raise ValueError("a route holds at most 255 bytes")
        out += bytes((len(raw),)) + raw
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What authentication metadata carried."""

    kind: str
    """``simple``, ``bearer``, or the name of another type."""
    username: str = ""
    password: str = ""
    token: str = ""


def decode_authentication(data: bytes) -> Credentials:
    """The credentials of authentication metadata."""
    kind, offset = _type_name(data, 0, _AUTH_TYPES)
    try:
        if kind == "simple":
            if offset + 2 > len(data):
                raise _bad("simple authentication ends before its username")
            size = int.from_bytes(data[offset : offset + 2], "big")
            username = data[offset + 2 : offset + 2 + size]
            if len(username) != size:
                raise _bad("simple authentication ends inside its username")
            password = data[offset + 2 + size :]
            return Credentials(kind, username.decode("utf-8"), password.decode("utf-8"))
        return Credentials(kind, token=data[offset:].decode("utf-8"))
    except UnicodeDecodeError:
        raise _bad("credentials are not UTF-8") from None


def encode_authentication(credentials: Credentials) -> bytes:
    """Authentication metadata for ``credentials``."""
    kind = _encode_type(credentials.kind, {name: id_ for id_, name in _AUTH_TYPES.items()})
    if credentials.kind == "simple":
        username = credentials.username.encode("utf-8")
        return kind + len(username).to_bytes(2, "big") + username + credentials.password.encode()
    return kind + credentials.token.encode("utf-8")
