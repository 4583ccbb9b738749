"""Builds of the C library, compiled once per test session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .binding import FUZZ_PROFILE, Library, build, compiler


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this session's builds go."""
    if shutil.which(compiler()) is None:
        pytest.fail(f"no C compiler ({compiler()}): ./scripts/setup.sh --test installs gcc")
    return tmp_path_factory.mktemp("airc-c")


@pytest.fixture(scope="session")
def library(build_dir: Path) -> Library:
    """The library with the fuzz profile's small limits, optimized as for a device."""
    return Library(build(build_dir, FUZZ_PROFILE))
