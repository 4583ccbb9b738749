"""`TicketStore`: bounded, and each session ticket resumes one connection only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from aioquic.tls import CipherSuite, SessionTicket

from airlane.transports.http.h3.tickets import TicketStore


def ticket(label: bytes, *, valid_for: timedelta = timedelta(hours=1)) -> SessionTicket:
    now = datetime.now(UTC)
    return SessionTicket(
        age_add=0,
        cipher_suite=CipherSuite.AES_128_GCM_SHA256,
        not_valid_after=now + valid_for,
        not_valid_before=now - timedelta(seconds=1),
        resumption_secret=b"s" * 32,
        server_name="localhost",
        ticket=label,
    )


def test_a_ticket_is_handed_out_once() -> None:
    store = TicketStore(4)
    store.add(ticket(b"a"))
    assert store.pop(b"a") is not None
    assert store.pop(b"a") is None and len(store) == 0


def test_the_oldest_tickets_go_past_the_capacity() -> None:
    store = TicketStore(2)
    for label in (b"a", b"b", b"c"):
        store.add(ticket(label))
    assert len(store) == 2
    assert store.pop(b"a") is None and store.pop(b"c") is not None


def test_an_expired_ticket_resumes_nothing() -> None:
    store = TicketStore(2)
    store.add(ticket(b"old", valid_for=timedelta(seconds=-1)))
    assert store.pop(b"old") is None


def test_a_store_holds_at_least_one() -> None:
    with pytest.raises(ValueError):
        TicketStore(0)
