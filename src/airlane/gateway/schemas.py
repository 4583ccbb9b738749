"""`Schemas`: the schema registry, as every transport reaches it.

Each method authorizes its call on ``schemas/<subject>``: ``publish`` to change a subject
(register, delete, set its compatibility mode), ``subscribe`` to read it (versions, a dry-run
check, validating a payload). Listing the subjects needs only an authenticated principal.
Subjects are the caller's tenant's (`airlane.gateway.tenancy`): another tenant's subject is not
found and not listed, and an event appended to a tenant's log is checked against that tenant's
subject of its type.
"""

from __future__ import annotations

import base64
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Literal

from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.tenancy import finding, own_names, scoped_name
from airlane.registry import (
    Compatibility,
    Incompatibility,
    Schema,
    SchemaRegistry,
    SchemaVersion,
    check_subject,
)
from airlane.security import Action, Principal, SecurityPolicy
from airlane.security.audit import audit_admin

__all__ = ["Schemas", "schema_resource", "version_to_dict"]


def schema_resource(subject: str) -> str:
    """The resource the security gate is asked about for ``subject``."""
    return f"schemas/{subject}"


class Schemas:
    """The registry operations; see the module docstring."""

    def __init__(self, events: EventSourcing, security: SecurityPolicy) -> None:
        self._events = events
        self._security = security

    @property
    def _registry(self) -> SchemaRegistry:
        return self._events.registry

    def _allow(self, principal: Principal, action: Action, subject: str) -> str:
        """Authorize ``action`` on ``subject``; the key its tenant keeps it under."""
        check_subject(subject, scoped=False)
        self._security.authorize(principal, action, schema_resource(subject))
        return scoped_name(principal, subject)

    def _finding(
        self, principal: Principal, action: Action, key: str, subject: str
    ) -> AbstractContextManager[None]:
        """`finding` for ``subject``: its errors name it as the client does, and a not-found is
        an audit record."""
        return finding(self._security, principal, action, key, subject, schema_resource(subject))

    async def subjects(self, principal: Principal) -> list[str]:
        """The names of the caller's tenant's subjects."""
        return own_names(principal, await self._registry.subjects())

    async def describe(self, principal: Principal, subject: str) -> tuple[list[int], Compatibility]:
        """``subject``'s version numbers and its compatibility mode."""
        key = self._allow(principal, Action.SCHEMAS_READ, subject)
        with self._finding(principal, Action.SCHEMAS_READ, key, subject):
            return await self._registry.versions(key), await self._registry.compatibility(key)

    async def register(self, principal: Principal, subject: str, schema: Schema) -> SchemaVersion:
        """Register ``schema`` under ``subject`` (idempotent; `IncompatibleSchema` when the
        subject's mode forbids it)."""
        key = self._allow(principal, Action.SCHEMAS_REGISTER, subject)
        with self._finding(principal, Action.SCHEMAS_REGISTER, key, subject):
            return _named(await self._registry.register(key, schema), subject)

    async def version(
        self, principal: Principal, subject: str, version: int | Literal["latest"] = "latest"
    ) -> SchemaVersion:
        """One registered version of ``subject``."""
        key = self._allow(principal, Action.SCHEMAS_READ, subject)
        with self._finding(principal, Action.SCHEMAS_READ, key, subject):
            return _named(await self._registry.get(key, version), subject)

    async def check(
        self, principal: Principal, subject: str, schema: Schema
    ) -> list[Incompatibility]:
        """Where ``schema`` would break ``subject``'s mode (empty: it would register)."""
        key = self._allow(principal, Action.SCHEMAS_READ, subject)
        with self._finding(principal, Action.SCHEMAS_READ, key, subject):
            return await self._registry.check(key, schema)

    async def compatibility(self, principal: Principal, subject: str) -> Compatibility:
        """``subject``'s compatibility mode."""
        key = self._allow(principal, Action.SCHEMAS_READ, subject)
        with self._finding(principal, Action.SCHEMAS_READ, key, subject):
            return await self._registry.compatibility(key)

    async def set_compatibility(
        self, principal: Principal, subject: str, mode: Compatibility | str
    ) -> Compatibility:
        """Set ``subject``'s compatibility mode; the mode now in force."""
        key = self._allow(principal, Action.SCHEMAS_ADMIN, subject)
        with self._finding(principal, Action.SCHEMAS_ADMIN, key, subject):
            await self._registry.set_compatibility(key, mode)
            now = await self._registry.compatibility(key)
        audit_admin(self._security, principal, "set_compatibility", schema_resource(subject))
        return now

    async def validate(
        self, principal: Principal, subject: str, data: bytes, content_type: str
    ) -> SchemaVersion:
        """Check a payload against ``subject``'s latest version (`SchemaViolation` if it does
        not conform); the version it was checked against."""
        key = self._allow(principal, Action.SCHEMAS_READ, subject)
        with self._finding(principal, Action.SCHEMAS_READ, key, subject):
            return _named(await self._registry.validate(key, data, content_type), subject)

    async def delete(self, principal: Principal, subject: str) -> list[int]:
        """Delete every version of ``subject``; the versions deleted."""
        key = self._allow(principal, Action.SCHEMAS_ADMIN, subject)
        with self._finding(principal, Action.SCHEMAS_ADMIN, key, subject):
            deleted = await self._registry.delete_subject(key)
        audit_admin(self._security, principal, "delete_subject", schema_resource(subject))
        return deleted


def _named(version: SchemaVersion, subject: str) -> SchemaVersion:
    """``version`` as the client that calls its subject ``subject`` sees it."""
    return version if version.subject == subject else replace(version, subject=subject)


def version_to_dict(version: SchemaVersion) -> dict[str, Any]:
    """A registered version as JSON."""
    schema = version.schema
    out: dict[str, Any] = {
        "subject": version.subject,
        "version": version.version,
        "id": version.id,
        "schema_type": schema.type.value,
    }
    if schema.message is None:
        out["schema"] = schema.document
    else:
        out["message"] = schema.message
        out["descriptor_set_base64"] = base64.b64encode(schema.definition).decode("ascii")
    return out
