"""`airlane bench` as a newcomer runs it: output folders made, unwritable paths said before
the run, total failure reported as failure (documented exit codes), no impossible steal."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def bench(*args: str, cwd: Path, columns: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airlane", "bench", *args],
        capture_output=True, text=True, timeout=180, check=False, cwd=cwd,
        env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_the_readme_command_makes_its_output_folder(tmp_path: Path) -> None:
    result = bench("--spawn", "--streams", "5", "--chunks", "20", "--transport", "both",
                   "--json", "bench-results/burst-5.json", "--plot", "bench-results/burst-5.png",
                   cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "bench-results" / "burst-5.json").stat().st_size > 0
    assert (tmp_path / "bench-results" / "burst-5.png").stat().st_size > 0
    assert "Traceback" not in result.stderr


def test_outputs_that_cannot_be_written_are_one_line_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    for args, said in (
        (["--plot", "out.xyz"], "--plot out.xyz: write .png, .svg, .pdf"),
        (["--json", "file/out.json"], "--json file/out.json"),
    ):
        result = bench("--spawn", "--streams", "2", *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        out = result.stdout + result.stderr
        assert said in out and "Traceback" not in out
        assert "starting a gateway" not in out  # refused before anything ran


def test_nothing_listening_is_exit_3_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as held:  # a port that is bound but does not listen
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        result = bench("--url", url, "--streams", "3", "--chunks", "5", "--timeout", "10",
                       cwd=tmp_path)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 3, out[-2000:]
    assert f"nothing connected to {url}" in out
    assert "Traceback" not in out
    for row in ("VM steal", "client CPU", "server CPU"):  # no figures from a run of ~0 s
        lines = [line for line in out.splitlines() if row in line]
        assert lines and all("%" not in line for line in lines), lines


def test_six_transports_fit_an_80_column_terminal_uncut(tmp_path: Path) -> None:
    result = bench("--spawn", "--streams", "2", "--chunks", "5", "--transport", "all",
                   cwd=tmp_path, columns=80)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "\u2026" not in result.stdout and "..." not in result.stdout  # nothing cut
    assert "(1/2)" in result.stdout  # split over two tables, each with the labels
    for label in ("out-of-order chunks", "chunks received / expected", "delivery lag p99 (ms)"):
        assert result.stdout.count(label) >= 2, label
    for transport in ("sse", "ws", "airc", "airc-ws", "grpc", "grpc-web"):
        assert any(line.split() and transport in line.split() for line in lines), transport
