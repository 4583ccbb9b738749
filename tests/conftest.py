"""Shared fixtures: a real gateway process for the integration tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest explains a failed ``assert`` only in the modules it rewrites: test files and conftests.
# The shared test bodies (``contract.py``) and helpers (``support.py``, the servers) hold asserts
# too, and a flake in CI leaves only its report: every module under tests/ is rewritten, asked
# for here before any of them is imported.
_HERE = Path(__file__).parent
pytest.register_assert_rewrite(
    *(f"tests.{p.name}" for p in _HERE.iterdir() if (p / "__init__.py").is_file()),
    *(f"tests.{p.stem}" for p in _HERE.glob("*.py") if not p.stem.startswith(("test_", "_"))),
)

from tests.natsserver import NatsServer, running_nats  # noqa: E402 (after the rewrite hook)
from tests.servers import ServerProcess, run_server  # noqa: E402

# A test run started in the background of a script (``cmd &``) inherits SIGINT ignored, and so
# would every process the tests start: a gateway or client told to stop with SIGINT (Ctrl-C)
# would ignore it, and the tests of that stop would fail for the way they were launched.
# Handled again here, in the main thread, before any test starts a process.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """One gateway for the session (synthetic backend, fast timing); tests that kill or
    reconfigure a server start their own with `run_server`."""
    with run_server() as running:
        yield running


@pytest.fixture(scope="session")
def nats_session() -> Iterator[NatsServer]:
    """One ``nats-server -js`` for the session; tests that restart the broker start their own
    with `running_nats`. Tests keep apart by using their own bucket and stream names."""
    with running_nats() as running:
        yield running


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A fresh ``nats-server -js`` (its own port and store) for one test."""
    with running_nats() as running:
        yield running
