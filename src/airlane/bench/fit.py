"""Fitting a wide results table to the terminal.

A table with a column per transport (or per implementation) is wider than an 80-column
terminal, and rich then squeezes every column and cuts labels with an ellipsis
("out-of-..."). `split_columns` instead lays the columns out over several tables that each
fit, every one repeating the first (label) column: nothing is cut, and each number keeps
the label beside it.
"""

from __future__ import annotations

from rich.table import Column, Table
from rich.text import Text

__all__ = ["split_columns"]

_CELL_CHROME = 3
"""What rich's default table adds per column: one space of padding each side and a border."""


def split_columns(table: Table, width: int) -> list[Table]:
    """``table`` as one or more tables no wider than ``width`` where that is possible (a
    single column wider than the terminal still wraps). The first column is repeated in each;
    the title is numbered ("(1/2)") and the caption goes under the last."""
    label, *data = table.columns
    budget = width - 1 - _width(label)  # the left border, then the label column
    widths = [_width(column) for column in data]
    groups = _greedy(widths, budget)
    if len(groups) == 1:
        return [table]
    balanced = _even(len(widths), len(groups))  # 3 + 3 reads better than 5 + 1
    if all(sum(widths[i - 1] for i in group) <= budget for group in balanced):
        groups = balanced
    return [_part(table, [0, *group], n, len(groups)) for n, group in enumerate(groups, 1)]


def _greedy(widths: list[int], budget: int) -> list[list[int]]:
    """Column numbers (from 1) packed left to right into groups within ``budget``."""
    groups: list[list[int]] = [[]]
    used = 0
    for index, needed in enumerate(widths, 1):
        if groups[-1] and used + needed > budget:
            groups.append([])
            used = 0
        groups[-1].append(index)
        used += needed
    return groups


def _even(count: int, parts: int) -> list[list[int]]:
    """Column numbers 1..``count`` in ``parts`` runs whose lengths differ by at most one."""
    size, extra = divmod(count, parts)
    groups, start = [], 1
    for part in range(parts):
        length = size + (part < extra)
        groups.append(list(range(start, start + length)))
        start += length
    return groups


def _width(column: Column) -> int:
    """The column's natural width on screen, padding and border included."""
    cells = [column.header, *column.cells]
    return max(_cell_len(cell) for cell in cells) + _CELL_CHROME


def _cell_len(cell: object) -> int:
    if isinstance(cell, str):
        return Text.from_markup(cell).cell_len  # "[bold]SSE[/bold]": measure what shows
    if isinstance(cell, Text):
        return cell.cell_len
    return 0


def _part(table: Table, indexes: list[int], number: int, parts: int) -> Table:
    """A table of ``table``'s columns at ``indexes``, with its rows and sections."""
    title = f"{table.title} ({number}/{parts})" if table.title else None
    caption = table.caption if number == parts else None
    part = Table(title=title, caption=caption)
    columns = [table.columns[i] for i in indexes]
    for column in columns:
        part.add_column(column.header, justify=column.justify)
    cells = [list(column.cells) for column in columns]
    for row_index, row in enumerate(table.rows):
        part.add_row(*(column_cells[row_index] for column_cells in cells))
        if row.end_section:
            part.add_section()
    return part
