"""Installed artifacts on a receiving machine: partial downloads, commit, rollback.

Layout under a destination directory ``<dest>``::

    <dest>/<name>/versions/<version>/...         complete, verified versions
    <dest>/<name>/current  -> versions/<version>  what applications load (a symlink)
    <dest>/<name>/previous -> versions/<version>  the version before it, for rollback
    <dest>/<name>/.partial/<version>/             a download in progress:
        manifest.json
        data/<file>          each file's bytes so far, at their final offsets (sparse)
        state/<file>.bitmap  which chunks of it were verified

A download survives being killed: the data file and its bitmap stay, and the next pull
re-checks the chunks the bitmap claims (a crash may have lost page-cache writes the bitmap
already counted) and fetches only the rest. A version becomes visible by one rename of its
directory (``data/``, with the manifest, becomes ``versions/<version>``), then one atomic
replacement of the ``current`` symlink; data and state live apart, so no file name a manifest
lists can collide with the download's own bookkeeping. Nothing ever writes into a
complete version.

A bitmap file: ``AIRBMP1\\n``, the file's SHA-256 as 32 raw bytes, the chunk count as a
big-endian u32, then one bit per chunk (chunk ``i`` is bit ``i % 8`` of byte ``i // 8``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from airlane.artifacts.errors import ArtifactError, VerificationError
from airlane.artifacts.manifest import Chunk, FileEntry, Manifest, check_relative_path

__all__ = ["ChunkSource", "Installation", "PartialFile", "PartialVersion"]

_BITMAP_MAGIC = b"AIRBMP1\n"
_MANIFEST = "manifest.json"
_SYNC_EVERY = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """Where a chunk's bytes already lie on this machine (an installed version's file)."""

    path: Path
    offset: int
    size: int


class PartialFile:
    """One file being downloaded: a data file of the final size, plus its bitmap."""

    def __init__(self, directory: Path, entry: FileEntry) -> None:
        self.entry = entry
        self.path = directory / "data" / entry.path
        self.bitmap_path = directory / "state" / (entry.path + ".bitmap")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.bitmap_path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size != entry.size:
            os.ftruncate(self._fd, entry.size)  # sparse: untouched chunks take no disk
        self._have = self._load_bitmap()
        self.dirty = False
        # SHA-256 of the file's verified prefix, advanced while the rest downloads.
        self._sha = hashlib.sha256()
        self._hashed = 0
        self._hash_lock = threading.Lock()

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        """The file's chunks, as the manifest lists them."""
        return self.entry.chunks

    def has(self, index: int) -> bool:
        """Whether chunk ``index`` was verified and written."""
        return bool(self._have[index >> 3] & (1 << (index & 7)))

    def missing(self) -> list[int]:
        """Indexes of the chunks still to get."""
        return [i for i in range(len(self.entry.chunks)) if not self.has(i)]

    def bytes_held(self) -> int:
        """Bytes of verified chunks."""
        return sum(c.size for i, c in enumerate(self.entry.chunks) if self.has(i))

    def recheck(self) -> int:
        """Re-verify every chunk the bitmap claims; unmark the bad. Returns how many were bad
        (writes the bitmap claimed may not have reached the disk before a crash)."""
        bad = 0
        for index, chunk in enumerate(self.entry.chunks):
            if self.has(index) and not chunk.matches(self.read(chunk.offset, chunk.size)):
                self._mark(index, False)
                bad += 1
        return bad

    def read(self, offset: int, size: int) -> bytes:
        """Bytes of the data file."""
        return os.pread(self._fd, size, offset)

    def put(self, index: int, data: bytes | memoryview) -> bool:
        """Verify ``data`` as chunk ``index``, and write and mark it if it matches."""
        if not self.store(index, data):
            return False
        self.mark(index)
        return True

    def store(self, index: int, data: bytes | memoryview) -> bool:
        """Verify and write chunk ``index`` without marking it: safe from worker threads
        (chunks do not overlap); the caller marks it on its own thread with `mark`."""
        chunk = self.entry.chunks[index]
        if not chunk.matches(data):
            return False
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], chunk.offset + written)
        return True

    def mark(self, index: int) -> None:
        """Count chunk ``index`` as verified and written."""
        if not self.has(index):
            self._mark(index, True)

    @property
    def hash_pending(self) -> bool:
        """Whether a verified chunk waits to be fed to the file's SHA-256."""
        return self._hashed < len(self.entry.chunks) and self.has(self._hashed)

    def hash_ready(self) -> None:
        """Feed the file's SHA-256 with the verified chunks that follow what it has hashed
        (from any thread; concurrent calls wait for one another)."""
        with self._hash_lock:
            chunks = self.entry.chunks
            unsynced = 0
            while self._hashed < len(chunks) and self.has(self._hashed):
                chunk = chunks[self._hashed]
                self._sha.update(self.read(chunk.offset, chunk.size))
                self._hashed += 1
                unsynced += chunk.size
                if unsynced >= _SYNC_EVERY:
                    # Start the disk writing now, beside the download, rather than all of it
                    # in the fsync before the commit.
                    os.fdatasync(self._fd)
                    unsynced = 0

    def sha256(self) -> str:
        """The whole file's SHA-256 (every chunk must be in)."""
        self.hash_ready()
        if self._hashed != len(self.entry.chunks):
            raise VerificationError(f"{self.entry.path}: chunks are missing")
        return self._sha.hexdigest()

    def save_bitmap(self) -> None:
        """Write the bitmap (a new file renamed over the old one)."""
        if not self.dirty:
            return
        header = _BITMAP_MAGIC + bytes.fromhex(self.entry.sha256)
        header += struct.pack(">I", len(self.entry.chunks))
        temporary = self.bitmap_path.with_name(self.bitmap_path.name + ".new")
        temporary.write_bytes(header + bytes(self._have))
        os.replace(temporary, self.bitmap_path)
        self.dirty = False

    def finish(self) -> None:
        """Flush the data file to disk (before it becomes part of a version)."""
        os.fsync(self._fd)

    def close(self) -> None:
        """Save the bitmap and close the file."""
        if self._fd >= 0:
            self.save_bitmap()
            os.close(self._fd)
            self._fd = -1

    def _mark(self, index: int, value: bool) -> None:
        if value:
            self._have[index >> 3] |= 1 << (index & 7)
        else:
            self._have[index >> 3] &= ~(1 << (index & 7)) & 0xFF
        self.dirty = True

    def _load_bitmap(self) -> bytearray:
        count = len(self.entry.chunks)
        empty = bytearray((count + 7) // 8)
        try:
            raw = self.bitmap_path.read_bytes()
        except FileNotFoundError:
            return empty
        header = _BITMAP_MAGIC + bytes.fromhex(self.entry.sha256) + struct.pack(">I", count)
        if not raw.startswith(header) or len(raw) != len(header) + len(empty):
            return empty  # another file's bitmap, or torn: start over, nothing is trusted
        return bytearray(raw[len(header) :])


class PartialVersion:
    """A version being downloaded into ``<dest>/<name>/.partial/<version>/``, locked
    against a second pull of the same version."""

    def __init__(self, installation: Installation, manifest: Manifest) -> None:
        self.installation = installation
        self.manifest = manifest
        self.directory = installation.folder / ".partial" / manifest.version
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = os.open(
            self.directory.parent / f"{manifest.version}.lock", os.O_RDWR | os.O_CREAT, 0o644
        )
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise ArtifactError(
                f"another pull of {manifest.name} {manifest.version} is running here"
            ) from None
        stored = self.directory / _MANIFEST
        if stored.exists() and stored.read_bytes() != manifest.to_bytes():
            # A different manifest under the same version: what we hold is not trusted.
            self._clear()
        stored.write_bytes(manifest.to_bytes())
        self.files = [PartialFile(self.directory, entry) for entry in manifest.files]

    def close(self) -> None:
        """Save bitmaps, close files, release the lock."""
        for partial in self.files:
            partial.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def check_whole(self) -> None:
        """SHA-256 of every file (most of it hashed while downloading) against the manifest,
        whose artifact SHA-256 is the digest of those."""
        for partial in self.files:
            if partial.sha256() != partial.entry.sha256:
                raise VerificationError(
                    f"{partial.entry.path}: every chunk verified but the file's SHA-256 "
                    "differs from the manifest (an inconsistent manifest)"
                )

    def commit(self) -> Path:
        """Make this the current version: fsync, rename into ``versions/``, swap ``current``
        (the old one becomes ``previous``). Returns the version's directory."""
        for partial in self.files:
            partial.finish()
        final = self.installation.versions / self.manifest.version
        data = self.directory / "data"
        for partial in self.files:
            partial.close()
        with (data / _MANIFEST).open("wb") as fh:
            fh.write(self.manifest.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(data)
        staged = self.directory.parent / f".staged-{self.manifest.version}"
        if staged.exists():
            shutil.rmtree(staged)
        os.rename(data, staged)
        shutil.rmtree(self.directory)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # an earlier install of the same version: replace it whole
            shutil.rmtree(final)
        os.rename(staged, final)
        _fsync_dir(final.parent)
        self.installation.switch_to(self.manifest.version)
        self.close()
        self.installation.drop_abandoned()
        return final

    def _clear(self) -> None:
        for child in self.directory.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()


class Installation:
    """One artifact's installed versions under ``<dest>/<name>``."""

    def __init__(self, dest: Path, name: str, *, keep: int = 2) -> None:
        if keep < 2:
            raise ArtifactError("keep at least 2 versions (current and previous)")
        self.folder = Path(dest) / check_relative_path(name)
        self.versions = self.folder / "versions"
        self.keep = keep

    @property
    def current(self) -> str | None:
        """The current version, if any."""
        return _link_target(self.folder / "current")

    @property
    def previous(self) -> str | None:
        """The version before it, if any."""
        return _link_target(self.folder / "previous")

    def manifest(self, version: str) -> Manifest:
        """An installed version's manifest."""
        return Manifest.from_bytes((self.versions / version / _MANIFEST).read_bytes())

    def begin(self, manifest: Manifest) -> PartialVersion:
        """Start (or resume) downloading ``manifest``'s version."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return PartialVersion(self, manifest)

    def local_chunks(self) -> dict[str, ChunkSource]:
        """Chunks of the installed current and previous versions by XXH3 (what a delta pull
        need not fetch)."""
        found: dict[str, ChunkSource] = {}
        for version in filter(None, (self.previous, self.current)):
            with contextlib.suppress(OSError, ArtifactError):
                manifest = self.manifest(version)
                for entry in manifest.files:
                    path = self.versions / version / entry.path
                    for chunk in entry.chunks:
                        found[chunk.xxh3] = ChunkSource(path, chunk.offset, chunk.size)
        return found

    def switch_to(self, version: str) -> None:
        """Point ``current`` at ``version`` (``previous`` at the old current) and delete
        versions beyond ``keep``."""
        old = self.current
        if old is not None and old != version:
            _replace_link(self.folder / "previous", f"versions/{old}")
        _replace_link(self.folder / "current", f"versions/{version}")
        self._prune()

    def drop_abandoned(self) -> None:
        """Delete downloads of other versions that no pull holds (their lock is free): once a
        newer version is installed, a half-fetched older one only takes disk."""
        partials = self.folder / ".partial"
        if not partials.is_dir():
            return
        for lock_path in partials.glob("*.lock"):
            fd = os.open(lock_path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a pull is running: not ours to delete
            else:
                shutil.rmtree(partials / lock_path.name[: -len(".lock")], ignore_errors=True)
                lock_path.unlink(missing_ok=True)
            finally:
                os.close(fd)

    def rollback(self) -> str:
        """Swap ``current`` and ``previous``; returns the version now current."""
        previous, current = self.previous, self.current
        if previous is None or not (self.versions / previous).is_dir():
            raise ArtifactError(f"{self.folder.name}: no previous version to roll back to")
        _replace_link(self.folder / "current", f"versions/{previous}")
        if current is not None:
            _replace_link(self.folder / "previous", f"versions/{current}")
        return previous

    def _prune(self) -> None:
        if not self.versions.is_dir():
            return
        protected = {self.current, self.previous}
        others = sorted(
            (p for p in self.versions.iterdir() if p.name not in protected),
            key=lambda p: p.stat().st_mtime_ns,
        )
        for stale in others[: max(0, len(others) - (self.keep - 2))]:
            shutil.rmtree(stale, ignore_errors=True)


def _link_target(link: Path) -> str | None:
    try:
        return Path(os.readlink(link)).name
    except OSError:
        return None


def _replace_link(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically (a new symlink renamed over the old)."""
    temporary = link.with_name(f".{link.name}.new")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    os.symlink(target, temporary)
    os.replace(temporary, link)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
