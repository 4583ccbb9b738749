"""Plots for docs/http3.md from the weak-network benchmarks' JSON (``--json FILE``).

    .venv/bin/python benchmarks/plot_weaknet.py --weaknet a.json b.json --out weaknet-5mb.png
    .venv/bin/python benchmarks/plot_weaknet.py --multiplex m.json --out multiplex-gaps.png

``--weaknet``: seconds per transfer against loss, one line per variant (medians, log scale; a
transfer that failed or timed out is drawn at the timeout with a cross). ``--multiplex``: the
distribution of inter-chunk gaps per variant at the benchmark's loss (a CDF, its upper tail
magnified).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

NAMES = {
    "tcp-bbr": "TCP, kernel BBR",
    "tcp-cubic": "TCP, CUBIC",
    "h3-airlane-bbr": "HTTP/3, airlane-bbr",
    "h3-reno": "HTTP/3, aioquic Reno",
    "wt": "WebTransport (a QUIC stream each)",
    "wt-redundant": "WebTransport, redundant + parity",
    "ws": "WebSocket multiplex (TCP)",
}


def plot_weaknet(files: list[Path], out: Path) -> None:
    cells = []
    size = rtt = None
    for path in files:
        data = json.loads(path.read_text())
        size, rtt = data["size_mb"], data["rtt_ms"]
        cells += data["cells"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, name in NAMES.items():
        mine = sorted((c for c in cells if c["variant"] == variant), key=lambda c: c["loss_pct"])
        if not mine:
            continue
        losses = [c["loss_pct"] for c in mine]
        medians = [statistics.median(c["seconds"]) if c["seconds"] else None for c in mine]
        ax.plot(
            [x for x, m in zip(losses, medians, strict=True) if m is not None],
            [m for m in medians if m is not None],
            marker="o",
            label=name,
        )
    ax.set_yscale("log")
    ax.set_xlabel("packet loss each way (%)")
    ax.set_ylabel("seconds to download (median, log scale)")
    ax.set_title(f"A {size:g} MB model update at {rtt:g} ms RTT")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_multiplex(path: Path, out: Path) -> None:
    data = json.loads(path.read_text())
    args = data["args"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for mode, result in data["results"].items():
        gaps = sorted(g * 1000 for g in result["gaps"])
        share = [(n + 1) / len(gaps) for n in range(len(gaps))]
        ax.plot(gaps, share, label=NAMES.get(mode, mode))
    ax.set_xlabel("inter-chunk gap (ms)")
    ax.set_ylabel("share of gaps at most this long")
    ax.set_ylim(0.9, 1.0005)
    ax.set_xlim(left=30)
    ax.set_title(
        f"{args['streams']} token streams on one connection, {args['loss']:g} % loss, "
        f"{args['rtt_ms']:g} ms RTT (upper tail)"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weaknet", nargs="*", type=Path, default=[])
    parser.add_argument("--multiplex", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.weaknet:
        plot_weaknet(args.weaknet, args.out)
    elif args.multiplex:
        plot_multiplex(args.multiplex, args.out)
    else:
        parser.error("give --weaknet or --multiplex")


if __name__ == "__main__":
    main()
