"""`LoadBoard`: the workers of one machine tell each other how busy they are.

``airlane serve --workers`` hands a reader to the worker producing its stream
(`airlane.runtime.handoff`), so a worker's share of the machine follows the streams it
produces. Those start where their create request arrives, and the kernel spreads
*connections*, not requests: one client creating every stream on one kept-alive connection
would put them all on one worker. So a worker asked to start a stream first looks at the
board, and hands the request (with its connection) to a sibling producing clearly fewer.

Readers following their streams pile connections up where the streams are: every reader of a
stream with thousands of them, or of a few named streams, would land on one worker, leaving
the others' cores idle and that one out of descriptors (its accepts then stop, and the
kernel keeps giving it a share of the new connections). So before any hand-over the board is
asked whether the sibling `takes` one more connection: it must have room for it under its
descriptor limit, less a reserve, and hold at most `balance` more connections than this
worker. Past that, a reader is served where it arrived (its stream followed through the
broker), which is what spreads a stream of many readers over the cores.

The board is one file of fixed slots in the supervisor's directory, mapped into each
worker's memory. Slot *i* is worker *i*'s alone: its process name (the one its hand-over
socket is named after), its load (the streams it produces, and starts, now), the
connections it holds and its descriptor limit, and when it last wrote them
(``CLOCK_MONOTONIC``, which every process of the machine shares). A worker writes its slot
every `PUBLISH_S` and whenever it looks, and reads the others'; a slot not written for
`STALE_S` (a stopped, killed or stuck worker) is passed over. Nothing depends on the
numbers being right: a stale or torn read places a stream less evenly, and a name that no
longer listens makes the hand-over refuse, so the stream starts where it arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import mmap
import os
import resource
import struct
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["PUBLISH_S", "SLOTS", "STALE_S", "LoadBoard", "balance", "board_path", "reserve"]

SLOTS = 256
"""Workers a board has room for (``--workers`` allows 256)."""
PUBLISH_S = 0.05
"""How often a worker writes its load when nothing else makes it."""
STALE_S = 1.0
"""A slot not written for this long is a worker that is not there to take anything."""
HANDED_FOR_S = 1.0
"""How long connections handed to a sibling are counted there, after the last one, while its
own count has not grown by them (they are on their way, or it has not written since)."""

_SLOT = struct.Struct("<QIII44s")
"""Written at, in monotonic ns (0: empty); load; connections held; descriptor limit; this
worker's process name."""
_SLOT_BYTES = 64
assert _SLOT.size == _SLOT_BYTES
_STAMPS = struct.Struct("<" + f"Q{_SLOT_BYTES - 8}x" * SLOTS)
"""Every slot's written-at, in one read: a scan unpacks only the slots in use (a few of
256), where unpacking each cost 50 us per stream created."""
_NAME_BYTES = 44


def board_path(directory: Path) -> Path:
    """The board of the workers sharing ``directory``."""
    return directory / "load.board"


def margin(load: int) -> int:
    """How many more streams a worker may produce than its lightest sibling before it sends
    new ones there: at least one (two workers taking turns keep even), and a sixteenth of
    its load (so that a busy machine does not pass requests back and forth over one)."""
    return 1 + load // 16


def balance(connections: int) -> int:
    """How many more connections than this worker's ``connections`` a sibling may hold and
    still be handed readers: 64 (a few readers go where their stream is, whatever the
    counts) and a quarter more (a stream of a thousand readers on two workers ends up about
    600 and 400, each worker encoding it once)."""
    return 64 + connections // 4


def reserve(limit: int) -> int:
    """Descriptors a worker keeps free of handed-over connections, of its ``limit``: for the
    connections the kernel gives it directly meanwhile, its broker links and its files."""
    return 64 + limit // 16


class _Slot:
    """A live sibling's slot as last read."""

    __slots__ = ("connections", "index", "limit", "load", "stamp")

    def __init__(self, index: int, stamp: int, load: int, connections: int, limit: int) -> None:
        self.index = index
        self.stamp = stamp
        self.load = load
        self.connections = connections
        self.limit = limit


