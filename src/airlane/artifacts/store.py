"""Artifact stores on disk: the directory a gateway serves, and how versions get into it.

Layout (one directory per version, never modified once it appears)::

    <root>/<name>/<version>/manifest.json
    <root>/<name>/<version>/<files...>          as listed in the manifest
    <root>/@<tenant>/<name>/<version>/...       a tenant's own artifacts

The store names a tenant's artifact ``@<tenant>/<name>`` (`airlane.core.scope`); the artifacts
directly under the root belong to no tenant: every tenant can read them, as far as its policy
allows (the gateway, `airlane.gateway.artifacts`).

A version appears atomically: `airlane.artifacts.packer` builds it in
``<root>/<name>/.incoming-<version>-<rand>`` and renames it into place, so a reader (the
gateway, an announcer scanning the store) sees either nothing or a complete version. Names and
versions starting with ``.`` are not versions.

This module reads only manifests (no numpy): the gateway imports it.
"""

from __future__ import annotations

from pathlib import Path

from airlane.artifacts.errors import ArtifactError, ArtifactNotFound, MalformedArtifact
from airlane.artifacts.manifest import Manifest
from airlane.core.scope import TENANT_PATTERN, scoped, split_scope

__all__ = ["MANIFEST", "ArtifactStore", "read_manifest", "segment"]

MANIFEST = "manifest.json"


class ArtifactStore:
    """A directory of artifact versions (read side: what the gateway serves)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._manifests: dict[tuple[str, str], tuple[int, Manifest]] = {}

    def names(self) -> list[str]:
        """Artifact names, sorted: the shared ones, then every tenant's (``@tenant/name``)."""
        if not self.root.is_dir():
            return []
        shared = sorted(_folders(self.root))
        owned = [
            scoped(folder.name[1:], name)
            for folder in sorted(self.root.iterdir())
            if folder.name.startswith("@") and TENANT_PATTERN.fullmatch(folder.name[1:])
            for name in sorted(_folders(folder))
        ]
        return shared + owned

    def versions(self, name: str) -> list[str]:
        """Complete versions of ``name``, oldest first (by when they appeared)."""
        folder = self._folder(name)
        if not folder.is_dir():
            return []
        found = [
            (entry.stat().st_mtime_ns, entry.parent.name)
            for entry in (p / MANIFEST for p in folder.iterdir() if _visible(p.name))
            if entry.is_file()
        ]
        return [version for _, version in sorted(found)]

    def latest(self, name: str) -> str:
        """The newest version of ``name``; `ArtifactError` (404) when it has none."""
        versions = self.versions(name)
        if not versions:
            raise _not_found(f"no artifact named {name!r}")
        return versions[-1]

    def manifest(self, name: str, version: str) -> Manifest:
        """The manifest of a version (``latest`` resolves), parsed once per file change."""
        if version == "latest":
            version = self.latest(name)
        path = self._folder(name) / segment(version) / MANIFEST
        try:
            stamp = path.stat().st_mtime_ns
        except FileNotFoundError:
            raise _not_found(f"no version {version!r} of {name!r}") from None
        cached = self._manifests.get((name, version))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        manifest = Manifest.from_bytes(path.read_bytes())
        if len(self._manifests) >= 1024:  # bounded: drop the oldest entry
            self._manifests.pop(next(iter(self._manifests)))
        self._manifests[(name, version)] = (stamp, manifest)
        return manifest

    def version_dir(self, name: str, version: str) -> Path:
        """The directory of a version (existing or not)."""
        return self._folder(name) / segment(version)

    def _folder(self, name: str) -> Path:
        tenant, plain = split_scope(name)
        base = self.root if tenant is None else self.root / f"@{tenant}"
        return base / segment(plain)


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a version directory (``<dir>/manifest.json``)."""
    path = directory / MANIFEST if directory.is_dir() else directory
    try:
        return Manifest.from_bytes(path.read_bytes())
    except FileNotFoundError:
        raise ArtifactError(f"no manifest at {path}") from None


def _visible(name: str) -> bool:
    return not name.startswith((".", "@"))


def _folders(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.is_dir() and _visible(p.name)]


def segment(value: str) -> str:
    """A name or version as one path segment (they come from URLs)."""
    if not value or value.startswith((".", "@")) or any(c in value for c in "/\\\x00"):
        raise MalformedArtifact(f"{value[:80]!r} is not a valid artifact name or version")
    return value


def _not_found(message: str) -> ArtifactNotFound:
    return ArtifactNotFound(message)
