"""Choosing a compression method: client classes, Accept-Encoding, overrides."""

from __future__ import annotations

import pytest

from airlane.wire.compression import (
    DEFAULTS,
    ClientClass,
    Compression,
    CompressionChoice,
    classify_client,
    negotiate,
    parse_accept_encoding,
)

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/126.0 Safari/537.36"
)
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
)
ANDROID_CHROME = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36"
)
ANDROID_APP = "Dalvik/2.1.0 (Linux; U; Android 13; SM-S911B Build/TP1A.220624.014)"


@pytest.mark.parametrize(
    ("user_agent", "remote_addr", "expected"),
    [
        (CHROME, "127.0.0.1", ClientClass.INTRANET),
        (IPHONE, "10.1.2.3", ClientClass.INTRANET),
        (None, "192.168.0.7", ClientClass.INTRANET),
        (None, "172.16.5.4:51234", ClientClass.INTRANET),
        (None, "::1", ClientClass.INTRANET),
        (None, "[::1]:8080", ClientClass.INTRANET),
        (None, "fd12:3456::1", ClientClass.INTRANET),
        (None, "fe80::1%eth0", ClientClass.INTRANET),
        (None, "::ffff:10.0.0.1", ClientClass.INTRANET),
        (None, "localhost", ClientClass.INTRANET),
        (IPHONE, "203.0.113.50", ClientClass.MOBILE),
        (ANDROID_CHROME, "8.8.8.8", ClientClass.MOBILE),
        (ANDROID_APP, None, ClientClass.MOBILE),
        (CHROME, "8.8.8.8", ClientClass.DESKTOP_BROWSER),
        (FIREFOX, "2001:4860::8888", ClientClass.DESKTOP_BROWSER),
        ("curl/8.5.0", "8.8.8.8", ClientClass.UNKNOWN),
        ("python-httpx/0.27", None, ClientClass.UNKNOWN),
        (None, None, ClientClass.UNKNOWN),
        ("", "not-an-address", ClientClass.UNKNOWN),
    ],
)
def test_classify_client(
    user_agent: str | None, remote_addr: str | None, expected: ClientClass
) -> None:
    assert classify_client(user_agent, remote_addr) is expected


def test_defaults_follow_the_seed_policy() -> None:
    assert DEFAULTS[ClientClass.INTRANET] == CompressionChoice(Compression.NONE)
    assert DEFAULTS[ClientClass.DESKTOP_BROWSER] == CompressionChoice(Compression.BROTLI, 3)
    assert DEFAULTS[ClientClass.MOBILE].method is Compression.LZ4
    assert DEFAULTS[ClientClass.UNKNOWN].method is Compression.NONE


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("", {}),
        ("gzip, br", {"gzip": 1.0, "br": 1.0}),
        ("BR;Q=0.5, zstd;q=1.0, *;q=0", {"br": 0.5, "zstd": 1.0, "*": 0.0}),
        ("br;q=0.25;foo=bar , , identity", {"br": 0.25, "identity": 1.0}),
        ("br;q=2, zstd;q=abc, lz4;q=0.1234, gzip;q=1.000", {"gzip": 1.0}),  # bad qvalues
        ("br;q=0, br;q=0.5", {"br": 0.5}),
    ],
)
def test_parse_accept_encoding(header: str, expected: dict[str, float]) -> None:
    assert parse_accept_encoding(header) == expected


BR3 = CompressionChoice(Compression.BROTLI, 3)
ZSTD = CompressionChoice(Compression.ZSTD, 3)
LZ4 = CompressionChoice(Compression.LZ4, 0)
NONE = CompressionChoice(Compression.NONE)
BROWSER = "gzip, deflate, br, zstd"


@pytest.mark.parametrize(
    ("accept", "client", "override", "expected"),
    [
        # The class default when admitted.
        (BROWSER, ClientClass.DESKTOP_BROWSER, None, BR3),
        (BROWSER, ClientClass.INTRANET, None, NONE),
        (BROWSER, ClientClass.UNKNOWN, None, NONE),
        ("lz4, zstd", ClientClass.MOBILE, None, LZ4),
        # Default refused: the best accepted, highest q first, ties zstd > br > lz4.
        (BROWSER, ClientClass.MOBILE, None, ZSTD),
        ("gzip, br", ClientClass.MOBILE, None, BR3),
        ("br;q=0.9, zstd;q=0.5", ClientClass.MOBILE, None, BR3),
        ("zstd, br;q=0", ClientClass.DESKTOP_BROWSER, None, ZSTD),
        ("lz4", ClientClass.DESKTOP_BROWSER, None, LZ4),
        ("*", ClientClass.DESKTOP_BROWSER, None, BR3),
        ("*;q=0.5, br;q=0", ClientClass.DESKTOP_BROWSER, None, ZSTD),
        # Identity refused for an intranet client: compress after all.
        ("br, identity;q=0", ClientClass.INTRANET, None, BR3),
        ("br, *;q=0", ClientClass.INTRANET, None, BR3),
        ("*;q=0, identity", ClientClass.INTRANET, None, NONE),
        # Nothing usable: identity.
        ("gzip, deflate", ClientClass.DESKTOP_BROWSER, None, NONE),
        ("gzip, identity;q=0", ClientClass.MOBILE, None, NONE),
        ("", ClientClass.DESKTOP_BROWSER, None, NONE),
        (None, ClientClass.DESKTOP_BROWSER, None, NONE),
        (None, ClientClass.MOBILE, None, NONE),
        # An explicit override wins over everything, if we know the method.
        (None, ClientClass.DESKTOP_BROWSER, "zstd", ZSTD),
        (BROWSER, ClientClass.DESKTOP_BROWSER, "none", NONE),
        (BROWSER, ClientClass.INTRANET, " LZ4 ", LZ4),
        (BROWSER, ClientClass.INTRANET, "brotli", BR3),
        (BROWSER, ClientClass.INTRANET, "identity", NONE),
        (BROWSER, ClientClass.DESKTOP_BROWSER, "gzip", BR3),  # unknown: ignored
    ],
)
def test_negotiate(
    accept: str | None, client: ClientClass, override: str | None, expected: CompressionChoice
) -> None:
    assert negotiate(accept, client, override) == expected


def test_choice_validates_level() -> None:
    CompressionChoice(Compression.ZSTD, -5)
    with pytest.raises(ValueError):
        CompressionChoice(Compression.BROTLI, 12)
    with pytest.raises(ValueError):
        CompressionChoice(Compression.NONE, 1)


def test_enum_values_are_content_codings() -> None:
    assert [m.value for m in Compression] == ["identity", "lz4", "br", "zstd"]
    assert Compression("br") is Compression.BROTLI
