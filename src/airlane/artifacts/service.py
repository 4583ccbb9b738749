"""The gateway's artifact service: the store it serves, and announcements of new versions.

Every version that appears in the store is announced once, as a ``message`` event on the hub
stream ``artifacts/<name>`` (a tenant's artifact, in the tenant's own scope)::

    {"type": "artifact.version", "name": ..., "version": ..., "sha256": ..., "size": ...,
     "files": n, "signed": true|false, "manifest": "/v1/artifacts/<name>/<version>/manifest.json"}

so edge clients subscribed over any transport (SSE, WebSocket, gRPC, AIRC, MQTT...) learn of
it and pull. The service scans the store every ``scan_interval_s`` (and on
``POST /v1/artifacts/rescan``); before announcing, it reads each stream's history so a restart
does not announce again what the stream already carries. Several gateway nodes sharing one
store over the JetStream hub may both announce a version in the same instant; pulling is
idempotent (a pull of the current version fetches nothing), so a duplicate costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from airlane.artifacts.errors import ArtifactError
from airlane.artifacts.store import ArtifactStore
from airlane.core import Event, Kind, Retention
from airlane.core.scope import scoped, split_scope
from airlane.hub import Hub, HubError

__all__ = ["ANNOUNCE_TYPE", "ArtifactService", "announcement_stream"]

log = logging.getLogger("airlane.artifacts")

ANNOUNCE_TYPE = "artifact.version"
"""The ``type`` of an announcement's payload."""

_RETENTION = Retention(max_events=1_000, ttl_s=None)


def announcement_stream(name: str) -> str:
    """The hub stream that announces versions of artifact ``name`` (a tenant's artifact
    ``@tenant/name``: the stream ``artifacts/name`` in that tenant's scope)."""
    tenant, plain = split_scope(name)
    return scoped(tenant, f"artifacts/{plain}")


class ArtifactService:
    """Serves a store directory and announces its new versions on the hub."""

    def __init__(self, root: Path, hub: Hub, *, scan_interval_s: float = 2.0) -> None:
        self.store = ArtifactStore(root)
        self.hub = hub
        self.scan_interval_s = scan_interval_s
        self._announced: dict[str, set[str]] = {}
        self._scanner: asyncio.Task[None] | None = None
        self._scan_lock = asyncio.Lock()

    async def start(self) -> None:
        """Announce what is new in the store, then keep scanning in the background."""
        await self.scan()
        if self.scan_interval_s > 0:
            self._scanner = asyncio.create_task(self._scan_forever(), name="artifact scanner")

    async def aclose(self) -> None:
        """Stop scanning."""
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
            self._scanner = None

    async def scan(self) -> list[dict[str, Any]]:
        """Announce every complete version not announced yet; returns the announcements."""
        async with self._scan_lock:
            made: list[dict[str, Any]] = []
            for name in await asyncio.to_thread(self.store.names):
                versions = await asyncio.to_thread(self.store.versions, name)
                if not versions:
                    continue
                known = await self._known(name)
                # Nothing announced yet (a first start, or the in-memory hub after a
                # restart): the newest version whose manifest reads stands for the others.
                # Announcing them all would send a follower through every old version again,
                # oldest first.
                fresh = not known
                for version in reversed(versions) if fresh else versions:
                    if version in known:
                        continue
                    payload = await self._announce(name, version, known)
                    if payload is None:
                        continue
                    made.append(payload)
                    if fresh:
                        known.update(versions)
                        break
            return made

    async def _announce(self, name: str, version: str, known: set[str]) -> dict[str, Any] | None:
        """Announce ``version`` of ``name`` and add it to ``known``; None if its manifest
        cannot be read (said in the log, not fatal, and known: not tried again)."""
        try:
            payload = await asyncio.to_thread(self._payload, name, version)
        except (ArtifactError, OSError) as exc:
            log.warning("not announcing %s %s: %s", name, version, exc)
            known.add(version)
            return None
        await self.hub.append(announcement_stream(name), Event.message(payload))
        known.add(version)
        return payload

    def _payload(self, name: str, version: str) -> dict[str, Any]:
        manifest = self.store.manifest(name, version)
        name = split_scope(name)[1]  # as the tenant's clients name it
        return {
            "type": ANNOUNCE_TYPE,
            "name": name,
            "version": version,
            "sha256": manifest.sha256,
            "size": manifest.size,
            "files": len(manifest.files),
            "signed": manifest.signature is not None,
            "manifest": f"/v1/artifacts/{name}/{version}/manifest.json",
        }

    async def _known(self, name: str) -> set[str]:
        """Versions the stream already announced (read once per name per process)."""
        known = self._announced.get(name)
        if known is not None:
            return known
        known = set()
        stream = announcement_stream(name)
        await self.hub.create(stream, retention=_RETENTION, exist_ok=True)
        subscription = await self.hub.subscribe(stream)
        try:
            while batch := subscription.poll(1024):
                known.update(filter(None, map(_announced_version, batch)))
        finally:
            await subscription.aclose()
        self._announced[name] = known
        return known

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                await self.scan()
            except HubError as exc:
                log.warning("artifact scan: the hub refused an announcement: %s", exc)
            except OSError as exc:
                log.warning("artifact scan: cannot read the store: %s", exc)


def _announced_version(event: Event) -> str | None:
    """The version an announcement event names (None for any other event)."""
    payload = (event.data or {}).get("payload") if event.kind is Kind.MESSAGE else None
    if isinstance(payload, dict) and payload.get("type") == ANNOUNCE_TYPE:
        return str(payload.get("version"))
    return None
