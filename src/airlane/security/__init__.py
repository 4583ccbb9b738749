"""The single security gate.

Every transport turns its credentials into a `Principal` with `SecurityPolicy.authenticate`
and asks `SecurityPolicy.authorize(principal, action, stream_id)` before it generates,
subscribes, publishes or cancels (ARCHITECTURE.md). mTLS and RBAC policies come later and
plug in here.

Exceptions (`airlane.core.errors.AirlaneError`, with their codes; each transport reports
them through its own table, ``docs/errors.md``)::

    SecurityError
    ├── Unauthenticated    no or bad credentials (unauthenticated)
    └── PermissionDenied   the principal may not do this (permission_denied)
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "ANONYMOUS",
    "Action",
    "AllowAll",
    "ApiKeyPolicy",
    "PermissionDenied",
    "Principal",
    "SecurityError",
    "SecurityPolicy",
    "Unauthenticated",
]


class Action(enum.StrEnum):
    """What a principal asks to do with a stream."""

    GENERATE = "generate"
    SUBSCRIBE = "subscribe"
    PUBLISH = "publish"
    CANCEL = "cancel"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking."""

    name: str
    """Stable identity (an API key's owner, a certificate subject)."""
    roles: frozenset[str] = field(default_factory=frozenset)
    """Roles for role-based policies."""


ANONYMOUS = Principal("anonymous")
"""The principal of a request without credentials under `AllowAll`."""


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

    def authenticate(self, bearer: str | None) -> Principal:
        """The principal behind a bearer token (None: no credentials were sent)."""
        ...

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Return if allowed; raise `PermissionDenied` otherwise."""
        ...


class AllowAll:
    """The default: everyone may do everything (for localhost and trusted networks)."""

    def authenticate(self, bearer: str | None) -> Principal:
        """Everyone is anonymous."""
        return ANONYMOUS

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Allow."""


class ApiKeyPolicy:
    """Bearer API keys: each key maps to a principal name; every key may do everything."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        if not keys:
            raise ValueError("ApiKeyPolicy needs at least one key")
        self._keys = {key.encode(): name for key, name in keys.items()}

    def authenticate(self, bearer: str | None) -> Principal:
        """Look the key up in constant time per key, so timing does not leak prefixes."""
        if not bearer:
            raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
        offered = bearer.encode()
        match = None
        for key, name in self._keys.items():
            if hmac.compare_digest(key, offered):
                match = name
        if match is None:
            raise Unauthenticated("invalid API key")
        return Principal(match)

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Any authenticated principal may act."""
        if principal is ANONYMOUS:
            raise PermissionDenied(f"anonymous principals may not {action.value}")
