"""Fetching an artifact version over HTTP: parallel, chunk-verified, resumable, atomic.

`pull` reads the version's manifest from a store URL (the gateway's ``/v1/artifacts`` or any
static HTTP server holding a store's layout: ``<base>/<name>/<version>/manifest.json`` and
the files beside it), then:

1. verifies the manifest's Ed25519 signature when given a public key;
2. resumes what an earlier, interrupted pull left (`install.PartialVersion`), re-checking it;
3. copies chunks the installed versions already hold (a delta pull: only changed chunks
   travel);
4. fetches the rest with ``parallel`` workers, each asking for a byte range that starts and
   ends on chunk boundaries (consecutive missing chunks, up to ``range_bytes``); every chunk is
   checked against its XXH3 before it is written and counted, a bad one is fetched again (a
   bounded number of times);
5. copes with servers that ignore ``Range`` and answer ``200`` with the whole file: the first
   such answer is read through, filling every missing chunk of that file, and the other
   workers stop asking for ranges of it;
6. checks every file's SHA-256 and the artifact's, then commits: one rename of the version's
   directory and an atomic swap of the ``current`` symlink (the old version stays as
   ``previous``).

Transient failures (connection errors, 5xx) are retried with backoff, a bounded number of times
per range; what was verified so far stays on disk for the next run.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from airlane.artifacts.errors import (
    ArtifactError,
    ArtifactNotFound,
    SignatureError,
    VerificationError,
)
from airlane.artifacts.install import ChunkSource, Installation, PartialFile, PartialVersion
from airlane.artifacts.manifest import Manifest
from airlane.artifacts.signing import verify_bytes

__all__ = ["PullOptions", "PullResult", "fetch_manifest", "pull"]

Progress = Callable[[int, int], None]
"""Called with (bytes verified so far, bytes in the artifact) as chunks land."""

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_MAX_MANIFEST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PullOptions:
    """How `pull` fetches."""

    parallel: int = 4
    """Concurrent range requests."""
    range_bytes: int = 8 * 1024 * 1024
    """Most bytes one range request asks for (a range is whole chunks, so at least one)."""
    attempts: int = 5
    """Tries per range (and per bad chunk) before the pull fails."""
    backoff_s: float = 0.2
    """First retry delay; doubles per failed try, capped at 5 s."""
    public_key: Any = None
    """An Ed25519 public key: the manifest must carry a valid signature by it."""
    keep: int = 2
    """Installed versions kept (current, previous, and older ones up to this count)."""
    timeout_s: float = 30.0
    """Per-request connect/read timeout."""

    def __post_init__(self) -> None:
        if self.parallel < 1 or self.attempts < 1 or self.range_bytes < 1:
            raise ArtifactError("parallel, attempts and range_bytes must be at least 1")


@dataclass(slots=True)
class PullResult:
    """What a pull did."""

    manifest: Manifest
    directory: Path
    up_to_date: bool = False
    """The version was already current: nothing was fetched."""
    resumed_bytes: int = 0
    """Bytes an earlier, interrupted pull had already verified."""
    reused_bytes: int = 0
    """Bytes copied from installed versions instead of fetched."""
    fetched_bytes: int = 0
    """Bytes of verified chunks fetched over the network."""
    refetched_chunks: int = 0
    """Chunks that arrived corrupt (or were lost on disk) and were fetched again."""
    ranges_ignored: bool = False
    """The server answered a range request with the whole file (200)."""
    requests: int = 0
    """HTTP requests for file bytes."""
    signed_by: str | None = None
    """The key id that signed the manifest, when a public key verified it."""
    seconds: float = 0.0


async def fetch_manifest(
    client: httpx.AsyncClient, base_url: str, name: str, version: str = "latest"
) -> Manifest:
    """GET and parse ``<base>/<name>/<version>/manifest.json``."""
    url = f"{base_url.rstrip('/')}/{quote(name)}/{quote(version)}/manifest.json"
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise ArtifactError(f"could not fetch {url}: {exc}") from None
    if response.status_code == 404:
        raise ArtifactNotFound(f"{url}: not found")
    if response.status_code != 200:
        raise ArtifactError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
    if len(response.content) > _MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{url}: the manifest is larger than {_MAX_MANIFEST_BYTES} bytes")
    manifest = Manifest.from_bytes(response.content)
    if manifest.name != name or version not in ("latest", manifest.version):
        raise VerificationError(
            f"{url} holds the manifest of {manifest.name} {manifest.version}, not {name} {version}"
        )
    return manifest


async def pull(
    base_url: str,
    name: str,
    dest: Path,
    version: str = "latest",
    *,
    options: PullOptions | None = None,
    client: httpx.AsyncClient | None = None,
    progress: Progress | None = None,
) -> PullResult:
    """Fetch version ``version`` of ``name`` from the store at ``base_url`` into ``dest``
    and make it current. Raises `ArtifactError` (or a subclass) when it cannot; what was
    verified stays on disk for the next call."""
    options = options or PullOptions()
    started = time.monotonic()
    own_client = client is None
    if client is None:
        client = httpx.AsyncClient(timeout=options.timeout_s)
    try:
        manifest = await fetch_manifest(client, base_url, name, version)
        signed_by = _check_signature(manifest, options.public_key)
        installation = Installation(dest, name, keep=options.keep)
        if installation.current == manifest.version and _same(installation, manifest):
            return PullResult(
                manifest,
                installation.versions / manifest.version,
                up_to_date=True,
                signed_by=signed_by,
                seconds=time.monotonic() - started,
            )
        partial = installation.begin(manifest)
        try:
            result = PullResult(manifest, partial.directory, signed_by=signed_by)
            fetcher = _Fetcher(client, base_url, partial, options, result, progress)
            await fetcher.run(installation.local_chunks())
            await asyncio.to_thread(partial.check_whole)
            result.directory = await asyncio.to_thread(partial.commit)
        finally:
            partial.close()
        result.seconds = time.monotonic() - started
        return result
    finally:
        if own_client:
            await client.aclose()


def _check_signature(manifest: Manifest, public_key: Any) -> str | None:
    if public_key is None:
        return None
    if manifest.signature is None:
        raise SignatureError(f"{manifest.name} {manifest.version}: the manifest is not signed")
    verify_bytes(public_key, manifest.canonical_bytes(), manifest.signature)
    return manifest.signature.get("key_id")


def _same(installation: Installation, manifest: Manifest) -> bool:
    try:
        return installation.manifest(manifest.version).sha256 == manifest.sha256
    except (OSError, ArtifactError):
        return False


@dataclass(slots=True)
class _Range:
    """Chunks ``first..last`` (inclusive) of one file, fetched by one request."""

    file: int
    first: int
    last: int
    tries: int = 0


@dataclass(slots=True)
class _FileState:
    partial: PartialFile
    whole_file_reader: bool = False
    """A worker is reading a 200 answer (the whole file): ranges of it are not asked for."""
    chunk_failures: dict[int, int] = field(default_factory=dict)


class _Fetcher:
    """The workers of one pull and the state they share (one event loop, no locks)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        partial: PartialVersion,
        options: PullOptions,
        result: PullResult,
        progress: Progress | None,
    ) -> None:
        self.client = client
        self.partial = partial
        self.options = options
        self.result = result
        self.progress = progress
        manifest = partial.manifest
        prefix = f"{base_url.rstrip('/')}/{quote(manifest.name)}/{quote(manifest.version)}/"
        self.urls = [prefix + quote(entry.path) for entry in manifest.files]
        self.files = [_FileState(p) for p in partial.files]
        self.queue: deque[_Range] = deque()
        self.done_bytes = 0
        self.total = manifest.size
        self._saved_at = time.monotonic()

    async def run(self, local: dict[str, ChunkSource]) -> None:
        """Resume, reuse local chunks, fetch the rest."""
        for state in self.files:
            self.result.refetched_chunks += await asyncio.to_thread(state.partial.recheck)
            held = state.partial.bytes_held()
            self.result.resumed_bytes += held
            self.done_bytes += held
        self._report()
        for state in self.files:
            self.result.reused_bytes += await asyncio.to_thread(self._reuse, state, local)
        self._report()
        # Rounds: chunks a round could not place (a range dropped while another worker read
        # the whole file, say) are queued again; each round is bounded, and so are the rounds.
        for _ in range(self.options.attempts):
            for index, state in enumerate(self.files):
                self._enqueue(index, state.partial.missing())
            if not self.queue:
                return
            await self._round()
        left = sum(len(state.partial.missing()) for state in self.files)
        if left:
            raise ArtifactError(f"{left} chunks could not be fetched; run the pull again")

    async def _round(self) -> None:
        workers = [
            asyncio.create_task(self._worker(), name=f"pull worker {n}")
            for n in range(min(self.options.parallel, len(self.queue)))
        ]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            for state in self.files:
                state.partial.save_bitmap()

    def _reuse(self, state: _FileState, local: dict[str, ChunkSource]) -> int:
        reused = 0
        for index in state.partial.missing():
            chunk = state.partial.chunks[index]
            source = local.get(chunk.xxh3)
            if source is None:
                continue
            try:
                with source.path.open("rb") as fh:
                    data = os.pread(fh.fileno(), source.size, source.offset)
            except OSError:
                continue
            if state.partial.put(index, data):
                reused += chunk.size
                self.done_bytes += chunk.size
        return reused

    def _enqueue(self, file: int, missing: list[int]) -> None:
        """Group consecutive missing chunks into ranges of at most ``range_bytes``."""
        chunks = self.files[file].partial.chunks
        run: list[int] = []
        size = 0
        for index in missing:
            contiguous = run and index == run[-1] + 1
            if run and (not contiguous or size + chunks[index].size > self.options.range_bytes):
                self.queue.append(_Range(file, run[0], run[-1]))
                run, size = [], 0
            run.append(index)
            size += chunks[index].size
        if run:
            self.queue.append(_Range(file, run[0], run[-1]))

    async def _worker(self) -> None:
        while self.queue:
            task = self.queue.popleft()
            state = self.files[task.file]
            if state.whole_file_reader or all(
                state.partial.has(i) for i in range(task.first, task.last + 1)
            ):
                continue  # the whole file is being read (the next round re-queues what it misses)
            try:
                await self._fetch(task, state)
            except (httpx.TransportError, _Transient) as exc:
                task.tries += 1
                if task.tries >= self.options.attempts:
                    raise ArtifactError(
                        f"{state.partial.entry.path}: bytes {self._span(task)} failed "
                        f"{task.tries} times ({exc}); run the pull again to resume"
                    ) from None
                state.partial.save_bitmap()
                await asyncio.sleep(min(5.0, self.options.backoff_s * 2 ** (task.tries - 1)))
                # What arrived before the failure was kept: ask only for the rest.
                self._requeue(task, state)

    def _requeue(self, task: _Range, state: _FileState) -> None:
        missing = [i for i in range(task.first, task.last + 1) if not state.partial.has(i)]
        before = len(self.queue)
        self._enqueue(task.file, missing)
        for queued in list(self.queue)[before:]:
            queued.tries = task.tries

    def _span(self, task: _Range) -> str:
        chunks = self.files[task.file].partial.chunks
        return f"{chunks[task.first].offset}-{chunks[task.last].end - 1}"

    async def _fetch(self, task: _Range, state: _FileState) -> None:
        chunks = state.partial.chunks
        start, end = chunks[task.first].offset, chunks[task.last].end
        headers = {"range": f"bytes={start}-{end - 1}"}
        self.result.requests += 1
        async with self.client.stream("GET", self.urls[task.file], headers=headers) as response:
            status = response.status_code
            if status == 206:
                _check_content_range(response, start, end, state.partial.entry.size)
                await self._consume(response, state, task.first, task.last)
            elif status == 200:
                self.result.ranges_ignored = True
                if state.whole_file_reader:
                    return
                state.whole_file_reader = True
                try:
                    await self._consume(response, state, 0, len(chunks) - 1)
                finally:
                    state.whole_file_reader = False
            elif status in (404, 410):
                raise ArtifactNotFound(f"{self.urls[task.file]}: HTTP {status}")
            elif status == 429 or status >= 500:
                raise _Transient(f"HTTP {status}")
            else:
                raise ArtifactError(f"{self.urls[task.file]}: HTTP {status} to a range request")
        # Chunks of this range still missing (corrupt on arrival) go round again, bounded.
        bad = [i for i in range(task.first, task.last + 1) if not state.partial.has(i)]
        for index in bad:
            failures = state.chunk_failures.get(index, 0) + 1
            state.chunk_failures[index] = failures
            if failures >= self.options.attempts:
                raise VerificationError(
                    f"{state.partial.entry.path}: chunk {index} at offset "
                    f"{chunks[index].offset} arrived corrupt {failures} times"
                )
            self.result.refetched_chunks += 1
        self._enqueue(task.file, bad)

    async def _consume(
        self, response: httpx.Response, state: _FileState, first: int, last: int
    ) -> None:
        """Read chunks ``first..last`` from a body that starts at chunk ``first``'s offset,
        verifying and writing each as soon as its bytes are in."""
        chunks = state.partial.chunks
        index = first
        buffer = bytearray()
        async for data in response.aiter_bytes():
            buffer += data
            while index <= last and len(buffer) >= chunks[index].size:
                size = chunks[index].size
                if not state.partial.has(index):
                    piece = memoryview(buffer)[:size]
                    ok = state.partial.put(index, piece)
                    piece.release()
                    if ok:
                        self.result.fetched_bytes += size
                        self.done_bytes += size
                        self._report()
                del buffer[:size]
                index += 1
            # No early exit: a body read to its end lets the connection be reused.
        if index <= last:
            raise _Transient(
                f"the body ended {chunks[last].end - chunks[index].offset} bytes short"
            )
        self._maybe_save(state)

    def _maybe_save(self, state: _FileState) -> None:
        now = time.monotonic()
        if now - self._saved_at >= 0.5:
            state.partial.save_bitmap()
            self._saved_at = now

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done_bytes, self.total)


class _Transient(Exception):
    """A failure worth retrying (a 5xx, a body cut short)."""


def _check_content_range(response: httpx.Response, start: int, end: int, size: int) -> None:
    header = response.headers.get("content-range", "")
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if (
        match is None
        or int(match[1]) != start
        or int(match[2]) != end - 1
        or match[3] not in ("*", str(size))
    ):
        raise _Transient(f"asked for bytes {start}-{end - 1}/{size}, got Content-Range {header!r}")
