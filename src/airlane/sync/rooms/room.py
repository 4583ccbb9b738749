"""Rooms: shared state (an `LWWMap`) kept in a hub stream and served to clients.

A room named ``R`` is the hub stream ``rooms/R``, a log of records:

- ``{"ops": [op, ...], "at": ms}``: operations clients sent (`airlane.sync.ops.Op` dicts),
  and when the node that took them checked them;
- ``{"state": [op, ...], "version": {...}, "at": ms}``: a compacted state, the winning op of
  every key (tombstones included), written after every `RoomConfig.compact_every` operations.

Each op's stamp is held to the clock drift bound against the record's ``at`` (this node's
clock for a record without one), so every node takes or skips the same ops.

Every gateway node serving the room holds one replica of the map, fed by one subscription to
that stream: a client's operations are appended to the stream (after the node's replica checked
them), and every node applies and relays what the stream carries, so clients on any node (with
the JetStream hub) see one another's changes. Applying is a join (per key, the greatest op), so
re-reading records, duplicates and compactions written by several nodes at once are harmless.

A joining client gets the node's current state, then the operations that follow. Retention keeps
at least one compacted state: streams are made with room for ``4 x compact_every`` records.

A room's state is bounded (`RoomConfig.max_state_bytes`, its winning ops as JSON): a compacted
state is one hub event, and in a cluster one broker message; a state that could not be stored
would leave the stream to be trimmed past its last compaction. Ops that would grow it past the
bound are refused (``stream_too_large``); ops that shrink it (deletes, smaller values) are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from airlane.core import Event, Kind, Retention
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.scope import scoped, split_scope
from airlane.hub import Hub, HubError, StreamNotFound, Subscription
from airlane.sync.errors import SyncError
from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from airlane.sync.ops import Op

__all__ = ["Room", "RoomConfig", "RoomError", "Rooms"]

log = logging.getLogger("airlane.sync.rooms")

Listener = Callable[[list[dict[str, Any]]], None]
"""Called with the op dicts a room applied (one call per record); must not block."""


class RoomError(AirlaneError):
    """A request about a room was refused (``invalid_room_request``)."""

    code = ErrorCode.INVALID_ROOM_REQUEST


@dataclass(frozen=True, slots=True)
class RoomConfig:
    """Bounds and timers of the rooms a node serves."""

    max_rooms: int = 10_000
    """Rooms held open at once on this node."""
    max_ops_per_message: int = 1_000
    """Operations one client message may carry."""
    compact_every: int = 256
    """Operations after which the node appends a compacted state."""
    idle_close_s: float = 60.0
    """A room without clients for this long is closed here (its state stays in the hub)."""
    max_drift_ms: int = 60_000
    """Operations stamped further ahead of this node's clock are refused (HLC drift bound)."""
    max_state_bytes: int = 768 * 1024
    """A room's state at most: its winning ops (tombstones included) as JSON. A compacted
    state must fit in one broker message (nats-server's ``max_payload``, 1 MiB by default)."""


TAKE_WAIT_S = 5.0
"""How long a submit waits for this node's replica to take its stored record before it
answers anyway (the record is stored: only this node's view of it is late)."""


def _stream(name: str) -> str:
    # A room in a tenant's scope (airlane.core.scope) is a stream in the same scope.
    tenant, plain = split_scope(name)
    return scoped(tenant, f"rooms/{plain}")


