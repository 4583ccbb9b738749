"""WebRTC through NATs (`airlane.bench.natlab`): a client and the gateway each behind a router,
coturn (Debian's package) on the public side as STUN and TURN server, the gateway minting TURN
credentials with coturn's shared secret. Each case streams a generation over a data channel
and resumes it on a new peer connection (tests/webrtc/aiortc_client.py), and checks the
candidate pair ICE chose, as the gateway's metrics report it:

- a cone NAT before the client: a direct path;
- a symmetric NAT before the client, the gateway public: direct, peer-reflexive;
- UDP blocked before the client: TURN over TCP to coturn, which relays to the gateway.

Symmetric NATs on both sides (relay to relay) do not connect yet: docs/webrtc.md, "Not yet".

These need root, nftables and coturn (scripts/setup.sh installs them); where one is missing
the tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airlane.bench.natlab import Nat, NatLab, natlab_available
from tests.webrtc.support import need, require_aiortc

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).with_name("aiortc_client.py")
PORT = 18490
SECRET = "natlab-secret"


@contextmanager
def _lab(
    tmp_path: Path, client_nat: Nat, gateway_nat: Nat, *, block_udp: bool = False
) -> Iterator[tuple[NatLab, str]]:
    require_aiortc()
    need(natlab_available())
    need(None if shutil.which("turnserver") else "coturn is missing (apt-get install coturn)")
    lab_ctx = NatLab(
        client_nat=client_nat, gateway_nat=gateway_nat, block_udp=block_udp, forward_tcp=(PORT,)
    )
    with lab_ctx as lab:
        lab.start_turn(SECRET, tmp_path)
        turn = lab.public_addr
        config = tmp_path / "airlane.toml"
        config.write_text(
            f"""
[synthetic]
ttft_ms = 5.0
itl_ms = 5.0

[rules]
dir = "rules"

[webrtc]
stun = ["stun:{turn}:3478"]
turn = ["turn:{turn}:3478?transport=udp", "turn:{turn}:3478?transport=tcp"]
turn_secret = "{SECRET}"
"""
        )
        url = lab.start_gateway(config, PORT, tmp_path / "gateway.log")
        yield lab, url


def _stream_through(lab: NatLab, url: str, tmp_path: Path, *options: str) -> list[str]:
    done = lab.run(
        "client",
        [sys.executable, str(CLIENT), "--url", url, "--ice", "--timeout-s", "60", *options],
        capture_output=True,
        text=True,
        timeout=90,
    )
    logs = (tmp_path / "gateway.log").read_text()[-2000:]
    assert done.returncode == 0, f"{done.stderr[-3000:]}\ngateway: {logs}"
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    (metrics,) = [line["lines"] for line in lines if line["event"] == "metrics"]
    pairs = [
        line.split('pair="', 1)[1].split('"', 1)[0]
        for line in metrics
        if line.startswith("airlane_webrtc_connections_total")
    ]
    assert pairs, metrics
    return pairs


def test_a_client_behind_a_cone_nat_connects_directly(tmp_path: Path) -> None:
    with _lab(tmp_path, "cone", "none") as (lab, url):
        pairs = _stream_through(lab, url, tmp_path)
    assert all("relay" not in pair for pair in pairs), pairs


def test_udp_blocked_before_the_client_connects_by_turn_over_tcp(tmp_path: Path) -> None:
    with _lab(tmp_path, "cone", "none", block_udp=True) as (lab, url):
        pairs = _stream_through(lab, url, tmp_path, "--turn-tcp")
    # The gateway (public) answers the client's relayed address from its own host address.
    assert all(pair.startswith("host/") and pair.endswith("-relay") for pair in pairs), pairs


def test_a_client_behind_a_symmetric_nat_reaches_a_public_gateway(tmp_path: Path) -> None:
    with _lab(tmp_path, "symmetric", "none") as (lab, url):
        pairs = _stream_through(lab, url, tmp_path)
    # Its server-reflexive address is useless to a peer, but the gateway learns the address
    # its checks come from (a peer-reflexive candidate) and answers there: no relay needed.
    assert pairs == ["host/udp-prflx"], pairs
