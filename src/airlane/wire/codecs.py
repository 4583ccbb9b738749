"""Payload codecs: values to bytes and back, JSON or MessagePack.

A `Codec` is looked up by the name a client asks for (``?codec=msgpack``) with `get_codec`.
The libraries' own exceptions are translated here, at the boundary: bad input raises
`DecodeError`, an unrepresentable value raises `EncodeError`.

JSON is RFC 8259 text via orjson; it refuses non-``str`` dict keys and integers outside the
64-bit range, and, like orjson, writes NaN and infinities as ``null``. MessagePack follows the
msgpack specification via msgspec, which accepts any key type the format can carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol, runtime_checkable

import msgspec
import orjson

from airlane.wire.errors import DecodeError, EncodeError, UnknownCodec

__all__ = ["CODECS", "JSON", "MSGPACK", "Codec", "JsonCodec", "MsgpackCodec", "get_codec"]


@runtime_checkable
class Codec(Protocol):
    """Turns payload values into bytes and back.

    The members are read-only properties so that an implementation may provide them as plain
    attributes, class attributes or properties.
    """

    @property
    def name(self) -> str:
        """Registry name, as a client spells it: ``"json"``, ``"msgpack"``."""
        ...

    @property
    def content_type(self) -> str:
        """Media type of the encoded bytes, for ``Content-Type`` headers."""
        ...

    @property
    def binary(self) -> bool:
        """Whether the encoding is binary (needs a binary frame, cannot go into SSE text)."""
        ...

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj``; raise `EncodeError` if the codec cannot represent it."""
        ...

    def decode(self, data: bytes) -> Any:
        """Decode ``data``; raise `DecodeError` if it is not a valid encoding."""
        ...


class JsonCodec:
    """JSON (RFC 8259), UTF-8 encoded, through orjson."""

    name: Final = "json"
    content_type: Final = "application/json"
    binary: Final = False

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj`` as compact JSON.

        Raises:
            EncodeError: for unsupported types, non-``str`` dict keys, integers beyond 64
                bits, or nesting deeper than orjson's limit.
        """
        try:
            return orjson.dumps(obj)
        except orjson.JSONEncodeError as exc:
            raise EncodeError(f"cannot encode as JSON: {exc}") from exc

    def decode(self, data: bytes) -> Any:
        """Decode one JSON document.

        Raises:
            DecodeError: if ``data`` is not a single valid UTF-8 JSON document.
        """
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"invalid JSON: {exc}") from exc


class MsgpackCodec:
    """MessagePack through msgspec, with one reusable encoder and decoder."""

    name: Final = "msgpack"
    # Not an IANA-registered type; this is the spelling MessagePack clients commonly send.
    content_type: Final = "application/msgpack"
    binary: Final = True

    __slots__ = ("_decoder", "_encoder")

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()

    def encode(self, obj: Any) -> bytes:
        """Encode ``obj`` as MessagePack.

        Raises:
            EncodeError: for unsupported types, integers outside [-2**63, 2**64 - 1], or
                nesting deeper than the interpreter's recursion limit.
        """
        try:
            return self._encoder.encode(obj)
        except (TypeError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
            raise EncodeError(f"cannot encode as MessagePack: {exc}") from exc

    def decode(self, data: bytes) -> Any:
        """Decode one MessagePack object.

        Raises:
            DecodeError: if ``data`` is malformed, has trailing bytes, or nests too deeply.
        """
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise DecodeError(f"invalid MessagePack: {exc}") from exc


JSON: Final = JsonCodec()
"""The JSON codec."""

MSGPACK: Final = MsgpackCodec()
"""The MessagePack codec."""

CODECS: Final[Mapping[str, Codec]] = {codec.name: codec for codec in (JSON, MSGPACK)}
"""Every registered codec by name."""


def get_codec(name: str) -> Codec:
    """Return the codec registered as ``name``.

    Raises:
        UnknownCodec: if there is none; the message lists the valid names.
    """
    try:
        return CODECS[name]
    except KeyError:
        valid = ", ".join(sorted(CODECS))
        raise UnknownCodec(f"unknown codec {name!r}; valid codecs: {valid}") from None
