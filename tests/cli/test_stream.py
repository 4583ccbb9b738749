"""``airlane stream``: a completion over either transport, and following an existing stream
from a resume token."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.cli.conftest import airlane
from tests.servers import ServerProcess

PROMPT = "Tell me about resumable streams."


def reference(url: str, max_tokens: int) -> str:
    body = {
        "model": "airlane-synthetic",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    return str(response.json()["choices"][0]["message"]["content"])


TRANSPORTS = ["sse", "ws", "airc", "airc-ws", "grpc", "rsocket"]


def url_for(server: ServerProcess, transport: str) -> str:
    """AIRC/TCP is addressed as tcp://host:port; everything else by the HTTP URL."""
    if transport == "airc":
        assert server.airc is not None
        return "tcp://{}:{}".format(*server.airc)
    if transport == "grpc":
        assert server.grpc is not None
        return server.grpc
    if transport == "rsocket":
        assert server.rsocket is not None
        return "tcp://{}:{}".format(*server.rsocket)
    return server.url


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stream_prints_the_completion(server: ServerProcess, transport: str) -> None:
    result = airlane(
        "stream", "--url", url_for(server, transport), "--transport", transport, "--prompt", PROMPT,
        "--max-tokens", "40",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == reference(server.url, 40)
    assert re.search(r"stream chatcmpl-\S+ +last id \S+:\d+ +finish length", result.stderr)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stream_follows_an_existing_stream_from_a_token(
    server: ServerProcess, transport: str
) -> None:
    name = f"tests/cli/follow-{transport}"
    events = [{"kind": "delta", "text": word} for word in ("one ", "two ", "three ", "four")]
    with httpx.Client(base_url=server.url) as http:
        http.post("/v1/streams", json={"name": name}).raise_for_status()
        published = http.post(f"/v1/streams/{name}/events", json={"events": events})
        token_after_two = published.json()["resume_token"].rsplit(":", 1)[0] + ":2"
        http.post(f"/v1/streams/{name}/events", json={"kind": "done"}).raise_for_status()
    result = airlane(
        "stream", "--url", url_for(server, transport), "--transport", transport,
        "--stream-id", name,
        "--from", token_after_two,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "three four"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stream_reports_an_unknown_stream(server: ServerProcess, transport: str) -> None:
    result = airlane(
        "stream", "--url", url_for(server, transport), "--transport", transport,
        "--stream-id", "nope",
    )  # fmt: skip
    assert result.returncode == 1
    assert "StreamNotFound" in result.stderr
