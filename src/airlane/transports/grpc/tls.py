"""TLS for the gRPC listener: its credentials from the server's `ServerTls`, and the identity
of a call's client certificate.

grpcio builds its own TLS from PEM bytes, so the credentials are dynamic: before each new
connection's handshake grpcio asks whether the material changed, and gets the reloaded
certificate, key and client CA bundle when `ServerTls.reload` has read new files.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
from cryptography import x509
from grpc import aio

from airlane.gateway import ForwardedIdentity, PeerIdentity, ServerTls

__all__ = ["caller_identity", "peer_address", "peer_identity", "server_credentials"]


def _configuration(tls: ServerTls) -> Any:
    cert, key, ca = tls.material()
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials that follow ``tls``'s reloads (client certificates required when it asks
    for them)."""
    seen = tls.loads

    def fetch() -> Any:
        nonlocal seen
        if tls.loads == seen:
            return None  # grpcio keeps the configuration it has
        seen = tls.loads
        return _configuration(tls)

    return grpc.dynamic_ssl_server_credentials(
        _configuration(tls), fetch, require_client_authentication=tls.mutual
    )


@functools.lru_cache(maxsize=256)
def _uris(pem: bytes) -> tuple[str, ...]:
    """A certificate's URI SANs (cached: a client's calls share one certificate)."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(sans.get_values_for_type(x509.UniformResourceIdentifier))


def peer_identity(context: aio.ServicerContext, tls: ServerTls | None) -> PeerIdentity | None:
    """Who the call's TLS client certificate says it is (None: no TLS, or no certificate)."""
    if tls is None:
        return None
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return None
    return tls.identity_from_uris(_uris(pems[0]))


def peer_address(peer: str) -> str | None:
    """The IP in grpc's peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return None


def caller_identity(
    context: aio.ServicerContext, tls: ServerTls | None, forwarded: ForwardedIdentity | None
) -> PeerIdentity | None:
    """Who the caller is by certificate: the identity a trusted proxy forwarded in
    ``x-forwarded-client-cert`` (when there is one), else the call's own TLS client
    certificate's."""
    if forwarded is not None:
        header = None
        for key, value in context.invocation_metadata() or ():
            if key == "x-forwarded-client-cert":
                header = value if isinstance(value, str) else value.decode("latin-1")
        identity = forwarded.identity(peer_address(context.peer()), header)
        if identity is not None:
            return identity
    return peer_identity(context, tls)
