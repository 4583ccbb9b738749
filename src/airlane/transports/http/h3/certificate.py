"""`ephemeral_certificate`: a self-signed certificate made in memory when the HTTP/3 listener
must speak TLS and none is configured.

QUIC has no clear-text mode, so the HTTP/3 listener of a gateway started without
``--tls-cert`` gets one of these at start: ECDSA P-256, valid 13 days (WebTransport's
``serverCertificateHashes`` takes certificates of at most 14 days), for ``localhost`` and the
loopback addresses. Clients trust it by its SHA-256 hash (logged at start) or not at all; it
is for development, and a configured certificate replaces it.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["EphemeralCertificate", "ephemeral_certificate"]

LIFETIME = datetime.timedelta(days=13)
"""Under WebTransport's 14-day ceiling for certificates trusted by hash."""


@dataclass(frozen=True, slots=True)
class EphemeralCertificate:
    """A certificate, its key, and the SHA-256 of its DER form."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    sha256: bytes

    @property
    def pem(self) -> bytes:
        """The certificate, PEM-encoded (for a client's trust store)."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)


def ephemeral_certificate(
    dns: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ("127.0.0.1", "::1")
) -> EphemeralCertificate:
    """A new self-signed certificate for ``dns`` and ``ips`` (see the module docstring)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Airlane development listener")])
    now = datetime.datetime.now(datetime.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(host) for host in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now - datetime.timedelta(minutes=5) + LIFETIME)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    der = certificate.public_bytes(serialization.Encoding.DER)
    return EphemeralCertificate(certificate, key, hashlib.sha256(der).digest())
