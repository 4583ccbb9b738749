"""Hostile traffic at the HTTP/3 listener: floods of new connections, a client past its stream
limit, a client past its flow-control window. Each gets a clear end (a dropped packet, a Retry,
a QUIC error code) while the listener goes on serving everyone else.

A real ``airlane serve``; the attackers are aioquic connections with their limits switched
off, so they send what a broken or hostile peer would.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from collections.abc import Iterator

import pytest
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from airlane.client import ConnectFailed, ConnectionLost
from airlane.client.h3 import H3Client
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(90)

# Small limits, so that a bounded flood reaches them.
LIMITS = """
[http3]
max_connections = 40
max_handshakes = 150
retry_above = 20
handshake_timeout_s = 2.0
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config=LIMITS) as running:
        yield running


def address(server: ServerProcess) -> tuple[str, int]:
    assert server.h3 is not None, "the gateway printed no HTTP/3 address"
    return server.h3


async def healthy(server: ServerProcess) -> None:
    host, port = address(server)
    async with await H3Client.connect(host, port, verify=False, timeout_s=10) as client:
        response = await client.request("GET", "/healthz")
        assert response.status == 200
        await response.read()


def client_hellos(host: str, port: int, count: int) -> list[bytes]:
    """The first datagrams of ``count`` real QUIC clients (each a valid ClientHello with its
    own connection id), whose senders will never answer."""
    configuration = QuicConfiguration(
        is_client=True, alpn_protocols=list(H3_ALPN), server_name="localhost"
    )
    configuration.verify_mode = ssl.CERT_NONE
    datagrams = []
    for _ in range(count):
        connection = QuicConnection(configuration=configuration)
        connection.connect((host, port), now=time.time())
        datagrams += [data for data, _ in connection.datagrams_to_send(now=time.time())]
    return datagrams


async def test_a_flood_of_new_connections_locks_no_client_out(server: ServerProcess) -> None:
    host, port = address(server)
    hellos = client_hellos(host, port, 400)
    garbage = [
        bytes([0xC3]) + b"\x00\x00\x00\x01" + b"\x08" + os.urandom(8) + b"\x08" + os.urandom(8)
        + os.urandom(1200)
        for _ in range(2000)
    ]  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for n, data in enumerate(hellos + garbage):
            try:
                sock.sendto(data, (host, port))
            except BlockingIOError:
                await asyncio.sleep(0.001)
            if n % 100 == 0:
                await asyncio.sleep(0)
        # Half-open connections past retry_above: a real client is sent a Retry first, echoes
        # its token, and is served; none of the flood's ClientHellos took its place.
        await healthy(server)
    await asyncio.sleep(2.5)  # the flood's handshakes time out and their state is dropped
    await healthy(server)


async def test_a_client_past_its_stream_limit_is_closed_and_others_served(
    server: ServerProcess,
) -> None:
    host, port = address(server)
    async with await H3Client.connect(host, port, verify=False) as hostile:
        # Ignore the gateway's stream credit (128 open requests) and open 400 at once.
        hostile._protocol._quic._remote_max_streams_bidi = 10_000
        requests = [hostile.request("GET", "/healthz") for _ in range(400)]
        answers = await asyncio.gather(*requests, return_exceptions=True)
        lost = [a for a in answers if isinstance(a, ConnectionLost)]
        assert lost, "the gateway let a client open streams past its limit"
        assert "Too many streams" in str(lost[0]), lost[0]  # STREAM_LIMIT_ERROR
    await healthy(server)


async def test_a_body_past_the_limit_is_stopped_not_buffered(server: ServerProcess) -> None:
    host, port = address(server)
    async with await H3Client.connect(host, port, verify=False) as hostile:
        quic = hostile._protocol._quic
        # Pretend the gateway granted a gigabyte of credit, then send 24 MiB: the gateway
        # stops the stream at its body limit (8 MiB) and answers, holding no more than that.
        quic._remote_max_data = 1 << 30
        quic._remote_max_stream_data_bidi_remote = 1 << 30
        async with asyncio.timeout(30):
            response = await hostile.request(
                "POST", "/v1/chat/completions", headers=[("content-type", "application/json")],
                body=os.urandom(24 << 20),
            )  # fmt: skip
            assert response.status == 413, response.status
            assert b"body_too_large" in await response.read()
    await healthy(server)


BOUNDS = """
[http3]
max_streams = 2
max_connections = 2
"""


async def test_past_max_streams_a_request_is_answered_503_and_past_max_connections_refused():
    with run_server(config=BOUNDS) as gateway:
        host, port = address(gateway)
        async with await H3Client.connect(host, port, verify=False, timeout_s=10) as client:
            made = await client.request(
                "POST", "/v1/streams", headers=[("content-type", "application/json")],
                body=b'{"name": "open"}',
            )  # fmt: skip
            assert made.status == 201, await made.read()
            await made.read()
            # Two requests that stay open (the stream has no end yet): the connection's bound.
            readers = [await client.request("GET", "/v1/streams/open/events") for _ in range(2)]
            assert [r.status for r in readers] == [200, 200]
            third = await client.request("GET", "/healthz")
            assert third.status == 503
            assert third.header("content-type") == "application/json"
            assert b'"code":"too_many_requests"' in (body := await third.read())
            assert b"too many requests on this connection" in body
            # A second connection has its own two; a third connection is refused.
            async with await H3Client.connect(host, port, verify=False, timeout_s=10) as other:
                answer = await other.request("GET", "/healthz")
                assert answer.status == 200
                await answer.read()
                with pytest.raises((ConnectionLost, ConnectFailed), match="server full"):
                    async with await H3Client.connect(
                        host, port, verify=False, timeout_s=10
                    ) as refused:
                        await refused.request("GET", "/healthz")
            for reader in readers:
                client.stop(reader)
            await asyncio.sleep(0.2)  # the stopped requests end on the gateway
            again = await client.request("GET", "/healthz")
            assert again.status == 200  # the bound is of requests open at once
            await again.read()


@pytest.mark.parametrize(("keep_alive_s", "stays_open"), [(0.0, False), (0.3, True)])
async def test_a_quiet_connection_closes_at_the_idle_timeout_unless_kept_alive(
    keep_alive_s: float, stays_open: bool
) -> None:
    config = f"[http3]\nidle_timeout_s = 1.0\nkeep_alive_s = {keep_alive_s}\n"
    with run_server(config=config) as gateway:
        host, port = address(gateway)
        async with await H3Client.connect(host, port, verify=False, timeout_s=10) as client:
            first = await client.request("GET", "/healthz")
            assert first.status == 200
            await first.read()
            await asyncio.sleep(2.5)  # nothing sent either way: past the idle timeout
            if stays_open:  # the gateway's PINGs kept it open
                assert not client.lost
                again = await client.request("GET", "/healthz")
                assert again.status == 200
                await again.read()
            else:
                assert client.lost
                with pytest.raises(ConnectionLost):
                    await client.request("GET", "/healthz")
        await healthy(gateway)
