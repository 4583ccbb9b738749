"""``airlane demo`` end to end: it starts its own gateway, streams over both transports,
prints the table and exits 0."""

from __future__ import annotations

import re

from airlane.cli.demo import TTFT_MEANING
from tests.cli.conftest import airlane
from tests.servers import ServerProcess


def test_demo_runs_end_to_end() -> None:
    result = airlane("demo", timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "gateway http://127.0.0.1:" in out
    for heading in ("TTFT (ms)", "tokens/s", "bytes received", "total (s)"):
        assert heading in out
    rows = [
        line for line in out.splitlines() if re.match(r"\W*(SSE|WebSocket)\s+\W+\s*[\d.]+", line)
    ]
    assert len(rows) == 2, out
    ids = re.findall(r"chatcmpl-[0-9a-f]+", out.split("streams used:")[1])
    assert len(ids) == 2 and ids[0] != ids[1]


def test_demo_against_a_running_gateway(server: ServerProcess) -> None:
    result = airlane("demo", "--url", server.url, "--max-tokens", "10", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "streams used:" in result.stdout
    assert f"airlane stream --url {server.url} --stream-id chatcmpl-" in result.stdout


def test_demo_measures_both_transports_from_the_same_point(server: ServerProcess) -> None:
    """Both TTFTs run from sending the request on an open connection, so they agree with each
    other (the server's first token comes after the same delay for both) and the output says
    what they measure. SSE's used to include loading httpx's I/O backend and connecting: about
    70 ms more than WebSocket's on every run."""
    result = airlane("demo", "--url", server.url, "--max-tokens", "10", timeout=60)
    assert result.returncode == 0, result.stderr
    ttft = {
        match[1]: float(match[2])
        for match in re.finditer(r"(SSE|WebSocket)\s+\W+\s*([\d.]+)", result.stdout)
    }
    assert set(ttft) == {"SSE", "WebSocket"}, result.stdout
    assert abs(ttft["SSE"] - ttft["WebSocket"]) < 40, ttft
    assert TTFT_MEANING in result.stdout.replace("\n", " ")
