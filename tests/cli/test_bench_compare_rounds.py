"""``airlane bench --compare --runs K``: K rounds of every server in alternating order, ratios
taken within each round (`airlane.bench.compare_rounds`). The arithmetic on made-up runs, the
order with real servers and a stand-in measurement, the command on a tiny real run. No timing
assertions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airlane.bench.compare import ImplementationRun, round_order, run_compare_rounds
from airlane.bench.compare_rounds import (
    compare_rounds_document,
    compare_rounds_table,
    ratio_summary,
    server_summary,
)
from airlane.bench.config import BenchConfig
from airlane.bench.peers import Implementation, airlane_implementation, peer_implementations
from airlane.bench.stats import Percentiles, TransportResult
from tests.cli.conftest import airlane

IN_CI = os.environ.get("CI") == "true"
CONFIG = BenchConfig(streams=2, chunks=5, transports=("sse", "ws"))
AIRLANE = airlane_implementation()
PEERS = {peer.name: peer for peer in peer_implementations()}


def _result(transport: str, mb_s: float, *, errors: int = 0) -> TransportResult:
    return TransportResult(
        transport=transport, config=CONFIG, wall_s=1.0, chunks_expected=10,
        chunks_received=10 - errors, streams_completed=2 - errors, errors=errors,
        error_samples=["boom"] * errors, out_of_order=0, payload_bytes=int(mb_s * 1e6),
        ttfc_ms=Percentiles(1.0, 2.0, 3.0, 4.0, 2), lag_ms=Percentiles(0.5, 0.9, 1.0, 2.0, 10),
        kept_up_pct=None, ttfc_samples_ms=[1.0, 4.0], lag_samples_ms=[0.5, 2.0],
    )  # fmt: skip


def _ran(implementation: Implementation, *results: TransportResult) -> ImplementationRun:
    return ImplementationRun(implementation, "ran", url="http://127.0.0.1:1", results=list(results))


def _rounds(airlane_mb_s: list[float], peer_mb_s: list[float]) -> list[list[ImplementationRun]]:
    return [
        [_ran(AIRLANE, _result("sse", ours)), _ran(PEERS["aiohttp"], _result("sse", theirs))]
        for ours, theirs in zip(airlane_mb_s, peer_mb_s, strict=True)
    ]


def test_ratios_are_taken_within_each_round() -> None:
    """Per-round ratios 2, 1 and 4: their median is 2, where a ratio of the medians (200 / 50)
    would say 4; a round is a pair, measured minutes apart at most."""
    rounds = _rounds([100.0, 300.0, 200.0], [50.0, 300.0, 50.0])
    found = ratio_summary(rounds)["aiohttp"]["sse"]
    assert found["payload_mb_s"] == {"median": 2.0, "min": 1.0, "max": 4.0, "rounds": 3}
    assert found["ttfc_p99_ms"] == {"median": 1.0, "min": 1.0, "max": 1.0, "rounds": 3}
    assert found["kept_up_pct"] is None  # burst: no rate to keep
    servers = server_summary(rounds)
    assert servers["airlane"]["sse"]["payload_mb_s"]["median"] == 200.0
    assert servers["aiohttp"]["sse"]["payload_mb_s"]["median"] == 50.0


def test_a_round_with_an_unclean_or_missing_run_gives_no_ratio() -> None:
    rounds = _rounds([100.0, 300.0, 200.0], [50.0, 100.0, 100.0])
    rounds[1][1] = _ran(PEERS["aiohttp"], _result("sse", 1.0, errors=1))  # measured something else
    rounds[2][1] = ImplementationRun(PEERS["aiohttp"], "failed", "crashed")
    found = ratio_summary(rounds)["aiohttp"]["sse"]["payload_mb_s"]
    assert found == {"median": 2.0, "min": 2.0, "max": 2.0, "rounds": 1}
    # The peer's own summary counts the unclean run apart and skips the failed round.
    peer = server_summary(rounds)["aiohttp"]["sse"]
    assert (peer["runs"], peer["clean_runs"]) == (2, 1)


def test_table_and_document() -> None:
    rounds = _rounds([100.0, 300.0], [50.0, 100.0])
    for round_ in rounds:
        round_.append(ImplementationRun(PEERS["node"], "skipped", "node is absent"))
    table = compare_rounds_table(BenchConfig(streams=2, chunks=5, transports=("sse",)), rounds)
    assert [c.header for c in table.columns] == ["median (range)", "airlane", "aiohttp"]
    document = compare_rounds_document(
        BenchConfig(streams=2, chunks=5, transports=("sse",)), rounds, pinning=None
    )
    assert document["config"]["runs"] == 2
    assert [(r["transport"], r["run"]) for r in document["results"]] == [("sse", 1), ("sse", 2)]
    compare = document["compare"]
    assert compare["order"] == [
        ["airlane", "aiohttp", "node"], ["node", "aiohttp", "airlane"]
    ]  # fmt: skip
    node = compare["implementations"][2]
    assert [(r["round"], r["status"], r["reason"]) for r in node["runs"]] == [
        (1, "skipped", "node is absent"), (2, "skipped", "node is absent")
    ]  # fmt: skip
    assert list(compare["ratios"]) == ["aiohttp"] and list(compare["summary"]) == [
        "airlane", "aiohttp"
    ]  # fmt: skip
    assert compare["ratios"]["aiohttp"]["sse"]["payload_mb_s"]["median"] == pytest.approx(2.5)


def test_round_order_alternates() -> None:
    assert [round_order(3, i) for i in range(3)] == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]


@pytest.mark.timeout(120)
async def test_rounds_measure_every_server_in_alternating_order() -> None:
    """Real servers started and stopped in each round; a stand-in measurement records the
    order. Every round's runs come back in the order given."""
    aiohttp = PEERS["aiohttp"]
    reason = aiohttp.unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"aiohttp must run in CI: {reason}")
        pytest.skip(reason)
    measured: list[str] = []
    started: list[int] = []

    async def measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        measured.append(name)
        return [_result("sse", 1.0)]

    rounds = await run_compare_rounds(
        BenchConfig(streams=2, chunks=3, transports=("sse",)),
        [AIRLANE, aiohttp],
        2,
        measure=measure,
        on_round=started.append,
    )
    assert started == [0, 1]
    assert measured == ["airlane", "aiohttp", "aiohttp", "airlane"]
    assert [[run.name for run in round_] for round_ in rounds] == [["airlane", "aiohttp"]] * 2
    assert all(run.status == "ran" for round_ in rounds for run in round_)


