"""Where schema versions live: the `SchemaStore` contract, in memory and in JetStream KV.

A store is deliberately dumb: it keeps versions and per-subject settings, and offers one
atomic operation, `SchemaStore.create` (write version *n* only if no version *n* exists).
The registry builds everything else (compatibility, idempotence, retries) on top of it.

`JetStreamSchemaStore` keeps everything in one KV bucket (default ``AIRLANE_SCHEMAS``, file
storage, history 1), so every node sees the same registry::

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
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

import orjson
from nats.errors import Error as NatsError
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)

from airlane.registry.errors import InvalidSchema, RegistryUnavailable
from airlane.registry.schemas import Compatibility, Schema, SchemaType, SchemaVersion, check_subject

__all__ = [
    "DEFAULT_BUCKET",
    "JetStreamSchemaStore",
    "MemorySchemaStore",
    "SchemaStore",
    "decode_version",
    "encode_version",
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


class JetStreamSchemaStore(SchemaStore):
    """A store in a JetStream KV bucket, shared by every node on the NATS cluster.

    Build it with `JetStreamSchemaStore.open`. NATS errors become `RegistryUnavailable`.
    """

    def __init__(self, js: Any, kv: Any, bucket: str) -> None:
        self._js = js
        self._kv = kv
        self.bucket = bucket
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."

    @classmethod
    async def open(
        cls, js: Any, bucket: str = DEFAULT_BUCKET, *, replicas: int = 1
    ) -> JetStreamSchemaStore:
        """Bind to ``bucket`` on JetStream context ``js``, creating it if it is missing."""
        async with _unavailable(f"cannot open schema bucket {bucket!r}"):
            try:
                kv = await js.key_value(bucket)
            except BucketNotFoundError:
                kv = await _create_bucket(js, bucket, replicas)
        return cls(js, kv, bucket)

    async def versions(self, subject: str) -> list[int]:
        """See `SchemaStore.versions` (one stream-info request)."""
        keys = await self._keys(f"subjects.{_token(subject)}.v.*")
        numbers = (key.rsplit(".", 1)[1] for key in keys)
        return sorted(int(number) for number in numbers if number.isdigit())

    async def get(self, subject: str, version: int) -> SchemaVersion | None:
        """See `SchemaStore.get`."""
        async with _unavailable("cannot read a schema version"):
            try:
                entry = await self._kv.get(_version_key(subject, version))
            except KeyNotFoundError:
                return None
        found = decode_version(entry.value)
        if (found.subject, found.version) != (subject, version):
            raise RegistryUnavailable(f"the record under {subject} v{version} is misplaced")
        return found

    async def create(self, version: SchemaVersion) -> bool:
        """See `SchemaStore.create`: a KV create, which fails if the key exists."""
        key = _version_key(version.subject, version.version)
        async with _unavailable("cannot write a schema version"):
            try:
                await self._kv.create(key, encode_version(version))
            except KeyWrongLastSequenceError:
                return False
        return True

    async def subjects(self) -> list[str]:
        """See `SchemaStore.subjects`."""
        keys = await self._keys("subjects.*.v.*")
        return sorted({_untoken(key.split(".")[1]) for key in keys})

    async def get_compatibility(self, subject: str) -> Compatibility | None:
        """See `SchemaStore.get_compatibility`."""
        async with _unavailable("cannot read a subject's settings"):
            try:
                entry = await self._kv.get(_config_key(subject))
            except KeyNotFoundError:
                return None
        try:
            return Compatibility(orjson.loads(entry.value)["compatibility"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RegistryUnavailable(f"unreadable settings for {subject!r}: {exc}") from exc

    async def set_compatibility(self, subject: str, mode: Compatibility) -> None:
        """See `SchemaStore.set_compatibility`."""
        record = orjson.dumps({"compatibility": mode.value})
        async with _unavailable("cannot write a subject's settings"):
            await self._kv.put(_config_key(subject), record)

    async def delete_subject(self, subject: str) -> list[int]:
        """See `SchemaStore.delete_subject`: purges the subject's keys from the stream."""
        removed = await self.versions(subject)
        async with _unavailable("cannot delete a subject"):
            await self._js.purge_stream(
                self._stream, subject=f"{self._prefix}subjects.{_token(subject)}.>"
            )
        return removed

    async def _keys(self, pattern: str) -> list[str]:
        async with _unavailable("cannot list schema keys"):
            info = await self._js.stream_info(self._stream, subjects_filter=self._prefix + pattern)
        return [subject.removeprefix(self._prefix) for subject in info.state.subjects or ()]


async def _create_bucket(js: Any, bucket: str, replicas: int) -> Any:
    config = KeyValueConfig(
        bucket=bucket,
        description="Airlane schema registry",
        history=1,  # versions are immutable; settings need no history either
        storage=StorageType.FILE,  # the registry must survive a broker restart
        replicas=replicas,
    )
    try:
        return await js.create_key_value(config)
    except BadRequestError:
        # Another node created it first (with a different config, or in between our calls).
        return await js.key_value(bucket)


@contextlib.asynccontextmanager
async def _unavailable(what: str) -> AsyncIterator[None]:
    """Translate the NATS client's errors at the boundary (STYLE.md section 3)."""
    try:
        yield
    except (NatsError, TimeoutError, OSError) as exc:
        raise RegistryUnavailable(f"{what}: {exc or type(exc).__name__}") from exc


def _token(subject: str) -> str:
    return check_subject(subject).replace(".", "/")


def _untoken(token: str) -> str:
    return token.replace("/", ".")


def _version_key(subject: str, version: int) -> str:
    return f"subjects.{_token(subject)}.v.{version}"


def _config_key(subject: str) -> str:
    return f"subjects.{_token(subject)}.config"


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
