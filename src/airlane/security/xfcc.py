"""``x-forwarded-client-cert`` (XFCC): the client certificate a proxy in front verified.

Behind a mesh (Envoy, Istio, Linkerd's Envoy-compatible header), the proxy terminates the
client's mutual TLS and tells the upstream who the client was in this header, in Envoy's
format: one element per proxy that forwarded the request, separated by ``,``; each element a
list of ``key=value`` pairs separated by ``;``, where a value holding ``,``, ``;`` or ``=`` is
in double quotes (a ``"`` inside escaped as ``\\"``). Keys: ``By`` (the proxy's own SAN URI),
``Hash`` (SHA-256 of the client certificate), ``Cert`` and ``Chain`` (URL-encoded PEM),
``Subject`` (the certificate's subject), ``URI`` and ``DNS`` (its SANs; several of each may
appear).

The header means something only when the proxy that sent it is trusted: anyone can write it.
`ForwardedIdentity` reads it only from configured proxy addresses, and takes the last element
(the one the nearest proxy wrote, about the client it saw); from anyone else it is ignored and
logged. Pure parsing but for that log line.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from airlane.security.tls import PeerIdentity, identity_of

__all__ = ["MAX_XFCC_BYTES", "BadXfcc", "ForwardedIdentity", "XfccElement", "parse_xfcc"]

log = logging.getLogger("airlane.security.xfcc")

MAX_XFCC_BYTES = 64 * 1024
"""Longest header read (a chain of PEM certificates fits many times over)."""
LOG_EVERY_S = 10.0
"""Ignored headers are logged at most this often (a client can send one per request)."""


class BadXfcc(ValueError):
    """A header that is not in Envoy's XFCC format."""


@dataclass(frozen=True, slots=True)
class XfccElement:
    """One proxy's account of the client certificate it verified."""

    by: tuple[str, ...] = ()
    hash: str | None = None
    cert: str | None = None
    chain: str | None = None
    subject: str | None = None
    uris: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    other: dict[str, str] = field(default_factory=dict)
    """Keys this reader does not know (kept, not trusted)."""


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside double quotes (quotes kept)."""
    parts, current, quoted, escaped = [], [], False, False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\" and quoted:
            current.append(char)
            escaped = True
        elif char == '"':
            quoted = not quoted
            current.append(char)
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        raise BadXfcc("an unterminated quoted value")
    parts.append("".join(current))
    return parts


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def parse_xfcc(header: str) -> list[XfccElement]:
    """Every element of an XFCC header, in order; `BadXfcc` if it is malformed."""
    if len(header) > MAX_XFCC_BYTES:
        raise BadXfcc(f"longer than {MAX_XFCC_BYTES} bytes")
    elements = []
    for raw in _split(header, ","):
        if not raw.strip():
            raise BadXfcc("an empty element")
        values: dict[str, list[str]] = {}
        for pair in _split(raw, ";"):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise BadXfcc(f"{pair.strip()[:40]!r} is not key=value")
            values.setdefault(key.strip().lower(), []).append(_unquote(value))

        def one(key: str, values: dict[str, list[str]] = values) -> str | None:
            found = values.pop(key, None)
            return found[-1] if found else None

        elements.append(
            XfccElement(
                by=tuple(values.pop("by", ())),
                hash=one("hash"),
                cert=one("cert"),
                chain=one("chain"),
                subject=one("subject"),
                uris=tuple(values.pop("uri", ())),
                dns=tuple(values.pop("dns", ())),
                other={key: found[-1] for key, found in values.items()},
            )
        )
    return elements


class ForwardedIdentity:
    """Client identities from XFCC, believed only from trusted proxies."""

    def __init__(self, trusted_proxies: Sequence[str], trust_domains: Sequence[str] = ()) -> None:
        try:
            self.proxies = tuple(ipaddress.ip_network(net, strict=False) for net in trusted_proxies)
        except ValueError as exc:
            raise ValueError(f"trusted proxy: {exc}") from None
        self.trust_domains = tuple(trust_domains)
        self.ignored = 0
        """Headers ignored because their sender is not a trusted proxy."""
        self._logged_at = -LOG_EVERY_S

    def trusts(self, address: str | None) -> bool:
        """Whether ``address`` (the direct peer's IP) is a trusted proxy."""
        if address is None:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def identity(self, address: str | None, header: str | None) -> PeerIdentity | None:
        """The identity in ``header`` if the direct peer at ``address`` is trusted (None when
        there is no header, or it is ignored); an identity with an ``error`` when a trusted
        proxy sent one that gives none."""
        if header is None:
            return None
        if not self.trusts(address):
            self.ignored += 1
            now = time.monotonic()
            if now - self._logged_at >= LOG_EVERY_S:
                log.warning(
                    "x-forwarded-client-cert from %s ignored: not a trusted proxy"
                    " (%d ignored so far)",
                    address or "?",
                    self.ignored,
                )
                self._logged_at = now
            return None
        try:
            elements = parse_xfcc(header)
        except BadXfcc as exc:
            return PeerIdentity(error=f"x-forwarded-client-cert: {exc}")
        return identity_of(elements[-1].uris, self.trust_domains)
