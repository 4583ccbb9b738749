"""Heartbeats: idle SSE responses get ``: ping`` comments; a WebSocket peer that stops
answering pings is disconnected after the timeout."""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.servers import FAST_SYNTHETIC, ServerProcess, run_server

HEARTBEAT_S = 0.3


@pytest.fixture(scope="module")
def quick_heartbeats() -> Iterator[ServerProcess]:
    config = FAST_SYNTHETIC + f"[http]\nsse_ping_s = {HEARTBEAT_S}\nws_ping_s = {HEARTBEAT_S}\n"
    with run_server(config=config) as server:
        yield server


def test_idle_sse_gets_ping_comments(quick_heartbeats):
    url = quick_heartbeats.url
    httpx.post(f"{url}/v1/streams", json={"name": "quiet/1"}, timeout=5).raise_for_status()
    received = b""
    deadline = time.monotonic() + 5
    with httpx.stream("GET", f"{url}/v1/streams/quiet/1/events", timeout=5) as response:
        for chunk in response.iter_raw():
            received += chunk
            if received.count(b": ping\n\n") >= 2 or time.monotonic() > deadline:
                break
    assert received.count(b": ping\n\n") >= 2


def _ws_handshake(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /v1/ws HTTP/1.1\r\n"
            f"Host: {parts.hostname}:{parts.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head[:80]
    return sock


def test_a_websocket_peer_that_never_pongs_is_closed(quick_heartbeats):
    sock = _ws_handshake(quick_heartbeats.url)
    opcodes = []
    deadline = time.monotonic() + 10 * HEARTBEAT_S + 5
    closed = False
    while time.monotonic() < deadline:
        data = sock.recv(4096)
        if not data:
            closed = True
            break
        opcodes.append(data[0] & 0x0F)  # first frame of each read is enough here
        if 0x8 in opcodes:  # close frame
            closed = True
            break
    sock.close()
    assert 0x9 in opcodes, "the server never pinged"
    assert closed, "the server kept a dead peer"
