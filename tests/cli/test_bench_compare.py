"""``airlane bench --compare`` and the reference peers of ``benchmarks/peers``.

The peers are real programs started on free loopback ports (and always stopped). Each is held
to the load-test contract Airlane serves: chunks in order, ``seq`` and ``ts`` first, about
1.2 KB, 16 tokens with their log-probabilities, a paced chunk never received before its
``ts``, SSE events ending ``\\n\\n``, WebSocket closing with 1000. A peer whose runtime is
missing is skipped here, but fails the test in CI (``CI=true``), where setup installs them all.
No timing assertions: CI machines vary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from array import array
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from airlane.bench import BenchConfig
from airlane.bench.compare import (
    RATIO_METRICS,
    ImplementationRun,
    ratio,
    ratios,
    run_compare,
)
from airlane.bench.compare_report import RATIO_LABELS, compare_document, compare_table
from airlane.bench.peers import (
    PEER_NAMES,
    Implementation,
    airlane_implementation,
    peer_implementations,
    select_peers,
)
from airlane.bench.spawn import ServerProcess
from airlane.bench.stats import TransportResult, summarize
from airlane.bench.tally import StreamTally
from tests.cli.conftest import airlane

IN_CI = os.environ.get("CI") == "true"
IMPLEMENTATIONS = {i.name: i for i in [airlane_implementation(), *peer_implementations()]}
PACED_INTERVAL_MS = 5.0


def require_runnable(implementation: Implementation) -> None:
    """Skip a test whose implementation cannot run here; in CI, fail it."""
    reason = implementation.unavailable()
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"{implementation.name} must run in CI: {reason}")
    pytest.skip(reason)


# -- the command -----------------------------------------------------------------------------


def run_compare_cli(tmp_path: Path, *args: str) -> dict:
    json_path = tmp_path / "compare.json"
    result = airlane(
        "bench", "--spawn", "--compare", "--streams", "3", "--chunks", "5",
        "--timeout", "30", "--json", str(json_path), *args, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "airlane bench --compare" in result.stdout
    assert "airlane/peer: payload MB/s" in result.stdout
    return json.loads(json_path.read_text())


def check_every_run(document: dict, transports: list[str]) -> list[dict]:
    implementations = document["compare"]["implementations"]
    assert [i["name"] for i in implementations] == ["airlane", *PEER_NAMES]
    ran = [i for i in implementations if i["status"] == "ran"]
    for implementation in implementations:
        if implementation["status"] != "ran":
            assert implementation["status"] == "skipped", implementation
            assert implementation["reason"]
            assert not IN_CI, f"{implementation['name']} did not run: {implementation['reason']}"
    assert ran[0]["name"] == "airlane"
    for implementation in ran:
        served = IMPLEMENTATIONS[implementation["name"]].transports
        expected = [t for t in transports if t in served]
        assert [r["transport"] for r in implementation["results"]] == expected
        for run in implementation["results"]:
            where = f"{implementation['name']} {run['transport']}: {run['error_samples']}"
            assert run["chunks_expected"] == 15, where
            assert run["chunks_received"] == 15, where
            assert run["errors"] == 0 and run["out_of_order"] == 0, where
            assert run["streams_completed"] == 3, where
    assert sorted(document["compare"]["ratios"]) == sorted(i["name"] for i in ran[1:])
    return ran


@pytest.mark.timeout(300)  # four servers started in turn, on a busy CI machine
def test_compare_burst_both_transports(tmp_path: Path) -> None:
    document = run_compare_cli(tmp_path, "--transport", "both")
    assert document["spawned"] is True
    assert [r["transport"] for r in document["results"]] == ["sse", "ws"]  # Airlane's
    ran = check_every_run(document, ["sse", "ws"])
    for name, ratios_of_peer in document["compare"]["ratios"].items():
        assert sorted(ratios_of_peer) == sorted(IMPLEMENTATIONS[name].transports)
        for found in ratios_of_peer.values():
            assert sorted(found) == sorted(RATIO_METRICS)
            assert found["payload_mb_s"] is not None and found["payload_mb_s"] > 0
            assert found["kept_up_pct"] is None  # burst mode
    assert len({i["server_pid"] for i in ran}) == len(ran)  # each server started fresh


@pytest.mark.timeout(300)
def test_compare_paced(tmp_path: Path) -> None:
    document = run_compare_cli(
        tmp_path, "--mode", "paced", "--interval-ms", f"{PACED_INTERVAL_MS:g}"
    )
    for implementation in check_every_run(document, ["sse", "ws"]):
        for run in implementation["results"]:
            assert run["kept_up_pct"] is not None, implementation["name"]


def test_compare_refuses_url_and_unknown_peers() -> None:
    result = airlane("bench", "--compare", "--url", "http://127.0.0.1:8420")
    assert result.returncode == 2
    assert "--url" in result.stdout + result.stderr
    result = airlane("bench", "--peers", "fastapi,tornado")
    assert result.returncode == 2
    assert "comma-separated" in result.stdout + result.stderr


# -- each implementation against the contract ---------------------------------------------


BOTH_TRANSPORTS = [n for n, i in IMPLEMENTATIONS.items() if i.transports == ("sse", "ws")]


@pytest.fixture(scope="module", params=BOTH_TRANSPORTS)
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A fresh server of each implementation that serves both transports (Airlane too: the
    contract's reference); the WebSocket-only picows has its own below."""
    implementation = IMPLEMENTATIONS[request.param]
    require_runnable(implementation)
    with implementation.server() as process:
        yield process


