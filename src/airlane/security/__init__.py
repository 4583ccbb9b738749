"""The single security gate.

Every transport turns its credentials into a `Principal` with `SecurityPolicy.authenticate`;
the gateway asks `SecurityPolicy.authorize(principal, action, stream_id)` before it generates,
subscribes, publishes or cancels (ARCHITECTURE.md). mTLS and RBAC policies come later and
plug in here.

Every principal belongs to a tenant. What a tenant's principals name (a stream id) is looked
up in that tenant's own namespace (`airlane.gateway.tenancy`), so another tenant's streams are
not there at all: not found, never forbidden. API keys name their tenant as ``NAME@TENANT``;
a key named only ``NAME`` is its own tenant, so two keys share streams only when they say so.

Exceptions (`airlane.core.errors.AirlaneError`, with their codes; each transport reports
them through its own table, ``docs/errors.md``)::

    SecurityError
    ├── Unauthenticated    no or bad credentials (unauthenticated)
    └── PermissionDenied   the principal may not do this (permission_denied)
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.scope import TENANT_PATTERN

if TYPE_CHECKING:  # ssl and the certificate code load only where TLS is configured
    from airlane.security.tls import PeerIdentity

__all__ = [
    "ANONYMOUS",
    "DEFAULT_TENANT",
    "TENANT_PATTERN",
    "Action",
    "AllowAll",
    "ApiKeyPolicy",
    "PermissionDenied",
    "Principal",
    "RequestFacts",
    "SecurityError",
    "SecurityPolicy",
    "Unauthenticated",
    "peer_principal",
    "principal_named",
]


class Action(enum.StrEnum):
    """What a principal asks to do, and to what kind of resource (the names a policy file's
    rules use, docs/security.md)."""

    GENERATE = "generate"
    """Start a chat completion or generation (its stream)."""
    SUBSCRIBE = "subscribe"
    """Read a stream: its events, snapshot and info, resuming too."""
    PUBLISH = "publish"
    """Write events into a stream, or create a named one."""
    CANCEL = "cancel"
    """Stop a stream's generation."""
    DELETE = "delete"
    """Delete a stream."""
    LOGS_READ = "logs.read"
    """Read an event log: info, replay."""
    LOGS_APPEND = "logs.append"
    """Create an event log, or append to one."""
    LOGS_CONSUME = "logs.consume"
    """Fetch and settle in a consumer group, see its state."""
    LOGS_ADMIN = "logs.admin"
    """Delete an event log or a consumer group."""
    SCHEMAS_READ = "schemas.read"
    """Read schemas, check or validate against them."""
    SCHEMAS_REGISTER = "schemas.register"
    """Register a schema version."""
    SCHEMAS_ADMIN = "schemas.admin"
    """Set a subject's compatibility, delete a subject."""
    ROOMS_READ = "rooms.read"
    """Join a room and read its state."""
    ROOMS_WRITE = "rooms.write"
    """Change a room's state."""
    ARTIFACTS_PULL = "artifacts.pull"
    """List, watch and download model artifacts."""
    ARTIFACTS_PUBLISH = "artifacts.publish"
    """Announce new artifact versions (a rescan of the store)."""
    RULES_READ = "rules.read"
    """List rules, see one (its state and held rows), test SQL against sample messages."""
    RULES_ADMIN = "rules.admin"
    """Add, replace or delete a rule."""
    RULES_APPROVE = "rules.approve"
    """Approve or reject a row a rule holds for approval."""


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What a transport knows about the request being authorized, beyond who sent it."""

    wire: str
    """``http`` (SSE and plain HTTP), ``ws``, ``grpc``, ``grpc-web`` or ``airc``."""
    method: str | None = None
    """The HTTP method (``POST``); None where the wire has none (AIRC, gRPC)."""
    path: str | None = None
    """The HTTP path, or the gRPC method (``/airlane.v1.Streams/Subscribe``)."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Headers or gRPC metadata, names in lower case, credentials left out."""

    @classmethod
    def of(
        cls,
        wire: str,
        pairs: Iterable[tuple[str, str]],
        method: str | None = None,
        path: str | None = None,
    ) -> RequestFacts:
        """Facts from a request's header or metadata ``pairs``: names in lower case, the last
        value of a repeated one, credentials and binary metadata left out, and bounded (what
        the policy sees is never a copy of an unbounded input)."""
        metadata: dict[str, str] = {}
        for raw, value in pairs:
            name = raw.lower()
            if name in _CREDENTIAL_HEADERS or name.endswith("-bin"):
                continue
            if len(metadata) >= _MAX_FACTS and name not in metadata:
                break
            metadata[name] = value[:_MAX_FACT_CHARS]
        return cls(wire, method, path, metadata)


_CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-forwarded-client-cert",
        "sec-websocket-key",
    }
)
_MAX_FACTS = 64
_MAX_FACT_CHARS = 1024


DEFAULT_TENANT = "default"
"""The tenant of principals that name none (everyone, under `AllowAll`): its stream ids are
stored as they are, so a single-tenant gateway's streams keep the ids clients gave them."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking."""

    name: str
    """Stable identity (an API key's owner, a certificate subject)."""
    roles: frozenset[str] = field(default_factory=frozenset)
    """Roles for role-based policies."""
    tenant: str = DEFAULT_TENANT
    """Whose resources this principal sees: its tenant's, and only those."""
    origin: str | None = field(default=None, compare=False)
    """Where the request came from (the client's address), for the audit log."""
    via: str = field(default="anonymous", compare=False)
    """How it proved who it is: ``key``, ``jwt``, ``spiffe`` (a client certificate, direct or
    through a trusted proxy) or ``anonymous``; policy rules can match on it."""
    claims: Mapping[str, str] = field(default_factory=dict, compare=False)
    """A JWT's claims that are strings or numbers, as strings (policy rules match them)."""
    request: RequestFacts | None = field(default=None, compare=False)
    """How the request that asks came (wire, method, path, metadata), for policy rules."""

    def __post_init__(self) -> None:
        if TENANT_PATTERN.fullmatch(self.tenant) is None:
            raise ValueError(f"a tenant is 1 to 64 of A-Z a-z 0-9 . _ -, not {self.tenant!r}")


ANONYMOUS = Principal("anonymous")
"""The principal of a request without credentials under `AllowAll`."""


def principal_named(spec: str) -> Principal:
    """The principal an API key's name describes: ``NAME@TENANT``, or ``NAME`` (its own
    tenant). A `ValueError` says what is wrong with a malformed one."""
    name, sep, tenant = spec.rpartition("@")
    if not sep:
        name, tenant = spec, spec
    if not name:
        raise ValueError(f"API key name {spec!r}: NAME@TENANT needs a name before the '@'")
    try:
        return Principal(name, tenant=tenant, via="key")
    except ValueError as exc:
        raise ValueError(f"API key name {spec!r}: {exc}") from None


class SecurityError(AirlaneError):
    """Base of the gate's refusals."""

    code = ErrorCode.PERMISSION_DENIED


class Unauthenticated(SecurityError):
    """Missing or invalid credentials."""

    code = ErrorCode.UNAUTHENTICATED


class PermissionDenied(SecurityError):
    """Valid credentials, but this action on this stream is not allowed."""


class SecurityPolicy(Protocol):
    """Authentication and authorization, in one place."""

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """The principal behind a bearer token (None: none was sent) or, without one, behind
        the client certificate a TLS listener verified (``peer``; None: none was sent)."""
        ...

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Return if allowed; raise `PermissionDenied` otherwise."""
        ...


def peer_principal(peer: PeerIdentity) -> Principal:
    """The principal a verified client certificate names (its SPIFFE ID, in the default
    tenant); `Unauthenticated` when the certificate names none that is accepted."""
    if peer.spiffe_id is None:
        raise Unauthenticated(peer.error or "the client certificate names no identity")
    return Principal(peer.spiffe_id, via="spiffe")


class AllowAll:
    """The default: everyone may do everything (for localhost and trusted networks)."""

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """Everyone is anonymous, but for a client certificate's identity (refused when the
        certificate's ID is malformed or from a trust domain not accepted)."""
        return ANONYMOUS if peer is None else peer_principal(peer)

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Allow."""


class ApiKeyPolicy:
    """Bearer API keys: each key maps to a principal's name (``NAME`` or ``NAME@TENANT``,
    see `principal_named`); every key may do everything within its tenant."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        if not keys:
            raise ValueError("ApiKeyPolicy needs at least one key")
        self._keys = {key.encode(): principal_named(name) for key, name in keys.items()}

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """Look the key up in constant time per key, so timing does not leak prefixes; with
        no key, a client certificate's identity."""
        if not bearer and peer is not None:
            return peer_principal(peer)
        if not bearer:
            raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
        offered = bearer.encode()
        match = None
        for key, principal in self._keys.items():
            if hmac.compare_digest(key, offered):
                match = principal
        if match is None:
            raise Unauthenticated("invalid API key")
        return match

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Any authenticated principal may act."""
        if principal is ANONYMOUS:
            raise PermissionDenied(f"anonymous principals may not {action.value}")
