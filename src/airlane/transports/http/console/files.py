"""Where the console's files are."""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The console's built files (see the package's docstring)."""
