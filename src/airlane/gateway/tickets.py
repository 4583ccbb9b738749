"""`Tickets`: short-lived credentials for clients that cannot set headers.

A browser's ``WebSocket`` and ``EventSource`` cannot send ``Authorization``; putting the
long-lived API key or JWT in the URL would leave it in every proxy's and server's access log.
Instead the page asks ``POST /v1/tickets`` (with its real credentials, from ``fetch``) for a
ticket, and opens the socket or the event stream with ``?ticket=...``.

A ticket carries the principal it stands for (name, tenant, roles, how it proved itself, its
JWT claims) and when it expires, signed with HMAC-SHA-256: any node that holds the same
secret (``[tickets] secret``) takes it, so an ``EventSource`` that reconnects through a load
balancer to another node is still let in. Nothing is stored, so nothing needs bounding. A
ticket lives `TICKET_TTL_S` seconds (long enough for an ``EventSource`` to reconnect on its
own a few times); the nodes' clocks must agree within a few seconds. Without a configured
secret each process makes its own, and its tickets are good on that process only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from airlane.security import Principal, Unauthenticated

__all__ = ["MAX_TICKET_CHARS", "MIN_SECRET_CHARS", "TICKET_TTL_S", "TicketConfig", "Tickets"]

TICKET_TTL_S = 60.0
"""How long a ticket is good for."""
MIN_SECRET_CHARS = 32
"""The shortest shared secret taken (a password-like one would let tickets be forged)."""
MAX_TICKET_CHARS = 8192
"""The longest ticket read: longer ones are refused before any work (a URL carries them)."""

_PREFIX = "tk1_"
_MAC_BYTES = 16  # 128 bits of HMAC-SHA-256: forging one is guessing it
_REFUSED = "unknown or expired ticket: ask POST /v1/tickets for a new one"


@dataclass(frozen=True, slots=True)
class TicketConfig:
    """``[tickets]``."""

    secret: str | None = None
    """Shared by every node of a deployment, at least `MIN_SECRET_CHARS` characters (unset:
    a random one per process, whose tickets only it takes)."""
    ttl_s: float = TICKET_TTL_S
    """How long a ticket is good for."""

    def __post_init__(self) -> None:
        if self.secret is not None and len(self.secret) < MIN_SECRET_CHARS:
            raise ValueError(f"[tickets] secret must be at least {MIN_SECRET_CHARS} characters")
        if not 0 < self.ttl_s <= 3600:
            raise ValueError("[tickets] ttl_s must be above 0 and at most 3600")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Tickets:
    """Issues and checks tickets (see the module docstring); ``clock`` (wall time, shared by
    the nodes) is for tests."""

    def __init__(
        self, config: TicketConfig | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        config = config or TicketConfig()
        self.ttl_s = config.ttl_s
        secret = config.secret
        self._key = secret.encode() if secret is not None else secrets.token_bytes(32)
        self._clock = clock

    def issue(self, principal: Principal) -> str:
        """A new ticket for ``principal``."""
        claims = {
            "n": principal.name,
            "t": principal.tenant,
            "r": sorted(principal.roles),
            "v": principal.via,
            "c": dict(principal.claims),
            "e": self._clock() + self.ttl_s,
            "j": _b64(secrets.token_bytes(8)),  # no two tickets alike, even issued at once
        }
        body = _b64(orjson.dumps(claims))
        return f"{_PREFIX}{body}.{_b64(self._mac(body))}"

    def principal(self, ticket: str) -> Principal:
        """The principal a ticket was issued to; `Unauthenticated` if it was not issued with
        this secret, was altered, or has expired."""
        if len(ticket) > MAX_TICKET_CHARS or not ticket.startswith(_PREFIX):
            raise Unauthenticated(_REFUSED)
        body, _, mac = ticket[len(_PREFIX) :].partition(".")
        try:
            signed = hmac.compare_digest(_unb64(mac), self._mac(body))
            claims = orjson.loads(_unb64(body)) if signed else None
        except (binascii.Error, ValueError):
            claims = None
        if not isinstance(claims, dict) or claims.get("e", 0) <= self._clock():
            raise Unauthenticated(_REFUSED)
        try:
            return Principal(
                str(claims["n"]),
                roles=frozenset(map(str, claims["r"])),
                tenant=str(claims["t"]),
                via=str(claims["v"]),
                claims={str(k): str(v) for k, v in claims["c"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise Unauthenticated(_REFUSED) from None

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:_MAC_BYTES]
