"""Fixtures of the server tests."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_gc() -> Iterator[None]:
    """The test changes the process's garbage collector: put it back as it was."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
