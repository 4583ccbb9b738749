"""Smoke tests of the proxy benchmark: `benchmarks/upstream.py` alone, then
`benchmarks/proxy.py` end to end at a tiny size. Performance is not asserted here."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
STAMP = re.compile(r"#(\d+)@(\d+)")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / "upstream.py"), "--port", "0", "--interval-ms", "5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"upstream listening on (http://\S+) \(pid (\d+)\)", line)
        assert match, line
        assert int(match.group(2)) == process.pid
        yield match.group(1)
    finally:
        process.terminate()
        process.wait(10)


def chat(**fields: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "two words"}], **fields}


def test_upstream_health(upstream: str) -> None:
    health = httpx.get(f"{upstream}/healthz", timeout=5).json()
    assert set(health) == {"pid", "streams"}


def test_upstream_streams_paced_stamped_chunks(upstream: str) -> None:
    body = chat(stream=True, stream_options={"include_usage": True}, bench={"chunks": 4})
    stamps: list[tuple[int, int, int]] = []
    frames: list[str] = []
    with httpx.stream("POST", f"{upstream}/v1/chat/completions", json=body, timeout=5) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/event-stream"
        for line in reply.iter_lines():
            received = time.monotonic_ns()
            if not line.startswith("data: "):
                continue
            frames.append(line[6:])
            for match in STAMP.finditer(line):
                stamps.append((int(match[1]), int(match[2]), received))
    assert [index for index, _, _ in stamps] == [0, 1, 2, 3]
    assert all(received >= ts for _, ts, received in stamps), "a chunk came before its time"
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(stamps)]
    assert gaps == [5_000_000] * 3
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(frame) for frame in frames[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = chunks[1]["choices"][0]["delta"]["content"]
    assert len(content.split()) == 16
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 64, "total_tokens": 66}


def test_upstream_max_tokens_sets_the_chunk_count(upstream: str) -> None:
    body = chat(stream=True, max_tokens=40, bench={"interval_ms": 0})
    with httpx.stream("POST", f"{upstream}/v1/chat/completions", json=body, timeout=5) as reply:
        text = "".join(reply.iter_text())
    assert [int(m[1]) for m in STAMP.finditer(text)] == [0, 1, 2]
    assert "usage" not in text, "no usage chunk unless asked for"


def test_upstream_answers_without_streaming(upstream: str) -> None:
    reply = httpx.post(f"{upstream}/v1/chat/completions", json=chat(max_tokens=32), timeout=5)
    completion = reply.json()
    assert completion["object"] == "chat.completion"
    assert len(STAMP.findall(completion["choices"][0]["message"]["content"])) == 2
    assert completion["usage"]["completion_tokens"] == 32


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/chat/completions", chat(stream=True, bench={"chunks": 0}), 400),
        ("/v1/chat/completions", [1], 400),
        ("/v1/other", chat(), 404),
    ],
)
def test_upstream_refuses(upstream: str, path: str, body: object, status: int) -> None:
    reply = httpx.post(f"{upstream}{path}", json=body, timeout=5)
    assert reply.status_code == status
    assert "message" in reply.json()["error"]


def test_proxy_benchmark_tiny_run() -> None:
    command = [
        sys.executable, str(BENCHMARKS / "proxy.py"), "--streams", "3", "--chunks", "5",
        "--interval-ms", "5", "--no-pin", "--json", "-",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["config"]["streams"] == 3
    for phase in ("direct", "proxied"):
        assert report[phase]["error_count"] == 0, report[phase]["errors"]
        assert report[phase]["streams_complete"] == 3
        assert report[phase]["chunks_received"] == report[phase]["chunks_expected"] == 15
        lag = report[phase]["lag_ms"]
        assert lag["samples"] == 15
        assert 0 <= lag["p50"] <= lag["p99"] <= lag["max"]
    assert set(report["added_latency_ms"]) >= {"p50", "p99", "mean"}
    assert set(report["added_latency_ms_steady"]) >= {"p50", "p99", "mean"}
    baseline = report["baseline"]
    assert baseline["bound_ms"] == 5
    assert baseline["kept_pace"] is (baseline["lag_p99_ms"] <= 5)
    assert 0 < report["proxied"]["lag_ms_steady"]["samples"] <= 15
    for phase in ("direct", "proxied"):
        ttfc = report[phase]["ttfc_ms"]
        assert ttfc["samples"] == 3 and 0 < ttfc["p50"] <= ttfc["max"]
    ledger = report["ledger_gateway_latency_ms"]
    assert ledger["streams"] == 3
    assert ledger["samples"] > 0


@pytest.mark.parametrize("via", ["relay", "aiohttp", "fastapi"])
def test_proxy_benchmark_through_each_reference_proxy(via: str) -> None:
    """The reference proxies (`benchmarks/peers/proxy_*.py`) relay every chunk unchanged."""
    command = [
        sys.executable, str(BENCHMARKS / "proxy.py"), "--via", via, "--streams", "3",
        "--chunks", "5", "--interval-ms", "5", "--no-pin", "--json", "-",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["config"]["via"] == via
    proxied = report["proxied"]
    assert proxied["error_count"] == 0, proxied["errors"]
    assert proxied["streams_complete"] == 3
    assert proxied["chunks_received"] == proxied["chunks_expected"] == 15
    assert report["ledger_gateway_latency_ms"] == {"streams": 0}  # no Airlane ledger there


def test_a_baseline_that_lagged_a_whole_interval_is_flagged() -> None:
    spec = importlib.util.spec_from_file_location("proxy_benchmark", BENCHMARKS / "proxy.py")
    assert spec is not None and spec.loader is not None
    proxy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = proxy  # its dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(proxy)
        assert proxy.baseline_check({"p50": 0.2, "p99": 1.5}, 20.0)["kept_pace"] is True
        lagged = proxy.baseline_check({"p50": 148.3, "p99": 203.9}, 20.0)
        assert lagged == {"kept_pace": False, "lag_p99_ms": 203.9, "bound_ms": 20.0}
        assert proxy.baseline_check({}, 20.0)["kept_pace"] is False  # no samples at all
    finally:
        sys.modules.pop(spec.name, None)
