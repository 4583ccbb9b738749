"""Gateways with special settings, shared by the HTTP integration tests (each is a real
``airlane serve`` process; see `tests.servers`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.http.support import PACED_SYNTHETIC
from tests.servers import ServerProcess, run_server

API_KEY = "secret"


@pytest.fixture(scope="session")
def paced_server() -> Iterator[ServerProcess]:
    """Synthetic tokens every 10 ms: long generations are still running while a client
    drops and resumes."""
    with run_server(config=PACED_SYNTHETIC) as running:
        yield running


@pytest.fixture(scope="session")
def keyed_server() -> Iterator[ServerProcess]:
    """A gateway that requires ``Authorization: Bearer secret``."""
    with run_server("--api-key", API_KEY) as running:
        yield running
