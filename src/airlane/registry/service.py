"""`SchemaRegistry`: subjects, versions, compatibility on registration, validation on append.

The registry holds no state of its own beyond a validator cache; everything lives in its
`SchemaStore`, so registries on several nodes sharing one JetStream bucket are one registry.

Registering races safely across nodes: version *n + 1* is written with the store's atomic
`SchemaStore.create`. A node that loses the race reads the subject again (the winner may have
registered the very same schema, or one the new schema is no longer compatible with), checks
again, and tries *n + 2*, up to ``max_attempts`` times.
"""

from __future__ import annotations

from typing import Literal

from airlane.registry.errors import (
    IncompatibleSchema,
    InvalidCompatibility,
    RegistrationConflict,
    SchemaViolation,
    SubjectNotFound,
    VersionNotFound,
)
from airlane.registry.modes import check_compatibility
from airlane.registry.schemas import (
    Compatibility,
    Incompatibility,
    Schema,
    SchemaVersion,
    check_subject,
)
from airlane.registry.store import SchemaStore
from airlane.registry.validation import Validators

__all__ = ["DEFAULT_MAX_ATTEMPTS", "SchemaRegistry"]

DEFAULT_MAX_ATTEMPTS = 8
"""Registration attempts before `RegistrationConflict`: each lost race means another node
registered a version meanwhile, so eight in a row means sustained contention on one subject."""


class SchemaRegistry:
    """Versioned schemas per subject, backed by a `SchemaStore`.

    ``default_compatibility`` applies to subjects without their own mode.
    """

    def __init__(
        self,
        store: SchemaStore,
        default_compatibility: Compatibility = Compatibility.BACKWARD,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        validators: Validators | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.default_compatibility = default_compatibility
        self.max_attempts = max_attempts
        self.validators = validators or Validators()

    async def register(self, subject: str, schema: Schema) -> SchemaVersion:
        """Register ``schema`` as the subject's next version and return it.

        Idempotent: a schema identical to an existing version returns that version. Raises
        `IncompatibleSchema` if the subject's mode forbids it, `RegistrationConflict` if
        other nodes kept registering first.
        """
        check_subject(subject)
        for _ in range(self.max_attempts):
            existing = await self._all_versions(subject)
            for version in existing:
                if version.schema == schema:
                    return version
            mode = await self.compatibility(subject)
            problems = check_compatibility(mode, schema, existing)
            if problems:
                raise IncompatibleSchema(_refusal(subject, mode, problems), problems)
            number = existing[-1].version + 1 if existing else 1
            candidate = SchemaVersion(subject, number, schema)
            if await self.store.create(candidate):
                return candidate
        raise RegistrationConflict(
            f"subject {subject!r}: lost the race for a new version {self.max_attempts} times"
        )

    async def check(self, subject: str, schema: Schema) -> list[Incompatibility]:
        """What `register` would object to (a dry run; empty if it would succeed)."""
        check_subject(subject)
        existing = await self._all_versions(subject)
        if any(version.schema == schema for version in existing):
            return []
        return check_compatibility(await self.compatibility(subject), schema, existing)

    async def get(self, subject: str, version: int | Literal["latest"] = "latest") -> SchemaVersion:
        """One version of the subject (the newest by default)."""
        check_subject(subject)
        if version == "latest":
            numbers = await self.versions(subject)
            version = numbers[-1]
        elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise VersionNotFound(f"{version!r} is not a version (1, 2, ... or 'latest')")
        found = await self.store.get(subject, version)
        if found is None:
            await self.versions(subject)  # SubjectNotFound if the whole subject is gone
            raise VersionNotFound(f"subject {subject!r} has no version {version}")
        return found

    async def versions(self, subject: str) -> list[int]:
        """The subject's version numbers, ascending; `SubjectNotFound` if it has none."""
        numbers = await self.store.versions(check_subject(subject))
        if not numbers:
            raise SubjectNotFound(f"no subject {subject!r}")
        return numbers

    async def subjects(self) -> list[str]:
        """Every subject with at least one version, sorted."""
        return await self.store.subjects()

    async def compatibility(self, subject: str) -> Compatibility:
        """The subject's mode (its own, else the registry's default)."""
        mode = await self.store.get_compatibility(check_subject(subject))
        return mode or self.default_compatibility

    async def set_compatibility(self, subject: str, mode: Compatibility | str) -> None:
        """Set the subject's mode (a `Compatibility` or its name); it applies to later
        registrations only."""
        check_subject(subject)
        try:
            mode = Compatibility(mode.upper() if isinstance(mode, str) else mode)
        except ValueError:
            choices = ", ".join(m.value for m in Compatibility)
            raise InvalidCompatibility(f"unknown mode {mode!r}; use one of {choices}") from None
        await self.store.set_compatibility(subject, mode)

    async def validate(
        self, subject: str, payload: bytes, content_type: str, version: int | None = None
    ) -> SchemaVersion:
        """Check an event's payload against a version (the latest by default) and return
        that version; raise `SchemaViolation` (naming subject and version) if it does not
        conform."""
        schema_version = await self.get(subject, "latest" if version is None else version)
        try:
            self.validators.validate(schema_version.schema, payload, content_type)
        except SchemaViolation as exc:
            where = f"subject {subject!r} version {schema_version.version}"
            raise SchemaViolation(f"{exc.message} ({where})", exc.errors) from None
        return schema_version

    async def delete_subject(self, subject: str) -> list[int]:
        """Delete every version and the subject's mode; returns the versions deleted.
        A later registration starts again at version 1."""
        removed = await self.store.delete_subject(check_subject(subject))
        if not removed:
            raise SubjectNotFound(f"no subject {subject!r}")
        return removed

    async def _all_versions(self, subject: str) -> list[SchemaVersion]:
        found = []
        for number in await self.store.versions(subject):
            version = await self.store.get(subject, number)
            if version is not None:  # deleted under our feet: the next attempt sees it all
                found.append(version)
        return found


def _refusal(subject: str, mode: Compatibility, problems: list[Incompatibility]) -> str:
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"schema is not {mode.value} compatible with subject {subject!r}: {first}{more}"
