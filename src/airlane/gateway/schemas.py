"""`Schemas`: the schema registry, as every transport reaches it.

Each method authorizes its call on ``schemas/<subject>``: ``publish`` to change a subject
(register, delete, set its compatibility mode), ``subscribe`` to read it (versions, a dry-run
check, validating a payload). Listing the subjects needs only an authenticated principal.
"""

from __future__ import annotations

from typing import Literal

from airlane.gateway.eventsourcing import EventSourcing
from airlane.registry import (
    Compatibility,
    Incompatibility,
    Schema,
    SchemaRegistry,
    SchemaVersion,
)
from airlane.security import Action, Principal, SecurityPolicy

__all__ = ["Schemas", "schema_resource"]


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

    def _allow(self, principal: Principal, action: Action, subject: str) -> None:
        self._security.authorize(principal, action, schema_resource(subject))

    async def subjects(self, principal: Principal) -> list[str]:
        """Every subject's name."""
        return await self._registry.subjects()

    async def describe(self, principal: Principal, subject: str) -> tuple[list[int], Compatibility]:
        """``subject``'s version numbers and its compatibility mode."""
        self._allow(principal, Action.SUBSCRIBE, subject)
        return await self._registry.versions(subject), await self._registry.compatibility(subject)

    async def register(self, principal: Principal, subject: str, schema: Schema) -> SchemaVersion:
        """Register ``schema`` under ``subject`` (idempotent; `IncompatibleSchema` when the
        subject's mode forbids it)."""
        self._allow(principal, Action.PUBLISH, subject)
        return await self._registry.register(subject, schema)

    async def version(
        self, principal: Principal, subject: str, version: int | Literal["latest"] = "latest"
    ) -> SchemaVersion:
        """One registered version of ``subject``."""
        self._allow(principal, Action.SUBSCRIBE, subject)
        return await self._registry.get(subject, version)

    async def check(
        self, principal: Principal, subject: str, schema: Schema
    ) -> list[Incompatibility]:
        """Where ``schema`` would break ``subject``'s mode (empty: it would register)."""
        self._allow(principal, Action.SUBSCRIBE, subject)
        return await self._registry.check(subject, schema)

    async def compatibility(self, principal: Principal, subject: str) -> Compatibility:
        """``subject``'s compatibility mode."""
        self._allow(principal, Action.SUBSCRIBE, subject)
        return await self._registry.compatibility(subject)

    async def set_compatibility(
        self, principal: Principal, subject: str, mode: Compatibility | str
    ) -> Compatibility:
        """Set ``subject``'s compatibility mode; the mode now in force."""
        self._allow(principal, Action.PUBLISH, subject)
        await self._registry.set_compatibility(subject, mode)
        return await self._registry.compatibility(subject)

    async def validate(
        self, principal: Principal, subject: str, data: bytes, content_type: str
    ) -> SchemaVersion:
        """Check a payload against ``subject``'s latest version (`SchemaViolation` if it does
        not conform); the version it was checked against."""
        self._allow(principal, Action.SUBSCRIBE, subject)
        return await self._registry.validate(subject, data, content_type)

    async def delete(self, principal: Principal, subject: str) -> list[int]:
        """Delete every version of ``subject``; the versions deleted."""
        self._allow(principal, Action.PUBLISH, subject)
        return await self._registry.delete_subject(subject)
