"""WebRTC through NATs (`airlane.bench.natlab`): a client and the gateway each behind a router,
coturn (Debian's package) on the public side as STUN and TURN server, the gateway minting TURN
credentials with coturn's shared secret. Each case streams a generation over a data channel
and resumes it on a new peer connection (tests/webrtc/aiortc_client.py), and checks the
candidate pair ICE chose, as the gateway's metrics report it:

- a cone NAT before the client: a direct path;
- a symmetric NAT before the client, the gateway public: direct, peer-reflexive;
- UDP blocked before the client: TURN over TCP to coturn, which relays to the gateway, and
  the same over TLS (``turns:``, coturn with a certificate from a CA the client trusts);
- symmetric NATs on both sides: through coturn (a TURN permission is for an address, not a
  port, so the relay takes the gateway's packets from whatever port its NAT picked).

These need root, nftables and coturn (scripts/setup.sh installs them); where one is missing
the tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airlane.bench.natlab import Nat, NatLab, natlab_available
from airlane.security.certs import issue_certificate, make_ca
from tests.webrtc.support import need, require_aiortc

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).with_name("aiortc_client.py")
PORT = 18490
SECRET = "natlab-secret"


@contextmanager
def _lab(
    tmp_path: Path,
    client_nat: Nat,
    gateway_nat: Nat,
    *,
    block_udp: bool = False,
    tls: bool = False,
) -> Iterator[tuple[NatLab, str]]:
    require_aiortc()
    need(natlab_available())
    need(None if shutil.which("turnserver") else "coturn is missing (apt-get install coturn)")
    lab_ctx = NatLab(
        client_nat=client_nat, gateway_nat=gateway_nat, block_udp=block_udp, forward_tcp=(PORT,)
    )
    with lab_ctx as lab:
        turn = lab.public_addr
        certificate = None
        if tls:  # a certificate for coturn's address, from a CA the client trusts
            make_ca(tmp_path / "ca", "airlane.lab")
            issued = issue_certificate(
                tmp_path / "ca", "spiffe://airlane.lab/turn", tmp_path, dns=(), ips=(turn,)
            )
            certificate = (issued.cert, issued.key)
        lab.start_turn(SECRET, tmp_path, tls=certificate)
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
turn = ["turn:{turn}:3478?transport=udp", "turn:{turn}:3478?transport=tcp",
        "turns:{turn}:5349?transport=tcp"]
turn_secret = "{SECRET}"
"""
        )
        url = lab.start_gateway(config, PORT, tmp_path / "gateway.log")
        yield lab, url


def _stream_through(lab: NatLab, url: str, tmp_path: Path, *options: str) -> list[str]:
    # With TURN over TLS, the client trusts the lab's CA (Python's default verify paths).
    ca = tmp_path / "ca" / "ca.pem"
    env = {**os.environ, "SSL_CERT_FILE": str(ca)} if ca.exists() else None
    done = lab.run(
        "client",
        [sys.executable, str(CLIENT), "--url", url, "--ice", "--timeout-s", "60", *options],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
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


def test_udp_blocked_before_the_client_connects_by_turn_over_tls(tmp_path: Path) -> None:
    with _lab(tmp_path, "cone", "none", block_udp=True, tls=True) as (lab, url):
        # The client is handed the turns: URL only: a relayed pair can only come through it.
        pairs = _stream_through(lab, url, tmp_path, "--turn-tls")
    assert all(pair.startswith("host/") and pair.endswith("-relay") for pair in pairs), pairs


def test_a_client_behind_a_symmetric_nat_reaches_a_public_gateway(tmp_path: Path) -> None:
    with _lab(tmp_path, "symmetric", "none") as (lab, url):
        pairs = _stream_through(lab, url, tmp_path)
    # Its server-reflexive address is useless to a peer, but the gateway learns the address
    # its checks come from (a peer-reflexive candidate) and answers there: no relay needed.
    assert pairs == ["host/udp-prflx"], pairs


def test_symmetric_nats_on_both_sides_connect_through_the_relay(tmp_path: Path) -> None:
    with _lab(tmp_path, "symmetric", "symmetric") as (lab, url):
        pairs = _stream_through(lab, url, tmp_path)
    # Seen from the gateway: the client's side is a relayed candidate (its own may be one too).
    assert pairs and all(pair.endswith("-relay") for pair in pairs), pairs
