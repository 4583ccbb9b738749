"""``airlane shaping`` on a real interface (a veth pair between two namespaces the test makes):
the classifier compiles, attaches with an HTB qdisc per lane, learns the gateway's control
connection from ``SET_LANE`` (its socket cookie in the flow map, gone when the connection
ends), counts what it sorts into ``/metrics``, and detaches leaving the interface as it was.
Every refusal (no privileges, no such interface, a root qdisc of someone else's, twice) is one
line and exit status 2.

These need root, iproute2, clang and libbpf's headers (scripts/setup.sh installs them); where
one is missing the test skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlane.bench.netlab import netlab_available
from airlane.bench.vethlab import VethLab
from airlane.runtime.bpf_maps import PinnedMap

pytestmark = pytest.mark.timeout(120)

PORT = 18_491
AIRC_PORT = 18_492
CLIENT = """
import asyncio, json, sys
from airlane.client.airc import AircClient

async def main():
    async with await AircClient.tcp(sys.argv[1], int(sys.argv[2])) as control:
        marks = await control.set_lane("control")
        request = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 20}
        events = [event async for event in await control.generate(request)]
        print(json.dumps({"marks": marks, "events": len(events)}), flush=True)
        sys.stdin.readline()  # held open until the test has looked at the flow map

asyncio.run(main())
"""


def need(reason: str | None) -> None:
    """Skip for ``reason``, except under ``CI=true``, where it fails."""
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _missing() -> str | None:
    reason = netlab_available()
    if reason is None and shutil.which("clang") is None:
        reason = "clang is not installed (scripts/setup.sh installs it)"
    if reason is None and not Path("/usr/include/bpf/bpf_helpers.h").is_file():
        reason = "libbpf's headers are missing (apt-get install libbpf-dev)"
    return reason


@pytest.fixture
def lab() -> Iterator[VethLab]:
    need(_missing())
    with VethLab() as opened:
        yield opened


def shaping(*args: str, config: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airlane", "shaping", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kw,  # type: ignore[call-overload]
    )


def tc(lab: VethLab, *args: str) -> str:
    return lab.run("a", ["tc", *args], capture_output=True, text=True, check=True).stdout


def lanes_config(tmp_path: Path) -> Path:
    config = tmp_path / "airlane.toml"
    config.write_text(f'[lanes]\nbpf_dir = "{tmp_path / "bpf"}"\n')
    return config


def test_attach_sort_count_and_detach(lab: VethLab, tmp_path: Path) -> None:
    config = lanes_config(tmp_path)
    before = tc(lab, "qdisc", "show", "dev", lab.dev_a)
    done = shaping("attach", lab.dev_a, "--netns", lab.a, "--rate", "20mbit", config=config)
    assert done.returncode == 0, done.stderr
    assert "HTB at 20000000 bit/s" in done.stdout
    qdiscs = tc(lab, "qdisc", "show", "dev", lab.dev_a)
    assert "qdisc htb 1: root" in qdiscs and "clsact" in qdiscs
    filters = tc(lab, "filter", "show", "dev", lab.dev_a, "egress")
    assert "airlane_egress" in filters and "direct-action" in filters

    # A gateway in namespace a; a client in b declares its connection the control lane.
    server_config = tmp_path / "gateway.toml"
    server_config.write_text(config.read_text() + "[synthetic]\nttft_ms = 5.0\nitl_ms = 2.0\n")
    lab.popen("a", [
        sys.executable, "-m", "airlane", "serve", "--host", lab.addr_a, "--port", str(PORT),
        "--airc-port", str(AIRC_PORT), "--grpc-port", "-1", "--http3-port", "-1",
        "--rsocket-port", "-1", "--config", str(server_config), "--log-level", "warning",
    ], cwd=tmp_path)  # fmt: skip
    url = f"http://{lab.addr_a}:{PORT}"
    probe = "import httpx,sys; httpx.get(sys.argv[1] + '/healthz', timeout=1).raise_for_status()"
    deadline = time.monotonic() + 20
    while lab.run("b", [sys.executable, "-c", probe, url], capture_output=True).returncode:
        assert time.monotonic() < deadline, "the gateway never answered"
        time.sleep(0.2)
    client = lab.popen(
        "b",
        [sys.executable, "-c", CLIENT, lab.addr_a, str(AIRC_PORT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None and client.stdin is not None
    result = json.loads(client.stdout.readline())
    assert result["marks"] == "dscp=40 priority=6 classifier", result
    assert result["events"] > 2

    # The gateway's socket of that connection is in the flow map, as the control lane.
    shown = lab.run("a", ["ss", "-tneH", "state", "established", "sport", f"= :{AIRC_PORT}"],
                    capture_output=True, text=True, check=True).stdout  # fmt: skip
    cookie = int(re.search(r"sk:([0-9a-f]+)", shown).group(1), 16)  # type: ignore[union-attr]
    flows_path = tmp_path / "bpf" / "tc" / "globals" / "airlane_flows"
    with PinnedMap(flows_path, 4) as flows:
        assert flows.lookup(struct.pack("<Q", cookie)) == struct.pack("<I", 0)
        assert json.loads(shaping("status", "--json", config=config).stdout)["flows"] == 1
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.wait(30) == 0
        deadline = time.monotonic() + 10
        while flows.keys(8):  # the connection ended: the gateway took its socket out
            assert time.monotonic() < deadline, "the flow stayed in the map"
            time.sleep(0.1)

    scrape = "import httpx,sys; print(httpx.get(sys.argv[1]).text)"
    metrics = lab.run(
        "b", [sys.executable, "-c", scrape, f"{url}/metrics"], capture_output=True, text=True
    ).stdout
    control = re.search(
        r'airlane_shaping_packets_total\{direction="egress",lane="control"\} (\d+)', metrics
    )
    assert control is not None and float(control.group(1)) > 0, metrics[-2000:]
    status = shaping("status", "--json", config=config)
    counters = json.loads(status.stdout)["counters"]
    assert counters["egress/control"]["packets"] > 0
    assert json.loads(status.stdout)["attached"] == [f"{lab.a}/{lab.dev_a}"]

    done = shaping("detach", lab.dev_a, "--netns", lab.a, config=config)
    assert done.returncode == 0, done.stderr
    assert tc(lab, "qdisc", "show", "dev", lab.dev_a) == before
    # Its maps unpinned and the BPF filesystem it mounted unmounted again.
    assert str(tmp_path / "bpf") not in Path("/proc/self/mounts").read_text()
    assert not list((tmp_path / "bpf").iterdir())
    # The gateway goes on without the classifier.
    again = lab.run("b", [sys.executable, "-c", probe, url], capture_output=True)
    assert again.returncode == 0


def test_a_root_qdisc_of_someone_elses_is_left_alone(lab: VethLab, tmp_path: Path) -> None:
    config = lanes_config(tmp_path)
    tc(lab, "qdisc", "add", "dev", lab.dev_a, "root", "handle", "5:", "tbf", "rate", "50mbit",
       "burst", "32k", "latency", "50ms")  # fmt: skip
    refused = shaping("attach", lab.dev_a, "--netns", lab.a, "--rate", "20mbit", config=config)
    assert refused.returncode == 2
    assert "has a root qdisc of its own (tbf)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # Without --rate the classifier goes beside it; detaching leaves the tbf as it was.
    done = shaping("attach", lab.dev_a, "--netns", lab.a, config=config)
    assert done.returncode == 0, done.stderr
    twice = shaping("attach", lab.dev_a, "--netns", lab.a, config=config)
    assert twice.returncode == 2 and "already attached" in twice.stderr
    assert shaping("detach", lab.dev_a, "--netns", lab.a, config=config).returncode == 0
    qdiscs = tc(lab, "qdisc", "show", "dev", lab.dev_a)
    assert "qdisc tbf 5: root" in qdiscs and "clsact" not in qdiscs


def test_refusals_are_one_clear_line(tmp_path: Path) -> None:
    need(_missing())
    config = lanes_config(tmp_path)
    cases = [
        (("attach", "no-such-dev0"), "no interface no-such-dev0"),
        (("detach", "lo"), "not attached to lo"),
        (("attach", "lo", "--rate", "fast"), "a rate is a number"),
    ]
    for args, message in cases:
        done = shaping(*args, config=config)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # Without the capabilities (setpriv drops them even from root): one line, nothing done.
    setpriv = shutil.which("setpriv")
    need(None if setpriv else "setpriv (util-linux) is not installed")
    assert setpriv is not None
    drop = "-net_admin,-bpf,-sys_admin"
    done = subprocess.run(
        [setpriv, "--bounding-set", drop, "--inh-caps", drop, sys.executable, "-m", "airlane",
         "shaping", "attach", "lo", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "needs root (CAP_NET_ADMIN and CAP_BPF)" in done.stderr
    assert not (tmp_path / "shaping").exists()


def test_the_benchmark_runs_and_loses_no_signalling(tmp_path: Path) -> None:
    """``benchmarks/lanes.py`` small (never timed), two runs a row: every frame sent in the
    window arrives, none was retransmitted, and the classifier row sorted packets into the
    control lane."""
    need(_missing())
    out = tmp_path / "lanes.json"
    script = Path(__file__).parents[2] / "benchmarks" / "lanes.py"
    done = subprocess.run(
        [sys.executable, str(script), "--rates", "20", "--seconds", "2", "--rows",
         "fifo,classifier", "--runs", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["row"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"fifo", "classifier"}
    for row in rows.values():
        assert row["frames"] > 0 and row["lost"] == 0 and row["retransmits"] == 0
        assert row["bulk_mbit"] > 0 and len(row["runs"]) == 2
    assert rows["classifier"]["classified"]["egress/control"] > 0
    assert "median      20 Mbit/s classifier" in done.stdout
