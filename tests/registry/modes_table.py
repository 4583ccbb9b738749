"""Expanding (old, new, backward?, forward?) cases into one expectation per mode."""

from __future__ import annotations

from typing import Any

from airlane.registry import Compatibility, Schema, SchemaVersion, check_compatibility

MODES = list(Compatibility)


def expected(mode: Compatibility, backward: bool, forward: bool) -> bool:
    """Whether a new version may be registered over one earlier version in ``mode``."""
    return (not mode.backward or backward) and (not mode.forward or forward)


def expand(cases: list[tuple[str, Any, Any, bool, bool]]) -> list[Any]:
    """One pytest param per case and mode: (mode, old, new, compatible)."""
    import pytest

    return [
        pytest.param(mode, old, new, expected(mode, backward, forward), id=f"{name}-{mode.value}")
        for name, old, new, backward, forward in cases
        for mode in MODES
    ]


def problems(mode: Compatibility, old: Schema, new: Schema) -> list[Any]:
    """`check_compatibility` of ``new`` over ``old`` registered as version 1."""
    return check_compatibility(mode, new, [SchemaVersion("s", 1, old)])
