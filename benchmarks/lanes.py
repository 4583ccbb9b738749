"""Signalling next to bulk at a saturated bottleneck: one-way latency, jitter and loss of small
signalling frames, and the bulk throughput, for four ways of sharing the link.

A veth pair joins namespace ``a`` (the sender: the gateway's side) and ``b`` (the receiver);
the bottleneck is ``a``'s egress, rate-limited by HTB. ``--bulk-flows`` TCP connections send
as fast as they can (``--cc``: their congestion control, CUBIC by default, the loss-based
filler most hosts run), and one TCP connection sends a 64-byte frame every ``--interval-ms``
carrying its send time (``CLOCK_MONOTONIC``, which both namespaces share, so the receiver
computes the one-way latency directly). The first second is warm-up and not counted.

====================== =====================================================================
row                    the bottleneck and the sockets
====================== =====================================================================
fifo                   one HTB class, one FIFO (``pfifo``, 1000 packets); no marks
htb                    ``airlane shaping``'s HTB classes (control 1:10 prio 0, bulk 1:30),
                       the signalling connection put in 1:10 by a static ``u32`` rule on its
                       port (what an operator writes by hand); no marks
user                   one HTB class whose queue is ``pfifo_fast`` (an interface's usual
                       default, which honours ``SO_PRIORITY``); the sockets marked by
                       Airlane's user-space lanes (`airlane.runtime.socket_lanes`: control
                       DSCP 40 priority 6, bulk DSCP 10 priority 2 and ``TCP_NOTSENT_LOWAT``)
classifier             ``airlane shaping attach --rate``: HTB per lane and the BPF classifier,
                       which learns the signalling socket from its cookie (the same
                       `SocketLane` the gateway uses) and sets its class; plus the marks
====================== =====================================================================

Per row: signalling latency p50 / p99 / max (microseconds), jitter (the change of latency
from one frame to the next, RFC 3550's delay variation) p50 / p99, frames lost (TCP cannot
lose a frame: what the bottleneck dropped shows as the signalling socket's retransmissions,
counted from ``TCP_INFO``), and the bulk goodput at the receiver. Needs root, iproute2, and
for the classifier row clang and libbpf's headers.

    .venv/bin/python benchmarks/lanes.py                          # 20 and 100 Mbit/s, every row
    .venv/bin/python benchmarks/lanes.py --rates 20 --seconds 5 --rows fifo,classifier
    .venv/bin/python benchmarks/lanes.py --json lanes.json --plot lanes.png
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROWS = ("fifo", "htb", "user", "classifier")
SIG_PORT = 19_501
BULK_PORT = 19_502
FRAME = struct.Struct("<QQ48x")  # seq, send time (ns): 64 bytes
WARMUP_S = 1.0
_TCP_INFO_TOTAL_RETRANS = 100  # offset of tcpi_total_retrans in struct tcp_info


# -- the ends (run in the namespaces as `lanes.py sig-send|sig-receive|bulk-send|bulk-receive`)
#
# Signalling and bulk run in separate processes, each end of the signalling in a process of
# its own with one thread: a thread waiting for the GIL behind bulk threads would add up to the
# interpreter's switch interval (5 ms) to a frame's measured latency.


def _lanes(args: argparse.Namespace) -> tuple[Any, Any]:
    """The row's `SocketLane` maker, or None for rows without marks."""
    from airlane.runtime.lane_flows import LaneFlows
    from airlane.runtime.socket_lanes import LanesConfig, SocketLane

    if args.row not in ("user", "classifier"):
        return None, None
    config = LanesConfig(bpf_dir=args.bpf_dir or LanesConfig().bpf_dir)
    flows = LaneFlows(config.bpf_dir) if args.row == "classifier" else None
    return (lambda sock: SocketLane(sock, config, flows)), flows


def _window(args: argparse.Namespace) -> tuple[int, int]:
    """The measured window (monotonic ns): from the start plus the warm-up to the end."""
    return args.t0 + int(WARMUP_S * 1e9), args.t0 + int(args.seconds * 1e9)


def _wait_for_start(args: argparse.Namespace) -> float:
    """Sleep until the common start; the monotonic time the run ends."""
    time.sleep(max(0.0, (args.t0 - time.monotonic_ns()) / 1e9))
    return args.t0 / 1e9 + args.seconds


def _listen(args: argparse.Namespace, port: int) -> socket.socket:
    listener = socket.create_server((args.host, port), reuse_port=True)
    listener.settimeout(args.seconds + 10)
    print("ready", flush=True)
    return listener