class LoadBoard:
    """This worker's slot on the board and its reading of the others' (module docstring)."""

    def __init__(self, directory: Path, slot: int, name: str, load: Callable[[], int]) -> None:
        """``slot``: this worker's index; ``name``: its process name as its siblings hand
        connections to it; ``load``: how many streams it produces now."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"a board has slots 0 to {SLOTS - 1}, not {slot}")
        encoded = name.encode()
        if len(encoded) > _NAME_BYTES:
            raise ValueError(f"a process name of {len(encoded)} bytes does not fit a slot")
        self.path = board_path(directory)
        self.slot = slot
        self.name = name
        self._encoded = encoded
        self._load = load
        self._connections: Callable[[], int] = lambda: 0
        self._limit = 0
        self._map: mmap.mmap | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._given: dict[str, tuple[int, int]] = {}
        """Streams handed to a sibling since its slot last changed: name -> (the written-at
        seen then, count). The sibling's own count takes them in at its next write."""
        self._handed: dict[str, _Handed] = {}
        """Connections handed to a sibling that its own count may not have yet, by name."""
        self._seen: dict[str, _Slot] = {}
        """Each live sibling's slot as last read, by name."""

    def start(self, connections: Callable[[], int], limit: int | None = None) -> None:
        """Map the board (creating it if this worker is the first) and write this slot
        every `PUBLISH_S` from the running loop. ``connections``: how many this worker
        holds now (its server's count); ``limit``: the descriptors it may have open (its
        soft ``RLIMIT_NOFILE`` unless given)."""
        if self._map is not None:
            raise RuntimeError("a board starts once")
        self._connections = connections
        if limit is None:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self._limit = min(max(0, limit), 0xFFFFFFFF)  # (RLIM_INFINITY is -1: not judged)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOTS * _SLOT_BYTES:
                os.ftruncate(fd, SLOTS * _SLOT_BYTES)  # (zeros: every slot empty)
            self._map = mmap.mmap(fd, SLOTS * _SLOT_BYTES)
        finally:
            os.close(fd)  # the mapping keeps the file
        self._tick(asyncio.get_running_loop())

    def lighter(self) -> str | None:
        """The sibling a new stream should start on: the least loaded, where this worker
        produces more than it by `margin` (and it has room for the connection); None where
        the stream should start here."""
        if self._map is None:
            return None
        own = self._publish()
        best: str | None = None
        best_load = own - margin(own)  # a sibling must be below this to be worth it
        for name, slot in self._scan().items():
            load = slot.load + _pending(self._given, name, slot.stamp)
            if load < best_load and _has_room(slot, self._connections_at(name, slot)):
                best, best_load = name, load
        return best

    def gave(self, name: str) -> None:
        """A new stream went to ``name`` (as `lighter` said): count it there until its own
        count does."""
        _count(self._given, name, self._seen)

    def takes(self, name: str) -> bool:
        """Whether the sibling ``name`` may be handed one more connection: it has room for
        it under its descriptor limit (less `reserve`) and holds at most `balance` more
        connections than this worker. A sibling not on the board is not judged (the
        hand-over itself refuses where nobody listens)."""
        if self._map is None:
            return True
        slot = self._seen.get(name)
        if slot is None or not self._current(slot, name):
            slot = self._scan().get(name)
            if slot is None:
                return True
        connections = self._connections_at(name, slot)
        own = self._connections()
        return _has_room(slot, connections) and connections <= own + balance(own)

    def handed(self, name: str) -> None:
        """A connection went to ``name``: count it there until its own count has grown by
        it (or `HANDED_FOR_S` after the last one went)."""
        now = time.monotonic_ns()
        sent = self._handed.get(name)
        if sent is None:
            slot = self._seen.get(name)
            self._handed[name] = _Handed(0 if slot is None else slot.connections, 1, now)
        else:
            sent.count += 1
            sent.last_ns = now

    def close(self) -> None:
        """Empty this slot (siblings stop sending streams here) and unmap the board."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        board, self._map = self._map, None
        if board is None:
            return
        with contextlib.suppress(ValueError):
            _SLOT.pack_into(board, self.slot * _SLOT_BYTES, 0, 0, 0, 0, b"")
        board.close()

    def _scan(self) -> dict[str, _Slot]:
        """Read every live sibling's slot (this one's is written first)."""
        board = self._map
        assert board is not None
        now = time.monotonic_ns()
        seen: dict[str, _Slot] = {}
        written = itertools.compress(range(SLOTS), _STAMPS.unpack_from(board))
        for index in written:
            if index == self.slot:
                continue
            stamp, load, connections, limit, raw = _SLOT.unpack_from(board, index * _SLOT_BYTES)
            if stamp == 0 or now - stamp > STALE_S * 1e9:
                continue
            name = raw.rstrip(b"\0").decode(errors="replace")
            seen[name] = _Slot(index, stamp, load, connections, limit)
        # Only the live siblings are remembered (a restarted worker has a new name).
        self._seen = seen
        for name in [name for name in self._given if name not in seen]:
            del self._given[name]
        for name in [name for name in self._handed if name not in seen]:
            del self._handed[name]
        return seen

    def _current(self, slot: _Slot, name: str) -> bool:
        """Read ``slot`` again where it was; False if it is no longer ``name``'s or stale."""
        board = self._map
        assert board is not None
        stamp, load, connections, limit, raw = _SLOT.unpack_from(board, slot.index * _SLOT_BYTES)
        if raw.rstrip(b"\0") != name.encode() or time.monotonic_ns() - stamp > STALE_S * 1e9:
            return False
        slot.stamp, slot.load, slot.connections, slot.limit = stamp, load, connections, limit
        return True

    def _connections_at(self, name: str, slot: _Slot) -> int:
        """The sibling's connections: its own count and those handed to it that the count
        does not show yet. A handed connection reaches the sibling over a socket and is
        counted at its next write after that, so a write alone does not say it arrived;
        the count having grown by it does (a sibling whose connections close meanwhile
        looks fuller than it is, for at most `HANDED_FOR_S`)."""
        sent = self._handed.get(name)
        if sent is None:
            return slot.connections
        waiting = sent.count - max(0, slot.connections - sent.baseline)
        if waiting <= 0 or time.monotonic_ns() - sent.last_ns > HANDED_FOR_S * 1e9:
            del self._handed[name]
            return slot.connections
        return slot.connections + waiting

    def _publish(self) -> int:
        load = max(0, self._load())
        if self._map is not None:
            # One write of the whole slot; the name is the same every time, so a sibling
            # reading meanwhile sees at worst old counts with a new time.
            _SLOT.pack_into(
                self._map,
                self.slot * _SLOT_BYTES,
                time.monotonic_ns(),
                min(load, 0xFFFFFFFF),
                min(max(0, self._connections()), 0xFFFFFFFF),
                self._limit,
                self._encoded,
            )
        return load

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._publish()
        self._timer = loop.call_later(PUBLISH_S, self._tick, loop)


