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
   bounded number of times). The bytes move on worker threads (`airlane.artifacts.ranges`:
   why, with numbers); the manifest comes through httpx;
5. copes with servers that ignore ``Range`` and answer ``200`` with the whole file: the first
   such answer is read through, filling every missing chunk of that file, and the other
   workers stop asking for ranges of it;
6. checks every file's SHA-256 and the artifact's, then commits: one rename of the version's
   directory and an atomic swap of the ``current`` symlink (the old version stays as
   ``previous``).

Transient failures (connection errors, 5xx) are retried with backoff, a bounded number of times
per range; what was verified so far stays on disk for the next run.

With ``transport="h3"`` the manifest and the ranges travel over HTTP/3 instead, the workers
sharing one QUIC connection (`airlane.artifacts.h3ranges`: for lossy links); everything else
is the same.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from airlane.artifacts.errors import (
    ArtifactError,
    ArtifactNotFound,
    VerificationError,
)
from airlane.artifacts.h3ranges import H3Ranges
from airlane.artifacts.install import ChunkSource, Installation, PartialFile, PartialVersion
from airlane.artifacts.manifest import Manifest
from airlane.artifacts.ranges import Connection, RangeConnection, RateLimit, Reader, ShortBody
from airlane.artifacts.verify import check_signature
from airlane.client.errors import ClientError

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
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with every request (``Authorization``, say)."""
    max_bytes_per_s: float | None = None
    """Cap on the pull's download rate, all workers together (None: as fast as it goes); for
    edge devices that share a weak link with live traffic."""
    transport: str = "http"
    """``http`` (HTTP/1.1 over TCP, a connection per worker) or ``h3`` (HTTP/3 over QUIC on
    the URL's port, one connection for all workers)."""
    cafile: str | None = None
    """Over ``h3``: the CA that verifies the gateway's certificate; None trusts any (chunk
    hashes and the manifest's signature still protect the bytes)."""

    def __post_init__(self) -> None:
        if self.parallel < 1 or self.attempts < 1 or self.range_bytes < 1:
            raise ArtifactError("parallel, attempts and range_bytes must be at least 1")
        if self.transport not in ("http", "h3"):
            raise ArtifactError(f"transport is http or h3, not {self.transport!r}")
        if self.max_bytes_per_s is not None and self.max_bytes_per_s <= 0:
            raise ArtifactError("max_bytes_per_s must be positive")


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
    connections: int = 0
    """HTTP/3 connections opened (over ``h3``; more than one: one was lost and reopened)."""
    signed_by: str | None = None
    """The key id that signed the manifest, when a public key verified it."""
    seconds: float = 0.0


async def fetch_manifest(
    client: httpx.AsyncClient, base_url: str, name: str, version: str = "latest"
) -> Manifest:
    """GET and parse ``<base>/<name>/<version>/manifest.json``."""
    url = _manifest_url(base_url, name, version)
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise ArtifactError(f"could not fetch {url}: {exc}") from exc
    return _manifest(url, response.status_code, response.content, name, version)


async def _fetch_manifest_h3(ranges: H3Ranges, base_url: str, name: str, version: str) -> Manifest:
    url = _manifest_url(base_url, name, version)
    try:
        response = await ranges.get(urlsplit(url).path)
        body = bytearray()
        while more := await response.receive():
            body += more
            if len(body) > _MAX_MANIFEST_BYTES:
                break
    except (OSError, ClientError) as exc:
        raise ArtifactError(f"could not fetch {url} over HTTP/3: {exc}") from exc
    return _manifest(url, response.status, bytes(body), name, version)


def _manifest_url(base_url: str, name: str, version: str) -> str:
    return f"{base_url.rstrip('/')}/{quote(name)}/{quote(version)}/manifest.json"


def _manifest(url: str, status: int, body: bytes, name: str, version: str) -> Manifest:
    """The manifest an answer to ``url`` holds, checked to be the one asked for."""
    if status == 404:
        raise ArtifactNotFound(f"{url}: not found")
    if status != 200:
        raise ArtifactError(f"{url}: HTTP {status} {body[:200].decode('utf-8', 'replace')}")
    if len(body) > _MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{url}: the manifest is larger than {_MAX_MANIFEST_BYTES} bytes")
    manifest = Manifest.from_bytes(body)
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
    h3 = (
        H3Ranges(base_url, options.headers, options.timeout_s, cafile=options.cafile)
        if options.transport == "h3"
        else None
    )
    own_client = client is None and h3 is None
    if client is None and h3 is None:
        client = httpx.AsyncClient(timeout=options.timeout_s, headers=dict(options.headers))
    try:
        if h3 is not None:
            manifest = await _fetch_manifest_h3(h3, base_url, name, version)
        else:
            assert client is not None
            manifest = await fetch_manifest(client, base_url, name, version)
        signed_by = check_signature(manifest, options.public_key)
        installation = Installation(dest, name, keep=options.keep)
        if _installed(installation, manifest):
            # Installed already (current, or previous after a rollback): make it current.
            if installation.current != manifest.version:
                installation.switch_to(manifest.version)
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
            fetcher = _Fetcher(base_url, partial, options, result, progress, h3)
            await fetcher.run(installation.local_chunks())
            result.connections = 0 if h3 is None else h3.connections
            await asyncio.to_thread(partial.check_whole)
            result.directory = await asyncio.to_thread(partial.commit)
        finally:
            partial.close()
        result.seconds = time.monotonic() - started
        return result
    finally:
        if own_client and client is not None:
            await client.aclose()
        if h3 is not None:
            await h3.aclose()


def _installed(installation: Installation, manifest: Manifest) -> bool:
    """Whether this exact version is installed; `VerificationError` when a version of that
    name is installed with other contents (versions are immutable: the source changed one)."""
    try:
        installed = installation.manifest(manifest.version)
    except (OSError, ArtifactError):
        return False
    if installed.sha256 != manifest.sha256:
        raise VerificationError(
            f"{manifest.name} {manifest.version} is installed with sha256 {installed.sha256}, "
            f"but the source now offers sha256 {manifest.sha256}: versions must not change"
        )
    return True


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
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Guards ``whole_file_reader`` (set from worker threads)."""


class _Fetcher:
    """The workers of one pull and the state they share.

    Each worker is a coroutine that hands one range at a time to its own thread
    (`ranges.RangeConnection`); the thread reads, verifies and writes chunks and reports each
    landed chunk back to the event loop, which alone marks bitmaps and counts bytes.
    """

    def __init__(
        self,
        base_url: str,
        partial: PartialVersion,
        options: PullOptions,
        result: PullResult,
        progress: Progress | None,
        h3: H3Ranges | None = None,
    ) -> None:
        self.partial = partial
        self.h3 = h3
        self.options = options
        self.result = result
        self.progress = progress
        manifest = partial.manifest
        prefix = f"{base_url.rstrip('/')}/{quote(manifest.name)}/{quote(manifest.version)}/"
        self.base_url = base_url
        self.targets = [urlsplit(prefix + quote(entry.path)) for entry in manifest.files]
        self.files = [_FileState(p) for p in partial.files]
        self.queue: deque[_Range] = deque()
        self.done_bytes = 0
        self.total = manifest.size
        self._saved_at = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._stopping = threading.Event()
        self._connections: list[Connection] = []
        largest = max((c.size for f in manifest.files for c in f.chunks), default=1)
        self._limit = (
            RateLimit(options.max_bytes_per_s, burst=largest)
            if options.max_bytes_per_s is not None
            else None
        )
        # One thread hashes each file's verified prefix while the rest downloads, so that
        # little of the SHA-256 pass is left once the last chunk lands.
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="airlane-sha256")
        self._hashing: set[int] = set()

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
        executor = ThreadPoolExecutor(self.options.parallel, thread_name_prefix="airlane-pull")
        for index in range(len(self.files)):
            self._hash_more(index)
        try:
            # Rounds: chunks a round could not place (a range dropped while another worker
            # read the whole file, say) are queued again; rounds are bounded too.
            for _ in range(self.options.attempts):
                for index, state in enumerate(self.files):
                    self._enqueue(index, state.partial.missing())
                if not self.queue:
                    return
                await self._round(executor)
        finally:
            # No thread may outlive the pull: they write into files about to be closed.
            self._stopping.set()
            for connection in self._connections:
                connection.abort()
            await asyncio.to_thread(executor.shutdown, wait=True)
            await asyncio.to_thread(self._hasher.shutdown, wait=True)
            for connection in self._connections:
                connection.close()
        left = sum(len(state.partial.missing()) for state in self.files)
        if left:
            raise ArtifactError(f"{left} chunks could not be fetched; run the pull again")

    async def _round(self, executor: ThreadPoolExecutor) -> None:
        workers = [
            asyncio.create_task(self._worker(executor), name=f"pull worker {n}")
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

    async def _worker(self, executor: ThreadPoolExecutor) -> None:
        connection: Connection = (
            self.h3.connection()
            if self.h3 is not None
            else RangeConnection(self.base_url, self.options.headers, self.options.timeout_s)
        )
        self._connections.append(connection)
        while self.queue:
            task = self.queue.popleft()
            state = self.files[task.file]
            if state.whole_file_reader or all(
                state.partial.has(i) for i in range(task.first, task.last + 1)
            ):
                continue  # the whole file is being read (the next round re-queues what it misses)
            self.result.requests += 1
            try:
                await self._loop.run_in_executor(executor, self._fetch, connection, task, state)
            except (OSError, http.client.HTTPException, ShortBody, _Transient) as exc:
                connection.close()
                if self._stopping.is_set():
                    return
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
                continue
            self._settle(task, state)
            self._maybe_save(state)

    def _settle(self, task: _Range, state: _FileState) -> None:
        """Chunks of a finished range still missing arrived corrupt: again, a bounded number
        of times."""
        if state.whole_file_reader:
            return
        chunks = state.partial.chunks
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

    def _requeue(self, task: _Range, state: _FileState) -> None:
        missing = [i for i in range(task.first, task.last + 1) if not state.partial.has(i)]
        before = len(self.queue)
        self._enqueue(task.file, missing)
        for queued in list(self.queue)[before:]:
            queued.tries = task.tries

    def _span(self, task: _Range) -> str:
        chunks = self.files[task.file].partial.chunks
        return f"{chunks[task.first].offset}-{chunks[task.last].end - 1}"

    # -- on a worker thread -----------------------------------------------------------------

    def _fetch(self, connection: Connection, task: _Range, state: _FileState) -> None:
        """One request: read its chunks, verify, write, and report each to the loop."""
        chunks = state.partial.chunks
        start, end = chunks[task.first].offset, chunks[task.last].end
        target = self.targets[task.file]
        path = target.path + (f"?{target.query}" if target.query else "")
        status, headers, body = connection.get(path, (start, end))
        if status == 206:
            _check_content_range(
                headers.get("content-range", ""), start, end, state.partial.entry.size
            )
            self._read_chunks(body, task.file, task.first, task.last)
        elif status == 200:
            with state.lock:
                claimed = not state.whole_file_reader
                state.whole_file_reader = True
            self._loop.call_soon_threadsafe(setattr, self.result, "ranges_ignored", True)
            if not claimed:
                connection.close()  # another worker reads the whole file
                return
            try:
                self._read_chunks(body, task.file, 0, len(chunks) - 1)
            finally:
                with state.lock:
                    state.whole_file_reader = False
        elif status in (404, 410):
            body.drain()
            raise ArtifactNotFound(f"{self._url(task)}: HTTP {status}")
        elif status == 429 or status >= 500:
            raise _Transient(f"HTTP {status}")
        else:
            raise ArtifactError(f"{self._url(task)}: HTTP {status} to a range request")

    def _read_chunks(self, body: Reader, task_file: int, first: int, last: int) -> None:
        state = self.files[task_file]
        chunks = state.partial.chunks
        buffer = bytearray(max(c.size for c in chunks[first : last + 1]))
        for index in range(first, last + 1):
            if self._stopping.is_set():
                raise _Transient("the pull is stopping")
            size = chunks[index].size
            if self._limit is not None:
                self._limit.take(size, self._stopping)
            view = memoryview(buffer)[:size]
            body.read_into(view)
            if not state.partial.has(index) and state.partial.store(index, view):
                self._loop.call_soon_threadsafe(self._landed, task_file, index, size)

    def _url(self, task: _Range) -> str:
        return self.targets[task.file].geturl()

    # -- back on the loop -------------------------------------------------------------------

    def _landed(self, file: int, index: int, size: int) -> None:
        partial = self.files[file].partial
        if partial.has(index):
            return
        partial.mark(index)
        self.result.fetched_bytes += size
        self.done_bytes += size
        self._report()
        self._hash_more(file)
        # Progress is saved as chunks land, not when a whole range is done: with ranges of
        # 8 MiB x 4 workers, a pull killed before any range completed kept nothing.
        self._maybe_save(self.files[file])

    def _hash_more(self, file: int) -> None:
        """Start hashing the file's newly contiguous prefix, unless a job already runs."""
        partial = self.files[file].partial
        if file in self._hashing or not partial.hash_pending or self._stopping.is_set():
            return
        self._hashing.add(file)
        job = self._loop.run_in_executor(self._hasher, partial.hash_ready)

        def finished(future: asyncio.Future[None]) -> None:
            self._hashing.discard(file)
            if not future.cancelled() and future.exception() is None:
                self._hash_more(file)

        job.add_done_callback(finished)

    def _maybe_save(self, state: _FileState) -> None:
        """Write the file's bitmap if the last write is 0.5 s old (a resume re-checks the
        chunks a bitmap claims, so one written ahead of its data loses nothing)."""
        now = time.monotonic()
        if now - self._saved_at >= 0.5:
            state.partial.save_bitmap()
            self._saved_at = now

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done_bytes, self.total)


class _Transient(Exception):
    """A failure worth retrying (a 5xx, a body cut short)."""


def _check_content_range(header: str, start: int, end: int, size: int) -> None:
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if (
        match is None
        or int(match[1]) != start
        or int(match[2]) != end - 1
        or match[3] not in ("*", str(size))
    ):
        raise _Transient(f"asked for bytes {start}-{end - 1}/{size}, got Content-Range {header!r}")
