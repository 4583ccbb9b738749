"""Development certificates: a CA, and SPIFFE workload certificates it signs.

What ``airlane certs ca`` and ``airlane certs issue`` write: a self-signed CA for one trust
domain, and X.509-SVIDs in the SPIFFE shape: exactly one URI SAN
``spiffe://<trust-domain>/<path>``, usable as a TLS server and client certificate both. ECDSA
P-256 keys, PEM files, the private keys readable by their owner only. For tests and
development; production identities come from a SPIRE server, a mesh, or your own PKI, and
Airlane reads those the same way.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from airlane.security.spiffe import SpiffeId

__all__ = ["IssuedFiles", "issue_certificate", "make_ca"]

_CA_CERT, _CA_KEY = "ca.pem", "ca.key"


@dataclass(frozen=True, slots=True)
class IssuedFiles:
    """Where a certificate and its key were written."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(directory: Path, trust_domain: str, *, days: int = 365) -> IssuedFiles:
    """Write ``ca.pem`` and ``ca.key`` for ``trust_domain`` into ``directory`` (made if
    needed); a `ValueError` for a trust domain that is not one."""
    td = SpiffeId.parse(f"spiffe://{trust_domain}").trust_domain
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Airlane development CA {td}")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = IssuedFiles(directory / _CA_CERT, directory / _CA_KEY)
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.key, key)
    return files


def issue_certificate(
    ca_directory: Path,
    spiffe_id: str,
    out_directory: Path,
    *,
    name: str | None = None,
    dns: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1", "::1"),
    days: int = 30,
    not_before: datetime.datetime | None = None,
    extra_uris: tuple[str, ...] = (),
) -> IssuedFiles:
    """Sign a workload certificate for ``spiffe_id`` with the CA in ``ca_directory``; write
    ``<name>.pem`` and ``<name>.key`` (``name`` defaults to the ID's last path segment).
    ``dns`` and ``ips`` go in as SANs too, so the same file serves a listener on localhost.
    ``not_before`` backdates it (tests make expired certificates this way); ``extra_uris``
    adds URI SANs (tests make certificates with two SPIFFE IDs this way)."""
    parsed = SpiffeId.parse(spiffe_id)
    ca_cert = x509.load_pem_x509_certificate((ca_directory / _CA_CERT).read_bytes())
    ca_key = serialization.load_pem_private_key((ca_directory / _CA_KEY).read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_directory / _CA_KEY}: not an EC key made by 'airlane certs ca'")
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or _now() - datetime.timedelta(minutes=5)
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(str(parsed))]
    sans += [x509.UniformResourceIdentifier(uri) for uri in extra_uris]
    sans += [x509.DNSName(host) for host in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, parsed.path or "/")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    stem = name or (parsed.path.rsplit("/", 1)[-1] or parsed.trust_domain)
    out_directory.mkdir(parents=True, exist_ok=True)
    files = IssuedFiles(out_directory / f"{stem}.pem", out_directory / f"{stem}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(files.key, key)
    return files
