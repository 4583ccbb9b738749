"""Fixtures of the Yjs tests: a started in-memory hub, and Node.js for the interop tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from airlane.hub import MemoryHub

from .support import node_binary


@pytest.fixture
async def hub() -> AsyncIterator[MemoryHub]:
    """A started `MemoryHub`, closed after the test."""
    memory = MemoryHub()
    await memory.start()
    yield memory
    await memory.aclose()


@pytest.fixture
def node() -> str:
    """The ``node`` binary (the test skips without it, and fails in CI)."""
    return node_binary()
