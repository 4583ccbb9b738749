"""``airlane bench`` smoke test at a tiny size: it spawns its own gateway, runs both
transports, and writes JSON and a PNG. No timing assertions: CI machines vary."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

from airlane.bench.memory import describe_host, describe_python
from tests.cli.conftest import airlane

RESULT_FIELDS = {
    "transport", "streams", "chunks_per_stream", "mode", "wall_s", "chunks_expected",
    "chunks_received", "streams_completed", "errors", "out_of_order", "payload_bytes",
    "payload_mb_s", "chunks_per_s", "ttfc_ms", "lag_ms", "steady_lag_ms", "kept_up_pct",
    "server_cpu", "client_cpu", "steal_pct", "python_op_ns",
}  # fmt: skip


def test_bench_spawn_smoke(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "x.json", tmp_path / "y.png"
    result = airlane(
        "bench", "--spawn", "--streams", "5", "--chunks", "20", "--transport", "both",
        "--json", str(json_path), "--plot", str(plot_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TTFC p99 (ms)" in result.stdout
    assert "VM steal" in result.stdout and "Python step (ns)" in result.stdout
    assert f"on CPython {platform.python_version()}, " in result.stdout
    document = json.loads(json_path.read_text())
    assert document["spawned"] is True
    # The interpreter, whose build moves the numbers (the gateway was spawned on this one).
    build = document["host"]["python_build"]
    assert build["executable"] == sys.executable and build["version"] == platform.python_version()
    assert build["libpython"] in {"shared", "static"}
    assert [r["transport"] for r in document["results"]] == ["sse", "ws"]
    for run in document["results"]:
        assert set(run) >= RESULT_FIELDS
        assert run["chunks_expected"] == 100
        assert run["chunks_received"] == run["chunks_expected"]
        assert run["errors"] == 0 and run["out_of_order"] == 0
        assert set(run["ttfc_ms"]) >= {"p50", "p95", "p99"} and run["ttfc_ms"]["count"] == 5
        assert run["lag_ms"]["count"] == 100
        # Linux reports steal (0 on bare metal); anything else, none.
        assert run["steal_pct"] is None or 0 <= run["steal_pct"] <= 100
        assert run["python_op_ns"] > 0  # the machine's speed, taken before the run
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_paced_smoke(tmp_path: Path) -> None:
    json_path = tmp_path / "paced.json"
    result = airlane(
        "bench", "--spawn", "--streams", "3", "--chunks", "10", "--mode", "paced",
        "--interval-ms", "5", "--transport", "sse", "--json", str(json_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "while all streams ran" in result.stdout
    [run] = json.loads(json_path.read_text())["results"]
    assert run["chunks_received"] == 30 and run["kept_up_pct"] is not None
    # Three streams that start together and run for ten intervals overlap.
    assert run["steady_lag_ms"]["count"] > 0


def test_bench_refuses_remote_targets() -> None:
    result = airlane("bench", "--url", "http://example.com:8420")
    assert result.returncode == 2
    assert "loopback" in result.stdout + result.stderr


def test_the_interpreter_s_libpython_is_told_from_the_process_s_mappings() -> None:
    # This interpreter's own mappings decide: a shared libpython is mapped from its own file.
    maps = Path("/proc/self/maps").read_text()
    expected = "shared" if "/libpython" in maps else "static"
    assert describe_python()["libpython"] == expected
    assert describe_host()["python_build"] == describe_python()


def test_without_proc_the_libpython_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("/proc/self/maps")

    monkeypatch.setattr("builtins.open", no_proc)
    assert describe_python()["libpython"] is None
