"""The schema registry's errors: one tree, each with an HTTP-ish ``status`` and a ``code``.

Exceptions::

    RegistryError              base of everything the registry raises on purpose
    ├── InvalidSubject         not a valid subject name (400; also a ValueError)
    ├── InvalidCompatibility   not a compatibility mode (400; also a ValueError)
    ├── SubjectNotFound        no subject by that name (404)
    ├── VersionNotFound        the subject has no such version (404)
    ├── IncompatibleSchema     registration refused by the subject's compatibility mode (409)
    ├── RegistrationConflict   other nodes kept winning the race for the next version (409)
    ├── InvalidSchema          the schema itself is malformed (422; also a ValueError)
    ├── SchemaViolation        an event does not conform to its schema (422)
    └── RegistryUnavailable    the store (JetStream) failed or holds unreadable data (503)

`InvalidSubject`, `InvalidSchema` and `SchemaViolation` are the caller's fault (bad input);
`RegistryUnavailable` is the infrastructure's, and wraps the store client's own exception as
its ``__cause__`` so that no ``nats`` exception leaks to callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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


class RegistryError(Exception):
    """Base class of the registry's own errors; ``status`` is the matching HTTP status."""

    status = 500
    code = "registry_error"


class InvalidSubject(RegistryError, ValueError):
    """The subject name does not match ``[A-Za-z0-9._-]{1,200}``."""

    status = 400
    code = "invalid_subject"


class InvalidCompatibility(RegistryError, ValueError):
    """Not one of the `airlane.registry.Compatibility` modes."""

    status = 400
    code = "invalid_compatibility"


class SubjectNotFound(RegistryError):
    """No subject by that name has a registered version."""

    status = 404
    code = "subject_not_found"


class VersionNotFound(RegistryError):
    """The subject exists but has no such version."""

    status = 404
    code = "version_not_found"


class IncompatibleSchema(RegistryError):
    """The schema breaks the subject's compatibility mode; ``incompatibilities`` says where."""

    status = 409
    code = "incompatible_schema"

    def __init__(self, message: str, incompatibilities: Sequence[Incompatibility]) -> None:
        super().__init__(message)
        self.incompatibilities = list(incompatibilities)


class RegistrationConflict(RegistryError):
    """Registration lost the race for the next version number too many times in a row."""

    status = 409
    code = "registration_conflict"


class InvalidSchema(RegistryError, ValueError):
    """The schema cannot be used: bad JSON, not a JSON Schema, bad descriptors, no message."""

    status = 422
    code = "invalid_schema"


class SchemaViolation(RegistryError):
    """A payload does not conform to its schema; ``errors`` lists where and why (bounded)."""

    status = 422
    code = "schema_violation"

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

    status = 503
    code = "registry_unavailable"
