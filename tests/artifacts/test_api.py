"""The package's public names: the functions they promise, whatever was imported before."""

from __future__ import annotations

import importlib.util
import types

import airlane.artifacts


def test_no_exported_name_is_also_a_submodule():
    # `from airlane.artifacts import pull` must give the function even after something
    # imported a submodule of that name (which Python would bind over it).
    clashes = [
        name
        for name in airlane.artifacts.__all__
        if importlib.util.find_spec(f"airlane.artifacts.{name}") is not None
    ]
    assert clashes == []


def test_pack_and_pull_are_functions_after_their_modules_load():
    import airlane.artifacts.fetch
    import airlane.artifacts.packer  # noqa: F401
    from airlane.artifacts import pack, pull

    assert not isinstance(pack, types.ModuleType) and callable(pack)
    assert not isinstance(pull, types.ModuleType) and callable(pull)
