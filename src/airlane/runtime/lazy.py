"""`lazy_exports`: a package re-exports names that are imported on first use (PEP 562).

A package whose ``__init__`` imports the modules behind its re-exports makes every import of
any of its submodules pay for all of them: ``import airlane.core`` ran the whole server stack's
imports (about half a second), and every ``airlane`` command loaded the benchmark client. With
lazy exports ``from airlane import Gateway`` still works, and loads the gateway when it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, homes: Mapping[str, Iterable[str]], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each name of ``homes[module]`` is
    imported from ``module`` the first time it is asked for, then kept in the package's
    namespace (later look-ups do not come back here). ``public`` (its ``__all__``) is what
    ``dir()`` lists besides what is loaded."""
    home_of = {name: module for module, names in homes.items() for name in names}
    listed = frozenset(public)

    def __getattr__(name: str) -> Any:
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *listed})

    return __getattr__, __dir__