class Room:
    """One room on this node: the replica, its listeners, the task following the stream."""

    def __init__(self, rooms: Rooms, name: str) -> None:
        self.rooms = rooms
        self.name = name
        self.clock = HybridClock(f"room:{rooms.node}", rooms.config.max_drift_ms)
        self.map = LWWMap(self.clock)
        self.listeners: set[Listener] = set()
        self.since_compaction = 0
        self.state_bytes = 0
        """The state's size: the JSON of every key's winning op (`RoomConfig.max_state_bytes`)."""
        self._sizes: dict[str, int] = {}  # key -> its winning op's JSON size
        self._growing = 0  # what submits under way may add to state_bytes
        self._taken_seq = 0
        self._taking: list[tuple[int, asyncio.Future[None]]] = []  # (seq, its submit), in order
        self.idle_since: float | None = time.monotonic()
        self._ready = asyncio.Event()
        self.lost = asyncio.Event()
        """Set when the room stopped following its stream (deleted, replaced, or the hub
        failed): its clients must reconnect, to the room opened again."""
        self._follower: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    async def open(self) -> None:
        """Create the stream if needed and start following it; returns once caught up."""
        hub = self.rooms.hub
        retention = Retention(max_events=4 * self.rooms.config.compact_every, ttl_s=None)
        await hub.create(_stream(self.name), retention=retention, exist_ok=True)
        self._subscription = await hub.subscribe(_stream(self.name))
        # Catch up synchronously with what is there, then follow in a task.
        while batch := self._subscription.poll(1024):
            self._take(batch)
        self._follower = asyncio.create_task(self._follow(), name=f"room {self.name}")
        self._ready.set()

    async def close(self) -> None:
        """Stop following (clients are dropped by their own transports)."""
        self._release_taken(everything=True)
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        if self._subscription is not None:
            await self._subscription.aclose()

    def state(self) -> dict[str, Any]:
        """What a joining client gets: every winning op and the replica's version."""
        return {
            "entries": [op.to_dict() for op in self.map.entries()],
            "version": self.map.version.to_dict(),
            "state": self.map.to_dict(),
        }

    async def submit(self, raw_ops: Any) -> int:
        """Check a client's operations and append them to the room's stream; returns how
        many. Nothing is appended if any is malformed or too far in the future."""
        if not isinstance(raw_ops, list) or not raw_ops:
            raise RoomError("'ops' must be a non-empty list of operations")
        if len(raw_ops) > self.rooms.config.max_ops_per_message:
            raise RoomError(f"at most {self.rooms.config.max_ops_per_message} ops per message")
        now_ms = time.time_ns() // 1_000_000
        try:
            ops = [Op.from_dict(item) for item in raw_ops]
            for op in ops:  # the drift bound, without applying: the stream is the truth
                self.clock.receive(op.stamp, now_ms)
        except SyncError as exc:
            raise RoomError(f"refused: {exc}") from None
        growth = self._check_growth(ops)
        # With the time they were accepted at: every node checks the drift bound against it,
        # and so reaches the same answer whatever its own clock says.
        record = {"ops": [op.to_dict() for op in ops], "at": now_ms}
        self._growing += growth
        try:
            stored = await self.rooms.hub.append(_stream(self.name), Event.message(record))
            # Answered once this node's replica has it: the next submit is checked against
            # a state that counts it, and a read here after the answer shows it.
            await self._taken(stored.seq)
        finally:
            self._growing -= growth
        return len(ops)

    async def _taken(self, seq: int) -> None:
        """Return once the follower has taken the record at ``seq`` (or the room is lost)."""
        if seq <= self._taken_seq or self.lost.is_set():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._taking.append((seq, waiter))
        with contextlib.suppress(TimeoutError):  # a stuck follower does not hold clients
            await asyncio.wait_for(waiter, TAKE_WAIT_S)

    def _release_taken(self, everything: bool = False) -> None:
        taking = self._taking
        while taking and (everything or taking[0][0] <= self._taken_seq):
            _, waiter = taking.pop(0)
            if not waiter.done():
                waiter.set_result(None)

    def _check_growth(self, ops: list[Op]) -> int:
        """How much ``ops`` would grow the state (as if each won its key: a loser changes
        nothing, so the bound errs on the safe side); refused if past the bound, counting
        what submits under way may add."""
        sizes: dict[str, int] = {}
        for op in ops:  # the last op of a key is the one that stays
            sizes[op.key] = len(orjson.dumps(op.to_dict()))
        growth = sum(size - self._sizes.get(key, 0) for key, size in sizes.items())
        limit = self.rooms.config.max_state_bytes
        held = self.state_bytes + max(0, self._growing)
        if growth > 0 and held + growth > limit:
            raise RoomError(
                f"the room's state would pass its bound of {limit} bytes "
                f"({held} now, {growth} more): delete keys or write smaller values",
                code=ErrorCode.STREAM_TOO_LARGE,
            )
        return max(0, growth)

    def _count(self, item: dict[str, Any], key: str) -> None:
        """``item`` (an op's dict) won ``key``: the state's size follows."""
        size = len(orjson.dumps(item))
        self.state_bytes += size - self._sizes.get(key, 0)
        self._sizes[key] = size

    async def _follow(self) -> None:
        assert self._subscription is not None
        why = "its stream ended"
        try:
            while batch := await self._subscription.next_batch(256):
                self._take(batch)
                await self._maybe_compact()
        except asyncio.CancelledError:
            raise
        except HubError as exc:
            why = f"the hub failed: {exc}"
        # Nothing more will reach this replica: forget the room, so that the next client
        # opens it again from the stream, and tell this one's clients to reconnect.
        log.warning("room %s stopped following its stream (%s); closing it", self.name, why)
        self.rooms.forget(self)
        self.lost.set()
        self._release_taken(everything=True)
        with contextlib.suppress(HubError, StreamNotFound):
            await self._subscription.aclose()  # (the hub frees a deleted stream's log then)

    def _take(self, batch: list[Event]) -> None:
        now_ms = time.time_ns() // 1_000_000
        for event in batch:
            if event.kind is not Kind.MESSAGE or event.data is None:
                continue
            record = event.data.get("payload")
            if not isinstance(record, dict):
                continue
            raw = record.get("ops") or record.get("state") or []
            # The drift bound against the clock of the node that accepted (or compacted) the
            # ops, which the record carries: a node whose own clock is behind must not skip
            # an op the others took, and an op appended to the stream directly, stamped far
            # ahead, is skipped by every node alike. (Records without it: this node's clock.)
            at = record.get("at")
            clock_ms = at if isinstance(at, int) and not isinstance(at, bool) else now_ms
            applied: list[dict[str, Any]] = []
            for item in raw:
                try:
                    op = Op.from_dict(item)
                    if self.map.apply(op, clock_ms):
                        applied.append(item)
                        self._count(item, op.key)
                except SyncError as exc:  # written by something else: skipped, not fatal
                    log.warning("room %s: skipping a stored op: %s", self.name, exc)
            if "state" in record:
                self.since_compaction = 0
            else:
                self.since_compaction += len(raw)
            if applied:
                for listener in tuple(self.listeners):
                    listener(applied)
        if batch:
            self._taken_seq = batch[-1].seq
            if self._taking:
                self._release_taken()

    async def _maybe_compact(self) -> None:
        if self.since_compaction < self.rooms.config.compact_every:
            return
        self.since_compaction = 0
        state = {
            "state": [op.to_dict() for op in self.map.entries()],
            "version": self.map.version.to_dict(),
            "at": time.time_ns() // 1_000_000,
        }
        with contextlib.suppress(HubError):
            await self.rooms.hub.append(_stream(self.name), Event.message(state))


