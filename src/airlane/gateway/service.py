"""`Gateway`: the service layer, the only thing a transport calls.

A transport parses its wire, turns its credentials into a `Principal` with `authenticate`, and
calls these methods; the gateway authorizes every call through the security gate itself (a
transport cannot forget to), runs producers (backend -> hub) as tasks it owns, and never knows
which wire a request came from. What it raises is an `airlane.core.errors.AirlaneError` with a
stable code, which each transport reports through its one table.

- streams: `start_chat` (an OpenAI chat body: parsed, its orphan policy derived, generated),
  `generate`, `start_loadtest` / `loadtest`, `subscribe` (from the start or after a resume
  position), `publish`, `create_named`, `cancel`, `delete`, `info`, `snapshot`;
- `logs` (`EventLogs`), `schemas` (`Schemas`), `rooms` (`SharedRooms`), `artifacts`
  (`Artifacts`): the other services, each authorizing its own calls;
- `health` and `stats` for probes and metrics; `resolve_conflicts` asks the backend's model to
  settle semantic merge conflicts (`airlane.gateway.arbiter`).

A producer iterates the backend's stream and appends each batch, or, where the backend offers a
feed for the request and the hub an appender for the stream, runs the feed into the appender
(`airlane.backends.base.Feed`): the same events, with no task step per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airlane.backends.base import (
    AdmittingBackend,
    Backend,
    BackendError,
    Feed,
    FeedingBackend,
    GenerationRequest,
    LoadTestSpec,
)
from airlane.core import (
    Event,
    OrphanMode,
    OrphanPolicy,
    Position,
    Retention,
    StreamInfo,
    StreamTooLarge,
)
from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.core.events import TERMINAL_KINDS
from airlane.core.scope import split_scope
from airlane.gateway.artifacts import Artifacts
from airlane.gateway.authguard import AuthGuard
from airlane.gateway.chat_request import ChatRequest, parse_chat_request
from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.feeding import run_held_back
from airlane.gateway.logs import EventLogs
from airlane.gateway.metered import MeteredSubscription
from airlane.gateway.quotas import Quotas
from airlane.gateway.rooms import SharedRooms
from airlane.gateway.rules import RulesConfig, RuleService
from airlane.gateway.schemas import Schemas
from airlane.gateway.tenancy import (
    client_info,
    client_names,
    finding,
    hub_key,
    scope_of,
    scoped_name,
)
from airlane.gateway.tickets import Tickets
from airlane.hub import (
    Hub,
    HubError,
    HubFull,
    HubStats,
    HubUnavailable,
    StreamEnded,
    StreamNotFound,
    Subscription,
)
from airlane.runtime.eager import start_eagerly
from airlane.security import (
    Action,
    AllowAll,
    Principal,
    RequestFacts,
    SecurityError,
    SecurityPolicy,
    Unauthenticated,
)
from airlane.security.audit import AuditedPolicy, AuditLog
from airlane.security.rbac import RbacPolicy
from airlane.wire.limits import MAX_EVENT_BYTES, publishable

if TYPE_CHECKING:  # the arbiter's machinery loads only when a conflict is settled
    from airlane.security.tls import PeerIdentity
    from airlane.sync.semantic import Edit, SemanticMap

__all__ = [
    "DEFAULT_MAX_GENERATIONS",
    "LOADTEST_MODEL",
    "LOADTEST_ORPHAN",
    "Chat",
    "Gateway",
    "GatewayConfig",
    "new_generation_id",
    "orphan_policy_from",
    "reader_name",
]

log = logging.getLogger("airlane.gateway")

DEFAULT_MAX_GENERATIONS = 20_000
"""Producers running at once; one more is refused (``hub_full``) rather than queued."""
END_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Waits between tries to store the error that ends a stream while the hub is away (about
15 s in all, past which the end is given up and logged)."""
LOADTEST_MODEL = "airlane-loadtest"
"""The model name of a load-test generation."""
PRODUCER_BACKLOG = 1024
"""Events a producer may have appended ahead of what the hub has stored (a hub that stores
elsewhere; the memory hub stores at once): past it, the producer is held back."""
LOADTEST_ORPHAN = OrphanPolicy(OrphanMode.CANCEL)
"""A load-test stream nobody reads is cancelled at once: it exists only for its reader."""


