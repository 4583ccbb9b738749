"""MQTT 5 properties (OASIS MQTT 5.0, section 2.2.2): the table of identifiers, and their codec.

A property list is a variable byte integer (its length in bytes) followed by properties, each
an identifier (a variable byte integer, in practice one byte) and a value of that identifier's
type. `Properties` holds the ones a client meets, by name; the two that may repeat (user
properties, subscription identifiers) are tuples. MQTT 3.1.1 has no properties: its packets
are encoded without them (whatever ``properties`` holds) and decode with ``properties=None``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any, Final

from airlane.wire.mqtt.primitives import (
    MQTTDecodeError,
    Reader,
    encode_binary,
    encode_string,
    encode_varint,
)

__all__ = ["Properties", "decode_properties", "encode_properties"]


@dataclass(frozen=True, slots=True)
class Properties:
    """The MQTT 5 properties of one packet; None (or empty) is absent."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def user(self, name: str) -> str | None:
        """The first user property called ``name``, or None."""
        for key, value in self.user_properties:
            if key == name:
                return value
        return None


# identifier -> (field name, value type). Types: "byte", "u16", "u32", "varint", "str",
# "bin", "pair".
_TABLE: Final[dict[int, tuple[str, str]]] = {
    0x01: ("payload_format_indicator", "byte"),
    0x02: ("message_expiry_interval", "u32"),
    0x03: ("content_type", "str"),
    0x08: ("response_topic", "str"),
    0x09: ("correlation_data", "bin"),
    0x0B: ("subscription_identifiers", "varint"),
    0x11: ("session_expiry_interval", "u32"),
    0x12: ("assigned_client_identifier", "str"),
    0x13: ("server_keep_alive", "u16"),
    0x15: ("authentication_method", "str"),
    0x16: ("authentication_data", "bin"),
    0x17: ("request_problem_information", "byte"),
    0x18: ("will_delay_interval", "u32"),
    0x19: ("request_response_information", "byte"),
    0x1A: ("response_information", "str"),
    0x1C: ("server_reference", "str"),
    0x1F: ("reason_string", "str"),
    0x21: ("receive_maximum", "u16"),
    0x22: ("topic_alias_maximum", "u16"),
    0x23: ("topic_alias", "u16"),
    0x24: ("maximum_qos", "byte"),
    0x25: ("retain_available", "byte"),
    0x26: ("user_properties", "pair"),
    0x27: ("maximum_packet_size", "u32"),
    0x28: ("wildcard_subscription_available", "byte"),
    0x29: ("subscription_identifier_available", "byte"),
    0x2A: ("shared_subscription_available", "byte"),
}
_IDS: Final[dict[str, tuple[int, str]]] = {
    name: (pid, kind) for pid, (name, kind) in _TABLE.items()
}
_REPEATED: Final = frozenset({"subscription_identifiers", "user_properties"})
_EMPTY: Final = Properties()
_LIMITS: Final[dict[str, int]] = {"byte": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF}
_FORMATS: Final[dict[str, str]] = {"byte": "!B", "u16": "!H", "u32": "!I"}


def _encode_value(kind: str, value: Any) -> bytes:
    if kind in _LIMITS:
        if not isinstance(value, int) or not 0 <= value <= _LIMITS[kind]:
            raise ValueError(f"property value {value!r} does not fit a {kind}")
        return struct.pack(_FORMATS[kind], value)
    if kind == "varint":
        return encode_varint(value)
    if kind == "str":
        return encode_string(value)
    if kind == "bin":
        return encode_binary(value)
    key, text = value
    return encode_string(key) + encode_string(text)


def encode_properties(properties: Properties | None) -> bytes:
    """The property list (length included) for ``properties``; an empty one for None."""
    if properties is None or properties == _EMPTY:
        return b"\x00"
    body = bytearray()
    for field in fields(properties):
        value = getattr(properties, field.name)
        if value is None or value == ():
            continue
        ident, kind = _IDS[field.name]
        for item in value if field.name in _REPEATED else (value,):
            body += encode_varint(ident)
            body += _encode_value(kind, item)
    return encode_varint(len(body)) + bytes(body)


def decode_properties(reader: Reader) -> Properties:
    """Read a property list; `MQTTDecodeError` for an unknown identifier, a repeated one that
    must not repeat, or a value that runs past the list."""
    length = reader.varint()
    if length == 0:
        return _EMPTY
    inner = reader.sub(length)
    values: dict[str, Any] = {}
    while inner.remaining:
        ident = inner.varint()
        entry = _TABLE.get(ident)
        if entry is None:
            raise MQTTDecodeError(f"unknown property identifier 0x{ident:02x}")
        name, kind = entry
        value: Any
        if kind == "byte":
            value = inner.u8()
        elif kind == "u16":
            value = inner.u16()
        elif kind == "u32":
            value = inner.u32()
        elif kind == "varint":
            value = inner.varint()
        elif kind == "str":
            value = inner.string()
        elif kind == "bin":
            value = inner.binary()
        else:
            value = (inner.string(), inner.string())
        if name in _REPEATED:
            values[name] = (*values.get(name, ()), value)
        elif name in values:
            raise MQTTDecodeError(f"property {name} appears twice")
        else:
            values[name] = value
    return Properties(**values)
