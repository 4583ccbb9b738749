"""Wide bench tables split to the terminal's width: every cell kept, labels repeated,
sections and caption carried over."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from airlane.bench.fit import split_columns


def render(tables: list[Table], width: int) -> str:
    console = Console(file=io.StringIO(), width=width, no_color=True, legacy_windows=False)
    for table in tables:
        console.print(table)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def wide_table() -> Table:
    table = Table(title="wide", caption="ratios are airlane / peer")
    table.add_column("metric")
    for name in ("airlane", "sse-starlette", "fastapi-ws", "grpcio", "peer-five", "peer-six"):
        table.add_column(name, justify="right")
    table.add_row("[bold]SSE[/bold]", *("" for _ in range(6)))
    table.add_row("out-of-order chunks", *(f"{n},000.25" for n in range(6)))
    table.add_section()
    table.add_row("client CPU", *("97 % (max 100) (client-bound?)" for _ in range(6)))
    return table


def test_a_table_that_fits_is_left_alone() -> None:
    table = wide_table()
    assert split_columns(table, 1000) == [table]


def test_a_wide_table_splits_evenly_and_keeps_every_cell() -> None:
    parts = split_columns(wide_table(), 80)
    assert len(parts) > 1
    counts = [len(part.columns) - 1 for part in parts]
    assert max(counts) - min(counts) <= 1 and sum(counts) == 6
    out = render(parts, 80)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "\u2026" not in out
    assert out.count("out-of-order chunks") == len(parts)
    assert out.count("97 % (max 100) (client-bound?)") == 6
    assert "[bold]" not in out  # markup still rendered, not measured as text
    assert out.count("ratios are airlane / peer") == 1  # the caption under the last part only
    assert [part.title for part in parts] == [f"wide ({n}/{len(parts)})" for n in
                                              range(1, len(parts) + 1)]  # fmt: skip
    assert all(part.rows[1].end_section for part in parts)
