"""The RSocket transport driven by RSocket-JS under Node (``rsocket-core`` 1.0.0-alpha line,
``rsocket-tcp-client``, ``rsocket-websocket-client``, ``rsocket-composite-metadata``): clients
nobody here wrote, over TCP and WebSocket.

Each test runs one scenario of ``tests/rsocket/node/rsocket-client.mjs``, which connects, does
its requests and prints what it saw as one JSON line. Without Node.js or the client's packages
(``npm ci --prefix tests/rsocket/node``, which ``scripts/setup.sh`` runs) the tests skip,
except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client.conftest import PACED_SYNTHETIC
from tests.rsocket.conftest import API_KEY
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

NODE_DIR = Path(__file__).resolve().parent / "node"
CLIENT = NODE_DIR / "rsocket-client.mjs"

# RSocket error codes (RSocket 1.0, "Error Codes").
REJECTED_SETUP = 0x003
APPLICATION_ERROR = 0x201
REJECTED = 0x202
INVALID = 0x204

# The server's first grant for a channel's commands (`airlane.transports.rsocket.channel`).
CHANNEL_WINDOW = 64


def node_binary() -> str:
    """``node``, with the client's packages installed; skips the test without them (fails it
    in CI, ``CI=true``, where setup installs them)."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (NODE_DIR / "node_modules" / "rsocket-core").is_dir():
        missing = f"run 'npm ci --prefix {NODE_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"RSocket-JS interop tests need Node.js: {missing}")
        pytest.skip(f"RSocket-JS interop tests need Node.js: {missing}")
    assert node is not None
    return node


def run_client(server: ServerProcess, transport: str, scenario: str, *extra: str) -> Any:
    """Run one scenario of the Node client against ``server``; its JSON result."""
    node = node_binary()
    if transport == "tcp":
        assert server.rsocket is not None
        host, port = server.rsocket
        where = ["--transport", "tcp", "--host", host, "--port", str(port)]
    else:
        url = server.url.replace("http://", "ws://", 1) + "/v1/rsocket"
        where = ["--transport", "ws", "--url", url]
    command = [node, str(CLIENT), *where, "--scenario", scenario, *extra]
    done = subprocess.run(
        command, cwd=NODE_DIR, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (
        f"{scenario} over {transport} failed (rc {done.returncode}):\n"
        f"stdout: {done.stdout}\nstderr: {done.stderr}"
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from {scenario} over {transport}: {done.stdout!r} {done.stderr!r}"
    result = json.loads(lines[-1])
    assert result["scenario"] == scenario and result["transport"] == transport
    return result


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in events if e.get("kind") == "delta")


@pytest.fixture(scope="module")
def guarded() -> Iterator[ServerProcess]:
    """A gateway with an API key."""
    with run_server("--api-key", API_KEY, config=PACED_SYNTHETIC) as running:
        assert running.rsocket is not None
        yield running


def test_a_generation_is_a_request_stream(gateway: ServerProcess, transport: str) -> None:
    result = run_client(gateway, transport, "stream")
    started, *events = result["payloads"]
    assert started["kind"] == "started" and started["seq"] == 0
    assert started["stream_id"] and started["epoch"]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] >= 1
    assert events[-1]["kind"] == "done"
    assert text_of(events)
    # The last payload, the done event, carries COMPLETE (NEXT|COMPLETE, no bare COMPLETE).
    assert result["completed_by"] == "payload"


def test_a_slow_reader_gets_no_more_than_it_asks_for(
    gateway: ServerProcess, transport: str
) -> None:
    """REQUEST_STREAM with n=1, then REQUEST_N(1) a little after each payload."""
    result = run_client(gateway, transport, "slow")
    payloads = result["payloads"]
    assert result["max_between_grants"] <= 1, result["max_between_grants"]
    assert len(payloads) <= result["grants"]
    assert payloads[0]["kind"] == "started" and payloads[-1]["kind"] == "done"
    assert len(payloads) > 3
    # A slow reader may get deltas joined, never lose any.
    snapshot = result["snapshot"]
    assert snapshot["kind"] == "snapshot" and snapshot["seq"] == payloads[-1]["seq"]
    assert text_of(payloads[1:]) == snapshot["text"]["content"]


