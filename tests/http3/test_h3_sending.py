"""How HTTP/3 datagrams leave: in segmented runs (``UDP_SEGMENT``) through `DatagramLane.batch`,
and without spinning on uvloop's millisecond clock (`airlane.runtime.quic_protocol`).

Real sockets on 127.0.0.1 and aioquic at both ends; the spy on ``datagrams_to_send`` wraps the
real method and only counts."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop
from aioquic.quic.connection import QuicConnection

from airlane.client.h3 import H3Client
from airlane.runtime.datagram_lanes import DatagramLane
from airlane.runtime.socket_lanes import LanesConfig
from airlane.transports.http.h3.server import Http3Server

pytestmark = pytest.mark.timeout(60)

BODY = bytes(range(256)) * (4 << 12)  # 4 MiB


class _Collector(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.arrived = asyncio.Event()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.got.append(data)
        self.arrived.set()


class _CountingSocket(socket.socket):
    """A real socket that counts its ``sendmsg`` calls."""

    calls = 0

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        _CountingSocket.calls += 1
        return super().sendmsg(*args, **kwargs)


async def _lane_to_receiver() -> tuple[DatagramLane, _Collector, Any, Callable[[], None]]:
    loop = asyncio.get_running_loop()
    receiver, collector = await loop.create_datagram_endpoint(
        _Collector, local_addr=("127.0.0.1", 0)
    )
    # Room for every datagram of a test at once (each takes more than its size there).
    receiver.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    address = receiver.get_extra_info("sockname")
    sender, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
    )
    raw = sender.get_extra_info("socket")
    sock = _CountingSocket(fileno=socket.dup(raw.fileno()))
    sock.setblocking(False)
    lane = DatagramLane(sender, LanesConfig(), sock)

    def close() -> None:
        sock.close()
        sender.close()
        receiver.close()

    return lane, collector, address, close


async def _until(collector: _Collector, count: int) -> None:
    async with asyncio.timeout(5):
        while len(collector.got) < count:
            collector.arrived.clear()
            await collector.arrived.wait()


async def test_a_batch_leaves_in_segmented_runs_and_arrives_datagram_by_datagram() -> None:
    lane, collector, address, close = await _lane_to_receiver()
    try:
        # 100 full-size datagrams and a short one: two runs of 44 (65,000 bytes at most),
        # and one of 12 that ends with the short datagram.
        sent = [bytes([i % 256]) * 1452 for i in range(100)] + [b"tail"]
        _CountingSocket.calls = 0
        with lane.batch():
            for datagram in sent:
                lane.sendto(datagram, address)
            assert collector.got == []  # held until the block ends
        await _until(collector, len(sent))
    finally:
        close()
    assert collector.got == sent
    assert _CountingSocket.calls == 3
    assert lane.segmenting


async def test_a_run_breaks_where_the_size_grows_or_the_address_changes() -> None:
    lane, collector, address, close = await _lane_to_receiver()
    try:
        other_lane, other, other_address, close_other = await _lane_to_receiver()
        close_other()  # only its address is needed: nothing listens there now
        del other_lane, other
        sent = [b"a" * 500, b"b" * 500, b"c" * 700, b"d" * 700, b"e" * 300, b"f" * 700]
        _CountingSocket.calls = 0
        with lane.batch():
            for datagram in sent:
                lane.sendto(datagram, address)
            lane.sendto(b"x" * 700, other_address)
            lane.sendto(b"g" * 700, address)
        await _until(collector, len(sent) + 1)
    finally:
        close()
    assert collector.got == [*sent, b"g" * 700]
    # Runs: [a b] [c d e] [f] (alone: plain send) [x] (another address) [g].
    assert _CountingSocket.calls == 2


async def test_without_segmentation_the_same_datagrams_go_one_by_one() -> None:
    lane, collector, address, close = await _lane_to_receiver()
    lane.segmenting = False  # what a kernel that refuses UDP_SEGMENT leaves
    try:
        sent = [bytes([i]) * 1200 for i in range(10)]
        with lane.batch():
            for datagram in sent:
                lane.sendto(datagram, address)
        await _until(collector, len(sent))
    finally:
        close()
    assert collector.got == sent


async def _app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for start in range(0, len(BODY), 64 << 10):
        await send({"type": "http.response.body", "body": BODY[start : start + (64 << 10)],
                    "more_body": True})  # fmt: skip
    await send({"type": "http.response.body", "body": b""})


def test_a_download_under_uvloop_builds_packets_about_once_per_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On uvloop's millisecond clock a pacing timer fired early, the packets were built at the
    # same millisecond, nothing was due, and the timer was set again, turn after turn: seven
    # builds per datagram sent over a whole download (268,000 for 36,000 at 50 MB).
    counts = {"calls": 0, "datagrams": 0}
    original = QuicConnection.datagrams_to_send

    def counting(self: QuicConnection, now: float) -> list[tuple[bytes, Any]]:
        out = original(self, now)
        counts["calls"] += 1
        counts["datagrams"] += len(out)
        return out

    monkeypatch.setattr(QuicConnection, "datagrams_to_send", counting)

    async def download() -> str:
        server = Http3Server(_app)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        await server.start(sock)
        try:
            host, port = server.address or ("", 0)
            async with await H3Client.connect(host, port, verify=False) as client:
                response = await client.request("GET", "/blob")
                digest = hashlib.sha256()
                async for chunk in response.chunks():
                    digest.update(chunk)
                return digest.hexdigest()
        finally:
            await server.aclose()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(download()) == hashlib.sha256(BODY).hexdigest()
    # Both ends are counted: the gateway's data packets and the client's acknowledgements.
    assert counts["datagrams"] > 2_000
    assert counts["calls"] < 2 * counts["datagrams"], counts
