"""Fixtures for the client tests: a gateway whose generations last long enough to be cut."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.servers import ServerProcess, run_server

PACED_SYNTHETIC = """
[synthetic]
ttft_ms = 5.0
itl_ms = 2.0
itl_jitter_ms = 0.5
"""
"""About 2 ms per token: a 300-token answer streams for ~0.6 s, long enough to cut it."""

LONG_REQUEST = {
    "model": "airlane-synthetic",
    "messages": [{"role": "user", "content": "Tell me about resumable streams."}],
    "max_tokens": 300,
}
"""A request whose synthetic answer runs to the token limit."""


@pytest.fixture(scope="package")
def gateway() -> Iterator[ServerProcess]:
    """One gateway for the client tests."""
    with run_server(config=PACED_SYNTHETIC) as running:
        yield running


def reference_text(url: str, request: dict[str, object]) -> str:
    """The answer as a non-streaming completion: what every streamed variant must equal."""
    response = httpx.post(f"{url}/v1/chat/completions", json=request, timeout=30)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])
