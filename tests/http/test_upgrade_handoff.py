"""The WebSocket hand-over: the upgrade request parsed once, by httptools, and given to
``websockets``' `ServerProtocol.accept` as the `Request` its own parser would have made of the
same bytes (`airlane.transports.http.server.handshake`); what that parser would have refused
before ``accept`` is refused here the same way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import InvalidHeaderValue
from websockets.http11 import Request
from websockets.server import ServerProtocol

from airlane.transports.http.server.handshake import (
    handshake_request,
    offered_subprotocols,
    refusal_before_handshake,
)
from tests.servers import ServerProcess, run_server

Headers = list[tuple[bytes, bytes]]

BROWSER_LIKE: Headers = [
    (b"host", b"127.0.0.1:8000"),
    (b"connection", b"Upgrade"),
    (b"upgrade", b"websocket"),
    (b"sec-websocket-version", b"13"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-extensions", b"permessage-deflate; client_max_window_bits"),
    (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64)"),
    (b"cookie", b"a=1;\tb=2"),
]


def websockets_parse(method: bytes, target: bytes, headers: Headers) -> Request | None:
    """What websockets makes of the request's bytes with its own parser."""
    lines = [method + b" " + target + b" HTTP/1.1\r\n"]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    reference = ServerProtocol()
    reference.receive_data(b"".join(lines) + b"\r\n")
    events = reference.events_received()
    if reference.handshake_exc is not None or not events:
        return None
    request = events[0]
    assert isinstance(request, Request)
    return request


def same(ours: Request, theirs: Request) -> bool:
    """The same target and header fields (names compared as websockets reads them: without
    case; the HTTP parser hands them on lower-cased, as ASGI has them)."""
    return ours.path == theirs.path and [
        (name.lower(), value) for name, value in ours.headers.raw_items()
    ] == [(name.lower(), value) for name, value in theirs.headers.raw_items()]


def test_a_browser_like_request_is_what_websockets_parses() -> None:
    ours = handshake_request(b"/v1/loadtest/ws", b"chunks=3&mode=burst", BROWSER_LIKE)
    theirs = websockets_parse(b"GET", b"/v1/loadtest/ws?chunks=3&mode=burst", BROWSER_LIKE)
    assert theirs is not None
    assert same(ours, theirs)


@pytest.mark.parametrize(
    ("method", "version", "headers", "status"),
    [
        ("POST", "1.1", BROWSER_LIKE, 405),
        ("GET", "1.0", BROWSER_LIKE, 505),
        ("GET", "1.1", [*BROWSER_LIKE, (b"content-length", b"0")], 400),
        ("GET", "1.1", [*BROWSER_LIKE, (b"transfer-encoding", b"chunked")], 400),
    ],
    ids=["post", "http-1.0", "content-length", "transfer-encoding"],
)
def test_what_websockets_would_refuse_is_refused_before_the_handshake(
    method: str, version: str, headers: Headers, status: int
) -> None:
    refusal = refusal_before_handshake(method, version, headers)
    assert refusal is not None and refusal[0] == status
    assert refusal_before_handshake("GET", "1.1", BROWSER_LIKE) is None


def test_the_offered_subprotocols_in_order() -> None:
    headers = [(b"sec-websocket-protocol", b"a, b"), (b"sec-websocket-protocol", b" c ,,")]
    assert offered_subprotocols(headers) == ["a", "b", "c"]


_token = st.text("abcdefghijklmnopqrstuvwxyz0123456789-!#$%&'*+.^_`|~", min_size=1, max_size=12)
_header = st.tuples(_token.map(str.encode), st.binary(max_size=40))


@given(headers=st.lists(_header, max_size=12), query=st.binary(max_size=30))
def test_either_the_same_request_as_websockets_or_refused(headers: Headers, query: bytes) -> None:
    """Never a request websockets' parser would read differently, and a value it would refuse
    is refused here too.

    Values are generated raw, so some carry bytes no HTTP parser passes (httptools refuses
    those before the hand-over); either way the hand-over must not differ.
    """
    headers = [(name, value.replace(b"\r", b"").replace(b"\n", b"")) for name, value in headers]
    headers = [(name, value.strip(b" \t")) for name, value in headers]  # as httptools gives them
    query = query.replace(b" ", b"").replace(b"\r", b"").replace(b"\n", b"").replace(b"#", b"")
    theirs = websockets_parse(b"GET", b"/ws?" + query if query else b"/ws", headers)
    try:
        ours = handshake_request(b"/ws", query, headers)
    except InvalidHeaderValue:
        assert theirs is None
        return
    if theirs is not None:
        assert same(ours, theirs)


async def _raw_upgrade(server: ServerProcess, extra: bytes) -> bytes:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/loadtest/ws?chunks=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + extra + b"\r\n"
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    return head.split(b"\r\n", 1)[0]


@pytest.mark.parametrize(
    "extra",
    [b"Sec-WebSocket-Version: 12\r\n", b"Sec-WebSocket-Version: 12\r\nContent-Length: 0\r\n"],
    ids=["refused-by-websockets", "refused-before-the-handshake"],
)
async def test_a_refused_handshake_gets_a_400(tmp_path: Path, extra: bytes) -> None:
    """An unsupported protocol version (websockets' answer), or a handshake with a body (the
    server's): 400, no traceback in the gateway's log, and the gateway goes on serving."""
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log, run_server(stderr=log) as server:
        assert await _raw_upgrade(server, extra) == b"HTTP/1.1 400 Bad Request"
        assert await _raw_upgrade(server, b"Sec-WebSocket-Version: 13\r\n") == (
            b"HTTP/1.1 101 Switching Protocols"
        )
    assert "Traceback" not in log_path.read_text()


async def test_an_accepted_handshake_switches_protocols(server: ServerProcess) -> None:
    assert await _raw_upgrade(server, b"Sec-WebSocket-Version: 13\r\n") == (
        b"HTTP/1.1 101 Switching Protocols"
    )
