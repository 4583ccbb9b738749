"""JSON and MessagePack codecs.

Invariant: decode(encode(value)) == value for every value the codec can represent, and the
libraries' exceptions never escape: bad input is DecodeError, bad values EncodeError.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.codecs import CODECS, JSON, MSGPACK, Codec, get_codec
from airlane.wire.errors import DecodeError, EncodeError, UnknownCodec, WireError

from .chunking import PROPERTY


def test_registry() -> None:
    assert get_codec("json") is JSON
    assert get_codec("msgpack") is MSGPACK
    assert set(CODECS) == {"json", "msgpack"}
    for codec in CODECS.values():
        assert isinstance(codec, Codec)
    assert (JSON.name, JSON.content_type, JSON.binary) == ("json", "application/json", False)
    assert (MSGPACK.name, MSGPACK.binary) == ("msgpack", True)


def test_unknown_codec_lists_valid_names() -> None:
    with pytest.raises(UnknownCodec, match=r"'protobuf'.*json, msgpack") as info:
        get_codec("protobuf")
    assert isinstance(info.value, WireError)


def test_json_encoding() -> None:
    assert (
        JSON.encode({"a": [1, 2.5, None, True, "\u00e9"]}) == '{"a":[1,2.5,null,true,"é"]}'.encode()
    )
    assert JSON.decode(b'{"a": [1, "x"]}') == {"a": [1, "x"]}


@pytest.mark.parametrize("value", [{1: "int key"}, object(), 2**70, {"set": {1}}])
def test_json_encode_errors(value: Any) -> None:
    with pytest.raises(EncodeError, match="cannot encode as JSON"):
        JSON.encode(value)


@pytest.mark.parametrize("data", [b"", b"{", b'{"a":}', b"[1] 2", b'"\xff"', b"[" * 2000])
def test_json_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        JSON.decode(data)


def test_msgpack_encoding() -> None:
    assert MSGPACK.encode({"a": 1}) == b"\x81\xa1a\x01"
    assert MSGPACK.decode(b"\x81\xa1a\x01") == {"a": 1}
    assert MSGPACK.decode(MSGPACK.encode({1: b"raw"})) == {1: b"raw"}


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [object(), 2**70, -(2**64), nested(5000)])
def test_msgpack_encode_errors(value: Any) -> None:
    with pytest.raises(EncodeError, match="cannot encode as MessagePack"):
        MSGPACK.encode(value)


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x92\x01", b"\x01\x02", b"\x91" * 5000])
def test_msgpack_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid MessagePack"):
        MSGPACK.decode(data)


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@PROPERTY
@given(VALUES, st.sampled_from(sorted(CODECS)))
def test_round_trip(value: Any, name: str) -> None:
    """Invariant: decode(encode(value)) == value for JSON-shaped values, in both codecs."""
    codec = get_codec(name)
    assert codec.decode(codec.encode(value)) == value
