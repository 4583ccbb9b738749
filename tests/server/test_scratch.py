"""The supervisor's temporary directory: locked while it lives, removed when it ends, and
removed by the next supervisor when it was killed outright (a real process, SIGKILLed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airlane.server.scratch import PREFIX, scratch_dir, sweep_abandoned

HOLD = """
import sys, time
from airlane.server.scratch import scratch_dir
with scratch_dir() as path:
    print(path, flush=True)
    time.sleep(60)
"""


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    return tmp_path


def test_a_directory_lives_with_its_block_and_is_not_swept_meanwhile(tmpdir_env: Path) -> None:
    with scratch_dir() as path:
        assert path.parent == tmpdir_env and path.name.startswith(PREFIX)
        (path / "board").write_bytes(b"x")
        assert sweep_abandoned() == []  # its lock is held (here: another open of the file)
        assert path.is_dir()
    assert not path.exists()
    assert list(tmpdir_env.iterdir()) == []


def test_the_directory_of_a_killed_supervisor_is_swept_and_a_live_ones_kept(
    tmpdir_env: Path,
) -> None:
    env = {**os.environ, "TMPDIR": str(tmpdir_env)}
    killed = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env
    )
    live = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert killed.stdout is not None and live.stdout is not None
        left, kept = Path(killed.stdout.readline().strip()), Path(live.stdout.readline().strip())
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        assert left.is_dir()  # it could not remove it
        (tmpdir_env / f"{PREFIX}old").mkdir()  # no lock in it: not known to be abandoned
        with scratch_dir() as mine:  # a new supervisor
            assert not left.exists()
            assert kept.is_dir() and (tmpdir_env / f"{PREFIX}old").is_dir()
            assert sorted(tmpdir_env.iterdir()) == sorted([kept, mine, tmpdir_env / f"{PREFIX}old"])
    finally:
        for process in (killed, live):
            process.kill()
            process.wait(10)
