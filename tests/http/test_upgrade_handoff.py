"""`UpgradingHttpProtocol`: a WebSocket upgrade handed over as the `Request` websockets would
have parsed itself, and requests it might answer differently handed over as bytes, as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS, Request
from websockets.server import ServerProtocol

from airlane.transports.http.http_protocol import parsed_upgrade_request
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
    """What websockets makes of the bytes uvicorn writes for an upgrade request."""
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
    return ours.path == theirs.path and list(ours.headers.raw_items()) == list(
        theirs.headers.raw_items()
    )


def test_a_browser_like_request_is_what_websockets_parses() -> None:
    target = b"/v1/loadtest/ws?chunks=3&mode=burst"
    ours = parsed_upgrade_request("GET", "1.1", target, BROWSER_LIKE)
    theirs = websockets_parse(b"GET", target, BROWSER_LIKE)
    assert ours is not None and theirs is not None
    assert same(ours, theirs)


@pytest.mark.parametrize(
    ("method", "version", "target", "headers"),
    [
        ("POST", "1.1", b"/ws", BROWSER_LIKE),
        ("GET", "1.0", b"/ws", BROWSER_LIKE),
        ("GET", "1.1", "/caf\xe9".encode(), BROWSER_LIKE),
        ("GET", "1.1", b"/" + b"a" * MAX_LINE_LENGTH, BROWSER_LIKE),
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"content-length", b"0")]),
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"transfer-encoding", b"chunked")]),
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"x-long", b"v" * MAX_LINE_LENGTH)]),
        ("GET", "1.1", b"/ws", [(b"x-%d" % i, b"1") for i in range(MAX_NUM_HEADERS + 1)]),
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"x-bad", b"a\x01b")]),
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"bad name", b"1")]),
        # obs-text: websockets 17 reads it as ISO-8859-1, older versions differently
        ("GET", "1.1", b"/ws", [*BROWSER_LIKE, (b"cookie", b"a=caf\xe9")]),
    ],
    ids=[
        "post",
        "http-1.0",
        "non-ascii-target",
        "long-target",
        "content-length",
        "transfer-encoding",
        "long-header",
        "too-many-headers",
        "control-in-value",
        "space-in-name",
        "non-ascii-value",
    ],
)
def test_what_websockets_might_answer_differently_goes_as_bytes(
    method: str, version: str, target: bytes, headers: Headers
) -> None:
    assert parsed_upgrade_request(method, version, target, headers) is None


_token = st.text("abcdefghijklmnopqrstuvwxyz0123456789-!#$%&'*+.^_`|~", min_size=1, max_size=12)
_header = st.tuples(_token.map(str.encode), st.binary(max_size=40))


@given(headers=st.lists(_header, max_size=12), query=st.binary(max_size=30))
def test_either_the_same_request_as_websockets_or_bytes(headers: Headers, query: bytes) -> None:
    """Never a request websockets would refuse, never one it would read differently.

    Values are generated raw, so some carry bytes no HTTP parser passes (httptools refuses
    those before uvicorn sees them); either way the hand-over must not differ.
    """
    headers = [(name, value.replace(b"\r", b"").replace(b"\n", b"")) for name, value in headers]
    target = b"/ws?" + query.replace(b" ", b"").replace(b"\r", b"").replace(b"\n", b"")
    ours = parsed_upgrade_request("GET", "1.1", target, headers)
    if ours is None:
        return
    theirs = websockets_parse(b"GET", target, headers)
    assert theirs is not None
    assert same(ours, theirs)


async def _raw_upgrade(server: ServerProcess, extra: bytes) -> bytes:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /v1/loadtest/ws?chunks=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + extra + b"\r\n"
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    return head.split(b"\r\n", 1)[0]


@pytest.mark.parametrize(
    "extra",
    [b"Sec-WebSocket-Version: 12\r\n", b"Sec-WebSocket-Version: 12\r\nContent-Length: 0\r\n"],
    ids=["handed-over-parsed", "handed-over-as-bytes"],
)
async def test_a_refused_handshake_gets_websockets_answer_either_way(
    tmp_path: Path, extra: bytes
) -> None:
    """An unsupported protocol version: 400 from websockets, whichever way the request went,
    no traceback in the gateway's log, and the gateway goes on serving."""
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
