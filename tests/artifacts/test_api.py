"""The package's public names: the functions they promise, whatever was imported before."""

from __future__ import annotations

import importlib.util
import re
import types
from pathlib import Path

import pytest

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


# The pure parts: no event loop, no sockets, no clock (ARCHITECTURE.md). The transfer
# parts (fetch, ranges, service) and the GPU measurement are not in this list on purpose.
PURE = [
    "checksums", "chunker", "config", "delta", "errors", "install", "manifest", "packer",
    "plan", "quant", "signing", "store", "tensorfile", "verify",
]  # fmt: skip
FORBIDDEN = re.compile(
    r"import asyncio|from asyncio|import socket|time\.time|time\.monotonic|perf_counter"
)


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_use_no_loop_socket_or_clock(module):
    source = (Path(airlane.artifacts.__file__).parent / f"{module}.py").read_text()
    assert not FORBIDDEN.search(source), module
