"""Fixtures of the MQTT bridge tests: a real Mosquitto per test, a gateway in this process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from tests.mosquitto import Mosquitto, running_mosquitto


@pytest.fixture
def broker() -> Iterator[Mosquitto]:
    """A fresh Mosquitto on a free port."""
    with running_mosquitto() as running:
        yield running


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    """A gateway with in-memory streams and logs."""
    gateway = Gateway(MemoryHub(), SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.aclose()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """The bridge's state directory."""
    return tmp_path / "bridge"