class _Handed:
    """Connections handed to one sibling: its count when the first went, how many, when the
    last went (monotonic ns)."""

    __slots__ = ("baseline", "count", "last_ns")

    def __init__(self, baseline: int, count: int, last_ns: int) -> None:
        self.baseline = baseline
        self.count = count
        self.last_ns = last_ns


def _has_room(slot: _Slot, connections: int) -> bool:
    """Whether a sibling holding ``connections`` has a descriptor to spare under its limit
    (a limit of 0, unlimited, is not judged)."""
    return slot.limit == 0 or connections + reserve(slot.limit) < slot.limit


def _pending(counts: dict[str, tuple[int, int]], name: str, stamp: int) -> int:
    """What was sent to ``name`` since its slot was written at ``stamp`` (forgotten once it
    has been written again: its own counts have them then)."""
    sent = counts.get(name)
    if sent is None:
        return 0
    if sent[0] == stamp:
        return sent[1]
    del counts[name]
    return 0


def _count(counts: dict[str, tuple[int, int]], name: str, seen: dict[str, _Slot]) -> None:
    slot = seen.get(name)
    stamp = 0 if slot is None else slot.stamp
    since, count = counts.get(name, (stamp, 0))
    counts[name] = (stamp, count + 1 if since == stamp else 1)
