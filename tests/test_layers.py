"""The layers of ARCHITECTURE.md, enforced on the import graph (read from the AST, not text).

Every ``import`` and ``from ... import`` in ``src/airlane`` is an edge, wherever it sits (a
function body's deferred import is a dependency too); imports under ``if TYPE_CHECKING:`` are
left out, since they run only for the type checker. The rules:

1. ``core/``, ``wire/`` and ``rules/`` are pure: no asyncio, no sockets, no clock, no I/O
   package, and nothing of Airlane's but each other (a codec that imported the hub loaded
   asyncio and the memory hub with it).
2. A transport imports no other transport, and nothing below the gateway: it acts through
   ``airlane.gateway`` and builds on ``core``, ``wire`` and ``runtime`` only. Nor does it reach
   into the gateway's parts (``gateway.hub``, ``gateway.security``...).
3. Nothing below ``transports/`` (everything but the server, the CLI and the benchmark) imports
   a transport.
4. No cycles between Airlane's packages.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "airlane"

PURE = ("core", "wire", "rules")
# What a pure layer may never import: the event loop, sockets and the network, threads and
# processes, the clock, the file system.
IO_MODULES = frozenset({
    "asyncio", "socket", "selectors", "ssl", "select", "uvloop", "anyio", "trio", "threading",
    "multiprocessing", "subprocess", "concurrent", "time", "datetime", "os", "shutil",
    "tempfile", "pathlib", "io", "signal", "http", "urllib", "httpx", "httptools", "websockets",
    "uvicorn", "grpc", "nats", "aiohttp", "requests", "logging",
})  # fmt: skip
# Airlane's layers a transport may import (besides its own package).
TRANSPORT_MAY_IMPORT = frozenset({"core", "wire", "runtime", "gateway", "v1"})
# Layers above the transports: they compose or drive them.
ABOVE_TRANSPORTS = frozenset({"server", "cli", "bench", "transports"})
# The gateway's parts a transport must not reach through it.
GATEWAY_PARTS = frozenset({"hub", "backend", "security", "events"})


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1 and parts[1] == "v1" and parts[-1].endswith(("_pb2", "_pb2_grpc")):
            continue  # generated
        yield ".".join(parts), path


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, tree: ast.AST) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import that runs (not under TYPE_CHECKING)."""
    package = module if tree_is_package(module) else module.rpartition(".")[0]
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            yield name, node.lineno
            for alias in node.names:  # ``from airlane.x import submodule``
                candidate = f"{name}.{alias.name}"
                if candidate in MODULES:
                    yield candidate, node.lineno
        stack.extend(ast.iter_child_nodes(node))


def tree_is_package(module: str) -> bool:
    return (SRC / module.replace(".", "/") / "__init__.py").exists()


MODULES = dict(_modules())
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}
IMPORTS = {name: sorted(set(_imports(name, tree))) for name, tree in TREES.items()}


def _layer(module: str) -> str:
    """The top-level package of an Airlane module (``airlane.hub.memory`` -> ``hub``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _transport(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "transports" else None


def test_the_graph_is_read_from_every_module():
    assert len(MODULES) > 150
    assert any(name == "airlane.gateway" for name, _ in IMPORTS["airlane.server.compose"])


@pytest.mark.parametrize("layer", PURE)
def test_pure_layers_do_no_io_and_import_only_each_other(layer):
    offenders = []
    for module, imports in IMPORTS.items():
        if _layer(module) != layer:
            continue
        for name, line in imports:
            top = name.split(".")[0]
            if top in IO_MODULES or (top == "airlane" and _layer(name) not in (*PURE, "v1")):
                offenders.append(f"{module}:{line} imports {name}")
    assert offenders == []


def test_importing_every_pure_module_loads_no_io():
    # What the AST says, checked by running it: a fresh interpreter imports every module of
    # core/, wire/ and rules/ and has loaded no event loop, no socket and no hub.
    pure = sorted(m for m in MODULES if _layer(m) in PURE)
    probe = (
        f"import importlib, json, sys\nfor m in {pure!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in ('asyncio', 'socket', 'ssl', 'airlane.hub', "
        "'airlane.gateway', 'airlane.transports') if m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(result.stdout) == []


def test_a_transport_imports_no_other_transport_and_nothing_below_the_gateway():
    offenders = []
    for module, imports in IMPORTS.items():
        own = _transport(module)
        if own is None:
            continue
        for name, line in imports:
            if not name.startswith("airlane"):
                continue
            other = _transport(name)
            if other is not None and other != own:
                offenders.append(f"{module}:{line} imports another transport: {name}")
            elif other is None and _layer(name) not in TRANSPORT_MAY_IMPORT:
                offenders.append(f"{module}:{line} imports below the gateway: {name}")
    assert offenders == []


def test_a_transport_does_not_reach_into_the_gateway():
    offenders = []
    for module, tree in TREES.items():
        if _transport(module) is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr not in GATEWAY_PARTS:
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "gateway":
                offenders.append(f"{module}:{node.lineno}: gateway.{node.attr}")
    assert offenders == []


def test_nothing_below_the_transports_imports_one():
    offenders = [
        f"{module}:{line} imports {name}"
        for module, imports in IMPORTS.items()
        if _layer(module) not in ABOVE_TRANSPORTS
        for name, line in imports
        if _transport(name) is not None
    ]
    assert offenders == []


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imports in IMPORTS.items():
        source = _layer(module)
        if not source:
            continue  # airlane/__init__: lazy re-exports of everything
        for name, _ in imports:
            target = _layer(name) if name.startswith("airlane.") else ""
            if target and target != source:
                graph[source].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path whose first node is repeated at its end, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_package_cycles():
    assert _cycle(_package_graph()) is None, " -> ".join(_cycle(_package_graph()) or [])


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_is_loose_in_the_package():
    loose = sorted(
        path.name
        for path in PACKAGE.glob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    assert loose == []
