"""The capsule that closes a WebTransport session (CLOSE_WEBTRANSPORT_SESSION).

On a session's CONNECT stream, after the head, HTTP/3 carries capsules (RFC 9297): a type and
a length as QUIC variable-length integers, then the value. A session ends with type 0x2843,
whose value is a 32-bit error code and a UTF-8 reason of at most 1024 bytes, and then the
stream's end.
"""

from __future__ import annotations

__all__ = ["CLOSE_SESSION", "encode_close", "parse_close", "varint"]

CLOSE_SESSION = 0x2843
MAX_REASON = 1024


def varint(value: int) -> bytes:
    """``value`` as a QUIC variable-length integer (RFC 9000 16), in its shortest form."""
    if value < 1 << 6:
        return value.to_bytes(1, "big")
    if value < 1 << 14:
        return (value | 0x4000).to_bytes(2, "big")
    if value < 1 << 30:
        return (value | 0x8000_0000).to_bytes(4, "big")
    return (value | 0xC000_0000_0000_0000).to_bytes(8, "big")


def _pull_varint(data: bytes, offset: int) -> tuple[int, int] | None:
    """(value, next offset), or None if ``data`` ends first."""
    if offset >= len(data):
        return None
    size = 1 << (data[offset] >> 6)
    if offset + size > len(data):
        return None
    value = int.from_bytes(data[offset : offset + size], "big") & ((1 << (8 * size - 2)) - 1)
    return value, offset + size


def encode_close(code: int, reason: str) -> bytes:
    """The capsule closing a session with ``code`` and ``reason`` (cut to 1024 bytes)."""
    value = (code & 0xFFFF_FFFF).to_bytes(4, "big") + reason.encode()[:MAX_REASON]
    return varint(CLOSE_SESSION) + varint(len(value)) + value


def parse_close(data: bytes) -> tuple[int, str] | None:
    """(code, reason) if ``data`` starts with a whole close capsule, else None."""
    kind = _pull_varint(data, 0)
    if kind is None or kind[0] != CLOSE_SESSION:
        return None
    length = _pull_varint(data, kind[1])
    if length is None or length[0] < 4 or length[1] + length[0] > len(data):
        return None
    value = data[length[1] : length[1] + length[0]]
    return int.from_bytes(value[:4], "big"), value[4:].decode("utf-8", "replace")
