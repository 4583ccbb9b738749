"""`JetStreamSchemaStore`: the schema registry in a JetStream key-value bucket.

The layout is described in `airlane.registry.store`. Kept apart so that the registry can be
imported without the NATS client.
"""

from __future__ import annotations

import contextlib
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

from airlane.registry.errors import RegistryUnavailable
from airlane.registry.schemas import Compatibility, SchemaVersion
from airlane.registry.store import (
    DEFAULT_BUCKET,
    SchemaStore,
    config_key,
    decode_version,
    encode_version,
    subject_of_token,
    subject_token,
    version_key,
)

__all__ = ["JetStreamSchemaStore"]


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
        keys = await self._keys(f"subjects.{subject_token(subject)}.v.*")
        numbers = (key.rsplit(".", 1)[1] for key in keys)
        return sorted(int(number) for number in numbers if number.isdigit())

    async def get(self, subject: str, version: int) -> SchemaVersion | None:
        """See `SchemaStore.get`."""
        async with _unavailable("cannot read a schema version"):
            try:
                entry = await self._kv.get(version_key(subject, version))
            except KeyNotFoundError:
                return None
        found = decode_version(entry.value)
        if (found.subject, found.version) != (subject, version):
            raise RegistryUnavailable(f"the record under {subject} v{version} is misplaced")
        return found

    async def create(self, version: SchemaVersion) -> bool:
        """See `SchemaStore.create`: a KV create, which fails if the key exists."""
        key = version_key(version.subject, version.version)
        async with _unavailable("cannot write a schema version"):
            try:
                await self._kv.create(key, encode_version(version))
            except KeyWrongLastSequenceError:
                return False
        return True

    async def subjects(self) -> list[str]:
        """See `SchemaStore.subjects`."""
        keys = await self._keys("subjects.*.v.*")
        return sorted({subject_of_token(key.split(".")[1]) for key in keys})

    async def get_compatibility(self, subject: str) -> Compatibility | None:
        """See `SchemaStore.get_compatibility`."""
        async with _unavailable("cannot read a subject's settings"):
            try:
                entry = await self._kv.get(config_key(subject))
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
            await self._kv.put(config_key(subject), record)

    async def delete_subject(self, subject: str) -> list[int]:
        """See `SchemaStore.delete_subject`: purges the subject's keys from the stream."""
        removed = await self.versions(subject)
        async with _unavailable("cannot delete a subject"):
            await self._js.purge_stream(
                self._stream, subject=f"{self._prefix}subjects.{subject_token(subject)}.>"
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
