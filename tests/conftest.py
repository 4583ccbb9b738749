"""Shared fixtures: a real gateway process for the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import ServerProcess, run_server


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """One gateway for the session (synthetic backend, fast timing); tests that kill or
    reconfigure a server start their own with `run_server`."""
    with run_server() as running:
        yield running
