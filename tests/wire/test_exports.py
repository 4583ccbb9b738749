"""The public surface of airlane.wire is deliberate (STYLE.md section 6)."""

from __future__ import annotations

import importlib

import pytest

import airlane.wire
from airlane.wire import errors

MODULES = ["codecs", "compression", "errors", "framing", "sse", "utf8"]


def test_package_exports() -> None:
    assert sorted(airlane.wire.__all__) == sorted(
        [
            "CODECS",
            "JSON",
            "MSGPACK",
            "ClientClass",
            "Codec",
            "Compression",
            "CompressionChoice",
            "Compressor",
            "DecodeError",
            "Decompressor",
            "EncodeError",
            "FrameDecoder",
            "FrameTooLarge",
            "SSEDecoder",
            "SSEError",
            "SSEMessage",
            "UnknownCodec",
            "Utf8Reassembler",
            "WireError",
            "chunk_utf8",
            "classify_client",
            "encode_comment",
            "encode_event",
            "encode_frame",
            "encode_retry",
            "get_codec",
            "make_compressor",
            "make_decompressor",
            "negotiate",
            "utf8_safe_cut",
        ]
    )
    for name in airlane.wire.__all__:
        assert getattr(airlane.wire, name) is not None


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(f"airlane.wire.{name}")
    assert module.__doc__
    for public in module.__all__:
        value = getattr(module, public)
        if callable(value):
            assert value.__doc__, f"{name}.{public} has no docstring"


@pytest.mark.parametrize(
    "error",
    [
        errors.SSEError,
        errors.FrameTooLarge,
        errors.DecodeError,
        errors.EncodeError,
        errors.UnknownCodec,
    ],
)
def test_error_tree(error: type[Exception]) -> None:
    assert issubclass(error, errors.WireError)
    assert error.__name__ in (errors.__doc__ or "")


def test_no_io_in_the_wire_layer() -> None:
    for name in MODULES:
        source = importlib.import_module(f"airlane.wire.{name}").__file__
        assert source is not None
        with open(source, encoding="utf-8") as file:
            text = file.read()
        for forbidden in ("import asyncio", "import socket", "import time", "from time"):
            assert forbidden not in text, f"{name} uses {forbidden!r}"
