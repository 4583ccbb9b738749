"""Tests of the A/B benchmark, `benchmarks/ab.py`: run as a subprocess at a tiny size, as a
user would run it (``HEAD`` against the working tree), and its pure parts imported directly.
No timing assertions: at this size the numbers are noise."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "ab.py"
RUN_KEYS = {
    "round", "side", "position", "flags", "transport", "streams", "chunks_per_stream", "mode",
    "chunks_expected", "chunks_received", "errors", "payload_mb_s", "chunks_per_s", "ttfc_ms",
    "lag_ms", "server_cpu", "client_cpu",
}  # fmt: skip


def ab_script(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/ab.py`` to completion from the repository root."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def worktrees() -> set[str]:
    """The paths of this repository's worktrees, as git lists them."""
    listing = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split(" ", 1)[1] for line in listing.splitlines() if line.startswith("worktree ")}


@pytest.fixture(scope="module")
def ab() -> Iterator[ModuleType]:
    """The script imported as a module (it is not in a package)."""
    spec = importlib.util.spec_from_file_location("ab_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up while it executes.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_help() -> None:
    result = ab_script("--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--base" in result.stdout and "--json" in result.stdout


@pytest.mark.parametrize("transport", ["sse", "ws"])
def test_smoke(transport: str, tmp_path: Path) -> None:
    json_path = tmp_path / "ab.json"
    before = worktrees()
    result = ab_script(
        "--base", "HEAD", "--transport", transport, "--streams", "3", "--chunks", "5",
        "--runs", "1", "--json", str(json_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "new/base" in result.stdout and "working tree" in result.stdout

    document = json.loads(json_path.read_text())
    assert document["benchmark"] == "ab" and document["cpus"] >= 1
    assert document["config"]["transport"] == transport and document["config"]["runs"] == 1
    runs = document["runs"]
    assert sorted(run["side"] for run in runs) == ["base", "new"]
    for run in runs:
        assert not RUN_KEYS - set(run), RUN_KEYS - set(run)
        assert run["transport"] == transport and run["round"] == 1
        assert run["chunks_received"] == run["chunks_expected"] == 15
        assert run["flags"] == []
    assert [run["side"] for run in runs] == ["base", "new"]  # round 1: base first

    base, new = document["revisions"]["base"], document["revisions"]["new"]
    assert base["spec"] == "HEAD" and len(base["sha"]) == 40
    assert new["working_tree"] is True and new["tree"] == str(REPO)
    assert base["python"] == new["python"] == sys.executable  # the default: this interpreter
    assert not Path(base["tree"]).exists()  # the temporary worktree is gone...
    assert base["tree"] not in worktrees()  # ...and unregistered
    assert worktrees() == before

    summary = document["summary"]
    assert summary["rounds_compared"] == 1
    assert set(summary["sides"]) == {"base", "new"}
    assert summary["sides"]["base"]["payload_mb_s"]["n"] == 1
    assert summary["ratios_new_over_base"]["payload_mb_s"] is not None


def test_bad_revision() -> None:
    before = worktrees()
    result = ab_script("--base", "no-such-rev-xyz", "--runs", "1")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: unknown revision 'no-such-rev-xyz' for --base"
    assert worktrees() == before


def test_a_gateway_that_fails_to_start_is_reported(ab: ModuleType, tmp_path: Path) -> None:
    # A "revision" whose airlane package exits at once: the guard passes (airlane is imported
    # from that tree), the gateway does not start, and the error quotes its output.
    package = tmp_path / "src" / "airlane"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import sys\nprint('no gateway here')\nsys.exit(3)\n")
    revision = ab.Revision("base", "fake", "0" * 40, "fake", tree=tmp_path)
    with contextlib.ExitStack() as stack, pytest.raises(ab.GatewayStartError, match="no gateway"):
        ab.start_gateway(revision, stack)


def test_the_import_guard_refuses_a_tree_without_airlane(ab: ModuleType, tmp_path: Path) -> None:
    # Without <tree>/src/airlane the editable install would answer: both sides the same code.
    revision = ab.Revision("base", "fake", "0" * 40, "fake", tree=tmp_path)
    with pytest.raises(ab.GatewayStartError, match="imports airlane from"):
        ab.check_imports(revision)


def test_each_side_runs_on_the_interpreter_it_is_given(ab: ModuleType, tmp_path: Path) -> None:
    # A stand-in interpreter that leaves a mark for each command it runs, then runs it on this
    # one: the import guard and the gateway both go through it.
    marks = tmp_path / "marks"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {marks}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    revision = ab.Revision("new", None, "0" * 40, "here", python=str(python))
    assert revision.title.endswith(f"[on {python}]")
    assert revision.to_dict()["python"] == str(python)
    with contextlib.ExitStack() as stack:
        gateway = ab.start_gateway(revision, stack)
        assert gateway.url.startswith("http://127.0.0.1:")
    lines = marks.read_text().splitlines()
    assert lines[0].startswith("-c import airlane")  # the guard
    assert lines[1].startswith("-m airlane serve --port 0")  # the gateway


def test_an_interpreter_that_is_not_there_is_reported(tmp_path: Path) -> None:
    before = worktrees()
    missing = tmp_path / "no-such-python"
    result = ab_script("--base", "HEAD", "--new-python", str(missing), "--runs", "1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"error: could not start a gateway: the new side's {missing}" in result.stderr
    assert worktrees() == before


def test_a_side_runs_with_the_configuration_it_is_given(ab: ModuleType, tmp_path: Path) -> None:
    """``--new-config``: that side's gateway is started with ``--config FILE`` (its command
    line says so), and reads it (a value it refuses stops it starting, with the reason)."""
    marks = tmp_path / "marks"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {marks}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    config = tmp_path / "share.toml"
    config.write_text("[admission]\nshare = 1.0\n")
    revision = ab.Revision("new", None, "0" * 40, "here", python=str(python), config=config)
    assert revision.title.endswith(f"[--config {config}]")
    assert revision.to_dict()["config"] == str(config)
    with contextlib.ExitStack() as stack:
        gateway = ab.start_gateway(revision, stack)
        assert gateway.url.startswith("http://127.0.0.1:")
    assert marks.read_text().splitlines()[1].endswith(f"--config {config}")
    # A configuration the gateway refuses stops it starting, with its reason.
    config.write_text("[admission]\nshare = 7\n")
    with contextlib.ExitStack() as stack, pytest.raises(ab.GatewayStartError, match="share"):
        ab.start_gateway(revision, stack)


def test_a_configuration_file_that_is_not_there_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "no-such.toml"
    result = ab_script("--base", "HEAD", "--base-config", str(missing), "--runs", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"the base side's configuration file {missing} is not there" in result.stderr


def _record(round_: int, side: str, mb_s: float, errors: int = 0) -> dict[str, Any]:
    result = {
        "errors": errors, "error_samples": ["boom"] if errors else [], "out_of_order": 0,
        "chunks_received": 100 - errors, "chunks_expected": 100, "payload_mb_s": mb_s,
        "chunks_per_s": mb_s * 1000, "ttfc_ms": {"p99": 1.0}, "lag_ms": {"p99": 2.0},
        "kept_up_pct": None, "server_cpu": {"mean_pct": 90.0}, "client_cpu": None,
        "wall_s": 100 / mb_s,  # CPU per chunk: 0.9 * wall_s * 1e6 / chunks
    }  # fmt: skip
    return {"round": round_, "side": side, **result}


def test_flagged_runs_are_left_out_of_the_summary(ab: ModuleType) -> None:
    records = [
        _record(1, "base", 10.0), _record(1, "new", 12.0),
        _record(2, "new", 15.0), _record(2, "base", 10.0),
        _record(3, "base", 50.0, errors=2), _record(3, "new", 11.0),
    ]  # fmt: skip
    for record in records:
        record["flags"] = ab.flags(record)
    assert records[4]["flags"] == ["2 failed streams: boom", "98 of 100 chunks"]
    summary = ab.summarize(records, "burst")
    base = summary["sides"]["base"]
    assert base["clean_runs"] == 2 and base["flagged_runs"] == 1
    assert base["payload_mb_s"] == {"median": 10.0, "min": 10.0, "max": 10.0, "n": 2}
    assert base["client_cpu_pct"] is None and "kept_up_pct" not in base
    assert summary["rounds_compared"] == 2  # round 3 has a flagged side
    assert summary["ratios_new_over_base"]["payload_mb_s"]["median"] == pytest.approx(1.35)
    # Server CPU per chunk: 90 % of a wall time of 100 / MB/s, over 100 chunks.
    assert base["server_us_per_chunk"]["median"] == pytest.approx(0.9 * 10.0 * 1e6 / 100)
    per_chunk = summary["ratios_new_over_base"]["server_us_per_chunk"]["median"]
    assert per_chunk == pytest.approx(1 / 1.35, rel=0.05)
    lines = ab.summary_lines(summary, "burst")
    assert any(line.startswith("WARNING: 1 flagged run") for line in lines)
    assert "FLAGGED" in ab.run_line(records[4], "burst")


def test_order_alternates(ab: ModuleType) -> None:
    assert [ab.order_of(i) for i in range(3)] == [
        ("base", "new"), ("new", "base"), ("base", "new"),
    ]  # fmt: skip
