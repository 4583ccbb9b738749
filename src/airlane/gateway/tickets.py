"""`Tickets`: short-lived credentials for clients that cannot set headers.

A browser's ``WebSocket`` and ``EventSource`` cannot send ``Authorization``; putting the
long-lived API key or JWT in the URL would leave it in every proxy's and server's access log.
Instead the page asks ``POST /v1/tickets`` (with its real credentials, from ``fetch``) for a
ticket, and opens the socket or the event stream with ``?ticket=...``. A ticket names the
principal that asked for it, is random (128 bits), lives `TICKET_TTL_S` seconds (long enough
for an ``EventSource`` to reconnect on its own a few times) and is known only to the node that
issued it. At most `MAX_TICKETS` are outstanding; issuing one more drops the oldest.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from airlane.security import Principal, Unauthenticated

__all__ = ["MAX_TICKETS", "TICKET_TTL_S", "Tickets"]

TICKET_TTL_S = 60.0
"""How long a ticket is good for."""
MAX_TICKETS = 100_000
"""Tickets outstanding on one node at most (about 20 MB at worst)."""


class Tickets:
    """Issues and checks tickets (see the module docstring); ``clock`` is for tests."""

    def __init__(
        self,
        ttl_s: float = TICKET_TTL_S,
        max_tickets: int = MAX_TICKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_tickets = max_tickets
        self._clock = clock
        self._tickets: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def issue(self, principal: Principal) -> str:
        """A new ticket for ``principal``."""
        now = self._clock()
        self._expire(now)
        while len(self._tickets) >= self.max_tickets:
            self._tickets.popitem(last=False)
        ticket = "tk_" + secrets.token_urlsafe(16)
        self._tickets[ticket] = (principal, now + self.ttl_s)
        return ticket

    def principal(self, ticket: str) -> Principal:
        """The principal a ticket was issued to; `Unauthenticated` if it is unknown or has
        expired."""
        entry = self._tickets.get(ticket)
        if entry is None or entry[1] <= self._clock():
            raise Unauthenticated("unknown or expired ticket: ask POST /v1/tickets for a new one")
        return entry[0]

    def _expire(self, now: float) -> None:
        # Issued in order with one lifetime: the expired ones are at the front.
        while self._tickets:
            ticket, (_, deadline) = next(iter(self._tickets.items()))
            if deadline > now:
                return
            del self._tickets[ticket]
