"""`LoadBoard`: the workers of one machine tell each other how busy they are.

``airlane serve --workers`` hands a reader to the worker producing its stream
(`airlane.runtime.handoff`), so a worker's share of the machine follows the streams it
produces. Those start where their create request arrives, and the kernel spreads
*connections*, not requests: one client creating every stream on one kept-alive connection
would put them all on one worker. So a worker asked to start a stream first looks at the
board, and hands the request (with its connection) to a sibling producing clearly fewer.

The board is one file of fixed slots in the supervisor's directory, mapped into each
worker's memory. Slot *i* is worker *i*'s alone: its process name (the one its hand-over
socket is named after), its load (the streams it produces, and starts, now) and when it last
wrote them (``CLOCK_MONOTONIC``, which every process of the machine shares). A worker writes
its slot every `PUBLISH_S` and whenever it looks, and reads the others'; a slot not written
for `STALE_S` (a stopped, killed or stuck worker) is passed over. Nothing depends on the
numbers being right: a stale or torn read places a stream less evenly, and a name that no
longer listens makes the hand-over refuse, so the stream starts where it arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["PUBLISH_S", "SLOTS", "STALE_S", "LoadBoard", "board_path"]

SLOTS = 256
"""Workers a board has room for (``--workers`` allows 256)."""
PUBLISH_S = 0.05
"""How often a worker writes its load when nothing else makes it."""
STALE_S = 1.0
"""A slot not written for this long is a worker that is not there to take anything."""

_SLOT = struct.Struct("<QI4x48s")
"""Written at, in monotonic ns (0: empty); load; this worker's process name."""
_SLOT_BYTES = 64
assert _SLOT.size == _SLOT_BYTES


def board_path(directory: Path) -> Path:
    """The board of the workers sharing ``directory``."""
    return directory / "load.board"


def margin(load: int) -> int:
    """How many more streams a worker may produce than its lightest sibling before it sends
    new ones there: at least one (two workers taking turns keep even), and a sixteenth of
    its load (so that a busy machine does not pass requests back and forth over one)."""
    return 1 + load // 16


class LoadBoard:
    """This worker's slot on the board and its reading of the others' (module docstring)."""

    def __init__(self, directory: Path, slot: int, name: str, load: Callable[[], int]) -> None:
        """``slot``: this worker's index; ``name``: its process name as its siblings hand
        connections to it; ``load``: how many streams it produces now."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"a board has slots 0 to {SLOTS - 1}, not {slot}")
        encoded = name.encode()
        if len(encoded) > _SLOT.size - 16:
            raise ValueError(f"a process name of {len(encoded)} bytes does not fit a slot")
        self.path = board_path(directory)
        self.slot = slot
        self.name = name
        self._encoded = encoded
        self._load = load
        self._map: mmap.mmap | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._given: dict[str, tuple[int, int]] = {}
        """Streams handed to a sibling since its slot last changed: name -> (the written-at
        seen then, count). The sibling's own count takes them in at its next write."""
        self._seen: dict[str, int] = {}
        """Each live sibling's written-at as `lighter` last read it."""

    def start(self) -> None:
        """Map the board (creating it if this worker is the first) and write this slot
        every `PUBLISH_S` from the running loop."""
        if self._map is not None:
            raise RuntimeError("a board starts once")
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
        produces more than it by `margin`; None where the stream should start here."""
        board = self._map
        if board is None:
            return None
        own = self._publish()
        now = time.monotonic_ns()
        best: str | None = None
        best_load = own - margin(own)  # a sibling must be below this to be worth it
        seen: dict[str, int] = {}
        for index in range(SLOTS):
            if index == self.slot:
                continue
            stamp, load, raw = _SLOT.unpack_from(board, index * _SLOT_BYTES)
            if stamp == 0:
                continue
            if now - stamp > STALE_S * 1e9:
                continue
            name = raw.rstrip(b"\0").decode(errors="replace")
            seen[name] = stamp
            given = self._given.get(name)
            if given is not None:
                if given[0] == stamp:
                    load += given[1]
                else:
                    del self._given[name]  # its own count has them now
            if load < best_load:
                best, best_load = name, load
        # Only the live siblings are remembered (a restarted worker has a new name).
        self._seen = seen
        for name in [name for name in self._given if name not in seen]:
            del self._given[name]
        return best

    def gave(self, name: str) -> None:
        """A new stream went to ``name`` (as `lighter` said): count it there until its own
        count does."""
        stamp = self._seen.get(name, 0)
        seen, count = self._given.get(name, (stamp, 0))
        self._given[name] = (stamp, count + 1 if seen == stamp else 1)

    def close(self) -> None:
        """Empty this slot (siblings stop sending streams here) and unmap the board."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        board, self._map = self._map, None
        if board is None:
            return
        with contextlib.suppress(ValueError):
            _SLOT.pack_into(board, self.slot * _SLOT_BYTES, 0, 0, b"")
        board.close()

    def _publish(self) -> int:
        load = max(0, self._load())
        if self._map is not None:
            # One write of the whole slot; the name is the same every time, so a sibling
            # reading meanwhile sees at worst an old load with a new time.
            _SLOT.pack_into(
                self._map,
                self.slot * _SLOT_BYTES,
                time.monotonic_ns(),
                min(load, 0xFFFFFFFF),
                self._encoded,
            )
        return load

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._publish()
        self._timer = loop.call_later(PUBLISH_S, self._tick, loop)