def sse_chunks(url: str) -> list[tuple[bytes, int]]:
    """Each chunk of one SSE load-test response with the time it arrived."""
    chunks: list[tuple[bytes, int]] = []
    pending = b""
    with httpx.stream("GET", url, timeout=30, trust_env=False) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for data in response.iter_raw():
            now = time.monotonic_ns()
            pending += data
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if event.startswith(b":"):  # a comment (keep-alive ping)
                    continue
                assert event.startswith(b"data: ") and b"\n" not in event, event[:80]
                chunks.append((event[len(b"data: ") :], now))
    assert pending == b""
    return chunks


def ws_chunks(url: str) -> list[tuple[bytes, int]]:
    """Each message of one WebSocket load-test stream with the time it arrived."""
    chunks: list[tuple[bytes, int]] = []
    with connect(url, compression=None, open_timeout=30) as ws:
        for message in ws:
            assert isinstance(message, str)  # a text message
            chunks.append((message.encode(), time.monotonic_ns()))
        assert ws.protocol.close_rcvd is not None
        assert ws.protocol.close_rcvd.code == 1000
    return chunks


def check_chunks(chunks: list[tuple[bytes, int]], count: int, paced: bool) -> None:
    assert len(chunks) == count
    stamps = []
    for seq, (raw, received_ns) in enumerate(chunks, start=1):
        assert raw.startswith(b'{"seq":%d,"ts":' % seq), raw[:40]
        assert 1100 <= len(raw) <= 1300, len(raw)
        chunk = json.loads(raw)
        assert list(chunk)[:2] == ["seq", "ts"]
        assert chunk["ts"] <= received_ns, "a chunk arrived before its ts"
        assert chunk["object"] == "chat.completion.chunk"
        [choice] = chunk["choices"]
        tokens = [entry["token"] for entry in choice["logprobs"]["content"]]
        assert len(tokens) == 16
        assert "".join(tokens) == choice["delta"]["content"]
        assert all(entry["logprob"] <= 0 for entry in choice["logprobs"]["content"])
        stamps.append(chunk["ts"])
    assert stamps == sorted(stamps)
    if paced:
        # Chunk i is due at start + i * interval, and that is its ts.
        interval_ns = PACED_INTERVAL_MS * 1e6
        for index, ts in enumerate(stamps):
            assert abs(ts - stamps[0] - index * interval_ns) <= 1, (index, ts - stamps[0])


