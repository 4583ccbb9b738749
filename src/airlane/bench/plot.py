"""``--plot``: one PNG with the distributions behind the table (matplotlib, Agg backend).

Left: time to first chunk, as a cumulative distribution per transport (log axis). Right:
delivery lag, likewise (symmetric log axis, since a lag can be slightly negative). CDFs rather
than histograms: tails are what matter, and they stay readable on a log axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airlane.bench.config import BenchConfig
from airlane.bench.stats import TransportResult

__all__ = ["LAG_LINEAR_BELOW_MS", "MAX_PLOTTED_POINTS", "Curve", "write_cdfs", "write_plot"]

MAX_PLOTTED_POINTS = 5000
"""Points per curve: a CDF of millions of samples looks the same thinned to this."""

LAG_LINEAR_BELOW_MS = 0.1
"""The lag axis is linear within +-0.1 ms (where negative lags live), logarithmic beyond."""

Curve = tuple[str, Sequence[float], Sequence[float]]
"""One curve of each panel: its label, then time-to-first-chunk and delivery-lag samples in
milliseconds, each in ascending order."""


def write_plot(
    path: Path,
    config: BenchConfig,
    results: Sequence[TransportResult],
    labels: Sequence[str] | None = None,
) -> None:
    """Draw the CDFs of ``results`` into the PNG file ``path``, one curve each, labelled
    ``labels`` (default: each result's transport)."""
    names = list(labels) if labels is not None else [r.transport for r in results]
    if len(names) != len(results):
        raise ValueError("give one label per result")
    curves = [
        (name, r.ttfc_samples_ms, r.lag_samples_ms) for r, name in zip(results, names, strict=True)
    ]
    write_cdfs(path, config, curves)


def write_cdfs(path: Path, config: BenchConfig, curves: Sequence[Curve]) -> None:
    """Draw ``curves`` (see `Curve`) into the PNG file ``path``, titled with ``config``'s
    workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    try:
        for name, ttfc_ms, lag_ms in curves:
            _cdf(left, [max(v, 1e-3) for v in ttfc_ms], name)
            _cdf(right, lag_ms, name)
        detail = f" every {config.interval_ms:g} ms" if config.mode == "paced" else ""
        figure.suptitle(
            f"airlane bench: {config.streams} streams x {config.chunks} chunks, "
            f"{config.mode}{detail}"
        )
        left.set_xscale("log")
        left.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        # Lag can be slightly negative (a chunk sent before its scheduled time): symlog.
        right.set_xscale("symlog", linthresh=LAG_LINEAR_BELOW_MS)
        for axes, title in ((left, "time to first chunk"), (right, "delivery lag")):
            axes.set_title(title)
            axes.set_xlabel("ms")
            axes.set_ylabel("fraction of samples")
            axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axes.xaxis.set_minor_formatter(NullFormatter())
            axes.grid(True, which="both", alpha=0.3)
            axes.legend()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)


def _cdf(axes: Any, ordered: Sequence[float], label: str) -> None:
    values = list(ordered)
    if not values:
        return
    step = max(1, len(values) // MAX_PLOTTED_POINTS)
    xs = [*values[::step], values[-1]]
    ys = [*(min(1.0, (i * step + 1) / len(values)) for i in range(len(xs) - 1)), 1.0]
    axes.plot(xs, ys, label=f"{label} (n={len(values):,})", drawstyle="steps-post")
