"""Configuration of the upstream HTTP client: deadlines, sizes, and the origin it talks to.

Typed and documented (STYLE.md section 5): `UpstreamTimeouts` and `UpstreamLimits` are frozen
dataclasses whose defaults are the ``DEFAULT_*`` instances; `Origin` is what a
`airlane.backends.upstream_http.ConnectionPool` connects to.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from airlane.backends.http11 import DEFAULT_MAX_HEAD_BYTES

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUTS",
    "Origin",
    "UpstreamLimits",
    "UpstreamTimeouts",
    "split_url",
]


@dataclass(frozen=True, slots=True)
class UpstreamTimeouts:
    """Deadlines of an upstream request, in seconds."""

    connect: float = 10.0
    """Opening a connection, TLS handshake included."""
    pool: float = 30.0
    """Waiting for a free connection when ``max_connections`` are busy."""
    write: float = 30.0
    """Handing the request to the kernel when its send buffer is full."""
    first_byte: float = 300.0
    """From the request sent to the first byte of the response. Generous: a reasoning model may
    think for minutes before it answers, and some servers send nothing until then."""
    idle: float = 300.0
    """The longest silence between two reads once the response has begun."""
    drain: float = 1.0
    """Reading the end of a body after `UpstreamResponse.drain_on_close`."""

    def __post_init__(self) -> None:
        for name in ("connect", "pool", "write", "first_byte", "idle", "drain"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timeout {name} must be > 0, not {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class UpstreamLimits:
    """Sizes that bound the pool and each connection."""

    max_connections: int = 1000
    """Connections open at once, busy or idle: one per stream in flight, so this also caps
    the streams relayed at once (more wait up to ``UpstreamTimeouts.pool``)."""
    keepalive_expiry: float = 4.0
    """An idle connection older than this (seconds) is closed instead of reused. Below the 5 s
    after which common servers (uvicorn, Node) close idle connections, so that we rarely send
    a request on a connection the server is closing."""
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    """Largest response head accepted."""
    max_buffered_bytes: int = 256 * 1024
    """Body bytes received but not yet read, per connection, before reading pauses (TCP then
    pushes back on the upstream). Far above one read's worth at streaming rates."""
    max_drain_bytes: int = 64 * 1024
    """Most body bytes read after `UpstreamResponse.drain_on_close` before giving up on reuse."""

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_head_bytes", "max_buffered_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")


DEFAULT_TIMEOUTS = UpstreamTimeouts()
"""The default deadlines."""
DEFAULT_LIMITS = UpstreamLimits()
"""The default sizes."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Origin:
    """Scheme, host and port of an upstream (RFC 6454): what a pool connects to."""

    scheme: str
    """``http`` or ``https``."""
    host: str
    """Name or address, without IPv6 brackets."""
    port: int
    """TCP port."""

    @classmethod
    def from_url(cls, url: str) -> Origin:
        """The origin of an absolute ``http(s)`` URL (path and query are ignored).

        Raises:
            ValueError: not an absolute http(s) URL, a user name in it, or a bad port.
        """
        return split_url(url)[0]

    @property
    def authority(self) -> str:
        """``host[:port]`` as the ``Host`` header writes it (port left out when default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if _DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}"


def split_url(url: str) -> tuple[Origin, str]:
    """``(origin, request target)`` of an absolute ``http(s)`` URL; see `Origin.from_url`."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is not a number, or out of range
        raise ValueError(f"invalid URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an absolute http(s) URL: {url!r}")
    if parts.username is not None:
        raise ValueError(f"credentials in a URL are not supported, use api_key: {url!r}")
    if port == 0:
        raise ValueError(f"invalid port in URL {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(scheme, parts.hostname, port or _DEFAULT_PORTS[scheme]), target
