"""``airlane bench --hub nats://...``: the spawned gateway appends through a real JetStream
broker (the tests' ``nats-server``), and the report says which hub it measured."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import airlane
from tests.natsserver import NatsServer


def test_bench_on_a_jetstream_hub(tmp_path: Path, nats_session: NatsServer) -> None:
    json_path = tmp_path / "hub.json"
    result = airlane(
        "bench", "--hub", nats_session.url, "--streams", "5", "--chunks", "20",
        "--transport", "sse", "--json", str(json_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(json_path.read_text())
    assert document["spawned"] is True and document["hub"] == nats_session.url
    [run] = document["results"]
    assert run["chunks_received"] == run["chunks_expected"] == 100
    assert run["errors"] == 0 and run["out_of_order"] == 0


def test_hub_goes_with_a_spawned_gateway_only() -> None:
    for args in (["--url", "http://127.0.0.1:8420"], ["--compare"]):
        result = airlane("bench", "--hub", "nats://127.0.0.1:4222", *args)
        assert result.returncode == 2
        assert "--hub is the spawned gateway's" in result.stdout + result.stderr
    result = airlane("bench", "--hub", "memory")
    assert result.returncode == 2 and "nats://" in result.stdout + result.stderr
