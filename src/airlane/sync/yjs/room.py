"""`YRoom`: one shared Yjs document on one node, served over the hub. The rooms of a node are
`airlane.sync.yjs.rooms.YRooms`.

Theory of operation
-------------------
A room ``R`` holds one pycrdt `Doc`, one pycrdt `Awareness`, its peers, and two hub cursors:
on ``yjs/R`` (the document) and ``yjs-awareness/R`` (presence); the record layout is
`airlane.sync.yjs.records`. Every node that has the room open follows the same streams, so a
change made on any node reaches every peer on every node, in memory (`MemoryHub`) or through
NATS JetStream.

Opening. The room reads the document stream from the start up to its last seq at that moment
and applies the ``state`` record that covers the most, then every record after the seq that
state covers, in order, wherever the state itself was written (a state covers what its writer
had followed, which may end well before the state's own position, and the records in between
may be other nodes' changes). The same cursor then follows the stream live.

A peer's change (sync step 2 or update) is applied to the document; what actually changed (the
update pycrdt's observer emits, empty for a change the room already had, deferred for one whose
dependencies have not arrived) is sent to the room's other peers and appended to the hub as an
``update`` record. If the hub refuses that append, the room closes (its peers get
``room_unavailable`` and reconnect): a document holding what its stream lacks would serve it on
this node only. The follower skips the room's own records (``origin``) and applies the
others' records to the document, sending what changed to the local peers.

Size. A document is bounded (`YRoomsConfig.max_document_bytes`): its state record is one hub
event, and in a cluster one broker message. Encoding the state to measure it costs O(document),
so the room keeps an estimate: the size it last measured (on loading, at each compaction) plus
the growth of every change applied since (`airlane.sync.yjs.growth`: a change's new structs,
and a few dozen bytes per newly deleted range), plus whatever pycrdt holds apart waiting for
what precedes it. A peer's change is checked before it is applied, so a refused one is in
neither the document nor the stream: a change that fits with room to spare passes on its size
alone; near the bound its growth is worked out (ranges the document has already deleted count
nothing: every peer's sync step 2 carries its whole delete set). The estimate is high (new
structs count twice, for the item an insertion splits; deletions that free content count as
growth), so before refusing a change on it the room applies it to a copy of the document and
measures (O(document): at most once per ten times what the last try took, the writer waiting),
which also re-bases the estimate. A change that would pass the bound is refused
(`DocumentTooLarge`, close 4413); one that only deletes may go
`YRoomsConfig.delete_allowance` further, so a full document can be made smaller. Changes from
other nodes are applied whatever their size (the stream has them), so nodes accepting changes
at the same moment can together pass the bound by what they accept meanwhile.

Compaction. History is bounded (`YRoomsConfig.doc_retention`): the hub folds the oldest records
away and drops their content. So whenever a room's follower has seen ``compact_every`` updates
after the latest state record (anyone's), it appends a new one: the whole document, with
``covers`` = the follower's position. Everything at or before that seq is in the document
(the room's own changes were applied before they were appended; the others' were applied by the
follower), so ``state + updates after covers`` is always the document, whichever node wrote the
state and whatever was in flight: records between ``covers`` and the state record are applied
again on load, harmlessly (Yjs updates are idempotent). A room also compacts when it closes
(idle), if updates followed the latest state. Nodes do not coordinate: two may compact at the
same moment, which costs one redundant record.

Awareness goes through the hub too, so peers on different nodes see each other's presence: a
local peer's awareness update is applied to the room's `Awareness`, sent to every local peer
(the sender included, as y-websocket's own server does: it is what keeps the provider's 30 s
"no message received" watchdog quiet in an otherwise idle room) and appended as an
``awareness`` record; the other nodes apply it and send it to their peers. A room that opens
appends a ``query`` record and the others answer with their peers' states. A peer that leaves
has its states removed (sent everywhere); states not renewed within
`YRoomsConfig.awareness_timeout_s` are dropped (clients renew theirs every 15 s; a live client
told its state was dropped announces it again at once).

Presence is bounded. Every client id the room holds has one owner: the local peer that
announced it, or the room instance on another node whose record did. An entry naming an id
that another owner holds is skipped, not applied: a y-websocket provider echoes every change
it is told of (other clients' states, and their removal when its own timer drops them), and
nobody may overwrite or remove someone else's presence. Entries pycrdt would ignore (an older
or repeated clock) are skipped first, so an echo never counts as a claim. A local peer may
hold `YRoomsConfig.max_awareness_ids_per_peer` ids and send states of at most
`YRoomsConfig.max_awareness_state_bytes`; an update past either is not applied and closes it
(`AwarenessTooLarge`). Another node's records may make the room hold
`YRoomsConfig.max_awareness_ids_per_node` ids, and all of them together
`YRoomsConfig.max_remote_awareness_states`; entries past those or over the state size are
skipped (logged). pycrdt keeps a clock for every id it ever saw; the room forgets a removed
id's clock after `YRoomsConfig.awareness_timeout_s` (until then a late echo of its old state
is refused by that clock), keeping `YRoomsConfig.max_removed_awareness_ids` at most.

Tasks. A room owns two follower tasks (document, presence) and, while it has no peer, an idle
timer; `YRoom.aclose` cancels them. `YRooms` owns its rooms and closes them all in `aclose`.
Nothing here touches a socket: peers are `YPeer` queues drained by the transport.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pycrdt import Awareness, Doc, TransactionEvent

from airlane.core import Event, Kind, Position
from airlane.core.errors import ErrorCode
from airlane.hub import Hub, HubError, Subscription
from airlane.sync.yjs.config import YRoomsConfig
from airlane.sync.yjs.errors import (
    AwarenessTooLarge,
    DocumentTooLarge,
    InvalidUpdate,
    ReadOnlyPeer,
    RoomFull,
    RoomUnavailable,
    UnknownMessage,
    YProtocolError,
)
from airlane.sync.yjs.growth import (
    MAX_GROWTH_PER_BYTE,
    applied_growth,
    delete_set_of,
    growth_of,
    new_ranges,
    pending_of,
)
from airlane.sync.yjs.peer import YPeer
from airlane.sync.yjs.protocol import (
    EMPTY_UPDATE,
    AuthDenied,
    AwarenessEntry,
    AwarenessMessage,
    QueryAwareness,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    check_state_vector,
    check_update,
    encode,
    encode_awareness_update,
    parse_awareness_update,
    parse_message,
)
from airlane.sync.yjs.records import (
    AwarenessQuery,
    AwarenessRecord,
    CorruptRecord,
    Record,
    StateRecord,
    UpdateRecord,
    awareness_stream_id,
    decode_record,
    doc_stream_id,
    record_event,
)

__all__ = ["YRoom"]

log = logging.getLogger("airlane.yjs")

_HUB = "hub"
"""Origin of changes that came from another node through the hub."""
_TIMEOUT = "timeout"
"""Origin of presence dropped because it was not renewed."""
_MAX_PROBE_WAIT_S = 5.0
"""The longest a writer waits for its change to be tried on a copy of a full document."""


@dataclass(frozen=True, slots=True)
class _Node:
    """Origin of presence applied from another node's record: that room instance."""

    origin: str


