"""`Artifacts`: the model artifact store, as every transport reaches it.

Reading artifact ``<name>`` (its versions, manifests, files) needs ``artifacts.pull`` on
``artifacts/<name>``; a rescan of the store needs ``artifacts.publish`` on ``artifacts``; a
listing shows only what the principal may read.

Tenants: a tenant's principals see its own artifacts (``<store>/@<tenant>/<name>``) and the
shared ones directly under the store's root; its own artifact of a name hides a shared one of
the same name. Another tenant's artifacts are not there for them. The store and its scanner are
given by the composition root (`serve`); a gateway without one answers ``not_found``.

The store is a directory: every call that touches the disk runs in a worker thread, so a slow
disk never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airlane.artifacts.errors import ArtifactError, ArtifactNotFound, MalformedArtifact
from airlane.artifacts.store import segment
from airlane.core.errors import NotFound
from airlane.core.scope import scoped, split_scope
from airlane.gateway.quotas import Quotas
from airlane.gateway.tenancy import scope_of
from airlane.security import Action, PermissionDenied, Principal, SecurityPolicy
from airlane.security.audit import audit_not_found

if TYPE_CHECKING:  # numpy and hashes load only where a store is configured
    from airlane.artifacts.service import ArtifactService

__all__ = ["ArtifactFile", "Artifacts", "artifact_resource"]

_PUBLISH_RESOURCE = "artifacts"


def artifact_resource(name: str) -> str:
    """The resource the security gate is asked about for artifact ``name``: the stream that
    announces its versions."""
    return f"artifacts/{name}"


@dataclass(slots=True)
class ArtifactFile:
    """One file of one version, opened for reading; the caller closes it."""

    fd: int
    """An open descriptor (read with ``os.pread``)."""
    size: int
    """Its size in bytes."""
    sha256: str
    """Its SHA-256 from the manifest: a strong validator (versions never change)."""
    is_manifest: bool
    """True for ``manifest.json`` itself (JSON), False for a file it lists (bytes)."""

    def close(self) -> None:
        """Close the descriptor."""
        os.close(self.fd)


class Artifacts:
    """The artifact operations; see the module docstring."""

    def __init__(self, security: SecurityPolicy, quotas: Quotas | None = None) -> None:
        self._security = security
        self._quotas = quotas or Quotas()
        self.service: ArtifactService | None = None
        """The store and its announcements, when the composition root configured one."""

    def serve(self, service: ArtifactService) -> None:
        """Serve ``service``'s store (started and closed with the gateway)."""
        self.service = service

    def _store(self) -> ArtifactService:
        if self.service is None:
            raise NotFound("this gateway serves no artifacts (start it with --artifacts DIR)")
        return self.service

    def _allow(self, principal: Principal, name: str) -> None:
        self._security.authorize(principal, Action.ARTIFACTS_PULL, artifact_resource(name))

    async def listing(self, principal: Principal) -> list[dict[str, Any]]:
        """Every artifact the principal may read: its name, versions and latest, and whether
        it is shared (not its tenant's own)."""
        service = self._store()
        tenant = scope_of(principal)

        def read() -> list[dict[str, Any]]:
            store, out = service.store, []
            stored = [split_scope(key) for key in store.names()]
            own = {name for owner, name in stored if owner == tenant}
            shared = {name for owner, name in stored if owner is None} - own
            for name in sorted(own | shared):
                try:
                    self._allow(principal, name)
                except PermissionDenied:
                    continue  # listed only where readable
                versions = store.versions(scoped(tenant, name) if name in own else name)
                if versions:
                    out.append(
                        {
                            "name": name,
                            "latest": versions[-1],
                            "versions": versions,
                            "shared": name in shared and tenant is not None,
                        }
                    )
            return out

        return await asyncio.to_thread(read)

    async def versions(self, principal: Principal, name: str) -> dict[str, Any]:
        """Artifact ``name``'s versions (sha256, size, files, signed) and its stream."""
        service = self._store()
        self._allow(principal, name)
        with self._finding(principal, name):
            key = _key(service, principal, name)
            return await asyncio.to_thread(_versions, service, key, name)

    async def rescan(self, principal: Principal) -> list[dict[str, Any]]:
        """Announce the versions new in the store now; what was announced."""
        service = self._store()
        self._security.authorize(principal, Action.ARTIFACTS_PUBLISH, _PUBLISH_RESOURCE)
        return await service.scan()

    async def open_file(
        self, principal: Principal, name: str, version: str, path: str
    ) -> ArtifactFile:
        """Open ``path`` of ``name``'s ``version`` (``latest`` for the newest):
        ``manifest.json`` or a file the manifest lists."""
        service = self._store()
        self._allow(principal, name)
        self._quotas.check_bytes(principal)

        def open_file() -> ArtifactFile:
            return _open_file(service, _key(service, principal, name), version, path)

        with self._finding(principal, name):
            return await asyncio.to_thread(open_file)

    @contextmanager
    def _finding(self, principal: Principal, name: str) -> Iterator[None]:
        """A not-found inside is an audit record (`audit_not_found`): another tenant's
        artifact is not found, as one that does not exist."""
        try:
            yield
        except ArtifactError as exc:
            audit_not_found(
                self._security, principal, Action.ARTIFACTS_PULL, artifact_resource(name), exc
            )
            raise

    def sending(self, principal: Principal, size: int) -> None:
        """Charge ``size`` bytes of an opened file (what a wire is about to send of it: the
        whole file, or the range asked for) to ``principal``'s bytes delivered."""
        self._quotas.charge_bytes(principal, size)

    async def start(self) -> None:
        """Start the store's scanner (announcing what is new first)."""
        if self.service is not None:
            await self.service.start()

    async def aclose(self) -> None:
        """Stop the scanner."""
        if self.service is not None:
            await self.service.aclose()


