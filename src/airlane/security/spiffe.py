"""SPIFFE IDs: parsing them as the SPIFFE standard writes them, and reading one from a peer's
certificate (an X.509-SVID carries exactly one, as its only URI SAN).

``spiffe://<trust-domain>/<path>``: the trust domain is lower-case letters, digits, ``.``,
``-`` and ``_``; the path is zero or more ``/segment`` of letters, digits, ``.``, ``-`` and
``_``, with no empty, ``.`` or ``..`` segment and no trailing ``/``; nothing else (no port,
user, query or fragment), 2048 bytes at most. Anything else is a `BadSpiffeId`, so a
certificate with a malformed ID is refused, not guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["BadSpiffeId", "SpiffeId", "spiffe_id_of"]

_TRUST_DOMAIN = re.compile(r"[a-z0-9._-]{1,255}")
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_MAX_BYTES = 2048


class BadSpiffeId(ValueError):
    """Not a SPIFFE ID, or not exactly one in a certificate; the message says why."""


@dataclass(frozen=True, slots=True)
class SpiffeId:
    """A parsed SPIFFE ID."""

    trust_domain: str
    path: str
    """``/a/b`` or empty."""

    def __str__(self) -> str:
        return f"spiffe://{self.trust_domain}{self.path}"

    @classmethod
    def parse(cls, text: str) -> SpiffeId:
        """``text`` as a SPIFFE ID; `BadSpiffeId` says what is wrong with it."""
        if len(text.encode()) > _MAX_BYTES:
            raise BadSpiffeId(f"a SPIFFE ID is at most {_MAX_BYTES} bytes")
        scheme, sep, rest = text.partition("://")
        if not sep or scheme != "spiffe":
            raise BadSpiffeId(f"{text[:80]!r} is not a spiffe:// URI")
        domain, slash, path = rest.partition("/")
        if not _TRUST_DOMAIN.fullmatch(domain):
            raise BadSpiffeId(
                f"{text[:80]!r}: the trust domain is lower-case letters, digits, '.', '-', '_'"
                " (no port, user or upper case)"
            )
        if slash:
            for segment in path.split("/"):
                if segment in ("", ".", "..") or not _SEGMENT.fullmatch(segment):
                    raise BadSpiffeId(
                        f"{text[:80]!r}: each path segment is letters, digits, '.', '-', '_'"
                        " (not empty, '.' or '..'; no query or fragment)"
                    )
        return cls(domain, f"/{path}" if slash else "")


def spiffe_id_of(uris: Iterable[str]) -> SpiffeId:
    """The SPIFFE ID among a certificate's URI SANs: exactly one ``spiffe://`` URI, well
    formed, or `BadSpiffeId`."""
    found = [uri for uri in uris if uri.lower().startswith("spiffe:")]
    if len(found) != 1:
        raise BadSpiffeId(f"the certificate carries {len(found)} SPIFFE IDs, not exactly one")
    return SpiffeId.parse(found[0])
