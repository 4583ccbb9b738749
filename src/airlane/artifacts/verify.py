"""Checking a version directory against its manifest: every chunk, file and signature.

`verify_directory` reads ``<dir>/manifest.json``, checks its Ed25519 signature when given a
public key, then every file: size, each chunk's XXH3 (and, for a bad chunk, which 1 KiB
pieces fail their Adler-32, to say where the damage is), the file's SHA-256, and the
artifact's SHA-256 over all files. It reports everything it finds rather than stopping at the
first problem. The artifact's SHA-256 is the digest of the files' (`manifest.artifact_digest`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from airlane.artifacts.errors import ArtifactError, SignatureError
from airlane.artifacts.manifest import Manifest, artifact_digest
from airlane.artifacts.signing import Ed25519PublicKey, verify_bytes

__all__ = ["FileReport", "VerifyReport", "check_signature", "verify_directory"]


@dataclass(slots=True)
class FileReport:
    """One file's findings."""

    path: str
    problem: str | None = None
    """A missing file or a size mismatch (then chunks were not checked)."""
    bad_chunks: list[int] = field(default_factory=list)
    bad_pieces: dict[int, list[int]] = field(default_factory=dict)
    """Per bad chunk, the 1 KiB pieces whose Adler-32 differs."""
    sha256_ok: bool = True

    @property
    def ok(self) -> bool:
        """Nothing wrong with this file."""
        return self.problem is None and not self.bad_chunks and self.sha256_ok


@dataclass(slots=True)
class VerifyReport:
    """What `verify_directory` found."""

    manifest: Manifest
    files: list[FileReport]
    sha256_ok: bool
    signature: str
    """``verified by <key id>``, ``not signed``, or ``signed by <key id> (not checked)``."""

    @property
    def ok(self) -> bool:
        """Every file, chunk and the whole artifact matched."""
        return self.sha256_ok and all(report.ok for report in self.files)

    def lines(self) -> list[str]:
        """The findings, one line each, for people."""
        head = f"{self.manifest.name} {self.manifest.version}: {self.signature}"
        lines = [head]
        for report in self.files:
            if report.ok:
                lines.append(f"ok    {report.path}")
            elif report.problem:
                lines.append(f"BAD   {report.path}: {report.problem}")
            else:
                where = ", ".join(
                    f"chunk {i} (KiB {report.bad_pieces.get(i, [])[:8]})"
                    for i in report.bad_chunks[:8]
                )
                more = len(report.bad_chunks) - 8
                tail = f" and {more} more" if more > 0 else ""
                lines.append(
                    f"BAD   {report.path}: {len(report.bad_chunks)} bad chunks: {where}{tail}"
                )
        lines.append("artifact sha256 " + ("ok" if self.sha256_ok else "MISMATCH"))
        return lines


def check_signature(manifest: Manifest, public_key: Ed25519PublicKey | None) -> str | None:
    """The id of the key that signed ``manifest``, checked against ``public_key`` (None: no
    check, None back). `SignatureError` when it is unsigned or signed otherwise."""
    if public_key is None:
        return None
    if manifest.signature is None:
        raise SignatureError(f"{manifest.name} {manifest.version}: the manifest is not signed")
    verify_bytes(public_key, manifest.canonical_bytes(), manifest.signature)
    return manifest.signature.get("key_id", "?")


def verify_directory(
    directory: Path, *, public_key: Ed25519PublicKey | None = None
) -> VerifyReport:
    """Check ``directory`` against its ``manifest.json``. `SignatureError` when a key is
    given and the signature is missing or wrong; damage is reported, not raised."""
    try:
        manifest = Manifest.from_bytes((directory / "manifest.json").read_bytes())
    except FileNotFoundError:
        raise ArtifactError(f"{directory} has no manifest.json") from None
    signature = "not signed"
    if manifest.signature is not None:
        signature = f"signed by {manifest.signature.get('key_id', '?')} (not checked: no key given)"
    key_id = check_signature(manifest, public_key)
    if key_id is not None:
        signature = f"signature verified (key {key_id})"
    reports = []
    digests: list[tuple[str, str]] = []
    for entry in manifest.files:
        report = FileReport(entry.path)
        reports.append(report)
        path = directory / entry.path
        try:
            with path.open("rb") as fh:
                size = fh.seek(0, 2)
                if size != entry.size:
                    report.problem = f"{size} bytes, the manifest says {entry.size}"
                    continue
                fh.seek(0)
                own = hashlib.sha256()
                for index, chunk in enumerate(entry.chunks):
                    data = fh.read(chunk.size)
                    own.update(data)
                    if not chunk.matches(data):
                        report.bad_chunks.append(index)
                        report.bad_pieces[index] = chunk.bad_pieces(data)
                digests.append((entry.path, own.hexdigest()))
                report.sha256_ok = digests[-1][1] == entry.sha256
        except FileNotFoundError:
            report.problem = "missing"
    sha_ok = len(digests) == len(manifest.files) and artifact_digest(digests) == manifest.sha256
    return VerifyReport(manifest, reports, sha_ok, signature)
