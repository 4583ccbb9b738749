"""`BenchConfig`: the workload ``airlane bench`` drives, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode, urlsplit

__all__ = [
    "DEFAULT_CHUNKS",
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_STREAMS",
    "DEFAULT_TIMEOUT_S",
    "LOOPBACK_HOSTS",
    "MAX_RUNS",
    "TRANSPORTS",
    "BenchConfig",
    "Transport",
    "airc_address",
    "loopback_address",
]

DEFAULT_STREAMS = 100
"""Concurrent streams: the seed's workload."""
DEFAULT_CHUNKS = 200
"""Chunks per stream (about 1.2 KB each): the seed's workload."""
DEFAULT_INTERVAL_MS = 20.0
"""Chunk interval in paced mode: 50 chunks/s per stream, a fast token stream."""
DEFAULT_TIMEOUT_S = 120.0
"""Upper bound on one transport's run; unfinished streams count as errors."""
MAX_RUNS = 20
"""Runs of one ``airlane bench --runs K`` at most: enough for a median, few enough to bound
the time taken."""

MAX_STREAMS = 20_000
"""More than one client process should open; the file descriptor limit is near anyway."""
MAX_CHUNKS = 100_000
"""The gateway's own limit on ``chunks``."""

LOOPBACK_HOSTS = {"127.0.0.1": "127.0.0.1", "::1": "::1", "localhost": "127.0.0.1"}
"""The only hosts a benchmark may target, and the address each is dialled at."""

Mode = Literal["burst", "paced"]
Transport = Literal["sse", "ws", "airc", "airc-ws", "grpc", "grpc-web", "rsocket"]
"""``sse`` and ``ws``: ``/v1/loadtest/sse`` and ``/v1/loadtest/ws``; ``airc``: AIRC over its
TCP listener; ``airc-ws``: AIRC over WebSocket (``/v1/ws``, subprotocol ``airc.v1.2``); ``grpc``:
``Generate`` on the gRPC listener; ``grpc-web``: the same as gRPC-Web on the HTTP port;
``rsocket``: a request-stream on the RSocket/TCP listener."""
TRANSPORTS: tuple[Transport, ...] = (
    "sse", "ws", "airc", "airc-ws", "grpc", "grpc-web", "rsocket",
)  # fmt: skip
"""Every transport, in the order ``--transport all`` runs them."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One benchmark: the same workload run over each transport in turn."""

    streams: int = DEFAULT_STREAMS
    """Concurrent streams (one connection each)."""
    chunks: int = DEFAULT_CHUNKS
    """Chunks each stream carries."""
    mode: Mode = "burst"
    """``burst``: the gateway sends as fast as it can; ``paced``: one chunk per interval."""
    interval_ms: float = DEFAULT_INTERVAL_MS
    """Chunk interval in paced mode."""
    transports: tuple[Transport, ...] = ("sse", "ws")
    """Transports to measure, in order."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Time limit of each transport's run."""

    def __post_init__(self) -> None:
        if not 1 <= self.streams <= MAX_STREAMS:
            raise ValueError(f"streams must be between 1 and {MAX_STREAMS}")
        if not 1 <= self.chunks <= MAX_CHUNKS:
            raise ValueError(f"chunks must be between 1 and {MAX_CHUNKS}")
        if self.mode not in ("burst", "paced"):
            raise ValueError("mode must be 'burst' or 'paced'")
        if not 0.1 <= self.interval_ms <= 60_000:
            raise ValueError("interval_ms must be between 0.1 and 60000")
        if not self.transports or any(t not in TRANSPORTS for t in self.transports):
            names = ", ".join(repr(name) for name in TRANSPORTS)
            raise ValueError(f"transports must be a non-empty selection of {names}")
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")

    @property
    def expected_chunks(self) -> int:
        """Chunks one transport's run should deliver in all."""
        return self.streams * self.chunks

    @property
    def query(self) -> str:
        """The load-test query string (``chunks``, ``mode``, ``interval_ms``)."""
        return urlencode(
            {"chunks": self.chunks, "mode": self.mode, "interval_ms": self.interval_ms}
        )


def loopback_address(url: str) -> tuple[str, int]:
    """``(host, port)`` to dial for ``url``, which must name a loopback host.

    Raises:
        ValueError: for a non-HTTP URL or a host other than 127.0.0.1, ::1 or localhost
            (a benchmark floods its target; it only ever targets this machine).
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"expected an http:// URL, not {url!r}")
    host = LOOPBACK_HOSTS.get(parts.hostname)
    if host is None:
        raise ValueError(f"benchmarks only target loopback (127.0.0.1, ::1), not {parts.hostname}")
    return host, parts.port or 80


def airc_address(url: str) -> tuple[str, int]:
    """``(host, port)`` to dial for an AIRC/TCP ``tcp://host:port`` URL on a loopback host.

    Raises:
        ValueError: not a ``tcp://`` URL with a port, or a host other than 127.0.0.1, ::1 or
            localhost.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or parts.hostname is None or port is None:
        raise ValueError(f"expected a tcp://host:port URL, not {url!r}")
    host = LOOPBACK_HOSTS.get(parts.hostname)
    if host is None:
        raise ValueError(f"benchmarks only target loopback (127.0.0.1, ::1), not {parts.hostname}")
    return host, port
