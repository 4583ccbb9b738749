"""Tickets: what a browser's WebSocket or EventSource passes instead of its key.

A page asks ``POST /v1/tickets`` with its real credentials, then opens ``?ticket=...``; the
key itself is not taken from the URL unless ``[http] query_tokens`` says so. Tickets name the
principal (its tenant too), expire, cannot be altered, and are taken by every node that shares
the secret they are signed with.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from airlane.gateway.tickets import TicketConfig, Tickets
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
        # Nor is a ticket a credential for another: one leaked into a log could otherwise be
        # renewed for ever, past the key it was issued for.
        renewed = await http.post(f"/v1/tickets?ticket={ticket}")
        assert renewed.status_code == 401, renewed.text
        assert "cannot ask for another ticket" in renewed.json()["error"]["message"]
        renewed = await http.post(f"/v1/tickets?ticket={ticket}", headers=KEY)
        assert renewed.status_code == 401  # not even beside the key: ask with the key alone


async def test_query_tokens_can_be_turned_back_on() -> None:
    with run_server("--api-key", "sk-x", config="[http]\nquery_tokens = true\n") as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            assert (await http.get("/v1/streams/x?access_token=sk-x")).status_code == 404


def test_tickets_carry_the_principal_expire_and_cannot_be_altered() -> None:
    now = [1_000_000.0]
    tickets = Tickets(TicketConfig(ttl_s=60), clock=lambda: now[0])
    ann = Principal("ann", roles=frozenset({"ops"}), tenant="team", via="jwt", claims={"sub": "a"})
    first = tickets.issue(ann)
    got = tickets.principal(first)
    assert (got, got.via, dict(got.claims)) == (ann, "jwt", {"sub": "a"})
    assert tickets.issue(ann) != first  # two at once still differ
    now[0] += 59.9
    assert tickets.principal(first) == ann
    now[0] += 0.1
    with pytest.raises(Unauthenticated, match="expired"):
        tickets.principal(first)
    now[0] = 1_000_000.0
    body, mac = first.removeprefix("tk1_").split(".")
    forged = body.replace(body[5], "A" if body[5] != "A" else "B", 1)
    for bad in (f"tk1_{forged}.{mac}", f"tk1_{body}.{mac[:-2]}", "tk1_x.y", "tk_old", "x" * 9000):
        with pytest.raises(Unauthenticated):
            tickets.principal(bad)
    with pytest.raises(Unauthenticated):
        Tickets().principal(first)  # another process's own secret


def test_a_shared_secret_lets_every_node_take_a_ticket() -> None:
    secret = "s" * 40
    node_a, node_b = Tickets(TicketConfig(secret=secret)), Tickets(TicketConfig(secret=secret))
    ann = Principal("ann", tenant="team")
    assert node_b.principal(node_a.issue(ann)) == ann
    with pytest.raises(ValueError, match="at least 32"):
        TicketConfig(secret="short")


async def test_an_event_stream_reconnects_to_another_node_with_its_ticket() -> None:
    config = f'[tickets]\nsecret = "{"k" * 40}"\n'
    with (
        run_server("--api-key", "ann@team=sk-ann", config=config) as one,
        run_server("--api-key", "ann@team=sk-ann", config=config) as two,
    ):
        async with httpx.AsyncClient(timeout=20) as http:
            issued = await http.post(f"{one.url}/v1/tickets", headers=KEY)
            ticket = issued.json()["ticket"]
            # Each node has its own memory hub here: the ticket's tenant is what is checked.
            sent = await http.post(
                f"{two.url}/v1/streams/feed/events", json={"kind": "message", "payload": 2},
                headers=KEY,
            )  # fmt: skip
            assert sent.status_code == 200
            url = f"{two.url}/v1/streams/feed/events?max_events=1&ticket={ticket}"
            async with http.stream("GET", url) as response:
                assert response.status_code == 200
                assert '"payload":2' in (await response.aread()).decode()
