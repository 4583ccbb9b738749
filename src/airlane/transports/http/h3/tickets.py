"""`TicketStore`: the TLS session tickets the HTTP/3 listener has issued, for 0-RTT.

A client that kept a ticket from an earlier connection resumes its session and may send its
first requests with the ClientHello (0-RTT), one round trip sooner. Early data can be replayed
by anyone who captured it, so two rules hold here: a ticket resumes one connection only (the
store forgets it when it is used, so a replayed ClientHello finds no ticket and gets a full
handshake), and `H3Protocol` answers a non-idempotent request that arrives as early data with
425 Too Early (RFC 8470), so no chat completion or publish is ever started from 0-RTT data.

The store lives in memory and is bounded: past ``capacity`` tickets the oldest are dropped
(their clients make a full handshake), and a restart forgets them all.
"""

from __future__ import annotations

from collections import OrderedDict

from aioquic.tls import SessionTicket

__all__ = ["TicketStore"]


class TicketStore:
    """Issued session tickets by their label, each usable once (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a ticket store holds at least one ticket")
        self.capacity = capacity
        self._tickets: OrderedDict[bytes, SessionTicket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tickets)

    def add(self, ticket: SessionTicket) -> None:
        """Keep ``ticket`` (aioquic calls this when the TLS layer issues one)."""
        self._tickets[ticket.ticket] = ticket
        while len(self._tickets) > self.capacity:
            self._tickets.popitem(last=False)

    def pop(self, label: bytes) -> SessionTicket | None:
        """The ticket named ``label``, forgotten as it is handed out; None if unknown, used
        already or expired."""
        ticket = self._tickets.pop(label, None)
        return ticket if ticket is not None and ticket.is_valid else None
