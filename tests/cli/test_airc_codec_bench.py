"""Smoke test of ``benchmarks/airc_codec.py``: it runs as a user would run it (``--quick``)
and writes JSON of the documented shape. No timing assertions: at this size they are noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "airc_codec.py"


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_quick_json_to_stdout() -> None:
    result = run_script("--quick", "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["quick"] is True
    assert set(document["codec"]) == {"64 B", "1.2 KB", "64 KB"}
    for row in document["codec"].values():
        assert set(row) == {
            "payload_bytes",
            "encode_ns_per_frame",
            "encode_frames_per_s",
            "decode_ns_per_frame",
            "decode_frames_per_s",
        }
        assert all(isinstance(value, int) and value > 0 for value in row.values())
    assert [row["payload_bytes"] for row in document["codec"].values()] == [64, 1200, 65535]
    connection = document["connection"]
    assert connection["message_bytes"] == 1200
    assert connection["ns_per_message"] > 0 and connection["messages_per_s"] > 0
    memory = document["memory"]
    assert 0 < memory["idle_connection_bytes"] < memory["busy_connection_bytes"]
    # A busy connection holds at least the payloads of what it has in flight and held.
    held = memory["busy_in_flight_frames"] + memory["busy_held_frames"]
    assert memory["busy_connection_bytes"] > held * memory["busy_frame_payload_bytes"]


def test_quick_table_and_json_file(tmp_path: Path) -> None:
    path = tmp_path / "airc.json"
    result = run_script("--quick", "--repeat", "1", "--json", str(path))
    assert result.returncode == 0, result.stderr
    assert "encode ns" in result.stdout and "memory per connection" in result.stdout
    assert json.loads(path.read_text())["repeat"] == 1


def test_help() -> None:
    result = run_script("--help")
    assert result.returncode == 0
    assert "--quick" in result.stdout and "--json" in result.stdout
