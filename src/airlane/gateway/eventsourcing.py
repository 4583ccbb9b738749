"""Event sourcing on a gateway node: the event logs and the schema registry, wired together.

An event appended to a log has a ``type`` (``reward.v1``); if the registry has a subject of
that name, the event's payload must conform to the subject's latest schema, or the append is
refused with `SchemaViolation` (422) before anything is stored. With ``require_schema``, a type
without a subject is refused too.

In one process both live in memory (`MemoryEventLog`, `MemorySchemaStore`). With NATS servers
(``airlane serve --hub nats://...``) both live in JetStream, on a connection of their own:
every node sees the same logs, consumer groups and schemas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from airlane.core.errors import ErrorCode
from airlane.core.scope import scoped, split_scope
from airlane.eventlog import EventLog, EventLogUnavailable, MemoryEventLog
from airlane.registry import (
    InvalidSubject,
    MemorySchemaStore,
    SchemaRegistry,
    SchemaVersion,
    SchemaViolation,
    SubjectNotFound,
)

__all__ = ["EventSourcing", "EventSourcingConfig", "UnknownEventType"]

log = logging.getLogger("airlane.eventlog")

SCHEMA_CACHE_S = 1.0
"""How long a node reuses the latest schema it looked up for a type: validation then costs no
broker round trip per event, and a newly registered version applies within this time."""
CONNECT_TIMEOUT_S = 10.0
"""How long start-up waits for the first connection to JetStream before it gives up."""
MAX_CACHED_TYPES = 10_000
"""Event types whose latest schema a node remembers at once."""


class UnknownEventType(SchemaViolation):
    """``require_schema`` is on and the registry has no subject named like the event type."""

    code = ErrorCode.UNKNOWN_EVENT_TYPE


@dataclass(frozen=True, slots=True)
class EventSourcingConfig:
    """How the event logs and the registry behave (``[eventsourcing]``)."""

    require_schema: bool = False
    """Refuse events whose type has no subject in the registry."""
    schema_cache_s: float = SCHEMA_CACHE_S
    """See `SCHEMA_CACHE_S`; 0 looks the schema up for every event."""


class EventSourcing:
    """The node's event logs (`logs`) and schema registry (`registry`)."""

    def __init__(
        self,
        config: EventSourcingConfig | None = None,
        *,
        servers: tuple[str, ...] = (),
        prefix: str = "airlane",
        replicas: int = 1,
    ) -> None:
        self.config = config or EventSourcingConfig()
        self.servers = servers
        """NATS servers (JetStream); empty: everything in this process's memory."""
        self.prefix = prefix
        self.replicas = replicas
        self._nc: Any = None  # a nats.aio.client.Client, once started
        self._logs: EventLog | None = None
        self._registry: SchemaRegistry | None = None
        self._latest: dict[str, tuple[float, SchemaVersion | None]] = {}
        if not servers:
            self._logs = MemoryEventLog(validate=self._validate)
            self._registry = SchemaRegistry(MemorySchemaStore())

    @property
    def logs(self) -> EventLog:
        """The event logs."""
        if self._logs is None:
            raise RuntimeError("EventSourcing.start() has not run")
        return self._logs

    @property
    def registry(self) -> SchemaRegistry:
        """The schema registry."""
        if self._registry is None:
            raise RuntimeError("EventSourcing.start() has not run")
        return self._registry

    async def start(self) -> None:
        """Connect to JetStream (when configured) and open the logs and the registry."""
        if not self.servers or self._nc is not None:
            return
        # Imported here: the in-memory default never loads the NATS client.
        import nats

        from airlane.eventlog.jetstream import JetStreamEventLog
        from airlane.registry.jetstream_store import JetStreamSchemaStore

        # Bounded: the client retries for ever, which a first connection that never succeeds
        # would turn into a start-up that hangs without a word.
        try:
            self._nc = await asyncio.wait_for(
                nats.connect(
                    list(self.servers),
                    name=f"airlane-{self.prefix}-events",
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    error_cb=_on_nats_error,
                ),
                CONNECT_TIMEOUT_S,
            )
        except TimeoutError:
            where = ", ".join(self.servers)
            raise EventLogUnavailable(
                f"cannot reach NATS at {where} within {CONNECT_TIMEOUT_S:g} s"
            ) from None
        upper = self.prefix.upper()
        self._logs = JetStreamEventLog(
            self._nc, stream=f"{upper}_LOGS", prefix=f"{self.prefix}.log", validate=self._validate
        )
        store = await JetStreamSchemaStore.open(
            self._nc.jetstream(), bucket=f"{upper}_SCHEMAS", replicas=self.replicas
        )
        self._registry = SchemaRegistry(store)

    async def aclose(self) -> None:
        """Disconnect (nothing to do in memory)."""
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):  # closing: whatever the client says
                await nc.drain()

    async def _validate(self, log: str, type: str, content_type: str, data: bytes) -> None:
        """The event logs' validator: the payload against the latest schema of the subject
        named like the type, in the log's tenant (`airlane.core.scope`)."""
        tenant, _ = split_scope(log)
        # A type that looks scoped is no subject name (a client's names hold no "@"): it must
        # not reach another tenant's subject.
        version = None if "@" in type else await self._schema_of(scoped(tenant, type))
        if version is None:
            if self.config.require_schema:
                raise UnknownEventType(
                    f"event type {type!r} has no schema in the registry (and this gateway "
                    "requires one)",
                    [],
                )
            return
        try:
            self.registry.validators.validate(version.schema, data, content_type)
        except SchemaViolation as exc:
            where = f"event type {type!r}: schema version {version.version}"
            raise SchemaViolation(f"{exc.message} ({where})", exc.errors) from None

    async def _schema_of(self, subject: str) -> SchemaVersion | None:
        now = time.monotonic()
        cached = self._latest.get(subject)
        if cached is not None and now - cached[0] < self.config.schema_cache_s:
            return cached[1]
        try:
            version: SchemaVersion | None = await self.registry.get(subject)
        except (SubjectNotFound, InvalidSubject):
            version = None  # an event type that cannot be a subject has no schema
        if len(self._latest) >= MAX_CACHED_TYPES:
            self._latest.clear()
        self._latest[subject] = (now, version)
        return version


async def _on_nats_error(exc: Exception) -> None:
    # The client reconnects by itself and requests made meanwhile fail with a clear error;
    # without this callback it would log a traceback for every failed reconnection attempt.
    log.debug("NATS (event logs): %r", exc)
