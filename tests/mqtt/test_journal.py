"""`InflightJournal`: a copy of a message sent again gets the message's number back (so the log
stores it once), while it is in flight and, for a broker that sends it after acknowledging it,
for a while after."""

from __future__ import annotations

from pathlib import Path

from airlane.transports.mqtt.journal import COMPACT_LINES, RECENT, InflightJournal


def journal(directory: Path) -> InflightJournal:
    opened = InflightJournal(directory)
    opened.open()
    return opened


def test_a_copy_in_flight_and_a_copy_after_the_acknowledgement_keep_their_number(
    tmp_path: Path,
) -> None:
    j = journal(tmp_path)
    first, line = j.take(7, "digest-a", dup=False)
    assert line is not None
    j.write([line])
    again, line = j.take(7, "digest-a", dup=True)  # in flight: same number
    assert again == first and line is None
    released = j.release(7)  # QoS 2: PUBREL came
    assert released is not None
    j.write([released])
    # Mosquitto 2.0 restarted from its store: the PUBLISH comes again, DUP set.
    late, line = j.take(7, "digest-a", dup=True)
    assert late == first and line is None
    # Another message under the same id is another message.
    other, line = j.take(7, "digest-b", dup=True)
    assert other.number != first.number and line is not None


def test_a_new_message_under_a_remembered_id_forgets_the_old_one(tmp_path: Path) -> None:
    j = journal(tmp_path)
    first, _ = j.take(3, "d", dup=False)
    j.release(3)
    fresh, _ = j.take(3, "d", dup=False)  # no DUP: the broker reused the id
    assert fresh.number != first.number
    j.release(3)
    copy, _ = j.take(3, "d", dup=True)
    assert copy == fresh


def test_the_remembered_ones_survive_a_restart_and_are_bounded(tmp_path: Path) -> None:
    j = journal(tmp_path)
    taken, line = j.take(11, "x", dup=False)
    assert line is not None
    j.write([line])
    settled = j.settle(11, taken.number)
    assert settled is not None
    j.write([settled])
    j.close()
    reopened = journal(tmp_path)
    copy, line = reopened.take(11, "x", dup=True)
    assert copy.number == taken.number and line is None
    for packet_id in range(1, RECENT + 2):
        reopened.take(packet_id, "y", dup=False)
        reopened.release(packet_id)
    # The oldest fell out of the bound: a copy of it is numbered anew.
    assert reopened.take(1, "y", dup=True)[1] is not None
    assert reopened.take(RECENT + 1, "y", dup=True)[1] is None


def _acknowledged(j: InflightJournal, packet_id: int, digest: str) -> int:
    taken, line = j.take(packet_id, digest, dup=False)
    assert line is not None
    j.write([line])
    settled = j.settle(packet_id, taken.number)
    assert settled is not None
    j.write([settled])
    return taken.number


def test_the_remembered_ones_survive_two_restarts_and_a_compaction(tmp_path: Path) -> None:
    """Each open rewrites the file, and so does a compaction: the acknowledged messages it
    remembers must be in the new file too, or the process after the next crash forgets them
    and stores a late copy twice."""
    j = journal(tmp_path)
    number = _acknowledged(j, 11, "x")
    j.close()
    journal(tmp_path).close()  # a restart: the file is rewritten
    reopened = journal(tmp_path)
    copy, line = reopened.take(11, "x", dup=True)
    assert copy.number == number and line is None
    # Enough messages to compact the file (each is two lines).
    for packet_id in range(1000, 1000 + COMPACT_LINES // 2 + 1):
        number = _acknowledged(reopened, packet_id, "z")
    reopened.close()
    again = journal(tmp_path)
    copy, line = again.take(packet_id, "z", dup=True)
    assert copy.number == number and line is None
    assert again.take(11, "x", dup=True)[1] is not None  # past the bound: numbered anew
    lines = tmp_path.joinpath("inflight.journal").read_text().count("\n")
    assert lines <= 2 * RECENT + 8, lines  # bounded by what is remembered
