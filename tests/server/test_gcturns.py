"""`GcTurns`: one holder of the turn at a time among the handles on one file, taken without
waiting, and given back by the kernel when the holding process dies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from airlane.server.gcturns import GcTurns, turns_path

HOLD = """
import sys, time
from pathlib import Path
from airlane.server.gcturns import GcTurns
turns = GcTurns(Path(sys.argv[1]))
assert turns.take()
print("held", flush=True)
time.sleep(60)
"""


def test_one_holder_at_a_time(tmp_path: Path) -> None:
    path = turns_path(tmp_path)
    first, second = GcTurns(path), GcTurns(path)
    try:
        assert first.take() and first.holding
        assert first.take()  # already held: still this one's
        assert not second.take() and not second.holding
        first.give_back()
        assert not first.holding
        assert second.take()
        assert not first.take()
        second.close()  # closing gives it back
        assert first.take()
    finally:
        first.close()
        second.close()
    # Closed, a handle opens the file again at its next take (a pacer started again).
    assert first.take()
    second = GcTurns(path)
    try:
        assert not second.take()
    finally:
        first.close()
        second.close()


def test_a_killed_holder_leaves_the_turn_free(tmp_path: Path) -> None:
    path = turns_path(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    turns = GcTurns(path)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not turns.take()
        holder.send_signal(signal.SIGKILL)  # mid-pass, say
        holder.wait(10)
        assert turns.take()
    finally:
        holder.kill()
        holder.wait(10)
        turns.close()
