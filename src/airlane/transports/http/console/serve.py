"""The web console (``/console``) and the metrics stream its overview plots.

=======  ==========================  ==========================================================
method   path                        what
=======  ==========================  ==========================================================
GET      /console                    the console's page (``/console/#/streams``... its views)
GET      /console/assets/{file}      its modules and style; ``client/`` is `@airlane/client`
GET      /v1/metrics/stream          SSE: one JSON sample of the gateway's metrics a second
=======  ==========================  ==========================================================

The console is on by default for clients on this host (``[http] console``); to others only
with ``[http] console_remote``, and then its pages ask for an API key, which every API call
is checked against as always: the console holds no power of its own. The metrics stream
carries what ``/metrics`` does (which asks for no key), as rates and percentiles over each
second rather than counters since start; each sample is computed for its reader from the
counters, so readers cost a timer each and nothing when there are none.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import ipaddress
import mimetypes
import re
import time
from pathlib import Path
from typing import Any

import orjson

from airlane.core.errors import BadRequest, NotFound
from airlane.transports.http.asgi import Receive, Request, Send, allow_methods, send_body
from airlane.transports.http.console.files import STATIC_DIR
from airlane.transports.http.context import AppContext
from airlane.transports.http.metrics import HttpMetrics
from airlane.wire.sse import encode_event

__all__ = ["MetricsSampler", "handle_console", "serve_metrics_stream"]

_TYPES = {
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".html": b"text/html; charset=utf-8",
    ".png": b"image/png",
    ".svg": b"image/svg+xml",
}


def _csp() -> bytes:
    """The console's content security policy: its pages load only their own files and talk
    only to this gateway. The page's one inline script, the import map that names where
    ``@airlane/client`` is, is allowed by its hash."""
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    found = re.search(r'<script type="importmap">(.*?)</script>', page, re.DOTALL)
    digest = b""
    if found is not None:
        raw = hashlib.sha256(found.group(1).encode()).digest()
        digest = b" 'sha256-" + base64.b64encode(raw) + b"'"
    return (
        b"default-src 'self'; script-src 'self'" + digest + b"; style-src 'self'; "
        b"img-src 'self' data:; connect-src 'self' ws: wss:; base-uri 'none'; "
        b"frame-ancestors 'none'; form-action 'none'"
    )


@functools.cache
def _headers() -> list[tuple[bytes, bytes]]:
    return [
        (b"cache-control", b"no-cache"),
        (b"content-security-policy", _csp()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    ]


async def handle_console(context: AppContext, request: Request, send: Send) -> None:
    """``/console`` and ``/console/assets/...`` (see the module docstring)."""
    allow_methods(request.method, "GET, HEAD")
    config = context.config
    if not config.console or not (config.console_remote or _local(request)):
        raise NotFound(
            "no console here: it is served to this host's clients only ([http] console_remote)"
        )
    rest = request.path.removeprefix("/console").strip("/")
    if rest == "":
        file = STATIC_DIR / "index.html"
    elif rest.startswith("assets/"):
        file = _asset(rest.removeprefix("assets/"))
    else:
        raise NotFound(f"no console page {request.path[:200]!r}")
    try:
        body = file.read_bytes()
    except OSError:
        raise NotFound(f"no console file {request.path[:200]!r}") from None
    content_type = (
        _TYPES.get(file.suffix)
        or (mimetypes.guess_type(file.name)[0] or "application/octet-stream").encode()
    )
    await send_body(send, 200, b"" if request.method == "HEAD" else body, content_type, _headers())


def _asset(name: str) -> Path:
    """The file ``name`` names under the static folder; NotFound for anything outside it."""
    path = (STATIC_DIR / name).resolve()
    if not path.is_relative_to(STATIC_DIR) or not path.is_file():
        raise NotFound(f"no console file {name[:200]!r}")
    return path


def _local(request: Request) -> bool:
    """Whether the request comes from this host (a loopback address)."""
    client = request.scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(str(client[0]).removeprefix("::ffff:")).is_loopback
    except ValueError:
        return False


class MetricsSampler:
    """Turns the gateway's counters into one sample a second: gauges as they are, counters as
    rates since the previous sample, delivery lag as percentiles of the writes in between."""

    def __init__(self, context: AppContext) -> None:
        self._context = context
        self._last: tuple[float, int, int, int, list[int]] | None = None

    def sample(self) -> dict[str, Any]:
        """The gateway now, and what changed since the last sample."""
        context = self._context
        metrics: HttpMetrics = context.metrics
        stats = context.gateway.stats()
        now = time.monotonic()
        lags = metrics.lag_counts()
        current = (now, stats.events_appended, stats.events_delivered, metrics.bytes_sent, lags)
        previous, self._last = self._last, current
        sample: dict[str, Any] = {
            "t": time.time(),
            "streams": stats.streams,
            "subscribers": stats.subscribers,
            "generations": context.gateway.running_generations,
            "retained_bytes": stats.retained_bytes,
            "connections": dict(metrics.connections),
            "events_appended": stats.events_appended,
            "events_delivered": stats.events_delivered,
            "bytes_sent": metrics.bytes_sent,
        }
        if previous is not None:
            span = max(now - previous[0], 1e-6)
            sample["appended_per_s"] = (current[1] - previous[1]) / span
            sample["delivered_per_s"] = (current[2] - previous[2]) / span
            sample["bytes_per_s"] = (current[3] - previous[3]) / span
            window = [a - b for a, b in zip(lags, previous[4], strict=True)]
            sample["lag_ms"] = {
                q: metrics.lag_quantile(window, p) for q, p in (("p50", 0.5), ("p99", 0.99))
            }
            sample["lag_writes"] = sum(window)
        return sample


async def serve_metrics_stream(
    context: AppContext, request: Request, receive: Receive, send: Send
) -> None:
    """``GET /v1/metrics/stream``: a sample a second (``?interval_ms=`` 200 to 60,000) until
    the client leaves."""
    allow_methods(request.method, "GET")
    raw = request.query.get("interval_ms", "1000")
    if not raw.isdigit() or not 200 <= int(raw) <= 60_000:
        raise BadRequest("interval_ms must be 200 to 60000", param="interval_ms")
    interval = int(raw) / 1000
    sampler = MetricsSampler(context)
    sampler.sample()  # the baseline the first rates are measured from
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no")],
    })  # fmt: skip
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        while not gone.done():
            await asyncio.wait([gone], timeout=interval)
            if gone.done():
                break
            frame = encode_event(orjson.dumps(sampler.sample()))
            await send({"type": "http.response.body", "body": frame, "more_body": True})
    finally:
        gone.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