_Owner = YPeer | str
"""Who holds an awareness client id: a local peer, or another node's room instance (the
``origin`` of its records)."""


class YRoom:
    """One shared document on this node; see the module docstring. Made by `YRooms`."""

    def __init__(
        self,
        name: str,
        hub: Hub,
        config: YRoomsConfig,
        *,
        on_idle: Callable[[YRoom], object] | None = None,
    ) -> None:
        self.name = name
        """The room name (the path after ``/v1/yjs/``)."""
        self.doc_stream = doc_stream_id(name)
        """The hub stream holding the document."""
        self.awareness_stream = awareness_stream_id(name)
        """The hub stream carrying presence between nodes."""
        self.origin = f"{secrets.token_hex(6)}"
        """This room instance's name in the records it appends."""
        self._hub = hub
        self._config = config
        self._doc: Doc[Any] = Doc()
        self._doc.observe(self._on_change)
        self._changes: list[bytes] = []  # filled by the observer during one apply
        self._awareness = Awareness(self._doc)
        self._awareness.set_local_state(None)  # the server itself has no presence
        self._awareness.observe(self._on_awareness)
        self._awareness_out: list[bytes] = []  # local peers' awareness updates to append
        self._owners: dict[int, _Owner] = {}  # every client id with a state: who holds it
        self._remote_held: collections.Counter[str] = collections.Counter()  # ids per origin
        self._removed: dict[int, float] = {}  # removed ids whose clock is kept: when (monotonic)
        self._swept = time.monotonic()
        self._peers: set[YPeer] = set()
        self._doc_sub: Subscription | None = None
        self._awareness_sub: Subscription | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Task[None] | None = None
        self._on_idle = on_idle  # called when the room should close (idle, or lost)
        self._followed_seq = 0  # the last document record applied (or skipped as covered)
        self._progress = asyncio.Event()  # set whenever the follower moved on
        self._max_lag = max(1, config.compact_every // 2)
        self._size = 0  # the document's encoded state: last measured, plus growth since
        self._pending = 0  # what pycrdt holds apart, waiting for what precedes it
        self._probed_at = -math.inf  # when a change was last tried on a copy, and how long it took
        self._probe_s = 0.0
        self.updates_since_state = 0
        """Update records in the stream after the latest state record this room has seen."""
        self.compactions = 0
        """State records this room appended."""
        self.closing = False
        """True once `aclose` began: no peer joins it any more."""

    # -- queries ----------------------------------------------------------------------------

    @property
    def doc(self) -> Doc[Any]:
        """The document (read it; never change it outside the room)."""
        return self._doc

    @property
    def peers(self) -> int:
        """Peers in the room on this node."""
        return len(self._peers)

    @property
    def document_bytes(self) -> int:
        """The document's encoded size as the room estimates it (at least what its state
        record would hold, as a rule; exact just after loading and compacting)."""
        return self._size + self._pending

    @property
    def awareness_states(self) -> dict[int, Any]:
        """Known presence by Yjs client id, this node's peers and the others'."""
        return dict(self._awareness.states)

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the room's streams if needed, load the document, start following."""
        config, hub = self._config, self._hub
        await hub.create(self.doc_stream, retention=config.doc_retention, exist_ok=True)
        await hub.create(
            self.awareness_stream, retention=config.awareness_retention_policy, exist_ok=True
        )
        info = await hub.info(self.awareness_stream)
        # Presence from now on: what was said before is stale; the query below asks again.
        self._awareness_sub = await hub.subscribe(
            self.awareness_stream, resume=Position(info.epoch, info.last_seq)
        )
        self._doc_sub = await hub.subscribe(self.doc_stream)
        await self._load(self._doc_sub, (await hub.info(self.doc_stream)).last_seq)
        await hub.append(self.awareness_stream, record_event(AwarenessQuery(self.origin)))
        self._spawn(self._follow_doc(self._doc_sub), "doc")
        self._spawn(self._follow_awareness(self._awareness_sub), "awareness")

    async def aclose(
        self, code: ErrorCode = ErrorCode.SHUTTING_DOWN, reason: str = "room closed"
    ) -> None:
        """Close every peer with ``code``, stop following, compact. Idempotent."""
        if self.closing:
            return
        self.closing = True
        for peer in list(self._peers):
            peer.close(code, reason)
        self._peers.clear()
        current = asyncio.current_task()
        tasks = [t for t in (*self._tasks, self._idle) if t is not None and t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._progress.set()  # releases peers waiting for the follower
        try:
            if self.updates_since_state:
                await self._compact(self._followed_seq)
        except HubError as exc:
            log.warning("room %s: could not compact on close: %s", self.name, exc)
        for sub in (self._doc_sub, self._awareness_sub):
            if sub is not None:
                await sub.aclose()

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.create_task(coro, name=f"yjs {what} {self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- peers ------------------------------------------------------------------------------

    def add(self, peer: YPeer) -> None:
        """Let ``peer`` in and start its sync: our state vector, then everyone's presence."""
        if len(self._peers) >= self._config.max_peers_per_room:
            raise RoomFull(
                f"room {self.name!r} holds {self._config.max_peers_per_room} peers, its limit"
            )
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._peers.add(peer)
        peer.send(encode(SyncStep1(self._doc.get_state())))
        states = self._awareness_update(list(self._awareness.states))
        if states is not None:
            peer.send(states)

    async def remove(self, peer: YPeer) -> None:
        """``peer`` left: drop its presence everywhere; start the idle timer if it was the
        last."""
        if peer not in self._peers:
            return
        self._peers.discard(peer)
        if peer.awareness_ids:
            ids = list(peer.awareness_ids)
            self._awareness.remove_awareness_states(ids, peer)
            try:
                await self._flush_awareness()
            except HubError as exc:  # other nodes drop it when it is not renewed
                log.warning("room %s: could not publish a departure: %s", self.name, exc)
        if not self._peers and not self.closing and self._on_idle is not None:
            self._idle = asyncio.create_task(self._idle_close(), name=f"yjs idle {self.name}")

    async def _idle_close(self) -> None:
        await asyncio.sleep(self._config.idle_close_s)
        self._idle = None
        if not self._peers and self._on_idle is not None:
            self._on_idle(self)

    async def receive(self, peer: YPeer, data: bytes) -> None:
        """Handle one y-websocket message from ``peer``. Raises a `YjsError` subclass (whose
        ``code`` the transport reports) for a message the room refuses; a change the hub does
        not take is `RoomUnavailable` (transient: the peer reconnects and resyncs)."""
        try:
            await self._receive(peer, data)
        except HubError as exc:
            raise RoomUnavailable(f"the hub did not take the change: {exc}") from exc

    async def _receive(self, peer: YPeer, data: bytes) -> None:
        message = parse_message(data)
        if isinstance(message, SyncStep1):
            check_state_vector(message.state_vector)
            try:
                missing = self._doc.get_update(message.state_vector)
            except ValueError:
                raise InvalidUpdate("sync step 1 carries no valid state vector") from None
            peer.send(encode(SyncStep2(missing)))
        elif isinstance(message, SyncStep2 | SyncUpdate):
            await self._receive_update(peer, message.update)
        elif isinstance(message, AwarenessMessage):
            self._receive_awareness(peer, message.update)
            await self._flush_awareness()
        elif isinstance(message, QueryAwareness):
            states = self._awareness_update(list(self._awareness.states))
            if states is not None:
                peer.send(states)
        elif isinstance(message, AuthDenied):
            raise UnknownMessage("auth messages go from server to client only")

    async def _receive_update(self, peer: YPeer, update: bytes) -> None:
        if update == EMPTY_UPDATE:
            return  # "nothing new": every client's answer to our step 1 when it has no edits
        if not peer.can_write:
            if self._would_change(update):
                raise ReadOnlyPeer(f"read-only: may not change {self.doc_stream!r}")
            return
        measured = await self._admit(update)
        changes = self._apply(update, peer)
        if measured is not None:  # tried on a copy: the size it has now, exactly
            self._size = measured
        for change in changes:
            record = record_event(UpdateRecord(self.origin, change))
            try:
                appended = await self._hub.append(self.doc_stream, record)
            except HubError:
                # The document now holds a change its stream lacks: a room kept open would
                # serve it here and nowhere else, and a peer resyncing here would never resend
                # it. Close the room instead: it reopens from the stream, and every peer that
                # has the change (the writer, the local peers it reached) reconnects and sends
                # it again in its sync step 2.
                self._lost("could not append a change to the hub")
                raise
            await self._keep_follower_near(appended.seq)

    async def _keep_follower_near(self, seq: int) -> None:
        """Backpressure: wait while this room's follower is more than half a compaction
        period behind ``seq``. Compaction runs in the follower, so a burst of local changes
        (which never wait on the hub in memory) must not outrun it past the retained history."""
        while seq - self._followed_seq > self._max_lag and not self.closing:
            self._progress.clear()
            await self._progress.wait()

    async def _admit(self, update: bytes) -> int | None:
        """Raise `DocumentTooLarge` if applying ``update`` would grow the document past its
        bound (see the module docstring). Return None if it may be applied, or the
        document's encoded size with it applied if that was measured to decide."""
        config = self._config
        bound = config.max_document_bytes
        if self.document_bytes + MAX_GROWTH_PER_BYTE * len(update) <= bound:
            return None  # the most it could add fits
        check_update(update)
        try:
            growth = growth_of(update, self._doc.get_state())
            limit = bound + (config.delete_allowance if growth.only_deletes else 0)
            cost = growth.bytes()
            if self.document_bytes + cost <= limit:
                return None
            if growth.deleted:  # ranges the document has deleted already add nothing
                known = delete_set_of(self._doc.get_update(self._doc.get_state()))
                cost = growth.bytes(new_ranges(growth.deleted, known))
        except ValueError as exc:
            raise InvalidUpdate(f"update cannot be applied: {exc}") from None
        if cost == 0 or self.document_bytes + cost <= limit:
            return None
        # The estimate says no; it is high (structs counted twice, deletions that free
        # content counted as growth): apply the change to a copy and measure.
        before, after, waiting = await self._probe_soon(update)
        if after + waiting + self._pending <= limit:
            return after
        raise DocumentTooLarge(
            f"document full: this change would take it from {before + self._pending} to "
            f"{after + waiting + self._pending} bytes, past {limit}"
        )

    async def _probe_soon(self, update: bytes) -> tuple[int, int, int]:
        """The document's encoded size now and with ``update`` applied, and what of it pycrdt
        would hold apart, measured on a copy, O(document). First waits, if need be, so that
        probing takes at most a tenth of the room's time (the writer waits: its messages are
        handled one at a time). Re-bases the estimate on what it measured."""
        wait = self._probed_at + 10 * self._probe_s - time.monotonic()
        if wait > 0:
            await asyncio.sleep(min(wait, _MAX_PROBE_WAIT_S))
            if self.closing:
                raise RoomUnavailable("the room closed")
        started = time.perf_counter()
        state = self._doc.get_update()
        copy: Doc[Any] = Doc()
        copy.apply_update(state)
        try:
            copy.apply_update(update)
            after = len(copy.get_update())
            waiting = pending_of(update, copy.get_state())
        except ValueError as exc:
            raise InvalidUpdate(f"update cannot be applied: {exc}") from None
        finally:
            self._probe_s = time.perf_counter() - started
            self._probed_at = time.monotonic()
        self._size = len(state)
        return len(state), after, waiting

    def _would_change(self, update: bytes) -> bool:
        """True if ``update`` holds something the document lacks. A peer's answer to our
        step 1 always carries its whole delete set, so "not empty" is not "a change"; this
        probes a copy (O(document), paid only for read-only peers' rare updates)."""
        check_update(update)
        probe: Doc[Any] = Doc()
        probe.apply_update(self._doc.get_update())
        changed: list[bytes] = []
        probe.observe(lambda event: changed.append(event.update))
        try:
            probe.apply_update(update)
        except ValueError as exc:
            raise InvalidUpdate(f"update cannot be applied: {exc}") from None
        return bool(changed)

    # -- the document -----------------------------------------------------------------------

    def _on_change(self, event: TransactionEvent) -> None:
        # pycrdt's observer: runs inside apply_update; must not raise (pycrdt would keep it).
        self._changes.append(event.update)

    def _apply(self, update: bytes, origin: YPeer | str, *, count: bool = True) -> list[bytes]:
        """Apply ``update`` and send what changed to every peer but ``origin``; return it.
        With ``count``, what changed is counted into the document's size (`_count`)."""
        check_update(update)
        self._changes.clear()
        try:
            self._doc.apply_update(update)
        except ValueError as exc:
            self._changes.clear()
            raise InvalidUpdate(f"update cannot be applied: {exc}") from None
        changes, self._changes = self._changes, []
        if count:
            self._count(update, changes, held_apart=isinstance(origin, YPeer))
        for change in changes:
            message = encode(SyncUpdate(change))
            for peer in self._peers:
                if peer is not origin:
                    peer.send(message)
        return changes

    def _count(self, update: bytes, changes: list[bytes], *, held_apart: bool) -> None:
        """Count what applying ``update`` changed into the document's size, and with
        ``held_apart`` what pycrdt holds apart of it, waiting for what precedes it."""
        if changes == [update]:
            held_apart = False  # it went in whole: the usual case
        elif not changes and not held_apart:
            return
        state_vector = self._doc.get_state()
        self._size += sum(applied_growth(change, state_vector) for change in changes)
        if held_apart:
            try:
                self._pending += pending_of(update, state_vector)
            except ValueError:  # not expected of an update pycrdt applied: count all of it
                self._pending += len(update)

    async def _load(self, sub: Subscription, until: int) -> None:
        """Read the stream up to seq ``until``: the latest state, the updates it lacks."""
        events: list[Event] = []
        while sub.position.seq < until:
            batch = await sub.next_batch(self._config.read_batch)
            if not batch:
                break
            events += batch
        records = [(e.seq, r) for e, r in ((e, self._decode(e)) for e in events) if r]
        # The state that covers the most, then every record after the seq it covers, wherever
        # that state itself was written: a state appended at seq 352 may cover only 256 (its
        # writer had followed that far), and the updates between, from other nodes too, are
        # in no state but the later ones. Re-applying what a state already holds is harmless.
        best: tuple[int, StateRecord] | None = None
        for seq, record in records:
            if isinstance(record, StateRecord) and (best is None or record.covers > best[1].covers):
                best = (seq, record)
        covers = 0 if best is None else best[1].covers
        updates = 0
        with self._doc.transaction():
            if best is not None:
                self._apply_logged(best[1].state, best[0], count=False)
            for seq, record in records:
                if seq <= covers or (best is not None and record is best[1]):
                    continue
                if isinstance(record, StateRecord):
                    self._apply_logged(record.state, seq, count=False)
                elif isinstance(record, UpdateRecord):
                    self._apply_logged(record.update, seq, count=False)
                    updates += 1
        self._changes.clear()
        self._size = len(self._doc.get_update())  # measured
        self.updates_since_state = updates
        if events:
            self._followed_seq = events[-1].seq
        log.debug("room %s: loaded %d records, %d updates", self.name, len(records), updates)

    def _apply_logged(self, update: bytes, seq: int, *, count: bool = True) -> None:
        try:
            self._apply(update, _HUB, count=count)
        except InvalidUpdate as exc:
            log.warning("room %s: record %d skipped: %s", self.name, seq, exc)

    def _decode(self, event: Event) -> Record | None:
        if event.kind is Kind.SNAPSHOT:
            log.warning(
                "room %s: history folded before seq %d was read; the next state record repairs it",
                self.name,
                event.seq,
            )
            return None
        if event.kind is not Kind.MESSAGE:
            return None
        try:
            return decode_record(event)
        except CorruptRecord as exc:
            log.warning("room %s: %s; skipped", self.name, exc)
            return None

    async def _follow_doc(self, sub: Subscription) -> None:
        try:
            while batch := await sub.next_batch(self._config.read_batch):
                for event in batch:
                    self._follow_record(event)
                    self._followed_seq = event.seq
                    if self.updates_since_state >= self._config.compact_every:
                        await self._compact_or_warn(event.seq)
                self._progress.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("room %s: following the document failed", self.name)
        self._lost("its document stream ended")

    def _follow_record(self, event: Event) -> None:
        record = self._decode(event)
        if isinstance(record, UpdateRecord):
            self.updates_since_state += 1
            if record.origin != self.origin:
                self._apply_logged(record.update, event.seq)
        elif isinstance(record, StateRecord):
            self.updates_since_state = 0
            if record.origin != self.origin:
                self._apply_logged(record.state, event.seq)

    async def _compact_or_warn(self, covers: int) -> None:
        try:
            await self._compact(covers)
        except HubError as exc:
            # Tried again after `compact_every` more updates; the updates themselves are in
            # the hub, so nothing is lost while retention holds them.
            log.warning("room %s: could not compact: %s", self.name, exc)

    async def _compact(self, covers: int) -> None:
        """Append the whole document as a state record covering seq ``covers``: every
        record up to it has been applied (or was already covered)."""
        state = StateRecord(self.origin, self._doc.get_update(), covers)
        self._size = len(state.state)  # measured, for free
        self.updates_since_state = 0
        await self._hub.append(self.doc_stream, record_event(state))
        self.compactions += 1
        log.debug("room %s: compacted (covers %d, %d bytes)", self.name, covers, len(state.state))

    def _lost(self, why: str) -> None:
        """The room cannot go on (its stream ended or failed): close it; peers reconnect."""
        self._progress.set()
        if not self.closing:
            log.warning("room %s: %s; closing it", self.name, why)
            for peer in list(self._peers):
                peer.close(ErrorCode.ROOM_UNAVAILABLE, f"room {why}; reconnect")
            if self._on_idle is not None:
                self._on_idle(self)

    # -- presence ---------------------------------------------------------------------------

    def _receive_awareness(self, peer: YPeer, update: bytes) -> None:
        """Apply what ``peer`` may change of ``update``; raise `AwarenessTooLarge` (applying
        nothing) if that would pass its bounds."""
        entries = parse_awareness_update(update)  # pycrdt's reader trusts its input
        kept, claims = self._admissible(entries, peer)
        if not kept:
            return
        config = self._config
        dropped = {
            e.client_id for e in kept if e.state is None and e.client_id in peer.awareness_ids
        }
        held = len(peer.awareness_ids) - len(dropped) + len(claims)
        if held > config.max_awareness_ids_per_peer:
            raise AwarenessTooLarge(
                f"presence for {held} client ids; a connection may hold "
                f"{config.max_awareness_ids_per_peer}"
            )
        for entry in kept:
            if entry.size > config.max_awareness_state_bytes:
                raise AwarenessTooLarge(
                    f"the presence state of client {entry.client_id} takes {entry.size} bytes; "
                    f"at most {config.max_awareness_state_bytes}"
                )
        if len(kept) < len(entries):
            update = encode_awareness_update(kept)
        self._awareness.apply_awareness_update(update, peer)

    def _admissible(
        self, entries: Sequence[AwarenessEntry], owner: _Owner
    ) -> tuple[list[AwarenessEntry], list[int]]:
        """The entries ``owner`` may apply that would change something, and the ids among
        them it does not hold yet (its claims). Skipped: ids another owner holds, entries
        pycrdt would ignore (its rule: a higher clock wins; an equal one only removes), and
        removals of ids nobody holds (pycrdt would keep their clock for ever)."""
        meta, states = self._awareness.meta, self._awareness.states
        kept: list[AwarenessEntry] = []
        claims: list[int] = []
        for entry in entries:
            client_id = entry.client_id
            holder = self._owners.get(client_id)
            if holder is not None and holder != owner:  # a peer equals only itself
                continue
            known = meta.get(client_id)
            clock = 0 if known is None else known["clock"]
            if not (
                clock < entry.clock
                or (clock == entry.clock and entry.state is None and client_id in states)
            ):
                continue
            if holder is None:
                if entry.state is None:
                    continue
                if client_id not in claims:
                    claims.append(client_id)
            kept.append(entry)
        return kept, claims

    def _awareness_update(self, client_ids: list[int]) -> bytes | None:
        if not client_ids:
            return None
        return encode(AwarenessMessage(self._awareness.encode_awareness_update(client_ids)))

    def _on_awareness(self, topic: str, args: tuple[dict[str, Any], Any]) -> None:
        # pycrdt's observer, called synchronously by apply/remove: relay, keep the owners,
        # and collect what local peers said for the hub (appended by `_flush_awareness`).
        if topic != "update":
            return
        changes, origin = args
        set_ids = [*changes["added"], *changes["updated"]]
        removed = changes["removed"]
        payload = self._awareness.encode_awareness_update([*set_ids, *removed])
        message = encode(AwarenessMessage(payload))
        for peer in self._peers:
            peer.send(message)
        owner: _Owner | None = origin if isinstance(origin, YPeer) else None
        if isinstance(origin, _Node):
            owner = origin.origin
        if owner is not None:
            for client_id in set_ids:
                self._hold(client_id, owner)
        for client_id in removed:
            self._release(client_id)
        if isinstance(origin, YPeer):
            self._awareness_out.append(payload)

    def _hold(self, client_id: int, owner: _Owner) -> None:
        holder = self._owners.get(client_id)
        if holder == owner:
            return
        if holder is not None:
            self._unhold(client_id, holder)
        self._owners[client_id] = owner
        self._removed.pop(client_id, None)
        if isinstance(owner, YPeer):
            owner.awareness_ids.add(client_id)
        else:
            self._remote_held[owner] += 1

    def _release(self, client_id: int) -> None:
        """``client_id`` has no state any more: nobody holds it; its clock is kept a while."""
        holder = self._owners.pop(client_id, None)
        if holder is not None:
            self._unhold(client_id, holder)
        self._removed.pop(client_id, None)
        self._removed[client_id] = time.monotonic()
        while len(self._removed) > self._config.max_removed_awareness_ids:
            self._forget(next(iter(self._removed)))

    def _unhold(self, client_id: int, holder: _Owner) -> None:
        if isinstance(holder, YPeer):
            holder.awareness_ids.discard(client_id)
        else:
            self._remote_held[holder] -= 1
            if self._remote_held[holder] <= 0:
                del self._remote_held[holder]

    def _forget(self, client_id: int) -> None:
        """Drop the clock pycrdt keeps for a removed ``client_id``."""
        del self._removed[client_id]
        if client_id not in self._awareness.states:
            self._awareness.meta.pop(client_id, None)

    async def _flush_awareness(self) -> None:
        out, self._awareness_out = self._awareness_out, []
        if out:
            events = [record_event(AwarenessRecord(self.origin, update)) for update in out]
            await self._hub.append_many(self.awareness_stream, events)

    async def _follow_awareness(self, sub: Subscription) -> None:
        period = self._config.awareness_timeout_s / 3
        try:
            while True:
                batch: list[Event] | None = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(period):
                        batch = await sub.next_batch(self._config.read_batch)
                if time.monotonic() - self._swept >= period:
                    self._drop_outdated()  # whether or not records keep coming
                if batch is None:
                    continue
                if not batch:
                    break
                for event in batch:
                    await self._awareness_record(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("room %s: following presence failed", self.name)
        if not self.closing:
            log.warning("room %s: presence from other nodes stopped (its stream ended)", self.name)

    async def _awareness_record(self, event: Event) -> None:
        if event.kind is Kind.SNAPSHOT:
            return  # records folded away before this room read them: stale presence anyway
        record = self._decode(event)
        if record is None or record.origin == self.origin:
            return
        if isinstance(record, AwarenessRecord):
            try:
                entries = parse_awareness_update(record.update)
            except YProtocolError as exc:
                log.warning("room %s: presence record %d skipped: %s", self.name, event.seq, exc)
                return
            kept = self._admissible_remote(record.origin, entries, event.seq)
            if kept:
                update = record.update
                if len(kept) < len(entries):
                    update = encode_awareness_update(kept)
                self._awareness.apply_awareness_update(update, _Node(record.origin))
        elif isinstance(record, AwarenessQuery):
            local = sorted(i for i, owner in self._owners.items() if isinstance(owner, YPeer))
            if local:
                update = self._awareness.encode_awareness_update(local)
                answer = record_event(AwarenessRecord(self.origin, update))
                try:
                    await self._hub.append(self.awareness_stream, answer)
                except HubError as exc:  # they will see our peers' next renewal
                    log.warning("room %s: could not answer a presence query: %s", self.name, exc)

    def _admissible_remote(
        self, origin: str, entries: Sequence[AwarenessEntry], seq: int
    ) -> list[AwarenessEntry]:
        """The entries of another node's record this room applies: those `_admissible`
        keeps, with states within the size bound, and claims within that node's share and
        the room's bound for other nodes' presence."""
        config = self._config
        kept, claims = self._admissible(entries, origin)
        room = config.max_remote_awareness_states - sum(self._remote_held.values())
        share = config.max_awareness_ids_per_node - self._remote_held[origin]
        refused = set(claims[max(0, min(room, share)) :])
        admitted = [
            entry
            for entry in kept
            if entry.client_id not in refused and entry.size <= config.max_awareness_state_bytes
        ]
        if len(admitted) < len(kept):
            log.warning(
                "room %s: presence record %d: %d of its states skipped (over the size or the "
                "number of states a node's records may make this room hold)",
                self.name,
                seq,
                len(kept) - len(admitted),
            )
        return admitted

    def _drop_outdated(self) -> None:
        """Drop presence not renewed in time (the peer or its node may be gone; a live
        client told so announces itself again), and forget removed ids' clocks after as
        long."""
        self._swept = time.monotonic()
        now_ms = time.time() * 1000  # pycrdt stamps ``lastUpdated`` with wall-clock ms
        timeout_ms = self._config.awareness_timeout_s * 1000
        outdated = [
            client_id
            for client_id in self._awareness.states
            if now_ms - self._awareness.meta[client_id]["lastUpdated"] >= timeout_ms
        ]
        if outdated:
            self._awareness.remove_awareness_states(outdated, _TIMEOUT)
        expired = self._swept - self._config.awareness_timeout_s
        for client_id in [i for i, removed in self._removed.items() if removed <= expired]:
            self._forget(client_id)