def test_contract_sse(server: ServerProcess) -> None:
    base = f"{server.url}/v1/loadtest/sse"
    check_chunks(sse_chunks(f"{base}?chunks=150"), 150, paced=False)
    paced = f"{base}?chunks=8&mode=paced&interval_ms={PACED_INTERVAL_MS:g}"
    check_chunks(sse_chunks(paced), 8, paced=True)
    check_chunks(sse_chunks(base), 200, paced=False)  # the default count


def test_contract_ws(server: ServerProcess) -> None:
    assert server.url is not None
    base = server.url.replace("http://", "ws://") + "/v1/loadtest/ws"
    check_chunks(ws_chunks(f"{base}?chunks=150"), 150, paced=False)
    paced = f"{base}?chunks=8&mode=paced&interval_ms={PACED_INTERVAL_MS:g}"
    check_chunks(ws_chunks(paced), 8, paced=True)


def test_contract_healthz_and_bad_queries(server: ServerProcess) -> None:
    health = httpx.get(f"{server.url}/healthz", trust_env=False, timeout=10)
    assert health.json()["pid"] == server.pid
    for query in ("chunks=0", "chunks=100001", "mode=steady", "interval_ms=0", "chunks=x"):
        response = httpx.get(f"{server.url}/v1/loadtest/sse?{query}", trust_env=False, timeout=10)
        assert response.status_code == 400, query


@pytest.fixture(scope="module")
def picows_server() -> Iterator[ServerProcess]:
    """The picows peer: WebSocket only, measured with ``airlane bench --url --transport ws``."""
    implementation = IMPLEMENTATIONS["picows"]
    require_runnable(implementation)
    with implementation.server() as process:
        yield process


def test_picows_peer_serves_the_ws_contract(picows_server: ServerProcess) -> None:
    assert picows_server.url is not None
    base = picows_server.url.replace("http://", "ws://") + "/v1/loadtest/ws"
    check_chunks(ws_chunks(f"{base}?chunks=150"), 150, paced=False)
    paced = f"{base}?chunks=8&mode=paced&interval_ms={PACED_INTERVAL_MS:g}"
    check_chunks(ws_chunks(paced), 8, paced=True)
    health = httpx.get(f"{picows_server.url}/healthz", trust_env=False, timeout=10)
    assert health.json()["pid"] == picows_server.pid
    with pytest.raises(InvalidStatus) as refused:
        ws_chunks(f"{base}?chunks=0")
    assert refused.value.response.status_code == 400


# -- the pieces, without servers ----------------------------------------------------------


def test_select_peers() -> None:
    assert [p.name for p in select_peers(None)] == list(PEER_NAMES)
    assert [p.name for p in select_peers("all")] == list(PEER_NAMES)
    assert [p.name for p in select_peers(" node, fastapi ")] == ["fastapi", "node"]
    for wrong in ("", "tornado", "node,,x"):
        with pytest.raises(ValueError, match="comma-separated"):
            select_peers(wrong)


def test_missing_peers_say_why(tmp_path: Path) -> None:
    for peer in peer_implementations(tmp_path):
        reason = peer.unavailable()
        assert reason is not None and "not found" in reason


def test_ratio() -> None:
    assert ratio(4.0, 2.0) == 2.0
    assert ratio(None, 2.0) is None and ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None and ratio(-1.0, 2.0) is None
    assert ratio(float("nan"), 1.0) is None
    assert RATIO_LABELS.keys() == RATIO_METRICS.keys()


