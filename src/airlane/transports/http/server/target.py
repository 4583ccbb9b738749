"""The request target as ASGI wants it: ``path`` (percent-decoded), ``raw_path`` and
``query_string``; and a connection's addresses as ASGI's ``client`` and ``server``."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

import httptools

__all__ = ["BadTarget", "address", "split_target"]


class BadTarget(ValueError):
    """A request target that is not a path (or absolute URL) in ASCII."""


def split_target(target: bytes) -> tuple[str, bytes, bytes]:
    """``(path, raw_path, query_string)`` of a request target (origin form ``/p?q``, absolute
    form ``http://host/p?q``, or ``*``)."""
    try:
        url = httptools.parse_url(target)
    except httptools.HttpParserInvalidURLError:
        raise BadTarget("the request target is not a URL") from None
    raw_path: bytes = url.path or b"/"
    try:
        path = raw_path.decode("ascii")
    except UnicodeDecodeError:
        raise BadTarget("the request target is not ASCII") from None
    if "%" in path:
        path = unquote(path)
    return path, raw_path, url.query or b""


def address(transport: asyncio.BaseTransport, name: str) -> tuple[str, int] | None:
    """The transport's ``peername`` or ``sockname`` as ``(host, port)`` (an IPv6 address's
    flow and scope fields dropped), or None when it has none (a Unix socket)."""
    info = transport.get_extra_info(name)
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None
