"""``scripts/newcomer.sh``: a newcomer's first hour replayed on a fresh clone, so that the
README and the docs cannot drift from what works.

Every ``airlane`` command line in README.md and docs/*.md (in a shell code block, or an inline
``.venv/bin/airlane ...``) is replayed by the script or skipped there with a reason; the walk
itself passes; a walk that fails says where and leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "newcomer.sh"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCED_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", ""}
INLINE_COMMAND = re.compile(r"`(\.venv/bin/airlane [^`]+)`")
AIRLANE_COMMAND = re.compile(r"^(?:.*\|\s*)?airlane\s")
WALK_BOUND_S = 900


def normalized(command: str) -> str:
    """A command as written in the docs, comparable with the script's: no ``.venv/bin/``, no
    trailing comment or ``&``, one space between words."""
    command = re.sub(r"(^|\s)\.venv/bin/", r"\1", command)
    command = re.sub(r"\s+#\s.*$", "", command)
    return " ".join(command.removesuffix("&").split())


def shell_lines(block: str) -> list[str]:
    """A code block's command lines, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def documented_commands() -> dict[str, str]:
    """Every documented ``airlane`` command line, normalized, with the file it is in."""
    found: dict[str, str] = {}
    for document in DOCUMENTS:
        text = document.read_text()
        blocks = [
            block for language, block in FENCED_BLOCK.findall(text) if language in SHELL_LANGUAGES
        ]
        lines = [line for block in blocks for line in shell_lines(block)]
        lines += INLINE_COMMAND.findall(text)
        for line in map(normalized, lines):
            if AIRLANE_COMMAND.match(line):
                found.setdefault(line, document.name)
    return found


def script_entries(keyword: str) -> dict[str, list[str]]:
    """The script's ``example COMMAND`` or ``skip COMMAND REASON`` lines: command -> the rest."""
    entries = {}
    for line in SCRIPT.read_text().splitlines():
        if line.startswith(f"{keyword} "):
            words = shlex.split(line)
            entries[normalized(words[1])] = words[2:]
    return entries


def test_every_documented_command_is_replayed_or_skipped_with_a_reason() -> None:
    documented = documented_commands()
    assert len(documented) > 30  # the extraction found the docs' examples
    examples, skips = script_entries("example"), script_entries("skip")
    missing = {command: doc for command, doc in documented.items() if command not in examples}
    missing = {command: doc for command, doc in missing.items() if command not in skips}
    assert not missing, f"documented but not in scripts/newcomer.sh: {missing}"
    for command, reason in skips.items():
        assert reason and reason[0].strip(), f"skipped without a reason: {command}"


def test_the_script_replays_nothing_the_docs_no_longer_say() -> None:
    documented = documented_commands()
    listed = {**script_entries("example"), **script_entries("skip")}
    stale = [c for c in listed if c.startswith("airlane") and c not in documented]
    assert not stale, f"in scripts/newcomer.sh but no longer documented: {stale}"


def walk(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    environment = {**os.environ, "TMPDIR": str(tmp_path), **env}
    started = time.monotonic()
    result = subprocess.run(
        [str(SCRIPT)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=WALK_BOUND_S + 60,
        check=False,
    )
    return result, time.monotonic() - started


@pytest.mark.timeout(WALK_BOUND_S + 120)
def test_the_newcomer_walk_passes_on_a_fresh_clone(tmp_path: Path) -> None:
    result, seconds = walk(tmp_path, NEWCOMER_TIMEOUT_S=str(WALK_BOUND_S))
    assert result.returncode == 0, result.stderr[-6000:]
    assert re.search(r"newcomer: all \d+ steps passed", result.stderr)
    assert not list(tmp_path.glob("airlane-newcomer.*")), "the clone was not removed"
    print(f"newcomer walk: {seconds:.0f} s")


@pytest.mark.timeout(120)
def test_a_failed_walk_says_where_and_cleans_up(tmp_path: Path) -> None:
    # One second is not enough for the set-up: the walk stops there, removing its clone.
    result, _ = walk(tmp_path, NEWCOMER_TIMEOUT_S="1")
    assert result.returncode == 1
    assert "newcomer: FAILED at step 1: ./scripts/setup.sh" in result.stderr, result.stderr
    assert "newcomer: ran: " in result.stderr
    assert not list(tmp_path.glob("airlane-newcomer.*")), "the clone was not removed"