def result(transport: str, chunk_ms: float) -> TransportResult:
    """A small synthetic result: 2 streams x 3 chunks, each chunk ``chunk_ms`` apart."""
    config = BenchConfig(streams=2, chunks=3, transports=("sse",))
    lags: array[int] = array("q")
    tallies = [StreamTally(lags) for _ in range(2)]
    for tally in tallies:
        tally.start_ns = 0
        for seq in range(1, 4):
            tally.chunk(seq, 0, 1200, int(seq * chunk_ms * 1e6))
        tally.finished = True
    return summarize(transport, config, tallies, lags, int(3 * chunk_ms * 1e6))


async def test_compare_skips_missing_and_reports_failed_peers() -> None:
    config = BenchConfig(streams=2, chunks=3, transports=("sse",))
    missing = Implementation("node", "absent", ("node",), checks=(lambda: "node is absent",))
    broken = Implementation("fastapi", "exits", (sys.executable, "-c", "raise SystemExit(3)"))
    measured: list[str] = []

    async def measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        measured.append(name)
        return [result("sse", 1.0)]

    runs = await run_compare(config, [missing, broken], measure=measure)
    assert [(r.name, r.status) for r in runs] == [("node", "skipped"), ("fastapi", "failed")]
    assert runs[0].reason == "node is absent"
    assert "did not become ready" in (runs[1].reason or "")
    assert measured == []


async def test_a_websocket_only_peer_gets_only_its_transport() -> None:
    """picows serves WebSocket only: skipped, unstarted, for an SSE workload; measured on
    WebSocket alone for both."""
    picows = IMPLEMENTATIONS["picows"]
    never_started = replace(picows, command=(sys.executable, "-c", "raise SystemExit(3)"))
    seen: list[tuple[str, ...]] = []

    async def measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        seen.append(workload.transports)
        return [result("ws", 1.0)]

    sse_only = BenchConfig(streams=2, chunks=3, transports=("sse",))
    [run] = await run_compare(sse_only, [never_started], measure=measure)
    assert (run.status, run.reason) == ("skipped", "it serves ws only")
    if picows.unavailable() is None:
        both = BenchConfig(streams=2, chunks=3, transports=("sse", "ws"))
        [run] = await run_compare(both, [picows], measure=measure)
        assert run.status == "ran" and seen == [("ws",)]


def test_compare_table_and_document() -> None:
    config = BenchConfig(streams=2, chunks=3, transports=("sse",))
    airlane_run = ImplementationRun(
        airlane_implementation(), "ran", url="http://127.0.0.1:1", results=[result("sse", 1.0)]
    )
    fastapi, aiohttp, node = (IMPLEMENTATIONS[name] for name in ("fastapi", "aiohttp", "node"))
    runs = [
        airlane_run,
        ImplementationRun(fastapi, "ran", results=[result("sse", 2.0)]),
        ImplementationRun(aiohttp, "skipped", "aiohttp missing"),
        ImplementationRun(node, "failed", "crashed"),
    ]
    assert ratios(airlane_run, runs[1])["sse"]["payload_mb_s"] == pytest.approx(2.0)
    table = compare_table(config, runs)
    assert [column.header for column in table.columns] == ["metric", "airlane", "fastapi"]
    document = compare_document(config, runs, pinning=None)
    assert [r["transport"] for r in document["results"]] == ["sse"]
    assert [i["status"] for i in document["compare"]["implementations"]] == [
        "ran", "ran", "skipped", "failed"
    ]  # fmt: skip
    assert list(document["compare"]["ratios"]) == ["fastapi"]
    assert document["compare"]["ratios"]["fastapi"]["sse"]["ttfc_p99_ms"] == pytest.approx(0.5)


def test_server_process_reads_past_a_chatty_start() -> None:
    """The ready line is found after much other output, and the server is stopped."""
    script = (
        "import sys, time; sys.stdout.write('x' * 200_000 + '\\n');"
        "print('listening on http://127.0.0.1:9', flush=True); time.sleep(60)"
    )
    with ServerProcess([sys.executable, "-c", script], name="chatty") as process:
        assert process.url == "http://127.0.0.1:9"
        pid = process.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
