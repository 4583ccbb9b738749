"""One in-memory consumer group: its cursor and its pending acks (pure: ``now`` is passed in).

The group hands out each record to one member at a time. A handed-out record is *pending*
until it is acked; its deadline is ``now + ack_wait_s`` (restarted by ``in_progress``, set to
``now + delay`` by ``nak``). A pending record whose deadline has passed is handed out again,
redeliveries before new records, unless it has been handed out ``max_deliver`` times, in
which case the group gives up on it. At most ``max_ack_pending`` records are pending at once:
past that the group hands out only redeliveries (JetStream's ``max_ack_pending`` does the
same), which bounds the pending table.

``now`` is the event loop's clock (monotonic seconds); record times are not involved.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.eventlog.base import GroupInfo, GroupSettings, Record
from airlane.eventlog.memory_log import LogState

__all__ = ["GroupState"]


@dataclass(slots=True)
class _Pending:
    deliveries: int
    deadline: float


class GroupState:
    """A consumer group's cursor (``next_seq``) and pending table, for one log, and the ack
    wait and max deliver it was created with (``settings``, defaults where it asks nothing)."""

    def __init__(
        self, log: str, group: str, settings: GroupSettings, next_seq: int, max_ack_pending: int
    ) -> None:
        self.log = log
        self.group = group
        # Fixed at creation: later joins are checked against these, never change them.
        self.ack_wait_s = settings.new_ack_wait_s
        self.max_deliver = settings.max_deliver
        self.next_seq = next_seq
        self.max_ack_pending = max_ack_pending
        self.deleted = False
        self._pending: dict[int, _Pending] = {}

    def take(self, log: LogState, max_events: int, now: float) -> list[tuple[Record, int]]:
        """Hand out up to ``max_events`` records as ``(record, deliveries)``: redeliveries
        whose deadline has passed first (in seq order), then records never handed out."""
        self._forget(log, now)
        out: list[tuple[Record, int]] = []
        for seq in sorted(self._pending):
            pending = self._pending[seq]
            if len(out) >= max_events:
                break
            record = log.record(seq)
            if pending.deadline <= now and record is not None:
                pending.deliveries += 1
                pending.deadline = now + self.ack_wait_s
                out.append((record, pending.deliveries))
        while (
            len(out) < max_events
            and self.next_seq <= log.last_seq
            and len(self._pending) < self.max_ack_pending
        ):
            record = log.record(self.next_seq)
            assert record is not None  # next_seq >= first_seq after _forget
            self._pending[self.next_seq] = _Pending(1, now + self.ack_wait_s)
            self.next_seq += 1
            out.append((record, 1))
        return out

    def next_deadline(self) -> float | None:
        """The earliest pending deadline: when a fetch with nothing to hand out should look
        again (None: only a new record, ack or nak can change anything)."""
        return min((pending.deadline for pending in self._pending.values()), default=None)

    def ack(self, seq: int) -> None:
        """Settle ``seq``, whoever holds it now."""
        self._pending.pop(seq, None)

    def nak(self, seq: int, deliveries: int, delay: float | None, now: float) -> None:
        """Redeliver ``seq`` at ``now + delay``, if delivery ``deliveries`` is still current."""
        pending = self._pending.get(seq)
        if pending is not None and pending.deliveries == deliveries:
            pending.deadline = now + (delay or 0.0)

    def touch(self, seq: int, deliveries: int, now: float) -> None:
        """Restart the ack deadline of ``seq``, if delivery ``deliveries`` is still current."""
        pending = self._pending.get(seq)
        if pending is not None and pending.deliveries == deliveries:
            pending.deadline = now + self.ack_wait_s

    def info(self, log: LogState, now: float) -> GroupInfo:
        """The group's state."""
        self._forget(log, now)
        next_seq = min(self.next_seq, log.last_seq + 1)
        return GroupInfo(
            log=self.log,
            group=self.group,
            next_seq=next_seq,
            pending_acks=len(self._pending),
            redelivered=sum(1 for p in self._pending.values() if p.deliveries > 1),
            unprocessed=log.last_seq - next_seq + 1,
            ack_wait_s=self.ack_wait_s,
            max_deliver=self.max_deliver,
        )

    def _forget(self, log: LogState, now: float) -> None:
        """Drop what retention trimmed and what ran out of deliveries."""
        first_seq = log.first_seq
        self.next_seq = max(self.next_seq, first_seq)
        for seq, pending in list(self._pending.items()):
            exhausted = (
                self.max_deliver is not None
                and pending.deliveries >= self.max_deliver
                and pending.deadline <= now
            )
            if seq < first_seq or exhausted:
                del self._pending[seq]
