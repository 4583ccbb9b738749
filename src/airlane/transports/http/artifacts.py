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
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airlane.artifacts.errors import ArtifactError
from airlane.security import Action, PermissionDenied, Principal
from airlane.transports.http.asgi import (
    HttpError,
    Receive,
    Request,
    Send,
    allow_methods,
    send_json,
)
from airlane.transports.http.context import AppContext

if TYPE_CHECKING:
    from airlane.artifacts.service import ArtifactService

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
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()):
        return None
    if not first:  # the last n bytes
        if not last.isdigit() or int(last) == 0:
            return _unsatisfiable(size)
        return max(0, size - int(last)), size
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    start = int(first)
    end = size if not last else min(size, int(last) + 1)
    if last and int(last) < start:
        return None  # invalid: ignored like any malformed range
    if start >= size:
        return _unsatisfiable(size)
    return start, end


def _unsatisfiable(size: int) -> tuple[int, int]:
    raise HttpError(
        416,
        f"the range is outside the file ({size} bytes)",
        code="range_not_satisfiable",
        headers=[(b"content-range", f"bytes */{size}".encode())],
    )


async def handle_artifacts(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route one ``/v1/artifacts...`` request."""
    service: ArtifactService | None = app.gateway.artifacts
    if service is None:
        raise HttpError(
            404,
            "this gateway serves no artifacts (start it with --artifacts DIR)",
            code="not_found",
        )
    parts = [part for part in request.path[len(_PREFIX) :].split("/") if part]
    security = app.gateway.security
    try:
        if not parts:
            allow_methods(request.method, "GET")
            await send_json(send, 200, await asyncio.to_thread(_listing, service, principal, app))
        elif parts == ["rescan"] and request.method == "POST":
            security.authorize(principal, Action.PUBLISH, "artifacts")
            await send_json(send, 200, {"announced": await service.scan()})
        elif len(parts) == 1:
            allow_methods(request.method, "GET")
            security.authorize(principal, Action.SUBSCRIBE, f"artifacts/{parts[0]}")
            await send_json(send, 200, await asyncio.to_thread(_versions, service, parts[0]))
        elif len(parts) >= 3:
            allow_methods(request.method, "GET, HEAD")
            security.authorize(principal, Action.SUBSCRIBE, f"artifacts/{parts[0]}")
            await _send_file(service, request, send, parts[0], parts[1], "/".join(parts[2:]))
        else:
            raise HttpError(
                404, f"no route for {request.method} {request.path[:200]}", code="not_found"
            )
    except ArtifactError as exc:
        raise HttpError(exc.status, str(exc), code=exc.code) from None


def _listing(service: ArtifactService, principal: Principal, app: AppContext) -> dict[str, Any]:
    store = service.store
    out = []
    for name in store.names():
        try:
            app.gateway.security.authorize(principal, Action.SUBSCRIBE, f"artifacts/{name}")
        except PermissionDenied:
            continue  # listed only where readable
        versions = store.versions(name)
        if versions:
            out.append({"name": name, "latest": versions[-1], "versions": versions})
    return {"artifacts": out}


def _versions(service: ArtifactService, name: str) -> dict[str, Any]:
    store = service.store
    versions: list[dict[str, Any]] = []
    for version in store.versions(name):
        try:
            manifest = store.manifest(name, version)
        except ArtifactError as exc:
            versions.append({"version": version, "error": str(exc)})
            continue
        versions.append(
            {
                "version": version,
                "sha256": manifest.sha256,
                "size": manifest.size,
                "files": [entry.path for entry in manifest.files],
                "signed": manifest.signature is not None,
            }
        )
    if not versions:
        raise HttpError(404, f"no artifact named {name!r}", code="not_found")
    return {
        "name": name,
        "latest": versions[-1]["version"],
        "versions": versions,
        "stream": f"artifacts/{name}",
    }


async def _send_file(
    service: ArtifactService, request: Request, send: Send, name: str, version: str, path: str
) -> None:
    store = service.store
    manifest = await asyncio.to_thread(store.manifest, name, version)
    folder = store.version_dir(name, manifest.version)
    if path == "manifest.json":
        file_path, etag = folder / "manifest.json", manifest.sha256
    else:
        entry = manifest.file(path)
        file_path, etag = folder / entry.path, entry.sha256
    cache = b"no-cache" if version == "latest" else b"public, max-age=31536000, immutable"
    headers = [
        (b"accept-ranges", b"bytes"),
        (b"etag", f'"{etag}"'.encode()),
        (b"cache-control", cache),
    ]
    fd = await asyncio.to_thread(_open, file_path)
    try:
        size = os.fstat(fd).st_size
        wanted = None
        if_range = request.header(b"if-range")
        if if_range is None or if_range.strip() == f'"{etag}"':
            wanted = parse_range(request.header(b"range"), size)
        start, end = wanted if wanted is not None else (0, size)
        status = 200
        if wanted is not None:
            status = 206
            headers.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
        content_type = (
            b"application/json" if path == "manifest.json" else b"application/octet-stream"
        )
        if request.method == "HEAD":
            headers.append((b"content-length", str(end - start).encode()))
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", content_type), *headers],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(end - start).encode()),
                    *headers,
                ],
            }
        )
        offset = start
        # One block in flight per response: a slow client holds 1 MiB, never the file.
        while offset < end:
            block = await asyncio.to_thread(os.pread, fd, min(_SEND_BLOCK, end - offset), offset)
            if not block:
                break  # the file shrank under us (it must not; versions are immutable)
            offset += len(block)
            await send({"type": "http.response.body", "body": block, "more_body": offset < end})
        if offset < end:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        os.close(fd)


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise HttpError(
            404, f"{path.name} is listed but missing on disk", code="not_found"
        ) from None
