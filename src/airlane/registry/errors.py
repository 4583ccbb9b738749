"""The schema registry's errors: one tree of `airlane.core.errors.AirlaneError`, each with its
stable code (in brackets; ``docs/errors.md`` says how each wire reports it).

Exceptions::

    RegistryError              base of everything the registry raises on purpose
    ├── InvalidSubject         not a valid subject name (invalid_subject; also a ValueError)
    ├── InvalidCompatibility   not a compatibility mode (invalid_compatibility; a ValueError)
    ├── SubjectNotFound        no subject by that name (subject_not_found)
    ├── VersionNotFound        the subject has no such version (version_not_found)
    ├── IncompatibleSchema     registration refused by the subject's compatibility mode
    │                          (incompatible_schema)
    ├── RegistrationConflict   other nodes kept winning the race for the next version
    │                          (registration_conflict)
    ├── InvalidSchema          the schema itself is malformed (invalid_schema; a ValueError)
    ├── SchemaViolation        an event does not conform to its schema (schema_violation)
    └── RegistryUnavailable    the store (JetStream) failed or holds unreadable data
                               (registry_unavailable)

`InvalidSubject`, `InvalidSchema` and `SchemaViolation` are the caller's fault (bad input);
`RegistryUnavailable` is the infrastructure's, and wraps the store client's own exception as
its ``__cause__`` so that no ``nats`` exception leaks to callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airlane.core.errors import AirlaneError, ErrorCode

if TYPE_CHECKING:
    from airlane.registry.schemas import Incompatibility

__all__ = [
    "IncompatibleSchema",
    "InvalidCompatibility",
    "InvalidSchema",
    "InvalidSubject",
    "RegistrationConflict",
    "RegistryError",
    "RegistryUnavailable",
    "SchemaViolation",
    "SubjectNotFound",
    "VersionNotFound",
]


class RegistryError(AirlaneError):
    """Base class of the registry's own errors."""

    code = ErrorCode.REGISTRY_ERROR


class InvalidSubject(RegistryError, ValueError):
    """The subject name does not match ``[A-Za-z0-9._-]{1,200}``."""

    code = ErrorCode.INVALID_SUBJECT


class InvalidCompatibility(RegistryError, ValueError):
    """Not one of the `airlane.registry.Compatibility` modes."""

    code = ErrorCode.INVALID_COMPATIBILITY


class SubjectNotFound(RegistryError):
    """No subject by that name has a registered version."""

    code = ErrorCode.SUBJECT_NOT_FOUND


class VersionNotFound(RegistryError):
    """The subject exists but has no such version."""

    code = ErrorCode.VERSION_NOT_FOUND


class IncompatibleSchema(RegistryError):
    """The schema breaks the subject's compatibility mode; ``incompatibilities`` says where."""

    code = ErrorCode.INCOMPATIBLE_SCHEMA

    def __init__(self, message: str, incompatibilities: Sequence[Incompatibility]) -> None:
        super().__init__(message)
        self.incompatibilities = list(incompatibilities)

    def details(self) -> Mapping[str, Any]:
        """Where the schema breaks the mode: what a user needs to fix it."""
        return {"incompatibilities": [p.to_dict() for p in self.incompatibilities]}


class RegistrationConflict(RegistryError):
    """Registration lost the race for the next version number too many times in a row."""

    code = ErrorCode.REGISTRATION_CONFLICT


class InvalidSchema(RegistryError, ValueError):
    """The schema cannot be used: bad JSON, not a JSON Schema, bad descriptors, no message."""

    code = ErrorCode.INVALID_SCHEMA


class SchemaViolation(RegistryError):
    """A payload does not conform to its schema; ``errors`` lists where and why (bounded)."""

    code = ErrorCode.SCHEMA_VIOLATION

    def __init__(self, message: str, errors: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.errors = list(errors)

    def __str__(self) -> str:
        if not self.errors:
            return self.message
        return f"{self.message}: " + "; ".join(self.errors)


class RegistryUnavailable(RegistryError):
    """The store failed (JetStream unreachable, timed out) or returned unreadable data."""

    code = ErrorCode.REGISTRY_UNAVAILABLE
