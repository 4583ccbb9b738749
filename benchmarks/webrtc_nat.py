"""WebRTC data channels through NATs: set-up time, success rate, throughput and inter-chunk gap
per NAT case, in the NAT lab (`airlane.bench.natlab`).

For each case a lab is built (a client and the gateway, each behind its own router, coturn on
the public side as STUN and TURN server), ``airlane serve`` starts on the gateway's side with
``[webrtc]`` naming coturn, and `benchmarks/peers/webrtc_peer.py` runs on the client's side:
``--setups`` peer connections one after another (time from ``createOffer`` to the channel's
``open``, and how many opened within 10 s), then a bulk read (``--bulk-events`` events of
1 KiB published beforehand, within a stream's default retention, read over one channel) and
paced generations (the synthetic backend's ``itl_ms`` of 5 ms, ``--tokens`` deltas in all)
whose inter-delta gaps are measured at the client.

============== ============ ============= ==================================================
case           client's NAT gateway's NAT the path ICE should find
============== ============ ============= ==================================================
host           none         none          host to host
cone           cone         none          the client's server-reflexive address (or host)
symmetric      symmetric    none          peer-reflexive: the gateway answers where the
                                          client's checks come from
relay          none         none          TURN over UDP (the client gathers relayed
                                          candidates only: iceTransportPolicy ``relay``)
tcp            cone, no UDP none          TURN over TCP (the client lists no STUN server)
tcp-with-stun  cone, no UDP none          the same, the client listing the STUN server too:
                                          aiortc waits out its STUN request before offering
both-symmetric symmetric    symmetric     relay to relay
============== ============ ============= ==================================================

Links are veth pairs: no loss, no delay, so what is measured is the stack (aiortc on both
ends, coturn in between), not a network. Needs root, nftables, coturn and aiortc.

    .venv/bin/python benchmarks/webrtc_nat.py                    # every case, 50 set-ups each
    .venv/bin/python benchmarks/webrtc_nat.py --cases relay,host --setups 10
    .venv/bin/python benchmarks/webrtc_nat.py --json results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from airlane.bench.natlab import Nat, NatLab, natlab_available

PEER = Path(__file__).with_name("peers") / "webrtc_peer.py"
PORT = 18500
SECRET = "bench-secret"

CASES: dict[str, tuple[Nat, Nat, bool, tuple[str, ...]]] = {
    "host": ("none", "none", False, ()),
    "cone": ("cone", "none", False, ()),
    "symmetric": ("symmetric", "none", False, ()),
    "relay": ("none", "none", False, ("--policy", "relay")),
    "tcp": ("cone", "none", True, ("--turn-tcp", "--no-stun")),
    "tcp-with-stun": ("cone", "none", True, ("--turn-tcp",)),
    "both-symmetric": ("symmetric", "symmetric", False, ()),
}


def run_case(name: str, args: argparse.Namespace) -> dict[str, Any]:
    client_nat, gateway_nat, block_udp, options = CASES[name]
    with (
        tempfile.TemporaryDirectory() as tmp,
        NatLab(
            client_nat=client_nat, gateway_nat=gateway_nat, block_udp=block_udp, forward_tcp=(PORT,)
        ) as lab,
    ):
        directory = Path(tmp)
        lab.start_turn(SECRET, directory)
        turn = lab.public_addr
        config = directory / "airlane.toml"
        config.write_text(
            f"""
[synthetic]
ttft_ms = 5.0
itl_ms = 5.0
itl_distribution = "constant"

[rules]
dir = "rules"

[webrtc]
stun = ["stun:{turn}:3478"]
turn = ["turn:{turn}:3478?transport=udp", "turn:{turn}:3478?transport=tcp"]
turn_secret = "{SECRET}"
ice_timeout_s = 15.0
"""
        )
        url = lab.start_gateway(config, PORT, directory / "gateway.log")
        done = lab.run(
            "client",
            [
                sys.executable, str(PEER), "--url", url, "--setups", str(args.setups),
                "--bulk-events", str(args.bulk_events), "--tokens", str(args.tokens), *options,
            ],
            capture_output=True,
            text=True,
            timeout=args.setups * 12 + 120,
        )  # fmt: skip
        if done.returncode != 0:
            return {"error": done.stderr[-1500:]}
        result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
        return result


def _row(name: str, result: dict[str, Any]) -> str:
    if "error" in result:
        return f"| {name} | the run failed: {result['error'].splitlines()[-1]} |"
    setup = result.get("setup_ms") or {}
    bulk = result.get("bulk") or {}
    gap = (result.get("paced") or {}).get("gap_ms") or {}
    pairs = ", ".join(sorted(result.get("pairs", {}))) or "-"
    return (
        f"| {name} | {result['ok']}/{result['setups']} | {setup.get('p50', '-')} | "
        f"{setup.get('p99', '-')} | {setup.get('over_300', '-')} | {bulk.get('mb_s', '-')} | "
        f"{gap.get('p50', '-')} | "
        f"{gap.get('p99', '-')} | {pairs} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--setups", type=int, default=50)
    parser.add_argument("--bulk-events", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--json", help="write the results here ('-': stdout)")
    args = parser.parse_args()
    reason = natlab_available()
    if reason is not None:
        sys.exit(reason)
    results = {}
    for name in args.cases.split(","):
        if name not in CASES:
            sys.exit(f"unknown case {name!r}; cases: {', '.join(CASES)}")
        results[name] = run_case(name, args)
        print(_row(name, results[name]), file=sys.stderr, flush=True)
    print("| case | opened | set-up p50 ms | set-up p99 ms | over 300 ms | bulk MB/s | gap p50 ms "
          "| gap p99 ms | pairs |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, result in results.items():
        print(_row(name, result))
    if args.json == "-":
        json.dump(results, sys.stdout, indent=1)
    elif args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
