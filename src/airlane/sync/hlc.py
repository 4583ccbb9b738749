"""Hybrid logical clock (HLC) stamps: ``(wall_ms, counter, node)``.

An HLC (Kulkarni et al., "Logical Physical Clocks", 2014) stays close to wall time, so stamps
are meaningful to people, yet never runs backwards and always orders an event after every
event its node has heard of, like a Lamport clock. Stamps are totally ordered: by ``wall_ms``,
then ``counter``, then ``node`` (the last only breaks ties between different nodes).

``(wall_ms, counter)`` is read as one integer, `Stamp.logical` = ``wall_ms << 16 | counter``.
That makes the HLC rules two ``max`` calls (see `HybridClock`), makes counter overflow carry
into ``wall_ms`` (65 536 events in one millisecond move the clock 1 ms ahead of wall time,
which the next tick of real time absorbs), and lets a version vector hold HLC time as plain
integers (`airlane.sync.vclock`).

Encodings keep the order: ``Stamp.encode()`` is fixed-width hex, ``Stamp.to_bytes()`` big
endian, so sorting encoded stamps as strings or bytes sorts the stamps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from airlane.sync.errors import ClockDriftError, LocalSyncError, MalformedError

__all__ = [
    "DEFAULT_MAX_DRIFT_MS",
    "MAX_COUNTER",
    "MAX_WALL_MS",
    "NODE_PATTERN",
    "HybridClock",
    "Stamp",
]

COUNTER_BITS: Final = 16
MAX_COUNTER: Final = (1 << COUNTER_BITS) - 1
"""The largest counter; one more carries into ``wall_ms``."""
MAX_WALL_MS: Final = (1 << 48) - 1
"""48 bits of milliseconds: about 8 900 years past the Unix epoch."""
DEFAULT_MAX_DRIFT_MS: Final = 60_000
"""How far ahead of local wall time a remote stamp may be. Phones and browsers are routinely
seconds off; a minute tolerates that while keeping one broken clock from pushing every
replica's stamps (and its own writes' precedence) far into the future."""

NODE_PATTERN: Final = re.compile(r"[A-Za-z0-9._:~-]{1,64}")
"""What a node id may look like. Ids starting with ``~`` are reserved for derived stamps (the
semantic arbiter's), so a `HybridClock` never issues them."""

_MAX_LOGICAL: Final = (MAX_WALL_MS << COUNTER_BITS) | MAX_COUNTER
_ENCODED = re.compile(r"([0-9a-f]{12})\.([0-9a-f]{4})\.(.+)", re.DOTALL)


@dataclass(frozen=True, slots=True, order=True)
class Stamp:
    """One HLC timestamp. Compared as ``(wall_ms, counter, node)``."""

    wall_ms: int
    """Milliseconds since the Unix epoch, as this node's HLC saw them."""
    counter: int
    """Events stamped within the same ``wall_ms`` before this one."""
    node: str
    """The node that issued the stamp; breaks ties between nodes."""

    def __post_init__(self) -> None:
        if not 0 <= self.wall_ms <= MAX_WALL_MS:
            raise LocalSyncError(f"wall_ms {self.wall_ms} is outside 0..2**48-1")
        if not 0 <= self.counter <= MAX_COUNTER:
            raise LocalSyncError(f"counter {self.counter} is outside 0..{MAX_COUNTER}")
        if not NODE_PATTERN.fullmatch(self.node):
            raise LocalSyncError(f"node id {self.node[:80]!r} is not [A-Za-z0-9._:~-]{{1,64}}")

    @property
    def logical(self) -> int:
        """``wall_ms`` and ``counter`` as one integer, the value version vectors hold."""
        return (self.wall_ms << COUNTER_BITS) | self.counter

    @classmethod
    def from_logical(cls, logical: int, node: str) -> Stamp:
        """The stamp of ``node`` at `logical` time; raises `LocalSyncError` past 48-bit ms."""
        if not 0 <= logical <= _MAX_LOGICAL:
            raise LocalSyncError(f"logical time {logical} is out of range")
        return cls(logical >> COUNTER_BITS, logical & MAX_COUNTER, node)

    def encode(self) -> str:
        """``"<wall_ms:12 hex>.<counter:4 hex>.<node>"``; sorts like the stamp."""
        return f"{self.wall_ms:012x}.{self.counter:04x}.{self.node}"

    @classmethod
    def decode(cls, text: str) -> Stamp:
        """Parse `encode`'s form; raises `MalformedError` if it is not one."""
        match = _ENCODED.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise MalformedError(f"not an encoded stamp: {str(text)[:80]!r}")
        return _checked(int(match[1], 16), int(match[2], 16), match[3])

    def to_bytes(self) -> bytes:
        """6 bytes of ``wall_ms``, 2 of ``counter`` (big endian), then the node id in ASCII."""
        return self.logical.to_bytes(8, "big") + self.node.encode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes) -> Stamp:
        """Parse `to_bytes`' form; raises `MalformedError` if it is not one."""
        if len(data) < 9:
            raise MalformedError(f"an encoded stamp needs at least 9 bytes, got {len(data)}")
        logical = int.from_bytes(data[:8], "big")
        try:
            node = data[8:].decode("ascii")
        except UnicodeDecodeError:
            raise MalformedError("stamp node id is not ASCII") from None
        return _checked(logical >> COUNTER_BITS, logical & MAX_COUNTER, node)


