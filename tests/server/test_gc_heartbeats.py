"""A full garbage-collector pass stops the whole process; the heartbeats that would fall due
during it go out before it (`GcPacer.collect_now`, `airlane.runtime.heartbeats`).

A real server in the test's loop holds an idle SSE reader and an idle WebSocket, heartbeats
every second. The pass is told to expect a long pause; at its start (a `gc.callbacks` hook,
inside the pass) each client socket is read without taking the bytes (``MSG_PEEK``): the
heartbeat must already be there, written before the walk began. With a short expected pause
it is not (the heartbeats are a second away), which is what the check would see without the
early beats."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import AsyncIterator

import httpx
import pytest

import airlane
from airlane.runtime.heartbeats import heartbeats
from airlane.server.gcpacer import GcPacer
from tests.asgi_server import Served, serving

PING_S = 1.0
WS_HANDSHAKE = (
    "GET /v1/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Sec-WebSocket-Protocol: airlane.v1.json\r\n\r\n"
)
PING_OPCODE = 0x89  # FIN + Ping, unmasked (from the server)


class _Expecting(GcPacer):
    """A pacer that expects its passes to take ``pause_s`` (a real pass of this small
    process takes milliseconds; what is tested is what goes out before it)."""

    def __init__(self, pause_s: float) -> None:
        super().__init__()
        self.pause_s = pause_s

    def expected_pause_s(self, objects: int) -> float:
        return self.pause_s


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    gateway = airlane.Gateway(airlane.MemoryHub(), airlane.SyntheticBackend())
    app = airlane.create_app(gateway, airlane.HttpConfig(sse_ping_s=PING_S, ws_ping_s=PING_S))
    async with serving(app, ws_ping_s=PING_S) as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as http:
            created = await http.post("/v1/streams", json={"name": "idle"})
            assert created.status_code in (200, 201), created.text
        yield running


async def _open(served: Served, request: str, until: bytes) -> socket.socket:
    """A raw client: ``request`` sent, the response read up to ``until``."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, (served.host, served.port))
    await loop.sock_sendall(sock, request.encode())
    head = b""
    while until not in head:
        part = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
        assert part, head
        head += part
    return sock


def _waiting(sock: socket.socket) -> bytes:
    """What the socket has received and nobody has read yet (left there)."""
    try:
        return sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def _clients(served: Served) -> tuple[socket.socket, socket.socket]:
    sse = await _open(served, "GET /v1/streams/idle/events HTTP/1.1\r\nHost: t\r\n\r\n", b"retry:")
    ws = await _open(served, WS_HANDSHAKE, b"\r\n\r\n")
    # Whatever followed the heads (the rest of the retry field) is read off: from here on,
    # anything waiting is news.
    for sock in (sse, ws):
        while _waiting(sock):
            sock.recv(65536)
    return sse, ws


