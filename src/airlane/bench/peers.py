"""The servers ``airlane bench --compare`` measures: Airlane and its reference peers.

A peer is a separate program in ``benchmarks/peers/`` of the source checkout that serves the
load-test contract (``GET /v1/loadtest/sse``, ``GET /v1/loadtest/ws``, ``GET /healthz`` with
``{"pid": ...}``) on ``--port 0`` and prints ``listening on http://HOST:PORT`` when ready,
written as an engineer would with a common stack (a WebSocket-only library, picows, serves
the WebSocket half and ``/healthz``: `Implementation.transports` says which). An
`Implementation` says how to start one and, through `Implementation.unavailable`, why it
cannot be run here (its runtime or its packages missing), so that a missing peer is reported
as skipped rather than failing the run.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import airlane
from airlane.bench.spawn import LocalGateway, ServerProcess

__all__ = [
    "AIRLANE",
    "PEER_NAMES",
    "Implementation",
    "airlane_implementation",
    "peer_implementations",
    "peers_dir",
    "select_peers",
]

AIRLANE = "airlane"
"""The name of the implementation every peer is compared with."""

PEER_NAMES = ("fastapi", "aiohttp", "node", "picows")
"""The reference peers, in the order they run."""


def peers_dir() -> Path:
    """``benchmarks/peers`` of the source checkout Airlane runs from (the peers are not part of
    the installed package)."""
    return Path(airlane.__file__).resolve().parents[2] / "benchmarks" / "peers"


@dataclass(frozen=True, slots=True)
class Implementation:
    """A server of the load-test contract, and how to start it."""

    name: str
    """Short name, used on the command line and in reports."""
    description: str
    """What it is built with."""
    command: tuple[str, ...]
    """Its command line (the port is 0: any free one)."""
    cwd: Path | None = None
    """Where to run it."""
    checks: tuple[Callable[[], str | None], ...] = field(default=(), repr=False)
    """Each returns why the implementation cannot run here, or None."""
    transports: tuple[str, ...] = ("sse", "ws")
    """The contract's transports it serves."""

    def unavailable(self) -> str | None:
        """Why it cannot run on this machine (a runtime or package missing), or None."""
        for check in self.checks:
            reason = check()
            if reason is not None:
                return reason
        return None

    def server(self) -> ServerProcess:
        """A (not yet started) process of this implementation."""
        return ServerProcess(self.command, name=self.name, cwd=self.cwd)


def airlane_implementation() -> Implementation:
    """The Airlane gateway with its synthetic backend: the baseline of every comparison."""
    return Implementation(
        AIRLANE, "Airlane gateway (synthetic backend)", tuple(LocalGateway().command)
    )


def peer_implementations(root: Path | None = None) -> list[Implementation]:
    """The reference peers in ``root`` (default `peers_dir`), in `PEER_NAMES` order."""
    root = peers_dir() if root is None else root
    node_dir = root / "node"
    return [
        Implementation(
            "fastapi",
            "FastAPI + sse-starlette on uvicorn (uvloop, httptools)",
            (sys.executable, str(root / "fastapi_app.py"), "--port", "0"),
            root,
            (_file(root / "fastapi_app.py"), _modules("fastapi", "sse_starlette", "uvicorn")),
        ),
        Implementation(
            "aiohttp",
            "aiohttp web server (asyncio loop)",
            (sys.executable, str(root / "aiohttp_app.py"), "--port", "0"),
            root,
            (_file(root / "aiohttp_app.py"), _modules("aiohttp")),
        ),
        Implementation(
            "node",
            "Node.js http + ws",
            ("node", str(node_dir / "server.js"), "--port", "0"),
            node_dir,
            (_file(node_dir / "server.js"), _program("node"), _node_modules(node_dir)),
        ),
        Implementation(
            "picows",
            "picows (WebSocket only; uvloop)",
            (sys.executable, str(root / "picows_app.py"), "--port", "0"),
            root,
            (_file(root / "picows_app.py"), _modules("picows", "uvloop")),
            transports=("ws",),
        ),
    ]


def select_peers(names: str | None, root: Path | None = None) -> list[Implementation]:
    """The peers named in the comma-separated ``names`` (None or ``all``: every peer).

    Raises:
        ValueError: a name that is not a peer.
    """
    peers = peer_implementations(root)
    if names is None or names.strip() == "all":
        return peers
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in PEER_NAMES]
    if unknown or not wanted:
        raise ValueError(f"peers must be a comma-separated selection of {', '.join(PEER_NAMES)}")
    return [peer for peer in peers if peer.name in wanted]


def _file(path: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        if path.is_file():
            return None
        return f"{path} not found (the peers live in a source checkout of Airlane)"

    return check


def _modules(*names: str) -> Callable[[], str | None]:
    def check() -> str | None:
        missing = [name for name in names if importlib.util.find_spec(name) is None]
        if not missing:
            return None
        return f"Python packages missing: {', '.join(missing)} (pip install -e '.[bench]')"

    return check


def _program(name: str) -> Callable[[], str | None]:
    def check() -> str | None:
        return None if shutil.which(name) else f"{name} is not installed"

    return check


def _node_modules(node_dir: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        if (node_dir / "node_modules" / "ws" / "package.json").is_file():
            return None
        return f"{node_dir}/node_modules is missing: run npm ci --prefix {node_dir}"

    return check
