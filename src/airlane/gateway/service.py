"""The gateway service: what every transport calls.

`Gateway` joins a hub, a backend, the security gate and the event sourcing services (event logs
and the schema registry: `airlane.gateway.eventsourcing`). Transports parse their wire, build a
`Principal` and call these methods; the gateway checks the gate, runs producers (backend ->
hub) as tasks it owns, and never knows which wire a request came from. A producer iterates
the backend's stream and appends each batch, or, where the backend offers a feed for the
request and the hub an appender for the stream, runs the feed into the appender
(`airlane.backends.base.Feed`): the same events, with no task step per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airlane.backends.base import (
    Backend,
    BackendError,
    Feed,
    FeedingBackend,
    GenerationRequest,
)
from airlane.core import Event, OrphanMode, OrphanPolicy, Position, Retention
from airlane.core.events import TERMINAL_KINDS
from airlane.gateway.eventsourcing import EventSourcing
from airlane.hub import Hub, HubFull, StreamEnded, StreamInfo, StreamNotFound, Subscription
from airlane.runtime.eager import start_eagerly
from airlane.security import Action, AllowAll, Principal, SecurityPolicy
from airlane.sync.rooms import Rooms

if TYPE_CHECKING:  # the service loads only where a store is configured
    from airlane.artifacts.service import ArtifactService

__all__ = ["DEFAULT_MAX_GENERATIONS", "Gateway", "GatewayConfig", "new_generation_id"]

log = logging.getLogger("airlane.gateway")

DEFAULT_MAX_GENERATIONS = 20_000
"""Producers running at once; one more is refused with HTTP 503 rather than queued."""


def new_generation_id() -> str:
    """A fresh stream id for a chat completion, in OpenAI's ``chatcmpl-`` style."""
    return f"chatcmpl-{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Gateway-wide defaults."""

    orphan: OrphanPolicy = field(default_factory=OrphanPolicy)
    """Orphan policy of generations that do not ask for another."""
    retention: Retention | None = None
    """Retention of new streams; None uses the hub's default."""
    max_generations: int = DEFAULT_MAX_GENERATIONS
    """Producers running at once."""