async def _pass_sees(served: Served, pacer: GcPacer) -> tuple[bytes, bytes]:
    """Run a full pass with both clients idle; what each had received when the pass began."""
    sse, ws = await _clients(served)
    seen: dict[str, bytes] = {}

    def at_start(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2 and not seen:
            seen["sse"], seen["ws"] = _waiting(sse), _waiting(ws)

    gc.callbacks.append(at_start)
    try:
        pacer.collect_now()
    finally:
        gc.callbacks.remove(at_start)
        sse.close()
        ws.close()
    return seen["sse"], seen["ws"]


async def test_heartbeats_due_during_a_full_pass_go_out_before_it(served, restore_gc):
    pacer = _Expecting(pause_s=2 * PING_S)
    sse, ws = await _pass_sees(served, pacer)
    assert b": ping" in sse
    assert ws[:1] == bytes([PING_OPCODE])
    assert pacer.early_beats == 2
    # Both connections count themselves out when they go.
    await asyncio.sleep(0.2)
    assert len(heartbeats()) == 0


async def test_heartbeats_not_due_during_the_pass_wait_for_their_time(served, restore_gc):
    pacer = _Expecting(pause_s=0.01)
    sse, ws = await _pass_sees(served, pacer)
    assert sse == b"" and ws == b""
    assert pacer.early_beats == 0


async def test_an_early_heartbeat_counts_the_next_period_from_itself(served, restore_gc):
    loop = asyncio.get_running_loop()
    sse, ws = await _clients(served)
    try:
        assert heartbeats().ahead(2 * PING_S) == 2
        early = loop.time()
        for sock in (sse, ws):
            assert _waiting(sock)
            sock.recv(65536)
        # The WebSocket's next Ping waits for the Pong of this one; the SSE reader's comes a
        # period after the early one, not at the time the old timer was set for.
        await asyncio.sleep(PING_S * 0.6)
        assert _waiting(sse) == b""
        while not _waiting(sse):
            assert loop.time() < early + 3 * PING_S
            await asyncio.sleep(0.02)
        assert loop.time() >= early + PING_S - 0.05
    finally:
        sse.close()
        ws.close()


def _pong_for(ping: bytes) -> bytes:
    """A client's (masked) Pong answering the server's Ping frame ``ping``."""
    payload = ping[2 : 2 + (ping[1] & 0x7F)]
    mask = b"\x01\x02\x03\x04"
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([0x8A, 0x80 | len(payload)]) + mask + masked


async def test_a_late_pong_does_not_push_the_next_ping_back(served):
    """The next Ping is a period after the last one, however late its Pong came (a Pong held
    up by a pause of the server, after an early Ping, would otherwise make a gap of a period
    plus the pause)."""
    loop = asyncio.get_running_loop()
    ws = await _open(served, WS_HANDSHAKE, b"\r\n\r\n")
    try:
        while _waiting(ws):
            ws.recv(65536)
        ping = await asyncio.wait_for(loop.sock_recv(ws, 64), 3 * PING_S)
        pinged = loop.time()
        assert ping[0] == PING_OPCODE
        await asyncio.sleep(0.6 * PING_S)
        await loop.sock_sendall(ws, _pong_for(ping))
        second = await asyncio.wait_for(loop.sock_recv(ws, 64), 3 * PING_S)
        assert second[0] == PING_OPCODE
        assert loop.time() - pinged < 1.3 * PING_S  # not 1.6 periods
    finally:
        ws.close()


async def test_a_pong_that_came_during_a_pause_past_its_deadline_keeps_the_connection(served):
    """The process stops (here a blocking sleep in a timer call-back, where the pacer's
    passes run) past a Ping's deadline while the client's Pong arrives: the loop reads the
    Pong before it runs the timer that fell due meanwhile (its clock is read once per turn),
    so the connection stays open."""
    loop = asyncio.get_running_loop()
    ws = await _open(served, WS_HANDSHAKE, b"\r\n\r\n")
    answered = threading.Event()

    def client() -> None:  # answers the Ping while the server's loop sleeps
        ws.setblocking(True)
        ws.settimeout(5)
        ping = ws.recv(64)
        assert ping[0] == PING_OPCODE
        ws.sendall(_pong_for(ping))
        answered.set()

    try:
        while _waiting(ws):
            ws.recv(65536)
        thread = threading.Thread(target=client)
        thread.start()
        paused = loop.create_future()

        def pause() -> None:  # from a timer, as the pacer's passes run
            beats = heartbeats().ahead(2 * PING_S)  # the Ping goes now
            time.sleep(1.5 * PING_S)  # the whole loop stops past the Pong's deadline
            paused.set_result(beats)

        loop.call_later(0.01, pause)
        assert await paused == 1
        thread.join(5)
        assert answered.is_set()
        await asyncio.sleep(0.2)
        assert _waiting(ws)[:1] != b"\x88"  # no Close frame (1011)
        # Still open: the next Ping comes a period after the last.
        ws.setblocking(False)
        ping = await asyncio.wait_for(loop.sock_recv(ws, 64), 3 * PING_S)
        assert ping[0] == PING_OPCODE
    finally:
        ws.close()