def sig_receive(args: argparse.Namespace) -> None:
    """Read the frames; print each one's one-way latency (ns) in the measured window."""
    conn, _ = _listen(args, SIG_PORT).accept()
    counted_from, stop = _window(args)
    latencies, buffer, arrived = [], b"", 0
    while True:
        data = conn.recv(65536)
        if not data:
            break
        now = time.monotonic_ns()
        buffer += data
        while len(buffer) >= FRAME.size:
            _, sent = FRAME.unpack_from(buffer)
            buffer = buffer[FRAME.size :]
            arrived += 1
            if counted_from <= sent <= stop:
                latencies.append(now - sent)
    print(json.dumps({"latencies_ns": latencies, "arrived": arrived}))


def sig_send(args: argparse.Namespace) -> None:
    """Send a timestamped frame every interval; print the socket's retransmissions."""
    from airlane.core import Lane

    make_lane, _ = _lanes(args)
    sig = socket.create_connection((args.host, SIG_PORT))
    sig.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    lane = make_lane(sig) if make_lane else None
    if lane is not None:
        lane(Lane.CONTROL)
    deadline = _wait_for_start(args)
    seq, next_at = 0, time.monotonic()
    while time.monotonic() < deadline:
        sig.sendall(FRAME.pack(seq, time.monotonic_ns()))
        seq += 1
        next_at += args.interval_ms / 1000
        time.sleep(max(0.0, next_at - time.monotonic()))
    info = sig.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    (retrans,) = struct.unpack_from("<I", info, _TCP_INFO_TOTAL_RETRANS)
    time.sleep(1.0)  # the last frames leave the queue
    if lane is not None:
        lane.release()
    sig.close()
    print(json.dumps({"sent": seq, "retransmits": retrans}))


