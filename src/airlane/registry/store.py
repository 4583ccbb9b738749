"""Where schema versions live: the `SchemaStore` contract, in memory and in JetStream KV.

A store is deliberately dumb: it keeps versions and per-subject settings, and offers one
atomic operation, `SchemaStore.create` (write version *n* only if no version *n* exists).
The registry builds everything else (compatibility, idempotence, retries) on top of it.

`airlane.registry.jetstream_store.JetStreamSchemaStore` keeps everything in one KV bucket
(default ``AIRLANE_SCHEMAS``, file storage, history 1), so every node sees the same registry::

    subjects.<subject>.v.<n>      one schema version (JSON record, below)
    subjects.<subject>.config     the subject's compatibility mode

``<subject>`` has its dots written as ``/``: a subject is then always exactly one token of
the NATS subject, so ``subjects.orders.v.*`` can never match keys of a subject named
``orders.v`` and ``subjects.<subject>.>`` names exactly one subject's keys. (Subject names
cannot contain ``/``, so the mapping is one-to-one.)

Versions are listed with one request (the stream's per-subject counts, filtered by
``subjects.<subject>.v.*``), not with a consumer, and a subject is deleted by purging its
keys from the stream, leaving no delete markers behind to list.
"""

from __future__ import annotations

import abc
import base64
import functools

import orjson

from airlane.core.scope import scoped, split_scope
from airlane.registry.errors import InvalidSchema, RegistryUnavailable
from airlane.registry.schemas import Compatibility, Schema, SchemaType, SchemaVersion, check_subject

__all__ = [
    "DEFAULT_BUCKET",
    "MemorySchemaStore",
    "SchemaStore",
    "config_key",
    "decode_version",
    "encode_version",
    "subject_of_token",
    "subject_token",
    "version_key",
]

DEFAULT_BUCKET = "AIRLANE_SCHEMAS"
RECORD_CACHE_SIZE = 256
"""Decoded records kept (by content): each is an immutable `SchemaVersion`."""


class SchemaStore(abc.ABC):
    """Storage for schema versions and subject settings. Subjects are already checked."""

    @abc.abstractmethod
    async def versions(self, subject: str) -> list[int]:
        """The subject's version numbers, ascending (empty if it has none)."""

    @abc.abstractmethod
    async def get(self, subject: str, version: int) -> SchemaVersion | None:
        """One version, or None if it does not exist."""

    @abc.abstractmethod
    async def create(self, version: SchemaVersion) -> bool:
        """Store ``version`` unless its number is taken (atomically); False if it was."""

    @abc.abstractmethod
    async def subjects(self) -> list[str]:
        """Subjects that have at least one version, sorted."""

    @abc.abstractmethod
    async def get_compatibility(self, subject: str) -> Compatibility | None:
        """The subject's own mode, or None if it uses the registry's default."""

    @abc.abstractmethod
    async def set_compatibility(self, subject: str, mode: Compatibility) -> None:
        """Set the subject's mode (allowed before its first version)."""

    @abc.abstractmethod
    async def delete_subject(self, subject: str) -> list[int]:
        """Remove every version and the settings; returns the versions removed."""

    async def aclose(self) -> None:  # noqa: B027 (optional hook: most stores hold nothing)
        """Release what the store holds (not the NATS connection it was given)."""


class MemorySchemaStore(SchemaStore):
    """A store in this process only: for tests and the single-process default."""

    def __init__(self) -> None:
        self._versions: dict[str, dict[int, SchemaVersion]] = {}
        self._modes: dict[str, Compatibility] = {}

    async def versions(self, subject: str) -> list[int]:
        """See `SchemaStore.versions`."""
        return sorted(self._versions.get(subject, ()))

    async def get(self, subject: str, version: int) -> SchemaVersion | None:
        """See `SchemaStore.get`."""
        return self._versions.get(subject, {}).get(version)

    async def create(self, version: SchemaVersion) -> bool:
        """See `SchemaStore.create`; atomic because nothing here awaits."""
        taken = self._versions.setdefault(version.subject, {})
        if version.version in taken:
            return False
        taken[version.version] = version
        return True

    async def subjects(self) -> list[str]:
        """See `SchemaStore.subjects`."""
        return sorted(subject for subject, versions in self._versions.items() if versions)

    async def get_compatibility(self, subject: str) -> Compatibility | None:
        """See `SchemaStore.get_compatibility`."""
        return self._modes.get(subject)

    async def set_compatibility(self, subject: str, mode: Compatibility) -> None:
        """See `SchemaStore.set_compatibility`."""
        self._modes[subject] = mode

    async def delete_subject(self, subject: str) -> list[int]:
        """See `SchemaStore.delete_subject`."""
        self._modes.pop(subject, None)
        return sorted(self._versions.pop(subject, ()))


def subject_token(subject: str) -> str:
    """A subject as one key token: its dots written as ``/``; a tenant's scope
    (``@tenant/name``) as ``=tenant=name``, since key-value keys may hold neither ``@`` nor a
    ``/`` of their own here, and plain subjects never hold ``=``."""
    tenant, plain = split_scope(check_subject(subject))
    token = plain.replace(".", "/")
    return token if tenant is None else f"={tenant.replace('.', '/')}={token}"


def subject_of_token(token: str) -> str:
    """The inverse of `subject_token`."""
    if token.startswith("="):
        _, tenant, plain = token.split("=", 2)
        return scoped(tenant.replace("/", "."), plain.replace("/", "."))
    return token.replace("/", ".")


def version_key(subject: str, version: int) -> str:
    """The key of a subject's version."""
    return f"subjects.{subject_token(subject)}.v.{version}"


def config_key(subject: str) -> str:
    """The key of a subject's settings."""
    return f"subjects.{subject_token(subject)}.config"


def encode_version(version: SchemaVersion) -> bytes:
    """The stored record: JSON, with a Protobuf descriptor set in base64."""
    schema = version.schema
    if schema.type is SchemaType.JSON:
        definition = schema.text
    else:
        definition = base64.b64encode(schema.definition).decode()
    record = {
        "subject": version.subject,
        "version": version.version,
        "type": schema.type.value,
        "definition": definition,
        "message": schema.message,
        "id": version.id,
    }
    return orjson.dumps(record)


def decode_version(data: bytes) -> SchemaVersion:
    """Read a record back; a corrupt or tampered one (its id no longer matches) is refused."""
    return _decode_cached(bytes(data))


# Parsing a schema (metaschema check, descriptor linking) costs far more than hashing the
# record, and validating "latest" reads the same record for every event.
@functools.lru_cache(maxsize=RECORD_CACHE_SIZE)
def _decode_cached(data: bytes) -> SchemaVersion:
    try:
        record = orjson.loads(data)
        kind = SchemaType(record["type"])
        if kind is SchemaType.JSON:
            schema = Schema.json(record["definition"])
        else:
            schema = Schema.protobuf(base64.b64decode(record["definition"]), record["message"])
        version = SchemaVersion(record["subject"], int(record["version"]), schema)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, InvalidSchema) as exc:
        raise RegistryUnavailable(f"unreadable schema record: {exc}") from exc
    if version.id != record.get("id"):
        raise RegistryUnavailable(f"schema record {version.subject} v{version.version} is corrupt")
    return version
