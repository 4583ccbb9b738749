"""The ``airlane.websocket.send_many`` extension: a batch of load-test chunks in one write,
each still its own WebSocket message, with and without permessage-deflate."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.sync.client import connect as sync_connect

from airlane.transports.http.server import ServerSettings
from airlane.transports.http.server.handshake import handshake_request
from airlane.transports.http.server.state import ServerState
from airlane.transports.http.ws_protocol import (
    BINARY,
    TEXT,
    FrameWriter,
    WebSocketProtocol,
    frame_messages,
)
from tests.servers import FAST_SYNTHETIC, ServerProcess, run_server


@pytest.mark.parametrize("compression", [None, "deflate"])
async def test_every_chunk_is_one_valid_text_message(
    server: ServerProcess, compression: str | None
) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/loadtest/ws?chunks=300&mode=burst"
    seqs = []
    async with connect(url, compression=compression, max_size=None) as ws:
        async for message in ws:
            assert isinstance(message, str)
            chunk = orjson.loads(message)
            assert list(chunk)[:2] == ["seq", "ts"]
            seqs.append(chunk["seq"])
        assert ws.close_code == 1000
    assert seqs == list(range(1, 301))


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65_535, 65_536, 70_000])
@pytest.mark.parametrize("binary", [False, True])
def test_frames_are_byte_for_byte_what_websockets_writes(size: int, binary: bool) -> None:
    reference = ServerProtocol()
    reference.state = State.OPEN
    messages = [b"a" * size, b"{}", b"x" * (size // 2)]
    for message in messages:
        if binary:
            reference.send_binary(message)
        else:
            reference.send_text(message)
    expected = b"".join(reference.data_to_send())
    assert frame_messages(BINARY if binary else TEXT, messages) == expected


def test_no_messages_make_no_bytes() -> None:
    assert frame_messages(TEXT, []) == b""


@pytest.mark.parametrize("enabled", [True, False])
async def test_ws_compression_setting_decides_whether_deflate_is_accepted(
    server: ServerProcess, enabled: bool
) -> None:
    """A client offering permessage-deflate gets it by default, and not when the gateway is
    configured with ``[http] ws_compression = false``; the stream is whole either way."""
    if enabled:
        await _read_all_with_deflate(server, expect_extension=True)
        return
    config = FAST_SYNTHETIC + "\n[http]\nws_compression = false\n"
    with run_server(config=config) as plain:
        await _read_all_with_deflate(plain, expect_extension=False)


async def _read_all_with_deflate(server: ServerProcess, *, expect_extension: bool) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/loadtest/ws?chunks=50&mode=burst"
    async with connect(url, compression="deflate", max_size=None) as ws:
        assert bool(ws.protocol.extensions) is expect_extension
        seqs = [orjson.loads(message)["seq"] async for message in ws]
    assert seqs == list(range(1, 51))


@pytest.mark.parametrize("log_level", ["info", "debug"])
async def test_connections_are_logged_only_at_debug(tmp_path: Path, log_level: str) -> None:
    """The ``[accepted]`` line and websockets' ``connection closed`` are per-connection
    access lines: not written at INFO (plain HTTP requests are not logged either), written at
    DEBUG; a refused WebSocket (unknown path) still gets its answer either way."""
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log, run_server(log_level=log_level, stderr=log) as server:
        url = server.url.replace("http://", "ws://") + "/v1/loadtest/ws?chunks=3&mode=burst"
        for _ in range(3):
            async with connect(url) as ws:
                assert len([message async for message in ws]) == 3
        with pytest.raises(InvalidStatus):
            async with connect(server.url.replace("http://", "ws://") + "/no/such/path"):
                pass
    text = log_path.read_text()
    logged = "[accepted]" in text or "connection closed" in text
    assert logged is (log_level == "debug"), text[-2000:]


class _Transport:
    """What a `WebSocketProtocol` asks of its transport, recording the writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


