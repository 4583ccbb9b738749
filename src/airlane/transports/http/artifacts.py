"""The artifacts API: model versions, their manifests and files, with byte ranges.

=========  ==========================================  ==========================================
method     path                                        what
=========  ==========================================  ==========================================
GET        /v1/artifacts                               artifact names, versions, latest
GET        /v1/artifacts/{name}                        its versions (sha256, size, signed) and
                                                       the stream that announces new ones
GET/HEAD   /v1/artifacts/{name}/{version}/{file}       a file of a version (``manifest.json`` or
                                                       one the manifest lists), with ``Range``
POST       /v1/artifacts/rescan                        announce versions new in the store now
=========  ==========================================  ==========================================

``{version}`` may be ``latest``. Files of a version never change, so they are served with a
strong ``ETag`` (the file's SHA-256 from the manifest) and ``Cache-Control: immutable``;
``latest`` answers are not cached. ``Range`` (RFC 9110 14) is honoured for one range
(``bytes=a-b``, ``a-``, ``-n``); several ranges, or a malformed header, are ignored and the
whole file is sent (as the RFC allows); a range past the end is a 416. ``If-Range`` with another
validator sends the whole file. Reading a version needs ``subscribe`` on the stream
``artifacts/<name>``; a rescan needs ``publish`` on ``artifacts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable

from airlane.core.errors import ErrorCode, NotFound
from airlane.core.numbers import decimal
from airlane.gateway import ArtifactFile, Principal
from airlane.runtime.datagram_lanes import DatagramLane
from airlane.runtime.socket_lanes import LanesConfig, bulk_while
from airlane.transports.http.asgi import (
    FLUSHED_EXTENSION,
    LANE_EXTENSION,
    SOCKET_EXTENSION,
    HttpError,
    Receive,
    Request,
    Send,
    allow_methods,
    send_json,
)
from airlane.transports.http.context import AppContext

__all__ = ["handle_artifacts", "parse_range"]

_PREFIX = "/v1/artifacts"
_SEND_BLOCK = 1024 * 1024


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range ``[start, end)`` a ``Range`` header asks for, or None to send the
    whole file (no header, several ranges, a malformed one). A range that starts past the
    end raises a 416 `HttpError`."""
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    first, last = decimal(first_text), decimal(last_text)
    if not dash or (first is None and last is None):
        return None
    if not first_text:  # the last n bytes
        if not last:
            return _unsatisfiable(size)
        return max(0, size - last), size
    if first is None or (last_text and last is None):
        return None
    start = first
    end = size if last is None else min(size, last + 1)
    if last is not None and last < start:
        return None  # invalid: ignored like any malformed range
    if start >= size:
        return _unsatisfiable(size)
    return start, end


def _unsatisfiable(size: int) -> tuple[int, int]:
    raise HttpError(
        f"the range is outside the file ({size} bytes)",
        code=ErrorCode.RANGE_NOT_SATISFIABLE,
        headers=[(b"content-range", f"bytes */{size}".encode())],
    )


async def handle_artifacts(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route one ``/v1/artifacts...`` request."""
    artifacts = app.gateway.artifacts
    parts = [part for part in request.path[len(_PREFIX) :].split("/") if part]
    if not parts:
        allow_methods(request.method, "GET")
        await send_json(send, 200, {"artifacts": await artifacts.listing(principal)})
    elif parts == ["rescan"] and request.method == "POST":
        await send_json(send, 200, {"announced": await artifacts.rescan(principal)})
    elif len(parts) == 1:
        allow_methods(request.method, "GET")
        await send_json(send, 200, await artifacts.versions(principal, parts[0]))
    elif len(parts) >= 3:
        allow_methods(request.method, "GET, HEAD")
        name, version, path = parts[0], parts[1], "/".join(parts[2:])
        opened = await artifacts.open_file(principal, name, version, path)
        # A model update is the bulk lane's traffic: its connection is marked so while it is
        # sent (docs/lanes.md); a small file, or a HEAD, leaves the connection as it is.
        threshold = app.lanes.bulk_response_bytes
        bulk = request.method == "GET" and 0 < threshold <= opened.size
        try:
            async with _bulk_lane(request, app.lanes) if bulk else contextlib.nullcontext():
                await _send_file(
                    opened,
                    request,
                    send,
                    immutable=version != "latest",
                    sending=lambda size: artifacts.sending(principal, size),
                )
        finally:
            opened.close()
    else:
        raise NotFound(f"no route for {request.method} {request.path[:200]}")


@contextlib.asynccontextmanager
async def _bulk_lane(request: Request, config: LanesConfig) -> AsyncIterator[None]:
    """Marks the request's connection bulk for an ``async with`` block: its socket, or over
    HTTP/3 its QUIC connection's datagrams until the client has acknowledged the response
    (they leave the connection after the block has handed them over)."""
    lane = request.extension(LANE_EXTENSION)
    if not isinstance(lane, DatagramLane):
        with bulk_while(request.extension(SOCKET_EXTENSION), config):
            yield
        return
    flushed: Callable[[], Awaitable[None]] | None = request.extension(FLUSHED_EXTENSION)
    with lane.bulk_while():
        yield
        if flushed is not None:
            await flushed()


async def _send_file(
    file: ArtifactFile,
    request: Request,
    send: Send,
    *,
    immutable: bool,
    sending: Callable[[int], None],
) -> None:
    """Answer with ``file`` (the range asked for, if one), telling ``sending`` how many of its
    bytes go out (the bytes quota's charge)."""
    cache = b"public, max-age=31536000, immutable" if immutable else b"no-cache"
    headers = [
        (b"accept-ranges", b"bytes"),
        (b"etag", f'"{file.sha256}"'.encode()),
        (b"cache-control", cache),
    ]
    size = file.size
    wanted = None
    if_range = request.header(b"if-range")
    if if_range is None or if_range.strip() == f'"{file.sha256}"':
        wanted = parse_range(request.header(b"range"), size)
    start, end = wanted if wanted is not None else (0, size)
    status = 200
    if wanted is not None:
        status = 206
        headers.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
    content_type = b"application/json" if file.is_manifest else b"application/octet-stream"
    headers = [
        (b"content-type", content_type),
        (b"content-length", b"%d" % (end - start)),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if request.method == "HEAD":
        await send({"type": "http.response.body", "body": b""})
        return
    sending(end - start)
    offset = start
    # One block in flight per response: a slow client holds 1 MiB, never the file.
    while offset < end:
        block = await asyncio.to_thread(os.pread, file.fd, min(_SEND_BLOCK, end - offset), offset)
        if not block:
            break  # the file shrank under us (it must not; versions are immutable)
        offset += len(block)
        await send({"type": "http.response.body", "body": block, "more_body": offset < end})
    if offset < end:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