@pytest.mark.timeout(300)
def test_compare_runs_reports_rounds_and_ratios(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "rounds.json", tmp_path / "rounds.png"
    result = airlane(
        "bench", "--compare", "--peers", "aiohttp", "--runs", "2", "--streams", "3",
        "--chunks", "5", "--transport", "both", "--timeout", "30",
        "--json", str(json_path), "--plot", str(plot_path), timeout=240,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "round 2 of 2" in output and "2 rounds" in output
    assert "airlane/peer: payload MB/s" in output and "Traceback" not in output
    document = json.loads(json_path.read_text())
    assert document["config"]["runs"] == 2
    assert [(r["transport"], r["run"]) for r in document["results"]] == [
        ("sse", 1), ("ws", 1), ("sse", 2), ("ws", 2)
    ]  # fmt: skip
    compare = document["compare"]
    if compare["implementations"][1]["runs"][0]["status"] == "skipped":
        assert not IN_CI, compare["implementations"][1]["runs"][0]["reason"]
        return
    assert compare["order"] == [["airlane", "aiohttp"], ["aiohttp", "airlane"]]
    for implementation in compare["implementations"]:
        for run in implementation["runs"]:
            assert run["status"] == "ran", run
            for found in run["results"]:
                assert found["chunks_received"] == found["chunks_expected"] == 15
    for transport in ("sse", "ws"):
        stats = compare["ratios"]["aiohttp"][transport]["payload_mb_s"]
        assert stats["rounds"] == 2 and 0 < stats["min"] <= stats["median"] <= stats["max"]
        assert compare["summary"]["aiohttp"][transport]["clean_runs"] == 2
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
