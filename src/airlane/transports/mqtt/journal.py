"""`InflightJournal`: which received QoS 1/2 messages the bridge is storing, so that a copy the
broker sends again after a crash is stored once.

The broker sends a QoS 1/2 message again (DUP set, same packet id) when the bridge went away
before acknowledging it. If the bridge had already stored it, that copy must not be stored
twice. MQTT gives a message no identity of its own, and a packet id is reused as soon as its
message is acknowledged, so the bridge names each message it takes with a number of its own
before storing it, writes that down here, and stores the record under the idempotency key
``mqtt.<journal epoch>.<number>``: a copy sent again finds its number in the journal (same
packet id, same digest of topic and payload) and is appended under the same key, which the
log recognises.

The file is a line per change, written before the store and before the acknowledgement::

    I <number> <packet id> <digest>     taken: about to be stored
    A <number>                          acknowledged to the broker

Only a copy marked DUP looks its number up; a new message always gets a new number. A copy
may also come after its message was acknowledged: Mosquitto 2.0, restarted from its store right
after it sent a QoS 2 message's PUBREL, restores the message as unacknowledged and sends the
PUBLISH again (seen in tests/mqtt/test_crash.py). So the last `RECENT` acknowledged messages
are remembered too (in memory, and from the journal's lines when it is read), and such a copy
gets its number back; a PUBLISH without DUP under a remembered packet id is a new message (the
broker reuses an id only once its flow is over) and forgets the old one. A process
killed between two lines leaves at worst a duplicate, never a loss: an ``A`` is written before
the acknowledgement is sent, so a lost acknowledgement makes the broker send the message again
under a number no longer live (stored again: a duplicate), and a message that was never taken
has no ``I`` line (stored for the first time). The file is rewritten with only the live and
remembered entries when it is opened, and once it grows by `COMPACT_LINES` lines past that and
past four times its live entries.

No fsync: the journal survives the process being killed (the kernel holds what was written);
a power cut may lose its last lines, and then the same rule applies (a duplicate at worst).
"""

from __future__ import annotations

import os
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMPACT_LINES", "RECENT", "InflightJournal", "Taken"]

COMPACT_LINES = 10_000
"""Lines past which the journal is rewritten with its live entries only."""
RECENT = 4096
"""Acknowledged messages remembered (packet id, number, digest) for a copy sent again."""


@dataclass(frozen=True, slots=True)
class Taken:
    """A message the journal numbered: its number and the idempotency key to store it
    under."""

    number: int
    key: str


class InflightJournal:
    """The journal of one bridge, in ``directory``; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "inflight.journal"
        self._epoch = ""
        self._next = 1
        self._live: dict[int, tuple[int, str]] = {}
        """packet id -> (number, digest) of messages taken and not yet acknowledged."""
        self._recent: OrderedDict[int, tuple[int, str]] = OrderedDict()
        """The same for the last `RECENT` acknowledged ones, oldest first."""
        self._lines = 0
        """Lines in the file."""
        self._kept = 0
        """Lines the last rewrite kept (what a compaction cannot shrink)."""
        self._fd = -1

    def open(self) -> None:
        """Read the journal (creating it if missing) and keep it open for appending."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            text = self.path.read_text("ascii")
        except FileNotFoundError:
            text = ""
        lines = text.splitlines()
        if lines and lines[0].startswith("E "):
            self._epoch = lines[0][2:].strip()
        if not self._epoch:
            self._epoch = secrets.token_hex(6)
        numbers: dict[int, int] = {}
        for line in lines[1:]:
            parts = line.split()
            try:
                if parts[0] == "I" and len(parts) == 4:
                    number, packet_id = int(parts[1]), int(parts[2])
                    self._live[packet_id] = (number, parts[3])
                    numbers[number] = packet_id
                    self._next = max(self._next, number + 1)
                elif parts[0] == "A" and len(parts) == 2:
                    number = int(parts[1])
                    packet_id = numbers.pop(number, 0)
                    if self._live.get(packet_id, (0, ""))[0] == number:
                        self._remember(packet_id, self._live.pop(packet_id))
            except (IndexError, ValueError):
                continue  # a torn last line from a killed process: nothing it says is needed
        self._rewrite()

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def live(self) -> int:
        """Messages taken and not acknowledged."""
        return len(self._live)

    def key(self, number: int) -> str:
        """The idempotency key of the message numbered ``number``."""
        return f"mqtt.{self._epoch}.{number}"

    def take(self, packet_id: int, digest: str, dup: bool) -> tuple[Taken, str | None]:
        """Number a received message; the line to write (None: a copy of a message already
        numbered, whose number it reuses). Write the lines with `write` before storing."""
        if dup:
            for known in (self._live.get(packet_id), self._recent.get(packet_id)):
                if known is not None and known[1] == digest:
                    return Taken(known[0], self.key(known[0])), None
        else:
            self._recent.pop(packet_id, None)  # the id is reused: its old message is done
        number = self._next
        self._next += 1
        self._live[packet_id] = (number, digest)
        return Taken(number, self.key(number)), f"I {number} {packet_id} {digest}\n"

    def settle(self, packet_id: int, number: int) -> str | None:
        """The line that marks ``number`` acknowledged (None if it is not live); write it
        before sending the acknowledgement."""
        live = self._live.get(packet_id)
        if live is None or live[0] != number:
            return None
        self._remember(packet_id, self._live.pop(packet_id))
        return f"A {number}\n"

    def release(self, packet_id: int) -> str | None:
        """The line that marks the message with ``packet_id`` acknowledged, whatever its
        number (None if none is live): a QoS 2 message is settled at PUBREL, when the
        broker can no longer send it again."""
        live = self._live.pop(packet_id, None)
        if live is None:
            return None
        self._remember(packet_id, live)
        return f"A {live[0]}\n"

    def _remember(self, packet_id: int, entry: tuple[int, str]) -> None:
        """Keep an acknowledged message's number for a copy sent again anyway (bounded)."""
        recent = self._recent
        recent[packet_id] = entry
        recent.move_to_end(packet_id)
        while len(recent) > RECENT:
            recent.popitem(last=False)

    def write(self, lines: list[str]) -> None:
        """Append ``lines`` in one write; rewrite the file once it has grown long."""
        if not lines:
            return
        data = "".join(lines).encode("ascii")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._lines += len(lines)
        # Against the live entries too: with thousands of QoS 2 messages awaiting PUBREL (a
        # broker draining a backlog sends new messages first), a fixed threshold would rewrite
        # the file on every write. This way a rewrite costs O(1) per line written.
        grown = self._lines - self._kept
        if grown > COMPACT_LINES and self._lines > 4 * len(self._live):
            self._rewrite()

    def _rewrite(self) -> None:
        """Replace the file with its epoch, the remembered acknowledged entries and the live
        ones (atomically: a new file renamed over the old)."""
        self.close()
        tmp = self.path.with_suffix(".tmp")
        body = [f"E {self._epoch}\n"]
        # Oldest first, as they were remembered: reading them back keeps the bound's order.
        body += [f"I {n} {pid} {d}\nA {n}\n" for pid, (n, d) in self._recent.items()]
        body += [f"I {n} {pid} {d}\n" for pid, (n, d) in sorted(self._live.items())]
        # Keeps the numbering going past acknowledged messages after a rewrite.
        body.append(f"I {self._next - 1} 0 -\nA {self._next - 1}\n" if self._next > 1 else "")
        tmp.write_text("".join(body), "ascii")
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._lines = self._kept = sum(line.count("\n") for line in body)
