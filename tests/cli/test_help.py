"""Every command's ``--help`` reads as text for a person: no type noise beside flags, no
reStructuredText markup shown literally; ``airlane --version`` answers like ``airlane version``."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from airlane.cli.main import app


def commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    if hasattr(group, "commands"):  # a group (typer carries its own click)
        for name, command in sorted(group.commands.items()):
            if not command.hidden:
                found += commands(command, (*prefix, name))
    return found


ALL = commands(typer.main.get_command(app))


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) or "airlane" for p in ALL])
def test_help_has_no_type_noise_or_literal_markup(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "``" not in result.output, result.output


def test_version_both_ways() -> None:
    run = [sys.executable, "-m", "airlane"]
    flag = subprocess.run(
        [*run, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    word = subprocess.run(
        [*run, "version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert flag.returncode == word.returncode == 0
    assert flag.stdout == word.stdout and flag.stdout.strip()
