"""HTTP/3 across a changing network: connection migration and 0-RTT resumption.

A real ``airlane serve``; Airlane's `H3Client` on aioquic. A client that moves to a new UDP
port mid-answer (as a phone leaving Wi-Fi does) keeps its streams: nothing is lost or
repeated. A client with a session ticket sends its first GET with the handshake (0-RTT);
the gateway takes no request that changes anything from early data (425 Too Early, and the
client's retry after the handshake), and a ticket resumes one connection only, so a replayed
ClientHello gets no early data.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from airlane.client.h3 import H3Client
from tests.http3.test_h3 import CHAT, JSON, content, sse_events
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

SLOW = "[synthetic]\nttft_ms = 5.0\nitl_ms = 4.0\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config=SLOW) as running:
        yield running


async def connect(server: ServerProcess, **options: object) -> H3Client:
    assert server.h3 is not None, "the gateway printed no HTTP/3 address"
    host, port = server.h3
    return await H3Client.connect(host, port, verify=False, **options)  # type: ignore[arg-type]


async def ticket_of(client: H3Client) -> object:
    """The session ticket the gateway sends just after the handshake."""
    async with asyncio.timeout(5):
        while client.session_ticket is None:
            await asyncio.sleep(0.01)
    return client.session_ticket


async def test_an_answer_goes_on_across_three_address_changes(server: ServerProcess) -> None:
    body = json.dumps({**CHAT, "max_tokens": 240, "seed": 3}).encode()
    async with await connect(server) as client:
        whole = await client.request("POST", "/v1/chat/completions", headers=JSON, body=body)
        expected = content(sse_events(await whole.read()))
        response = await client.request("POST", "/v1/chat/completions", headers=JSON, body=body)
        addresses = {client.local_address}
        received: list[bytes] = []
        async for chunk in response.chunks():
            received.append(chunk)
            if len(received) % 3 == 0 and len(addresses) < 4:  # mid-answer, three times
                addresses.add(await client.rebind())
        assert len(addresses) == 4, (addresses, len(received))
        # The streams on it went on too, and new ones open on the last address.
        assert content(sse_events(b"".join(received))) == expected
        assert (await client.request("GET", "/healthz")).status == 200


async def test_a_session_ticket_gives_0rtt_for_safe_requests_only(
    server: ServerProcess,
) -> None:
    async with await connect(server) as first:
        assert (await first.request("GET", "/healthz")).status == 200
        ticket = await ticket_of(first)
    async with await connect(server, session_ticket=ticket) as client:
        health = await client.request("GET", "/healthz")  # sent with the ClientHello
        assert health.status == 200
        assert client.resumed and client.early_data_accepted
        # A chat completion waits for the handshake and is served.
        body = json.dumps({**CHAT, "max_tokens": 5}).encode()
        chat = await client.request("POST", "/v1/chat/completions", headers=JSON, body=body)
        assert chat.status == 200 and content(sse_events(await chat.read()))
        next_ticket = await ticket_of(client)
    # Sent as early data, a POST is refused before anything starts.
    async with await connect(server, session_ticket=next_ticket) as early:
        refused = await early._send("POST", "/v1/chat/completions", JSON, body, None)
        assert refused.status == 425, refused.status
        assert b"too early" in await refused.read()
        assert early.early_data_accepted


async def test_a_ticket_resumes_once_so_a_replay_gets_no_early_data(
    server: ServerProcess,
) -> None:
    async with await connect(server) as first:
        ticket = await ticket_of(first)
    async with await connect(server, session_ticket=ticket) as once:
        assert (await once.request("GET", "/healthz")).status == 200
        assert once.early_data_accepted
    async with await connect(server, session_ticket=ticket) as replay:
        # The server forgot the ticket: a full handshake, and the GET is still answered.
        assert (await replay.request("GET", "/healthz")).status == 200
        assert not replay.resumed and not replay.early_data_accepted
