"""How much a Yjs update can add to a document's encoded state, told without applying it.

A room bounds its document (`YRoomsConfig.max_document_bytes`): its state record is one hub
event, and in a cluster one broker message. Encoding the state to measure it costs O(document)
(tens of milliseconds for a heavily edited document of 700 KB), so the room keeps an estimate
(the size it last measured, plus the growth of every change since) and checks each update's
growth against it before applying it. This module tells that growth, from the update's bytes
and the document's state vector and delete set (sans I/O; pycrdt's update functions read and
trim the update).

The growth of an update, measured on pycrdt 0.14 (yrs):

- its new structs: `STRUCT_FACTOR` times their bytes in the update. A struct is stored as it
  was sent, but inserted into an existing item it splits that item in two, and the second
  piece takes about as many bytes as the struct's own ids: a single-character insertion grew
  the state by 11-25 bytes for updates of 17-38 (by the width of the client ids), seeded
  random edits by up to 3.5 % more than their structs, and a change that inserts at many
  places at once (an offline client's sync step 2) can split an item per struct. Typing
  merges into the previous item and grows the state by a byte per character: the estimate is
  high, and the room tries a change on a copy of the document before it refuses it;
- each newly deleted range may split the items at both of its ends: `RANGE_BYTES`. Measured:
  15-29 bytes for a range inside one item (1-byte to 53-bit client ids), up to 32 for one
  straddling two items, 47 once in random edits; a delete set of 592 KB (every other
  character of a 300 KB text) grew the state to 2.5 MB. A range the document has already
  deleted adds nothing: every peer's answer to sync step 1 carries its whole delete set.

Deleting whole items shrinks the state (their content goes), which only a measurement shows.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pycrdt import get_state, get_update, write_var_uint

__all__ = [
    "MAX_GROWTH_PER_BYTE",
    "RANGE_BYTES",
    "STRUCT_FACTOR",
    "DeleteSet",
    "Growth",
    "applied_growth",
    "decode_state_vector",
    "delete_set_of",
    "growth_of",
    "new_ranges",
    "pending_of",
]

STRUCT_FACTOR = 2
"""What a byte of new structs may add to the encoded state (itself, and the split it causes)."""
RANGE_BYTES = 64
"""What one newly deleted range may add to the encoded state: the pieces it splits off the
items at its ends, each an info byte, two ids of up to 8 + 5 bytes and a length."""
MAX_GROWTH_PER_BYTE = max(STRUCT_FACTOR, RANGE_BYTES // 2)
"""The most an update can grow the state per byte of its own, as counted here: a deleted range
takes at least two bytes of it (clock and length)."""
_MAX_CLOCK = 2**32 - 1  # yrs counts clocks in u32
_MAX_GAPPED_CLIENTS = 8  # clients read one by one out of an update's waiting structs

DeleteSet = dict[int, list[tuple[int, int]]]
"""Deleted ranges by client id: ``(clock, length)``."""


@dataclass(frozen=True, slots=True)
class Growth:
    """What an update would add to a document."""

    structs: int
    """Bytes of the structs the document lacks."""
    deleted: DeleteSet | None
    """Its deleted ranges (all of them, new or not); None if they could not be read apart
    from the structs (structs of more than a few clients the document does not know, past
    their clock 0: they would wait for what precedes them)."""

    @property
    def only_deletes(self) -> bool:
        """True if the update brings no struct the document lacks."""
        return self.structs == 0 and self.deleted is not None

    def bytes(self, new_ranges: int | None = None) -> int:
        """The growth, counting ``new_ranges`` deleted ranges (all of them if None)."""
        if self.deleted is None:
            return self.structs * MAX_GROWTH_PER_BYTE
        if new_ranges is None:
            new_ranges = sum(map(len, self.deleted.values()))
        return STRUCT_FACTOR * self.structs + RANGE_BYTES * new_ranges


def growth_of(update: bytes, state_vector: bytes) -> Growth:
    """What ``update`` would add to a document whose state vector is ``state_vector``: O(the
    update). Raises ValueError for an update pycrdt cannot read."""
    new = get_update(update, state_vector)  # the structs the document lacks, every deletion
    # Trimmed again against "every client at the last clock", the structs go and the deletions
    # stay. The clients: the document's, those whose structs start at 0 (get_state lists only
    # those), and, read from what is left, those whose structs start later (they wait).
    clients = decode_state_vector(state_vector).keys() | decode_state_vector(get_state(new)).keys()
    for _ in range(_MAX_GAPPED_CLIENTS + 1):
        everything = write_var_uint(len(clients)) + b"".join(
            write_var_uint(client) + write_var_uint(_MAX_CLOCK) for client in clients
        )
        rest = get_update(new, everything)
        groups, offset = _var_uint(rest, 0)
        if not groups:
            deleted, _ = _delete_set(rest, offset)
            return Growth(len(new) - len(rest), deleted)
        _, offset = _var_uint(rest, offset)  # the group's struct count, then its client
        clients = clients | {_var_uint(rest, offset)[0]}
    return Growth(len(new), None)


def applied_growth(change: bytes, state_vector: bytes) -> int:
    """The growth (`Growth.bytes`) of a ``change`` a document has applied, given its state
    vector since (which covers every struct of the change): what `growth_of` tells before,
    for a fifth of the cost (one trim, no state vector to build)."""
    rest = get_update(change, state_vector)  # the structs go, the deletions stay
    groups, offset = _var_uint(rest, 0)
    if groups:
        return len(change) * MAX_GROWTH_PER_BYTE
    deleted, _ = _delete_set(rest, offset)
    return Growth(len(change) - len(rest), deleted).bytes()


def new_ranges(deleted: DeleteSet, known: DeleteSet) -> int:
    """How many of the ``deleted`` ranges are not within ``known`` (a document's)."""
    count = 0
    for client, ranges in deleted.items():
        spans = known.get(client)
        if not spans:
            count += len(ranges)
            continue
        starts = [start for start, _ in spans]
        for clock, length in ranges:
            at = bisect.bisect_right(starts, clock) - 1
            if at < 0 or clock + length > spans[at][0] + spans[at][1]:
                count += 1
    return count


def delete_set_of(empty_update: bytes) -> DeleteSet:
    """A document's delete set, from ``doc.get_update(doc.get_state())`` (no struct, every
    deletion), with each client's ranges sorted and merged."""
    groups, offset = _var_uint(empty_update, 0)
    if groups:
        raise ValueError("an update with structs is not a delete set")
    deleted, _ = _delete_set(empty_update, offset)
    merged: DeleteSet = {}
    for client, ranges in deleted.items():
        spans: list[tuple[int, int]] = []
        for clock, length in sorted(ranges):
            if spans and clock <= spans[-1][0] + spans[-1][1]:
                start, span = spans[-1]
                spans[-1] = (start, max(span, clock + length - start))
            else:
                spans.append((clock, length))
        merged[client] = spans
    return merged


def pending_of(update: bytes, state_vector: bytes) -> int:
    """What of an applied ``update`` the document holds apart, waiting for what precedes it
    (pycrdt keeps such structs and deletions in the document but in no state it encodes):
    its bytes, or `RANGE_BYTES` per deletion of something the document lacks. 0 when all
    of it went in."""
    left = get_update(update, state_vector)
    groups, offset = _var_uint(left, 0)
    if groups:
        return len(left)
    deleted, _ = _delete_set(left, offset)
    clocks = decode_state_vector(state_vector)
    waiting = sum(
        1
        for client, ranges in deleted.items()
        for clock, length in ranges
        if clock + length > clocks.get(client, 0)
    )
    return RANGE_BYTES * waiting


def decode_state_vector(state_vector: bytes) -> dict[int, int]:
    """A state vector (pycrdt's encoding) as clocks by client id."""
    count, offset = _var_uint(state_vector, 0)
    clocks: dict[int, int] = {}
    for _ in range(count):
        client, offset = _var_uint(state_vector, offset)
        clocks[client], offset = _var_uint(state_vector, offset)
    return clocks


def _delete_set(data: bytes, offset: int) -> tuple[DeleteSet, int]:
    clients, offset = _var_uint(data, offset)
    deleted: DeleteSet = {}
    for _ in range(clients):
        client, offset = _var_uint(data, offset)
        count, offset = _var_uint(data, offset)
        ranges = deleted.setdefault(client, [])
        for _ in range(count):
            clock, offset = _var_uint(data, offset)
            length, offset = _var_uint(data, offset)
            ranges.append((clock, length))
    return deleted, offset


def _var_uint(data: bytes, offset: int) -> tuple[int, int]:
    """The varUint at ``offset`` and the offset after it (pycrdt wrote ``data``; ValueError
    if it ends inside the number)."""
    value = shift = 0
    while True:
        try:
            byte = data[offset]
        except IndexError:
            raise ValueError("a truncated varUint") from None
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, offset