def _checked(wall_ms: int, counter: int, node: str) -> Stamp:
    """Build a stamp from decoded fields, turning a bad field into the peer's fault."""
    try:
        return Stamp(wall_ms, counter, node)
    except LocalSyncError as exc:
        raise MalformedError(str(exc)) from None


class HybridClock:
    """The HLC of one node. Pure: the caller passes its wall time in, in ms.

    With ``l`` the logical time of the last stamp issued (`Stamp.logical`):

    - a local event gets ``max(l + 1, wall_ms << 16)``: wall time if it moved on, else one
      counter tick after the last stamp;
    - receiving a remote stamp ``r`` moves the clock to ``max(l + 1, r + 1, wall_ms << 16)``,
      so everything issued afterwards orders after ``r``.

    These are the published HLC update rules, with the counter carrying into ``wall_ms``
    instead of overflowing.
    """

    def __init__(self, node: str, max_drift_ms: int = DEFAULT_MAX_DRIFT_MS) -> None:
        if not NODE_PATTERN.fullmatch(node) or node.startswith("~"):
            raise LocalSyncError(f"node id {node[:80]!r} is invalid or reserved ('~...')")
        if max_drift_ms < 0:
            raise LocalSyncError("max_drift_ms must be >= 0")
        self.node: Final = node
        """This node's id, in every stamp it issues."""
        self.max_drift_ms: Final = max_drift_ms
        """How far ahead of local wall time a received stamp may be, in ms."""
        # Logical time 0 is never issued: version vectors read 0 as "nothing seen yet".
        self._logical = 0

    @property
    def last(self) -> Stamp | None:
        """The clock's current reading (the last stamp issued or merged), or None if none."""
        return None if self._logical == 0 else Stamp.from_logical(self._logical, self.node)

    def now(self, wall_ms: int) -> Stamp:
        """Stamp a local event at wall time ``wall_ms``."""
        return self._advance(max(self._logical + 1, _wall_logical(wall_ms)))

    def receive(self, remote: Stamp, wall_ms: int) -> Stamp:
        """Merge a stamp received from another node; returns the receive event's stamp.

        Raises `ClockDriftError`, and leaves the clock as it was, if ``remote`` is more than
        ``max_drift_ms`` ahead of ``wall_ms``.
        """
        self.check_drift(remote, wall_ms)
        return self._advance(max(self._logical + 1, remote.logical + 1, _wall_logical(wall_ms)))

    def _advance(self, logical: int) -> Stamp:
        stamp = Stamp.from_logical(logical, self.node)  # raises before any state changes
        self._logical = logical
        return stamp

    def check_drift(self, remote: Stamp, wall_ms: int) -> None:
        """Raise `ClockDriftError` if ``remote`` is too far ahead of ``wall_ms``; else nothing.

        For callers that vet a batch of stamps before merging any of them.
        """
        if remote.wall_ms - wall_ms > self.max_drift_ms:
            raise ClockDriftError(remote.wall_ms, wall_ms, self.max_drift_ms)


def _wall_logical(wall_ms: int) -> int:
    if not 0 <= wall_ms <= MAX_WALL_MS:
        raise LocalSyncError(f"wall_ms {wall_ms} is outside 0..2**48-1")
    return wall_ms << COUNTER_BITS