class Rooms:
    """The rooms this node serves (opened on first use, closed when idle)."""

    def __init__(self, hub: Hub, *, node: str = "local", config: RoomConfig | None = None):
        self.hub = hub
        self.node = node
        self.config = config or RoomConfig()
        self._rooms: dict[str, Room] = {}
        self._opening: dict[str, asyncio.Future[Room]] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def room(self, name: str) -> Room:
        """The open room ``name`` (opened and caught up first if needed)."""
        room = self._rooms.get(name)
        if room is not None:
            return room
        pending = self._opening.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        if len(self._rooms) >= self.config.max_rooms:
            raise RoomError(f"this node serves {self.config.max_rooms} rooms, its limit")
        future: asyncio.Future[Room] = asyncio.get_running_loop().create_future()
        self._opening[name] = future
        room = Room(self, name)
        try:
            await room.open()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            del self._opening[name]
        self._rooms[name] = room
        future.set_result(room)
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(), name="rooms-reaper")
        return room

    async def state(self, name: str) -> dict[str, Any]:
        """A room's state (opening it here if needed); `StreamNotFound` never: rooms exist
        from their first use."""
        return (await self.room(name)).state()

    def forget(self, room: Room) -> None:
        """Stop serving ``room`` here (it lost its stream); the next use opens it again."""
        if self._rooms.get(room.name) is room:
            del self._rooms[room.name]

    def join(self, room: Room, listener: Listener) -> None:
        """Add a client's listener."""
        room.listeners.add(listener)
        room.idle_since = None

    def leave(self, room: Room, listener: Listener) -> None:
        """Remove a client's listener; the room idles when it has none."""
        room.listeners.discard(listener)
        if not room.listeners:
            room.idle_since = time.monotonic()

    async def aclose(self) -> None:
        """Close every room."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        rooms, self._rooms = list(self._rooms.values()), {}
        for room in rooms:
            with contextlib.suppress(HubError, StreamNotFound):
                await room.close()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.config.idle_close_s / 4))
            now = time.monotonic()
            for name, room in list(self._rooms.items()):
                idle = room.idle_since
                if idle is not None and now - idle >= self.config.idle_close_s:
                    del self._rooms[name]
                    with contextlib.suppress(HubError):
                        await room.close()
