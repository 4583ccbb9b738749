"""TLS for every listener, with client certificates carrying SPIFFE identities.

`ServerTls` holds the TLS 1.3 context the listeners hand each accepted connection, built from
PEM files: the listener's certificate and key and, for mutual TLS, a CA bundle that client
certificates must chain to. `reload` reads the files again when they change on disk (a
rotated certificate, a CA bundle with a new CA), so a connection accepted afterwards uses the
new ones without a restart; one that fails to load leaves the old context in place and says
why once. `peer_identity` turns what a handshake verified into a `PeerIdentity`: the SPIFFE ID
of the client's certificate, or why it cannot be one (malformed, several, another trust
domain), which the security gate turns into ``unauthenticated``.

No I/O but reading the files it is given; the owner (``airlane serve``) calls `reload` on a
timer.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlane.security.spiffe import BadSpiffeId, spiffe_id_of

__all__ = ["PeerIdentity", "ServerTls", "TlsError", "TlsSettings", "identity_of"]

log = logging.getLogger("airlane.security.tls")


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Where a listener's TLS material is, and what a client certificate must show."""

    cert_file: Path
    """The listener's certificate chain (PEM)."""
    key_file: Path
    """Its private key (PEM)."""
    client_ca_file: Path | None = None
    """CA bundle for client certificates; set, every client must present one that chains to
    it (mutual TLS), else none is asked for."""
    trust_domains: tuple[str, ...] = ()
    """SPIFFE trust domains a client certificate's ID may come from (empty: any the CA
    signs)."""
    reload_s: float = 10.0
    """How often the files are checked for changes."""


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """Who the client's verified certificate says it is."""

    spiffe_id: str | None = None
    """Its SPIFFE ID, when it has exactly one, well formed, from an accepted trust domain."""
    error: str | None = None
    """Why its certificate gives no identity (the gate refuses it with this message)."""
    uris: tuple[str, ...] = field(default=())
    """Every URI SAN of the certificate."""


class ServerTls:
    """See the module docstring. Construction loads the files (`TlsError` if it cannot)."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.loads = 0
        """How many times the material was (re)loaded."""
        self.on_refused: Callable[[str | None, str], None] | None = None
        """Set by the composition root: told of each handshake a listener refused (the
        client's address and why), for the audit log."""
        self._stamp = self._stamps()
        self._context = self._load()
        self._material = self._read_material()

    @property
    def context(self) -> ssl.SSLContext:
        """The context for a connection accepted now."""
        return self._context

    def refused(self, peer: str | None, error: ssl.SSLError) -> None:
        """A listener refused a client's TLS handshake (no, an untrusted or an expired
        certificate; not TLS at all): tell `on_refused`."""
        if self.on_refused is not None:
            self.on_refused(peer, f"TLS handshake refused: {error.reason or error}")

    @property
    def mutual(self) -> bool:
        """Whether clients must present a certificate."""
        return self.settings.client_ca_file is not None

    def material(self) -> tuple[bytes, bytes, bytes | None]:
        """The PEM bytes of the certificate chain, the key and the client CA bundle, as last
        loaded (for listeners, such as gRPC's, that build their own TLS from them)."""
        return self._material

    def reload(self) -> bool:
        """Load the files again if any changed since the last load; whether it did. A file
        that fails to load keeps the previous material, and is reported once per change."""
        stamp = self._stamps()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            context, material = self._load(), self._read_material()
        except TlsError as exc:
            log.error("TLS material not reloaded, the previous one stays: %s", exc)
            return False
        self._context, self._material = context, material
        log.info("TLS material reloaded")
        return True

    def identity_from_uris(self, uris: Sequence[str]) -> PeerIdentity:
        """The identity of a verified client certificate with these URI SANs."""
        return identity_of(uris, self.settings.trust_domains)

    def peer_identity(self, peercert: dict[str, Any] | None) -> PeerIdentity | None:
        """The identity a verified client certificate (``SSLObject.getpeercert()``) gives;
        None when the client sent none."""
        if not peercert:
            return None
        uris = tuple(
            str(value) for kind, value in peercert.get("subjectAltName", ()) if kind == "URI"
        )
        return identity_of(uris, self.settings.trust_domains)

    # -- loading -----------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        s = self.settings
        return [s.cert_file, s.key_file] + ([s.client_ca_file] if s.client_ca_file else [])

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in self._files():
            try:
                st = os.stat(path)
            except OSError:
                stamps.append((-1, -1))
            else:
                stamps.append((st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        s = self.settings
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        try:
            context.load_cert_chain(s.cert_file, s.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"{s.cert_file} / {s.key_file}: {_why(exc)}") from None
        if s.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=s.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise TlsError(f"{s.client_ca_file}: {_why(exc)}") from None
            context.verify_mode = ssl.CERT_REQUIRED
        self.loads += 1
        return context

    def _read_material(self) -> tuple[bytes, bytes, bytes | None]:
        s = self.settings
        try:
            ca = s.client_ca_file.read_bytes() if s.client_ca_file else None
            return s.cert_file.read_bytes(), s.key_file.read_bytes(), ca
        except OSError as exc:
            raise TlsError(_why(exc)) from None


def identity_of(uris: Sequence[str], trust_domains: Sequence[str]) -> PeerIdentity:
    """The identity a certificate with these URI SANs gives, accepting SPIFFE IDs from
    ``trust_domains`` (any, when empty)."""
    try:
        spiffe = spiffe_id_of(uris)
    except BadSpiffeId as exc:
        return PeerIdentity(error=f"client certificate: {exc}", uris=tuple(uris))
    if trust_domains and spiffe.trust_domain not in trust_domains:
        return PeerIdentity(
            error=f"client certificate: trust domain {spiffe.trust_domain!r} is not accepted",
            uris=tuple(uris),
        )
    return PeerIdentity(spiffe_id=str(spiffe), uris=tuple(uris))


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return str(exc) or exc.__class__.__name__
