"""Tickets: what a browser's WebSocket or EventSource passes instead of its key.

A page asks ``POST /v1/tickets`` with its real credentials, then opens ``?ticket=...``; the
key itself is not taken from the URL unless ``[http] query_tokens`` says so. Tickets name the
principal (its tenant too), expire, and are bounded in number.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from airlane.gateway.tickets import Tickets
from airlane.security import Principal, Unauthenticated
from tests.servers import ServerProcess, run_server

KEY = {"authorization": "Bearer sk-ann"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server("--api-key", "ann@team=sk-ann") as running:
        yield running


async def test_an_event_stream_opened_with_a_ticket(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        sent = await http.post(
            "/v1/streams/feed/events", json={"kind": "message", "payload": 1}, headers=KEY
        )
        assert sent.status_code == 200
        issued = await http.post("/v1/tickets", headers=KEY)
        assert issued.status_code == 200, issued.text
        ticket = issued.json()["ticket"]
        assert issued.json()["expires_in_s"] > 0
        # As an EventSource would: no headers, the ticket in the URL; the tenant's stream.
        url = f"/v1/streams/feed/events?max_events=1&ticket={ticket}"
        async with http.stream("GET", url) as response:
            assert response.status_code == 200
            body = (await response.aread()).decode()
        assert '"payload":1' in body
        in_url = await http.get("/v1/streams/feed?access_token=sk-ann")
        assert in_url.status_code == 401  # the key itself is not read from URLs
        assert (await http.post("/v1/tickets")).status_code == 401  # a ticket needs a credential


async def test_query_tokens_can_be_turned_back_on() -> None:
    with run_server("--api-key", "sk-x", config="[http]\nquery_tokens = true\n") as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            assert (await http.get("/v1/streams/x?access_token=sk-x")).status_code == 404


def test_tickets_expire_and_are_bounded() -> None:
    now = [0.0]
    tickets = Tickets(ttl_s=60, max_tickets=3, clock=lambda: now[0])
    ann = Principal("ann", tenant="team")
    first = tickets.issue(ann)
    assert tickets.principal(first) == ann
    now[0] = 59.9
    assert tickets.principal(first) == ann
    now[0] = 60.0
    with pytest.raises(Unauthenticated, match="expired"):
        tickets.principal(first)
    issued = [tickets.issue(ann) for _ in range(4)]
    with pytest.raises(Unauthenticated):
        tickets.principal(issued[0])  # the oldest made room
    assert all(tickets.principal(t) == ann for t in issued[1:])
    assert len({*issued}) == 4 and all(len(t) > 20 for t in issued)