def new_generation_id() -> str:
    """A fresh stream id for a chat completion, in OpenAI's ``chatcmpl-`` style."""
    return f"chatcmpl-{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat completion that has started: the request as parsed, and its stream."""

    request: ChatRequest
    """What the client asked for (``stream``, ``include_usage``, the generation)."""
    info: StreamInfo
    """The stream its events go to."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Gateway-wide defaults."""

    orphan: OrphanPolicy = field(default_factory=OrphanPolicy)
    """Orphan policy of generations that do not ask for another."""
    retention: Retention | None = None
    """Retention of new streams; None uses the hub's default."""
    max_generations: int = DEFAULT_MAX_GENERATIONS
    """Producers running at once."""
    max_event_bytes: int = MAX_EVENT_BYTES
    """The most bytes an event a client publishes may hold (`airlane.wire.limits`)."""


def reader_name(principal: Principal, label: str | None) -> str:
    """How the usage ledger names a reader: the principal's name, followed by the label it
    gives (``alice/dashboard``) when it gives one. Only without authentication (anonymous)
    is a label the whole name: no reader can put its reading on another principal's name."""
    if not label or label == principal.name:
        return principal.name
    label = label[:64]
    return label if principal.via == "anonymous" else f"{principal.name}/{label}"


_ANNOUNCEMENTS = "artifacts/"
"""The streams the artifact store announces versions on (`airlane.artifacts.service`)."""