HANDSHAKE = [
    (b"host", b"x"),
    (b"connection", b"Upgrade"),
    (b"upgrade", b"websocket"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
]


def _protocol(*, accepted: bool = True, deflate: bool = False) -> WebSocketProtocol:
    """A connection as `upgrade_to_websocket` makes it (its application not started),
    accepted unless told otherwise."""
    settings = ServerSettings(ws_ping_s=None, ws_compression=deflate)
    state = ServerState(_no_app, settings, asyncio.get_running_loop())
    headers = list(HANDSHAKE)
    if deflate:
        headers.append((b"sec-websocket-extensions", b"permessage-deflate"))
    conn = ServerProtocol(
        state=State.OPEN,
        extensions=[ServerPerMessageDeflateFactory()] if deflate else None,
    )
    response = conn.accept(handshake_request(b"/", b"", headers))
    assert response.status_code == 101
    scope = {"type": "websocket", "path": "/", "headers": headers}
    protocol = WebSocketProtocol(state, _Transport(), scope, conn, response)  # type: ignore[arg-type]
    if accepted:
        protocol._accept({"type": "websocket.accept"})
        protocol.transport.written.clear()  # type: ignore[attr-defined]
    return protocol


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not run")


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (mask of zeros: the payload is as it is)."""
    return bytes((0x80 | opcode, 0x80 | len(payload))) + b"\0\0\0\0" + payload


@pytest.mark.parametrize("binary", [False, True])
async def test_write_now_writes_the_frames_at_once_after_a_pong(binary: bool) -> None:
    """A ping's Pong goes out as the ping is read, so a later batch never overtakes it."""
    protocol = _protocol()
    protocol.data_received(_client_frame(0x9, b"p"))  # ping
    writer = FrameWriter(protocol)
    assert writer.write([b"one", b"two"], binary)
    frames = frame_messages(BINARY if binary else TEXT, [b"one", b"two"])
    assert protocol.transport.written == [b"\x8a\x01p", frames]  # type: ignore[attr-defined]


async def test_write_now_frames_through_the_extension_when_one_is_negotiated() -> None:
    protocol = _protocol(deflate=True)
    assert not protocol.plain
    assert FrameWriter(protocol).write([b"one" * 100], False)
    (written,) = protocol.transport.written  # type: ignore[attr-defined]
    assert written[0] == 0xC1  # FIN, RSV1 (compressed), text


async def _not_accepted() -> WebSocketProtocol:
    return _protocol(accepted=False)


async def _close_sent() -> WebSocketProtocol:
    protocol = _protocol()
    await protocol.send({"type": "websocket.close", "code": 1000})
    return protocol


async def _disconnected() -> WebSocketProtocol:
    protocol = _protocol()
    protocol.connection_lost(None)
    return protocol


async def _http_answer() -> WebSocketProtocol:
    protocol = _protocol(accepted=False)
    await protocol.send({"type": "websocket.http.response.start", "status": 403, "headers": []})
    return protocol


async def _paused() -> WebSocketProtocol:
    protocol = _protocol()
    protocol.pause_writing()  # flow control: ASGI send waits
    return protocol


async def _closing() -> WebSocketProtocol:
    protocol = _protocol()
    protocol.data_received(_client_frame(0x8, b"\x03\xe8"))  # the peer's Close (1000)
    return protocol


@pytest.mark.parametrize(
    "make",
    [_not_accepted, _close_sent, _disconnected, _http_answer, _paused, _closing],
    ids=["handshake", "close-sent", "disconnected", "http-answer", "paused", "closing"],
)
async def test_write_now_writes_nothing_in_every_other_state(make: Any) -> None:
    protocol = await make()
    written = list(protocol.transport.written)
    assert not FrameWriter(protocol).write([b"x"], False)
    assert protocol.transport.written == written


async def test_write_now_goes_through_again_once_resumed() -> None:
    protocol = await _paused()
    protocol.resume_writing()
    assert FrameWriter(protocol).write([b"x"], False)


async def test_write_now_does_not_keep_the_connection_alive() -> None:
    protocol = _protocol()
    writer = FrameWriter(protocol)
    del protocol
    gc.collect()
    assert not writer.write([b"x"], False)


def test_a_slow_reader_gets_every_chunk_in_order() -> None:
    """A reader that takes its messages slowly, through a small receive buffer: the gateway's
    socket buffer fills, flow control pauses the connection, the pump's direct writes are
    declined and its batches wait in ASGI ``send``; every chunk still arrives, once, in order,
    and the stream ends with a normal close."""
    # ~9.6 MB, more than the socket buffers between the two ends hold (on loopback the
    # sender's grows to a few MB); the stream retains all of it, so that the reader, however
    # far behind, is sent chunks and not the folded state that retention leaves of older ones.
    chunks = 8000
    config = "[retention]\nmax_events = 20000\nmax_bytes = 67108864\n"
    with run_server(config=config) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
        sock.settimeout(30)
        sock.connect((host, int(port)))
        url = f"ws://{host}:{port}/v1/loadtest/ws?chunks={chunks}&mode=burst"
        seqs: list[int] = []
        with sync_connect(url, sock=sock, max_queue=4, compression=None, max_size=None) as ws:
            for index, message in enumerate(ws):
                seqs.append(orjson.loads(message)["seq"])
                if index % 10 == 0:
                    time.sleep(0.002)
            assert ws.close_code == 1000
    assert seqs == list(range(1, chunks + 1))
