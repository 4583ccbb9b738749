"""The public surface of airlane.sync is deliberate, and its pure modules stay pure."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import airlane.sync

PURE_MODULES = [
    "airlane.sync",
    "airlane.sync.errors",
    "airlane.sync.hlc",
    "airlane.sync.vclock",
    "airlane.sync.ops",
    "airlane.sync.lww",
    "airlane.sync.lamport",
    "airlane.sync.dag",
    "airlane.sync.semantic",
]
PACKAGE_DIR = Path(airlane.sync.__file__).parent
# No asyncio, no sockets, no clock reads: time is passed in (ARCHITECTURE.md).
FORBIDDEN = re.compile(
    r"import asyncio|from asyncio|socket|time\.time|time\.monotonic|perf_counter"
)


def test_exported_names():
    assert set(airlane.sync.__all__) == {
        "Action",
        "Arbiter",
        "ArbitrationRequest",
        "Bias",
        "Causality",
        "ClockDriftError",
        "Delta",
        "Edit",
        "HybridClock",
        "JSONValue",
        "LWWArbiter",
        "LWWElementSet",
        "LWWMap",
        "LWWRegister",
        "LamportClock",
        "LocalSyncError",
        "MalformedError",
        "ModelArbiter",
        "Op",
        "PipelineState",
        "RemoteSyncError",
        "SemanticMap",
        "Snapshot",
        "SnapshotPipeline",
        "SnapshotReceiver",
        "Stamp",
        "SyncError",
        "TaskGraphError",
        "Trigger",
        "ValidationReport",
        "VersionVector",
        "Violation",
        "normalized_text_hash",
        "stable_point",
        "validate_task_graph",
    }


@pytest.mark.parametrize("name", PURE_MODULES)
def test_every_exported_name_exists_and_is_documented(name):
    module = importlib.import_module(name)
    assert module.__doc__
    assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
    for attr in module.__all__:
        value = getattr(module, attr)
        if inspect.isclass(value) or inspect.isfunction(value):  # not aliases, constants
            assert value.__doc__, f"{name}.{attr} has no docstring"


def test_the_package_does_not_import_the_yjs_rooms():
    init = (PACKAGE_DIR / "__init__.py").read_text()
    assert "yjs" not in re.sub(r'""".*?"""', "", init, count=1, flags=re.DOTALL)


def test_pure_modules_do_no_io_and_read_no_clock():
    sources = sorted(PACKAGE_DIR.glob("*.py"))  # yjs/ (rooms over the hub) is not pure
    assert len(sources) >= len(PURE_MODULES)
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert offenders == []