def bulk_receive(args: argparse.Namespace) -> None:
    """Read every bulk connection; print the goodput (bit/s) in the measured window."""
    listener = _listen(args, BULK_PORT)
    counted_from, stop = _window(args)
    total = [0]

    def read(conn: socket.socket) -> None:
        while True:
            data = conn.recv(1 << 20)
            if not data:
                return
            if counted_from <= time.monotonic_ns() <= stop:
                total[0] += len(data)

    threads = []
    for _ in range(args.bulk_flows):
        conn, _ = listener.accept()
        threads.append(threading.Thread(target=read, args=(conn,), daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join(args.seconds + 15)
    print(json.dumps({"bulk_bps": total[0] * 8 / (args.seconds - WARMUP_S)}))


def bulk_send(args: argparse.Namespace) -> None:
    """Send as fast as the bottleneck takes, on ``--bulk-flows`` connections."""
    from airlane.core import Lane

    make_lane, _ = _lanes(args)
    socks, lanes = [], []
    for _ in range(args.bulk_flows):
        sock = socket.create_connection((args.host, BULK_PORT))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, args.cc.encode())
        if make_lane:
            lanes.append(make_lane(sock))
            lanes[-1](Lane.BULK)
        socks.append(sock)

    def pump(sock: socket.socket) -> None:
        chunk = bytes(65536)
        sock.settimeout(1.0)
        while time.monotonic() < deadline:
            try:
                sock.send(chunk)
            except TimeoutError:
                continue

    deadline = _wait_for_start(args)
    threads = [threading.Thread(target=pump, args=(sock,), daemon=True) for sock in socks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.seconds + 5)
    for lane in lanes:
        lane.release()
    for sock in socks:
        sock.close()


# -- one row ------------------------------------------------------------------------------------


def _tc(lab: Any, *args: str) -> None:
    lab.run("a", ["tc", *args], check=True, capture_output=True)


def _bottleneck(lab: Any, row: str, rate_mbit: int, bpf_dir: Path) -> None:
    rate = f"{rate_mbit}mbit"
    dev = lab.dev_a
    if row == "classifier":
        from airlane.runtime.socket_lanes import LanesConfig
        from airlane.shaping import attach

        attach(dev, netns=lab.a, rate=rate, config=LanesConfig(bpf_dir=str(bpf_dir)))
        return
    if row == "htb":
        _tc(lab, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "30")
        _tc(lab, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
            "rate", rate, "ceil", rate)  # fmt: skip
        for minor, share, prio in ((0x10, 1, 0), (0x30, 9, 2)):
            _tc(lab, "class", "add", "dev", dev, "parent", "1:1", "classid", f"1:{minor:x}",
                "htb", "rate", f"{rate_mbit * share * 100}kbit", "ceil", rate, "prio",
                str(prio), "quantum", "1514")  # fmt: skip
            _tc(lab, "qdisc", "add", "dev", dev, "parent", f"1:{minor:x}", "pfifo", "limit",
                "100" if minor == 0x10 else "1000")  # fmt: skip
        _tc(lab, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
            "u32", "match", "ip", "dport", str(SIG_PORT), "0xffff", "flowid", "1:10")  # fmt: skip
        return
    _tc(lab, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
    _tc(lab, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
        "rate", rate, "ceil", rate, "quantum", "1514")  # fmt: skip
    leaf = ["pfifo_fast"] if row == "user" else ["pfifo", "limit", "1000"]
    _tc(lab, "qdisc", "add", "dev", dev, "parent", "1:1", *leaf)


def run_row(row: str, rate_mbit: int, args: argparse.Namespace) -> dict[str, Any]:
    """One row at one rate, in a fresh lab."""
    from airlane.bench.vethlab import VethLab

    me = str(Path(__file__).resolve())
    with VethLab() as lab, tempfile.TemporaryDirectory() as tmp:
        bpf_dir = Path(tmp) / "bpf"
        if args.gso_max_size:
            lab.run("a", ["ip", "link", "set", "dev", lab.dev_a, "gso_max_size",
                          str(args.gso_max_size)], check=True)  # fmt: skip
        _bottleneck(lab, row, rate_mbit, bpf_dir)
        # Every process starts its clock at t0 (CLOCK_MONOTONIC is shared by the namespaces).
        t0 = time.monotonic_ns() + int(2e9)
        common = ["--seconds", str(args.seconds), "--bulk-flows", str(args.bulk_flows),
                  "--t0", str(t0)]  # fmt: skip
        marks = ["--row", row, "--bpf-dir", str(bpf_dir)]
        receivers = {}
        for name in ("sig-receive", "bulk-receive"):
            receivers[name] = lab.popen(
                "b", [sys.executable, me, name, "--host", lab.addr_b, *common],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert receivers[name].stdout.readline().strip() == "ready"
        bulk = lab.popen(
            "a", [sys.executable, me, "bulk-send", "--host", lab.addr_b, "--cc", args.cc,
                  *marks, *common],
        )  # fmt: skip
        sender = lab.run(
            "a",
            [sys.executable, me, "sig-send", "--host", lab.addr_b, "--interval-ms",
             str(args.interval_ms), *marks, *common],
            capture_output=True, text=True, timeout=args.seconds + 60,
        )  # fmt: skip
        if sender.returncode != 0:
            raise RuntimeError(f"{row}: the sender failed: {sender.stderr[-2000:]}")
        bulk.wait(30)
        received = {}
        for receiver in receivers.values():
            out, _ = receiver.communicate(timeout=30)
            received.update(json.loads(out))
        if row == "classifier":
            from airlane.runtime.lane_flows import ShapingCounters
            from airlane.runtime.socket_lanes import LanesConfig
            from airlane.shaping import detach

            counters = ShapingCounters(bpf_dir).read()
            detach(lab.dev_a, netns=lab.a, config=LanesConfig(bpf_dir=str(bpf_dir)))
        else:
            counters = {}
    sent = json.loads(sender.stdout)
    return _summary(row, rate_mbit, received, sent, counters)


def _summary(
    row: str, rate_mbit: int, received: dict[str, Any], sent: dict[str, Any], counters: Any
) -> dict[str, Any]:
    latencies = [ns / 1000 for ns in received["latencies_ns"]]
    jitter = [abs(b - a) for a, b in itertools.pairwise(latencies)]

    def pct(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    summary = {
        "row": row,
        "rate_mbit": rate_mbit,
        "frames": len(latencies),
        "sent": sent["sent"],
        "lost": sent["sent"] - received["arrived"],
        "latency_us": {
            "p50": pct(latencies, 0.5),
            "p99": pct(latencies, 0.99),
            "max": max(latencies, default=float("nan")),
        },
        "jitter_us": {"p50": pct(jitter, 0.5), "p99": pct(jitter, 0.99)},
        "retransmits": sent["retransmits"],
        "bulk_mbit": received["bulk_bps"] / 1e6,
        "mean_latency_us": statistics.fmean(latencies) if latencies else float("nan"),
    }
    if counters:
        summary["classified"] = {f"{d}/{lane}": p for (d, lane), (p, _) in counters.items() if p}
    return summary


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's runs as one: the median of each latency, jitter and throughput figure, the
    frames lost and retransmits summed (a loss in any run shows), each run kept in ``runs``."""
    first = runs[0]
    if len(runs) == 1:
        return first

    def median(*keys: str) -> float:
        values = []
        for run in runs:
            value: Any = run
            for key in keys:
                value = value[key]
            values.append(value)
        return statistics.median(values)

    classified: collections.Counter[str] = collections.Counter()
    for run in runs:
        classified.update(run.get("classified", {}))
    return {
        **({"classified": dict(classified)} if classified else {}),
        "row": first["row"],
        "rate_mbit": first["rate_mbit"],
        "frames": sum(r["frames"] for r in runs),
        "sent": sum(r["sent"] for r in runs),
        "lost": sum(r["lost"] for r in runs),
        "latency_us": {q: median("latency_us", q) for q in ("p50", "p99", "max")},
        "jitter_us": {q: median("jitter_us", q) for q in ("p50", "p99")},
        "retransmits": sum(r["retransmits"] for r in runs),
        "bulk_mbit": median("bulk_mbit"),
        "mean_latency_us": median("mean_latency_us"),
        "runs": runs,
    }


def _line(result: dict[str, Any], label: str) -> str:
    lat, jit = result["latency_us"], result["jitter_us"]
    return (
        f"{label:9} {result['rate_mbit']:>4} Mbit/s {result['row']:11} latency p50 "
        f"{lat['p50']:9.0f} p99 {lat['p99']:9.0f} max {lat['max']:9.0f} us | jitter p50 "
        f"{jit['p50']:7.0f} p99 {jit['p99']:8.0f} us | frames {result['frames']:5} lost "
        f"{result['lost']} retransmits {result['retransmits']:3} | "
        f"bulk {result['bulk_mbit']:6.1f} Mbit/s"
    )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Signalling p99 latency and jitter per row, one panel per rate (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({r["rate_mbit"] for r in results})
    fig, axes = plt.subplots(1, len(rates), figsize=(5.5 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        rows = [r for r in results if r["rate_mbit"] == rate]
        names = [r["row"] for r in rows]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["latency_us"]["p99"] for r in rows], 0.4,
               label="latency p99")  # fmt: skip
        ax.bar([i + 0.2 for i in x], [r["jitter_us"]["p99"] for r in rows], 0.4,
               label="jitter p99")  # fmt: skip
        ax.set_xticks(list(x), names)
        ax.set_yscale("log")
        ax.set_ylabel("microseconds")
        ax.set_title(f"signalling at a saturated {rate} Mbit/s bottleneck")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    for name in ("sig-send", "sig-receive", "bulk-send", "bulk-receive"):
        part = sub.add_parser(name)
        part.add_argument("--host", required=True)
        part.add_argument("--seconds", type=float, required=True)
        part.add_argument("--bulk-flows", type=int, required=True)
        part.add_argument("--t0", type=int, required=True, help="the start, monotonic ns")
        if name.endswith("send"):
            part.add_argument("--row", choices=ROWS, required=True)
            part.add_argument("--cc", default="cubic")
            part.add_argument("--interval-ms", type=float, default=5.0)
            part.add_argument("--bpf-dir")
    parser.add_argument("--rates", default="20,100", help="Mbit/s, comma-separated")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--bulk-flows", type=int, default=4)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--cc", default="cubic", help="the bulk flows' congestion control")
    parser.add_argument(
        "--gso-max-size",
        type=int,
        help="cap the sender's segmentation offload (bytes): a 64 KB GSO packet holds a "
        "shaped class for its whole transmission time",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="run every row this many times; report medians"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    ends = {"sig-send": sig_send, "sig-receive": sig_receive, "bulk-send": bulk_send,
            "bulk-receive": bulk_receive}  # fmt: skip
    if args.command in ends:
        ends[args.command](args)
        return 0
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for run in range(args.runs):  # the rows interleaved, so a drift of the machine hits all
        for rate in (int(r) for r in args.rates.split(",")):
            for row in args.rows.split(","):
                result = run_row(row, rate, args)
                runs.setdefault((rate, row), []).append(result)
                print(_line(result, f"run {run + 1}/{args.runs}"), flush=True)
    results = [median_of(done) for done in runs.values()]
    if args.runs > 1:
        print(f"medians of {args.runs} runs (frames lost and retransmits: summed)")
        for result in results:
            print(_line(result, "median"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