class Gateway:
    """Hub + backend + security gate. See the module docstring."""

    def __init__(
        self,
        hub: Hub,
        backend: Backend,
        *,
        security: SecurityPolicy | None = None,
        config: GatewayConfig | None = None,
        events: EventSourcing | None = None,
    ) -> None:
        self.hub = hub
        self.backend = backend
        self.events = events or EventSourcing()
        """Event logs and the schema registry (in memory unless given)."""
        self.rooms = Rooms(hub, node=getattr(hub, "node", "local"))
        """Shared-state rooms kept in the hub (`airlane.sync.rooms`)."""
        self.artifacts: ArtifactService | None = None
        """The artifact store served under ``/v1/artifacts`` and its announcements, when the
        composition root configured one (`airlane.artifacts.service`)."""
        self.security: SecurityPolicy = security or AllowAll()
        self.config = config or GatewayConfig()
        self._producers: set[asyncio.Task[None]] = set()
        self._feeding = backend if isinstance(backend, FeedingBackend) else None

    async def start(self) -> None:
        """Start the hub's background work, then the event logs and the registry."""
        await self.hub.start()
        await self.events.start()
        if self.artifacts is not None:
            await self.artifacts.start()

    async def aclose(self) -> None:
        """Stop every producer, then the hub and the backend."""
        producers = list(self._producers)
        for task in producers:
            task.cancel()
        for task in producers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.rooms.aclose()
        if self.artifacts is not None:
            await self.artifacts.aclose()
        await self.hub.aclose()
        await self.events.aclose()
        await self.backend.aclose()

    @property
    def running_generations(self) -> int:
        """Producers running now."""
        return len(self._producers)

    # -- the operations ---------------------------------------------------------------------

    async def generate(
        self,
        principal: Principal,
        request: GenerationRequest,
        *,
        stream_id: str | None = None,
        orphan: OrphanPolicy | None = None,
    ) -> StreamInfo:
        """Create a stream and start producing it from the backend."""
        stream_id = stream_id or new_generation_id()
        self.security.authorize(principal, Action.GENERATE, stream_id)
        if len(self._producers) >= self.config.max_generations:
            raise HubFull(f"{self.config.max_generations} generations are running, the limit")
        info = await self.hub.create(
            stream_id, retention=self.config.retention, orphan=orphan or self.config.orphan
        )
        # The producer's first steps run here, in the request's own loop turn: its first batch
        # and its pacing clock start with its setup, not after every other request that
        # arrived in the same turn (which would also put all their paced deadlines in step).
        task = start_eagerly(self._produce(stream_id, request), name=f"produce {stream_id}")
        if task is not None:
            self._producers.add(task)
            task.add_done_callback(self._producers.discard)
            self.hub.on_cancel(stream_id, task.cancel)
        return info

    async def subscribe(
        self,
        principal: Principal,
        stream_id: str,
        *,
        resume: Position | None = None,
        subscriber: str | None = None,
    ) -> Subscription:
        """A cursor on ``stream_id``, after ``resume`` if given."""
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        return await self.hub.subscribe(stream_id, resume=resume, subscriber=subscriber)

    async def publish(self, principal: Principal, stream_id: str, event: Event) -> Event:
        """Append an application event to a named stream, creating the stream if needed."""
        self.security.authorize(principal, Action.PUBLISH, stream_id)
        try:
            return await self.hub.append(stream_id, event)
        except StreamNotFound:
            await self.hub.create(stream_id, retention=self.config.retention, exist_ok=True)
            return await self.hub.append(stream_id, event)

    async def create_named(
        self, principal: Principal, stream_id: str, *, exist_ok: bool = False
    ) -> StreamInfo:
        """Create a named stream (agent events, rooms) that clients publish to."""
        self.security.authorize(principal, Action.PUBLISH, stream_id)
        return await self.hub.create(stream_id, retention=self.config.retention, exist_ok=exist_ok)

    async def delete(self, principal: Principal, stream_id: str) -> None:
        """End the stream if it is running, then forget it."""
        self.security.authorize(principal, Action.CANCEL, stream_id)
        await self.hub.delete(stream_id)

    async def cancel(self, principal: Principal, stream_id: str) -> bool:
        """Stop the producer and end the stream with ``done(cancelled)``."""
        self.security.authorize(principal, Action.CANCEL, stream_id)
        return await self.hub.cancel(stream_id)

    async def info(self, principal: Principal, stream_id: str) -> StreamInfo:
        """A stream's status."""
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        return await self.hub.info(stream_id)

    async def snapshot(self, principal: Principal, stream_id: str) -> Event:
        """Everything a stream carried so far, as one snapshot event."""
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        return await self.hub.snapshot(stream_id)

    # -- producing --------------------------------------------------------------------------

    async def _produce(self, stream_id: str, request: GenerationRequest) -> None:
        """Copy the backend's events into the stream; always leave it ended."""
        terminal_seen = False
        try:
            fed = self._feed(stream_id, request)
            if fed is not None:
                feed, sink = fed
                await feed.run(sink)
                # A feed's last batch ends with its terminal event, so this append is refused
                # (StreamEnded, below); it ends the stream only if a feed broke that rule.
                await self.hub.append(stream_id, Event.done("stop"))
                return
            # aclosing: however we leave the loop, the backend's iterator is closed now, which
            # is what aborts an upstream request.
            append_many = self.hub.append_many
            async with contextlib.aclosing(self.backend.stream(request)) as batches:
                async for batch in batches:
                    # One hub call per batch: the per-append work is paid once per batch.
                    await append_many(stream_id, batch)
                    if batch and batch[-1].kind in TERMINAL_KINDS:  # Event.terminal, inlined
                        terminal_seen = True
                        break
            if not terminal_seen:
                await self.hub.append(stream_id, Event.done("stop"))
        except StreamEnded:
            # Cancelled or deleted while producing, or the backend put events after its
            # terminal one (the hub refuses them): the stream already has its end.
            pass
        except BackendError as exc:
            await self._end_with_error(stream_id, Event.error(exc.message, code=exc.code))
        except asyncio.CancelledError:
            # Cancel reached us through the hub (the stream has ended) or the gateway is
            # shutting down; either way the backend iterator was closed, aborting upstream.
            raise
        except Exception:
            log.exception("backend %s failed on stream %s", self.backend.name, stream_id)
            await self._end_with_error(
                stream_id, Event.error("the backend failed unexpectedly", code="internal_error")
            )

    def _feed(
        self, stream_id: str, request: GenerationRequest
    ) -> tuple[Feed, Callable[[Sequence[Event]], None]] | None:
        """The backend's feed for ``request`` and the hub's appender for the stream, where
        both exist."""
        if self._feeding is None:
            return None
        sink = self.hub.appender(stream_id)
        if sink is None:
            return None
        feed = self._feeding.feed(request)
        return None if feed is None else (feed, sink)

    async def _end_with_error(self, stream_id: str, event: Event) -> None:
        with contextlib.suppress(StreamEnded, StreamNotFound):
            await self.hub.append(stream_id, event)


def orphan_policy_from(name: str | None, default: OrphanPolicy) -> OrphanPolicy:
    """Parse a client's orphan policy choice (``keep``, ``grace``, ``cancel``)."""
    if not name:
        return default
    return OrphanPolicy(OrphanMode(name), grace_s=default.grace_s, keep_s=default.keep_s)
