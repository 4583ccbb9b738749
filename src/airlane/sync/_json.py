"""JSON-compatible values: the type, and a bounded check of a peer's or caller's value."""

from __future__ import annotations

from typing import Final, TypeAlias

from airlane.sync.errors import LocalSyncError

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
"""A value that survives a JSON round trip (what ops and snapshots may carry)."""

MAX_JSON_DEPTH: Final = 32
"""Nesting limit: deep enough for documents, shallow enough that checking and comparing a
peer's value cannot recurse without bound."""

_INT_MIN: Final = -(1 << 63)  # what orjson (and most JSON peers) encode exactly
_INT_MAX: Final = (1 << 64) - 1


def check_json(value: object, depth: int = MAX_JSON_DEPTH) -> None:
    """Raise `LocalSyncError` unless ``value`` is JSON-compatible and at most ``depth`` deep."""
    if isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
        raise LocalSyncError("integers must fit in 64 bits")
    if value is None or isinstance(value, str | bool | int | float):
        return
    if depth == 0:
        raise LocalSyncError(f"value nests deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, list):
        for item in value:
            check_json(item, depth - 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise LocalSyncError("object keys must be strings")
            check_json(item, depth - 1)
    else:
        raise LocalSyncError(f"a {type(value).__name__} is not a JSON value")