class Gateway:
    """The service layer. See the module docstring."""

    def __init__(
        self,
        hub: Hub,
        backend: Backend,
        *,
        security: SecurityPolicy | None = None,
        config: GatewayConfig | None = None,
        events: EventSourcing | None = None,
        audit: AuditLog | None = None,
        quotas: Quotas | None = None,
        auth_guard: AuthGuard | None = None,
        tickets: Tickets | None = None,
        rules: RulesConfig | None = None,
    ) -> None:
        self.hub = hub
        """Where streams live (for the composition root and tests: transports call the
        methods here instead)."""
        self.backend = backend
        """Where tokens come from."""
        self.audit = audit or AuditLog()
        """Refusals and admin actions, recorded (`airlane.security.audit`)."""
        self.security = AuditedPolicy(security or AllowAll(), self.audit)
        """The one security gate every method asks (its refusals audited); the policy itself
        is ``security.policy``."""
        self.config = config or GatewayConfig()
        self.events = events or EventSourcing()
        """Event logs and the schema registry (in memory unless given)."""
        self.quotas = quotas or Quotas()
        """What each principal and tenant may ask of this node."""
        self.logs = EventLogs(self.events, self.security, self.quotas)
        """The event logs and consumer groups (`airlane.gateway.logs`)."""
        self.schemas = Schemas(self.events, self.security)
        """The schema registry (`airlane.gateway.schemas`)."""
        self.rooms = SharedRooms(hub, self.security, node=getattr(hub, "node", "local"))
        """LWW rooms and Yjs documents kept in the hub (`airlane.gateway.rooms`)."""
        self.artifacts = Artifacts(self.security, self.quotas)
        """The model artifact store, when the composition root gives one
        (`airlane.gateway.artifacts`)."""
        self.auth_guard = auth_guard or AuthGuard()
        """Failed authentications per client address (`airlane.gateway.authguard`)."""
        # Request facts (headers decoded, credentials left out) are made per request only
        # where a policy file's rules can look at them.
        self._rules_see_requests = isinstance(self.security.policy, RbacPolicy)
        self.tickets = tickets or Tickets()
        """Short-lived credentials for WebSocket and EventSource clients."""
        self.rules = RuleService(self, rules)
        """Streaming SQL rules over topics, logs and streams (`airlane.gateway.rules`)."""
        self.started = time.monotonic()
        self._producers: set[asyncio.Task[None]] = set()
        self._starting = 0
        """Generations whose stream is being created (not yet producing)."""
        self._feeding = backend if isinstance(backend, FeedingBackend) else None
        self._admit = backend.admit if isinstance(backend, AdmittingBackend) else None

    async def start(self) -> None:
        """Start the hub's background work, then the event logs and the registry."""
        await self.hub.start()
        await self.events.start()
        await self.artifacts.start()
        await self.rules.start()

    async def aclose(self) -> None:
        """Stop the rules and every producer, then the hub and the backend."""
        await self.rules.aclose()
        producers = list(self._producers)
        for task in producers:
            task.cancel()
        for task in producers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.rooms.aclose()
        await self.artifacts.aclose()
        await self.logs.aclose()
        await self.hub.aclose()
        await self.events.aclose()
        await self.backend.aclose()

    @property
    def running_generations(self) -> int:
        """Producers running now."""
        return len(self._producers)

    def load(self) -> int:
        """How many streams this process produces, counting those it is starting: what the
        workers of ``airlane serve --workers`` compare to place new ones
        (`airlane.runtime.loadboard`)."""
        return len(self._producers) + self._starting

    def stats(self) -> HubStats:
        """The hub's counters (streams, subscribers, events), for metrics."""
        return self.hub.stats()

    def health(self) -> dict[str, object]:
        """What a liveness probe reports: this process, its streams and its backend."""
        stats = self.hub.stats()
        return {
            "status": "ok",
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "streams": stats.streams,
            "subscribers": stats.subscribers,
            "generations": self.running_generations,
            "backend": self.backend.name,
        }

    # -- who is asking ----------------------------------------------------------------------

    def authenticate(
        self,
        bearer: str | None,
        peer: PeerIdentity | None = None,
        *,
        ticket: str | None = None,
        origin: str | None = None,
        request: Callable[[], RequestFacts] | None = None,
    ) -> Principal:
        """The principal behind a ticket (`issue_ticket`), a bearer token (None: none was
        sent), or the client certificate a TLS listener verified (``peer``), in that order;
        `Unauthenticated` if the gate refuses it (audited, with ``origin``: the client's
        address, which the principal carries too, as it carries ``request()``: what the
        transport knows of the request, made only where a policy file's rules can match it)."""
        try:
            self.auth_guard.check(origin)
            try:
                if ticket is not None:
                    principal = self.tickets.principal(ticket)
                else:
                    principal = self.security.authenticate(bearer, peer)
            except Unauthenticated:
                self.auth_guard.failed(origin)
                raise
            self.quotas.admit(principal)
        except AirlaneError as exc:
            self.audit.record("deny", exc.code.value, reason=str(exc), origin=origin)
            raise
        facts = request() if request is not None and self._rules_see_requests else None
        if origin is None and facts is None:
            return principal
        return replace(principal, origin=origin, request=facts)

    def issue_ticket(self, principal: Principal) -> tuple[str, float]:
        """A short-lived ticket standing for ``principal`` (for a WebSocket or EventSource
        URL, where headers cannot be set), and its lifetime in seconds."""
        return self.tickets.issue(principal), self.tickets.ttl_s

    # -- chats and generations --------------------------------------------------------------

    async def start_chat(self, principal: Principal, body: Any) -> Chat:
        """Start the chat completion an OpenAI request ``body`` asks for: parsed
        (`InvalidChatRequest` names a bad parameter), its orphan policy derived
        (``airlane.orphan``), and generated into a new stream."""
        request = parse_chat_request(body)
        orphan = orphan_policy_from(request.orphan, self.config.orphan)
        info = await self.generate(principal, request.generation, orphan=orphan)
        return Chat(request, info)

    @staticmethod
    def loadtest_spec(
        chunks: Any = 200, mode: Any = "burst", interval_ms: Any = 20.0, varied: Any = False
    ) -> LoadTestSpec:
        """The benchmark workload a client asks for, within the limits every wire applies
        (`BadRequest` says which value is out of range)."""
        try:
            return LoadTestSpec.checked(chunks, mode, interval_ms, varied)
        except ValueError as exc:
            raise BadRequest(str(exc), param="loadtest") from None

    async def start_loadtest(
        self, principal: Principal, spec: LoadTestSpec, *, orphan: str | None = "cancel"
    ) -> StreamInfo:
        """A synthetic stream of the seed's benchmark chunks; ``orphan`` as a client names it
        (the default cancels it once nobody reads it)."""
        try:
            policy = orphan_policy_from(orphan, self.config.orphan)
        except ValueError:
            raise BadRequest(
                "'orphan' must be 'keep', 'grace' or 'cancel'", param="orphan"
            ) from None
        generation = GenerationRequest(model=LOADTEST_MODEL, loadtest=spec)
        return await self.generate(principal, generation, orphan=policy)

    @contextlib.asynccontextmanager
    async def loadtest(
        self, principal: Principal, spec: LoadTestSpec
    ) -> AsyncIterator[tuple[str, Subscription]]:
        """A fresh load-test stream and its one reader; the stream is deleted afterwards,
        since nobody else can want its chunks (keeping them would grow memory with every
        benchmark)."""
        info = await self.start_loadtest(principal, spec)
        try:
            async with await self.subscribe(principal, info.stream_id) as subscription:
                yield info.stream_id, subscription
        finally:
            with contextlib.suppress(StreamNotFound):
                await self.delete(principal, info.stream_id)

    # -- streams ----------------------------------------------------------------------------

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
        key = hub_key(principal, stream_id)
        self.security.authorize(principal, Action.GENERATE, stream_id)
        if len(self._producers) >= self.config.max_generations:
            raise HubFull(f"{self.config.max_generations} generations are running, the limit")
        if self._admit is not None:
            self._admit(request)  # a backend that is full says so before the stream exists
        release = self.quotas.start_stream(principal)
        self._starting += 1
        try:
            with client_names(key, stream_id):
                info = await self.hub.create(
                    key, retention=self.config.retention, orphan=orphan or self.config.orphan
                )
        except BaseException:
            release()
            raise
        finally:
            self._starting -= 1
        # The producer's first steps run here, in the request's own loop turn: its first batch
        # and its pacing clock start with its setup, not after every other request that
        # arrived in the same turn (which would also put all their paced deadlines in step).
        producing = self._produce(key, request)
        if self.quotas.counts_tokens:
            producing = self._charged(principal, key, producing)
        task = start_eagerly(producing, name=f"produce {key}")
        if task is None:  # it ran to its end in its first steps
            release()
        else:
            self._producers.add(task)
            task.add_done_callback(self._producers.discard)
            task.add_done_callback(lambda _: release())
            self.hub.on_cancel(key, task.cancel)
        return client_info(info, stream_id)

    async def _read_key(self, principal: Principal, stream_id: str) -> str:
        """Where ``principal`` reads ``stream_id``: its tenant's stream, except that a shared
        artifact's announcements (``artifacts/<name>``, where the tenant has no artifact of
        that name) are read where the store announces them, in no tenant's scope."""
        key = hub_key(principal, stream_id)
        if key == stream_id or not stream_id.startswith(_ANNOUNCEMENTS):
            return key
        try:
            await self.hub.info(key)
        except StreamNotFound:
            return stream_id
        return key

    async def subscribe(
        self,
        principal: Principal,
        stream_id: str,
        *,
        resume: Position | None = None,
        subscriber: str | None = None,
    ) -> Subscription:
        """A cursor on ``stream_id``, after ``resume`` if given (another epoch's position
        starts over with a snapshot); ``subscriber`` labels the reader in the usage ledger
        (`reader_name`)."""
        key = await self._read_key(principal, stream_id)
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        metered = self.quotas.counts_bytes
        if metered:
            self.quotas.check_bytes(principal)
        with finding(self.security, principal, Action.SUBSCRIBE, key, stream_id):
            subscription = await self.hub.subscribe(
                key, resume=resume, subscriber=reader_name(principal, subscriber)
            )
        if metered:
            return MeteredSubscription(subscription, self.quotas, principal)
        return subscription

    async def publish(self, principal: Principal, stream_id: str, event: Event) -> Event:
        """Append an application event to a named stream, creating the stream if needed;
        refused when it passes a limit of `airlane.wire.limits` (too deep, too large)."""
        key = hub_key(principal, stream_id)
        self.security.authorize(principal, Action.PUBLISH, stream_id)
        event = publishable(event, self.config.max_event_bytes)
        with finding(self.security, principal, Action.PUBLISH, key, stream_id):
            try:
                return await self.hub.append(key, event)
            except StreamNotFound:
                await self.hub.create(key, retention=self.config.retention, exist_ok=True)
                return await self.hub.append(key, event)

    async def create_named(
        self, principal: Principal, stream_id: str, *, exist_ok: bool = False
    ) -> StreamInfo:
        """Create a named stream (agent events, rooms) that clients publish to."""
        key = hub_key(principal, stream_id)
        self.security.authorize(principal, Action.PUBLISH, stream_id)
        with client_names(key, stream_id):
            info = await self.hub.create(key, retention=self.config.retention, exist_ok=exist_ok)
        return client_info(info, stream_id)

    async def delete(self, principal: Principal, stream_id: str) -> None:
        """End the stream if it is running, then forget it."""
        key = hub_key(principal, stream_id)
        self.security.authorize(principal, Action.DELETE, stream_id)
        with finding(self.security, principal, Action.DELETE, key, stream_id):
            await self.hub.delete(key)
        self.security.admin(principal, "delete_stream", stream_id)

    async def cancel(self, principal: Principal, stream_id: str) -> bool:
        """Stop the producer and end the stream with ``done(cancelled)``."""
        key = hub_key(principal, stream_id)
        self.security.authorize(principal, Action.CANCEL, stream_id)
        with finding(self.security, principal, Action.CANCEL, key, stream_id):
            return await self.hub.cancel(key)

    async def info(self, principal: Principal, stream_id: str) -> StreamInfo:
        """A stream's status."""
        key = await self._read_key(principal, stream_id)
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        with finding(self.security, principal, Action.SUBSCRIBE, key, stream_id):
            return client_info(await self.hub.info(key), stream_id)

    async def owner(self, principal: Principal, stream_id: str) -> str | None:
        """The sibling process that produces ``principal``'s stream ``stream_id`` (`Hub.owner`),
        where a reader is better served. Says nothing of whether ``principal`` may read it
        (the owner checks, as here)."""
        return await self.hub.owner(hub_key(principal, stream_id))

    def cluster(self) -> dict[str, object]:
        """The gateway nodes sharing this hub, as this node knows them (one node, itself,
        without a shared hub)."""
        nodes = self.hub.nodes()
        return {"shared": bool(nodes), "nodes": nodes or [{"node": "this", "self": True,
                "alive": True, "heard_s_ago": 0.0, "producing": self.running_generations,
                "streams": [], "readers": self.hub.stats().subscribers}]}  # fmt: skip

    async def list_streams(
        self, principal: Principal, *, prefix: str = "", limit: int = 100
    ) -> list[StreamInfo]:
        """The streams of the caller's tenant that this node holds and the caller may read,
        newest first, at most ``limit``, with ids starting with ``prefix``. The check is the
        policy's own, not audited: a list asks for nothing, so what it leaves out is no
        refusal (reading one of them is checked, and audited, as always)."""
        tenant = scope_of(principal)

        def readable(key: str) -> bool:
            owner, name = split_scope(key)
            if owner != tenant:
                return False
            try:
                self.security.policy.authorize(principal, Action.SUBSCRIBE, name)
            except SecurityError:  # not this caller's to read
                return False
            return True

        infos = await self.hub.stream_infos(scoped_name(principal, prefix), limit, readable)
        return [client_info(info, split_scope(info.stream_id)[1]) for info in infos]

    async def snapshot(self, principal: Principal, stream_id: str) -> Event:
        """Everything a stream carried so far, as one snapshot event."""
        key = await self._read_key(principal, stream_id)
        self.security.authorize(principal, Action.SUBSCRIBE, stream_id)
        with finding(self.security, principal, Action.SUBSCRIBE, key, stream_id):
            return await self.hub.snapshot(key)

    # -- producing --------------------------------------------------------------------------

    async def _charged(
        self, principal: Principal, key: str, producing: Coroutine[Any, Any, None]
    ) -> None:
        """Run ``producing``, then charge its completion tokens to the tenant's quota."""
        try:
            await producing
        finally:
            with contextlib.suppress(HubError):
                usage = (await self.hub.info(key)).usage or {}
                self.quotas.charge_tokens(principal, int(usage.get("completion_tokens", 0)))

    async def _produce(self, stream_id: str, request: GenerationRequest) -> None:
        """Copy the backend's events into the stream; always leave it ended."""
        terminal_seen = False
        try:
            fed = self._feed(stream_id, request)
            if fed is not None:
                feed, appender = fed
                hub = self.hub
                await run_held_back(
                    feed, appender, lambda n: hub.settle(stream_id, backlog=n), PRODUCER_BACKLOG
                )
                await hub.settle(stream_id)  # everything it appended is stored
                # A feed's last batch ends with its terminal event, so this append is refused
                # (StreamEnded, below); it ends the stream only if a feed broke that rule.
                await self.hub.append(stream_id, Event.done("stop"))
                return
            # aclosing: however we leave the loop, the backend's iterator is closed now, which
            # is what aborts an upstream request.
            append_many = self.hub.append_many
            # Where the hub queues appends for storing elsewhere (JetStream), the backend is
            # read on while earlier batches are stored, and what it yields meanwhile goes
            # out together; settling bounds how far it runs ahead.
            queued = self.hub.appender(stream_id)
            settle = self.hub.settle
            async with contextlib.aclosing(self.backend.stream(request)) as batches:
                async for batch in batches:
                    # One hub call per batch: the per-append work is paid once per batch.
                    if queued is None:
                        await append_many(stream_id, batch)
                    else:
                        queued(batch)
                        await settle(stream_id, backlog=PRODUCER_BACKLOG)
                    if batch and batch[-1].kind in TERMINAL_KINDS:  # Event.terminal, inlined
                        terminal_seen = True
                        break
            if queued is not None:
                await settle(stream_id)  # everything appended is stored (or this raises)
            if not terminal_seen:
                await self.hub.append(stream_id, Event.done("stop"))
        except StreamEnded:
            # Cancelled or deleted while producing, or the backend put events after its
            # terminal one (the hub refuses them): the stream already has its end.
            pass
        except StreamTooLarge:
            # The generation reached the stream's text limit: it ends there, as at max_tokens
            # (the batch that passed it is not stored; the backend's iterator is closed).
            with contextlib.suppress(StreamEnded, StreamNotFound):
                await self.hub.append(stream_id, Event.done("length"))
        except BackendError as exc:
            await self._end_with_error(stream_id, Event.error(exc.message, code=exc.code.value))
        except HubError as exc:
            # The stream store refused or stayed away (a broker gone for longer than the
            # hub's unavailable_after_s): not the backend's failure, and said as such.
            log.warning("stream %s: the hub stopped the generation: %s", stream_id, exc)
            await self._end_with_error(stream_id, Event.error(str(exc), code=exc.code.value))
        except asyncio.CancelledError:
            # Cancel reached us through the hub (the stream has ended) or the gateway is
            # shutting down; either way the backend iterator was closed, aborting upstream.
            raise
        except Exception:
            log.exception("backend %s failed on stream %s", self.backend.name, stream_id)
            await self._end_with_error(
                stream_id,
                Event.error("the backend failed unexpectedly", code=ErrorCode.INTERNAL_ERROR.value),
            )

    def _feed(
        self, stream_id: str, request: GenerationRequest
    ) -> tuple[Feed, Callable[[Sequence[Event]], int]] | None:
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
        """Append the error that ends a stream whose producer failed. While the hub is away
        this is retried (bounded): a stream left without an end would keep its readers
        waiting, and no other node ends a stream whose producer's node is alive."""
        for delay in (0.0, *END_RETRY_DELAYS_S):
            await asyncio.sleep(delay)
            try:
                await self.hub.append(stream_id, event)
                return
            except (StreamEnded, StreamNotFound):
                return
            except HubUnavailable:
                continue
        log.error("stream %s: could not store its end (the hub stayed away)", stream_id)

    # -- shared state ------------------------------------------------------------------------

    async def resolve_conflicts(
        self, semantic: SemanticMap, now_ms: int, *, model: str, timeout_s: float = 60.0
    ) -> list[Edit]:
        """Settle ``semantic``'s merge conflicts with the model behind this gateway's backend
        (`airlane.gateway.arbiter`); the decision edits, already applied, to send to the
        other replicas. A model that fails or stays silent leaves them to last-writer-wins."""
        from airlane.gateway.arbiter import resolve_with_backend

        return await resolve_with_backend(
            semantic, self.backend, now_ms, model=model, timeout_s=timeout_s
        )


def orphan_policy_from(name: str | None, default: OrphanPolicy) -> OrphanPolicy:
    """Parse a client's orphan policy choice (``keep``, ``grace``, ``cancel``); a
    `ValueError` for anything else."""
    if not name:
        return default
    return OrphanPolicy(OrphanMode(name), grace_s=default.grace_s, keep_s=default.keep_s)