def _key(service: ArtifactService, principal: Principal, name: str) -> str:
    """The store's name of the artifact ``principal`` calls ``name``: its tenant's own when
    it has one of that name, else the shared one (in a worker thread: it looks at the disk)."""
    segment(name)  # a name no client may use is refused before any path is made of it
    tenant = scope_of(principal)
    if tenant is not None and service.store.versions(own := scoped(tenant, name)):
        return own
    return name


def _versions(service: ArtifactService, key: str, name: str) -> dict[str, Any]:
    store = service.store
    versions: list[dict[str, Any]] = []
    for version in store.versions(key):
        try:
            manifest = store.manifest(key, version)
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
        raise ArtifactNotFound(f"no artifact named {name!r}")
    return {
        "name": name,
        "latest": versions[-1]["version"],
        "versions": versions,
        "stream": artifact_resource(name),
    }


def _open_file(service: ArtifactService, key: str, version: str, path: str) -> ArtifactFile:
    store = service.store
    manifest = store.manifest(key, version)
    folder = store.version_dir(key, manifest.version)
    name = split_scope(key)[1]
    if path == "manifest.json":
        file_path, sha256 = folder / "manifest.json", manifest.sha256
    else:
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise MalformedArtifact(f"{path[:200]!r} is not a file path of an artifact")
        entry = next((e for e in manifest.files if e.path == path), None)
        if entry is None:  # not there, as a missing version is not: 404, not "malformed"
            raise ArtifactNotFound(f"{name} {manifest.version} has no file {path[:200]!r}")
        file_path, sha256 = folder / entry.path, entry.sha256
    try:
        fd = os.open(file_path, os.O_RDONLY)
    except FileNotFoundError:
        raise ArtifactNotFound(f"{file_path.name} is listed but missing on disk") from None
    return ArtifactFile(fd, os.fstat(fd).st_size, sha256, path == "manifest.json")