def test_unary_calls_are_request_response(gateway: ServerProcess, transport: str) -> None:
    result = run_client(gateway, transport, "response")
    started, *events = result["payloads"]
    info, snapshot = result["info"], result["snapshot"]
    assert info["id"] == started["stream_id"] and info["epoch"] == started["epoch"]
    assert info["ended"] and info["last_seq"] == events[-1]["seq"]
    assert snapshot["kind"] == "snapshot" and snapshot["text"]["content"] == text_of(events)
    assert result["missing"]["code"] == APPLICATION_ERROR
    assert result["missing"]["message"].startswith("stream_not_found")


def test_publishing_is_fire_and_forget(gateway: ServerProcess, transport: str) -> None:
    result = run_client(gateway, transport, "fnf")
    assert result["info"]["id"] == result["stream_id"]
    assert result["info"]["last_seq"] == 5
    assert result["published"] == {"stream_id": result["stream_id"], "seq": 6}


def test_an_agent_session_is_a_request_channel(gateway: ServerProcess, transport: str) -> None:
    """generate in REQUEST_CHANNEL, publish once granted, then the client's bare COMPLETE;
    the server completes the channel once the generation is over."""
    result = run_client(gateway, transport, "channel")
    got, notes = result["got"], result["notes"]
    assert result["granted"][0] == CHANNEL_WINDOW and result["sent"] == 2
    answers = {m["id"]: m for m in got if "id" in m}
    assert answers[1]["op"] == "started" and answers[1]["epoch"]
    assert answers[2] == {"op": "published", "stream_id": notes, "seq": 1, "id": 2}
    generated = answers[1]["stream_id"]
    events = [m["event"] for m in got if m.get("stream_id") == generated and "event" in m]
    assert events[-1]["kind"] == "done" and text_of(events)
    ended = {"op": "ended", "stream_id": generated, "seq": events[-1]["seq"]}
    assert ended in got
    assert got.index(ended) > max(i for i, m in enumerate(got) if "event" in m)
    assert not [m for m in got if m.get("op") == "error"]
    assert result["completed_by"] in ("complete", "payload")


def test_an_unknown_route_is_refused_and_the_connection_goes_on(
    gateway: ServerProcess, transport: str
) -> None:
    result = run_client(gateway, transport, "bad-route")
    assert result["error"]["code"] == INVALID
    assert result["error"]["message"].startswith("unknown_op"), result["error"]
    assert "no.such.route" in result["error"]["message"]
    assert result["after"]["code"] == APPLICATION_ERROR
    assert result["after"]["message"].startswith("stream_not_found")


def test_bearer_tokens_in_request_metadata(guarded: ServerProcess, transport: str) -> None:
    result = run_client(guarded, transport, "auth", "--token", API_KEY)
    assert result["anonymous"]["code"] == REJECTED
    assert result["anonymous"]["message"].startswith("unauthenticated")
    assert result["published"]["seq"] == 1
    assert result["wrong"]["code"] == REJECTED
    assert result["wrong"]["message"].startswith("unauthenticated")


def test_simple_credentials_in_setup(guarded: ServerProcess, transport: str) -> None:
    result = run_client(guarded, transport, "setup-auth", "--token", API_KEY)
    assert result["published"]["seq"] == 1 and result["info"]["last_seq"] == 1
    wrong = run_client(guarded, transport, "setup-auth", "--token", f"{API_KEY}-wrong")
    assert "published" not in wrong
    assert wrong["connection_error"]["code"] == REJECTED_SETUP
    assert wrong["connection_error"]["message"].startswith("unauthenticated")
