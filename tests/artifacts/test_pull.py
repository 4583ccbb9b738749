"""Pulling versions over HTTP: verified, delta-aware, resumable, atomic, with rollback."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from airlane.artifacts.errors import ArtifactError, SignatureError, VerificationError
from airlane.artifacts.fetch import PullOptions, pull
from airlane.artifacts.install import Installation
from airlane.artifacts.manifest import artifact_digest
from airlane.artifacts.signing import generate_private_key
from airlane.artifacts.store import read_manifest
from airlane.artifacts.verify import verify_directory
from tests.artifacts.support import FaultyProxy

SMALL_RANGES = PullOptions(parallel=4, range_bytes=64 * 1024, backoff_s=0.01)


def _base(server) -> str:
    return f"{server.url}/v1/artifacts"


def _installed(dest: Path, name: str) -> Path:
    return dest / name / "current"


async def test_pull_installs_a_verified_version_and_makes_it_current(
    artifact_server, store, tmp_path, signing_key
):
    options = PullOptions(parallel=4, range_bytes=64 * 1024, public_key=signing_key.public_key())
    seen: list[tuple[int, int]] = []
    result = await pull(
        _base(artifact_server),
        "tiny",
        tmp_path,
        "1",
        options=options,
        progress=lambda done, total: seen.append((done, total)),
    )
    expected = read_manifest(store / "tiny" / "1")
    assert result.manifest.sha256 == expected.sha256
    assert result.fetched_bytes == expected.size
    assert result.signed_by == signing_key_id(signing_key)
    assert result.requests > 1  # ranges, in parallel
    current = _installed(tmp_path, "tiny")
    assert os.readlink(current) == "versions/1"
    assert (current / "model.safetensors").read_bytes() == (
        store / "tiny" / "1" / "model.safetensors"
    ).read_bytes()
    assert verify_directory(current).ok
    assert seen[-1] == (expected.size, expected.size)
    assert not (tmp_path / "tiny" / ".partial" / "1").exists()
    assert list((tmp_path / "tiny" / ".partial").iterdir()) == []
    again = await pull(_base(artifact_server), "tiny", tmp_path, "1", options=options)
    assert again.up_to_date and again.fetched_bytes == 0


def signing_key_id(key) -> str:
    from airlane.artifacts.signing import key_id

    return key_id(key.public_key())


async def test_a_new_version_fetches_only_the_changed_chunks_and_rollback_restores(
    artifact_server, store, tmp_path
):
    await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)
    result = await pull(_base(artifact_server), "tiny", tmp_path, "latest", options=SMALL_RANGES)
    assert result.manifest.version == "2"
    assert result.reused_bytes > 0
    assert result.fetched_bytes < result.manifest.size / 4  # one layer of four changed
    assert result.fetched_bytes + result.reused_bytes == result.manifest.size
    installation = Installation(tmp_path, "tiny")
    assert (installation.current, installation.previous) == ("2", "1")
    assert verify_directory(_installed(tmp_path, "tiny")).ok
    assert installation.rollback() == "1"
    assert (installation.current, installation.previous) == ("1", "2")
    assert read_manifest(_installed(tmp_path, "tiny")).version == "1"
    back = await pull(_base(artifact_server), "tiny", tmp_path, "2", options=SMALL_RANGES)
    assert back.up_to_date and back.fetched_bytes == 0
    assert (installation.current, installation.previous) == ("2", "1")


async def test_a_version_that_changed_at_the_source_is_refused(artifact_server, tmp_path):
    await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)
    installed = tmp_path / "tiny" / "versions" / "1" / "manifest.json"
    body = orjson.loads(installed.read_bytes())
    body["files"][0]["sha256"] = "0" * 64  # as if another build had been published as 1
    body["sha256"] = artifact_digest([(body["files"][0]["path"], "0" * 64)])
    installed.write_bytes(orjson.dumps(body))
    with pytest.raises(VerificationError, match="must not change"):
        await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)


async def test_signatures_are_enforced_when_a_key_is_given(artifact_server, tmp_path):
    stranger = generate_private_key().public_key()
    with pytest.raises(SignatureError, match="signed by"):
        await pull(
            _base(artifact_server), "tiny", tmp_path, "1", options=PullOptions(public_key=stranger)
        )
    with pytest.raises(SignatureError, match="not signed"):
        await pull(
            _base(artifact_server), "plain", tmp_path, "1", options=PullOptions(public_key=stranger)
        )
    assert not (tmp_path / "tiny" / "current").exists()


async def test_a_tampered_manifest_is_rejected_by_the_signature(store, tmp_path, signing_key):
    tampered = tmp_path / "store"
    shutil.copytree(store / "tiny", tampered / "tiny")
    manifest = tampered / "tiny" / "1" / "manifest.json"
    text = manifest.read_text()
    first_chunk = read_manifest(store / "tiny" / "1").files[0].chunks[0].xxh3
    manifest.write_text(text.replace(first_chunk, "0" * 32, 1))
    from tests.servers import run_server

    with run_server(
        "--artifacts", str(tampered), "--airc-port", "-1", "--grpc-port", "-1"
    ) as server:
        with pytest.raises(SignatureError):
            await pull(
                _base(server),
                "tiny",
                tmp_path / "dest",
                "1",
                options=PullOptions(public_key=signing_key.public_key()),
            )
        # Without the key, the chunk that no longer matches its (tampered) hash is refused.
        with pytest.raises(VerificationError, match="corrupt"):
            await pull(
                _base(server),
                "tiny",
                tmp_path / "dest",
                "1",
                options=PullOptions(attempts=2, backoff_s=0.01),
            )
    assert not (tmp_path / "dest" / "tiny" / "current").exists()


async def test_chunks_corrupted_on_the_wire_are_detected_and_fetched_again(
    artifact_server, store, tmp_path
):
    host, port = httpx.URL(artifact_server.url).host, httpx.URL(artifact_server.url).port
    # Bytes far into the first two connections' answers (past the manifest): file data.
    proxy = FaultyProxy((host, port), flips={0: [300_000], 1: [150_000, 400_000]})
    async with proxy.running():
        result = await pull(
            f"{proxy.url}/v1/artifacts",
            "tiny",
            tmp_path,
            "1",
            options=PullOptions(parallel=2, range_bytes=128 * 1024, backoff_s=0.01),
        )
    assert proxy.flipped >= 2
    assert result.refetched_chunks >= 1
    assert verify_directory(_installed(tmp_path, "tiny")).ok


async def test_a_server_that_ignores_range_is_read_whole(store, tmp_path):
    # Python's own http.server answers every GET with 200 and the whole file.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "0",
            "--bind",
            "127.0.0.1",
            "--directory",
            str(store),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = process.stdout.readline()
        port = int(line.split("port ")[1].split()[0])
        result = await pull(f"http://127.0.0.1:{port}", "tiny", tmp_path, "2", options=SMALL_RANGES)
    finally:
        process.terminate()
        process.wait(10)
    assert result.ranges_ignored
    assert result.manifest.version == "2"
    assert verify_directory(_installed(tmp_path, "tiny")).ok


@pytest.mark.parametrize(
    "ranges",
    [["--parallel", "1", "--range-size", "64KiB"], []],
    # The defaults (8 MiB ranges, 4 workers): no range of this version completes before the
    # kill, which once left the bitmap empty and the next pull starting over.
    ids=["small ranges", "default ranges"],
)
async def test_a_killed_pull_resumes_from_its_partial_file(
    artifact_server, store, tmp_path, ranges
):
    host, port = httpx.URL(artifact_server.url).host, httpx.URL(artifact_server.url).port
    size = read_manifest(store / "tiny" / "1").size
    proxy = FaultyProxy((host, port), rate=size / 10)  # per connection: 10 s for it all
    bitmap = tmp_path / "tiny" / ".partial" / "1" / "state" / "model.safetensors.bitmap"
    async with proxy.running():
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "airlane",
            "artifacts",
            "pull",
            f"{proxy.url}/v1/artifacts",
            "tiny",
            "--version",
            "1",
            "--dest",
            str(tmp_path),
            *ranges,
            "--quiet",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        # Killed once 40 % of the version came through (more than a second in), bounded.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proxy.relayed < 0.4 * size:
            await asyncio.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        await process.wait()
    assert _bits(bitmap) >= 3, "the pull made no progress before it was killed"
    assert not (tmp_path / "tiny" / "current").exists()
    result = await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)
    assert result.resumed_bytes > 0
    assert result.resumed_bytes + result.fetched_bytes == size
    assert verify_directory(_installed(tmp_path, "tiny")).ok


def _bits(bitmap: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        return sum(bin(b).count("1") for b in bitmap.read_bytes()[8 + 32 + 4 :])
    return 0


async def test_a_damaged_partial_chunk_is_found_on_resume(artifact_server, store, tmp_path):
    manifest = read_manifest(store / "tiny" / "1")
    installation = Installation(tmp_path, "tiny")
    partial = installation.begin(manifest)
    source = (store / "tiny" / "1" / "model.safetensors").read_bytes()
    for index, chunk in enumerate(manifest.files[0].chunks[:5]):
        assert partial.files[0].put(index, source[chunk.offset : chunk.end])
    partial.close()
    part = tmp_path / "tiny" / ".partial" / "1" / "data" / "model.safetensors"
    with part.open("r+b") as fh:  # the disk lost a write the bitmap had counted
        fh.seek(manifest.files[0].chunks[2].offset + 10)
        fh.write(b"\x00\x01\x02")
    result = await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)
    assert result.refetched_chunks == 1
    assert (
        result.resumed_bytes
        == sum(c.size for c in manifest.files[0].chunks[:5]) - manifest.files[0].chunks[2].size
    )
    assert verify_directory(_installed(tmp_path, "tiny")).ok


async def test_an_abandoned_download_is_dropped_once_a_version_is_installed(
    artifact_server, store, tmp_path
):
    abandoned = Installation(tmp_path, "tiny").begin(read_manifest(store / "tiny" / "1"))
    abandoned.close()  # as a pull that was killed and never resumed leaves it
    assert (tmp_path / "tiny" / ".partial" / "1").is_dir()
    await pull(_base(artifact_server), "tiny", tmp_path, "2", options=SMALL_RANGES)
    assert list((tmp_path / "tiny" / ".partial").iterdir()) == []


async def test_two_pulls_of_one_version_do_not_mix(artifact_server, store, tmp_path):
    manifest = read_manifest(store / "tiny" / "1")
    holder = Installation(tmp_path, "tiny").begin(manifest)
    try:
        with pytest.raises(ArtifactError, match="another pull"):
            await pull(_base(artifact_server), "tiny", tmp_path, "1", options=SMALL_RANGES)
    finally:
        holder.close()


async def test_unreachable_and_missing_are_clear_errors(artifact_server, tmp_path):
    with pytest.raises(ArtifactError, match="could not fetch"):
        await pull("http://127.0.0.1:9/v1/artifacts", "tiny", tmp_path, options=SMALL_RANGES)
    with pytest.raises(ArtifactError, match="not found"):
        await pull(_base(artifact_server), "nope", tmp_path, options=SMALL_RANGES)


async def test_a_gateway_with_api_keys_needs_the_key_on_every_request(store, tmp_path):
    from tests.servers import run_server

    with run_server(
        "--artifacts",
        str(store),
        "--api-key",
        "edge=s3cret",
        "--airc-port",
        "-1",
        "--grpc-port",
        "-1",
    ) as server:
        with pytest.raises(ArtifactError, match="401"):
            await pull(_base(server), "plain", tmp_path, "1", options=SMALL_RANGES)
        keyed = PullOptions(range_bytes=64 * 1024, headers={"authorization": "Bearer s3cret"})
        result = await pull(_base(server), "plain", tmp_path, "1", options=keyed)
    assert result.fetched_bytes == result.manifest.size
    assert verify_directory(_installed(tmp_path, "plain")).ok


async def test_a_rate_limit_caps_the_download(artifact_server, store, tmp_path):
    manifest = read_manifest(store / "plain" / "1")
    rate = manifest.size / 1.5  # about 1.5 s for the version, whatever the parallelism
    burst = max(c.size for c in manifest.files[0].chunks)
    options = PullOptions(parallel=4, range_bytes=64 * 1024, max_bytes_per_s=rate)
    started = time.monotonic()
    result = await pull(_base(artifact_server), "plain", tmp_path, "1", options=options)
    elapsed = time.monotonic() - started
    assert result.fetched_bytes == manifest.size
    assert elapsed >= (manifest.size - burst) / rate  # a floor: the cap held
    with pytest.raises(ArtifactError, match="positive"):
        PullOptions(max_bytes_per_s=0)


def _proxied(artifact_server, **faults) -> FaultyProxy:
    url = httpx.URL(artifact_server.url)
    return FaultyProxy((url.host, url.port), **faults)


async def test_connections_reset_mid_answer_are_reopened_and_the_rest_asked_again(
    artifact_server, tmp_path
):
    # Two workers; each of their first connections is reset partway into its answers.
    proxy = _proxied(artifact_server, cuts={1: 150_000, 2: 90_000})
    async with proxy.running():
        result = await pull(
            f"{proxy.url}/v1/artifacts", "tiny", tmp_path, "1",
            options=PullOptions(parallel=2, range_bytes=128 * 1024, backoff_s=0.01),
        )  # fmt: skip
    assert proxy.reset == 2 and proxy.connections >= 4  # two cut, and reopened
    assert verify_directory(_installed(tmp_path, "tiny")).ok
    assert result.fetched_bytes == result.manifest.size  # nothing fetched twice in full


async def test_5xx_answers_are_retried_with_backoff(artifact_server, tmp_path):
    proxy = _proxied(artifact_server, refusals={1, 2, 3})
    async with proxy.running():
        await pull(f"{proxy.url}/v1/artifacts", "tiny", tmp_path, "1", options=SMALL_RANGES)
    assert proxy.refused == 3
    assert verify_directory(_installed(tmp_path, "tiny")).ok


async def test_retries_are_bounded_and_the_failure_says_so(artifact_server, store, tmp_path):
    proxy = _proxied(artifact_server, refusals=range(1, 10_000))  # the manifest, then 503s
    async with proxy.running():
        with pytest.raises(ArtifactError, match=r"failed 5 times \(HTTP 503\); run the pull"):
            await pull(f"{proxy.url}/v1/artifacts", "tiny", tmp_path, "1", options=SMALL_RANGES)
    # Bounded per range: the pull stops once one range has failed 5 times, and each of the
    # others was asked for at most as often.
    chunks = sum(len(f.chunks) for f in read_manifest(store / "tiny" / "1").files)
    assert 5 <= proxy.refused <= 5 * chunks
    assert not _installed(tmp_path, "tiny").exists()


class _CountingRangeServer:
    """A plain HTTP/1.1 range server on a free port of 127.0.0.1 over a store's directory,
    that records the byte range of every file request (what the pull asked for, seen at the
    serving side)."""

    def __init__(self, root: Path) -> None:
        seen: list[tuple[str, int, int]] = []
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the pull's workers use it

            def do_GET(self) -> None:
                path = root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                data = path.read_bytes()
                start, end = 0, len(data) - 1
                header = self.headers.get("range")
                if header is not None:
                    first, last = header.removeprefix("bytes=").split("-")
                    start, end = int(first), min(int(last), len(data) - 1)
                    with lock:
                        seen.append((self.path, start, end + 1))
                self.send_response(206 if header is not None else 200)
                if header is not None:
                    self.send_header("content-range", f"bytes {start}-{end}/{len(data)}")
                self.send_header("content-length", str(end + 1 - start))
                self.end_headers()
                with contextlib.suppress(ConnectionError):  # a worker stopped mid-answer
                    self.wfile.write(data[start : end + 1])

            def log_message(self, *args) -> None:
                pass

        self.seen = seen
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _CountingRangeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


async def test_a_chunk_that_keeps_arriving_corrupt_fails_the_pull_after_the_bounded_tries(
    artifact_server, store, tmp_path
):
    """docs/artifacts.md, Pulling, step 4 (and `PullOptions.attempts`): a chunk that arrives
    corrupt is fetched again a bounded number of times (5 tries), then the pull fails with a
    clear error naming the chunk, keeping what it verified and installing nothing; a good
    source afterwards finishes the version."""
    manifest = read_manifest(store / "tiny" / "1")
    (entry,) = manifest.files
    index = len(entry.chunks) // 2  # a chunk in the middle: ranges on both sides of it
    bad = entry.chunks[index]
    # A serving side whose copy of the file has one chunk's bytes altered, for every
    # request: the corruption is at the source, so every re-fetch gets it again.
    served = tmp_path / "served"
    shutil.copytree(store / "tiny" / "1", served / "tiny" / "1")
    data = served / "tiny" / "1" / entry.path
    body = bytearray(data.read_bytes())
    for offset in range(bad.offset, bad.end, 997):  # bytes spread over the chunk
        body[offset] ^= 0xFF
    data.write_bytes(body)
    corrupt = bytes(body[bad.offset : bad.end])
    dest = tmp_path / "dest"
    options = PullOptions(parallel=4, range_bytes=64 * 1024, backoff_s=0.01)
    assert options.attempts == 5  # the documented bound is the default one
    refused = rf"{entry.path}: chunk {index} at offset {bad.offset} arrived corrupt 5 times"
    with _CountingRangeServer(served) as server, pytest.raises(VerificationError, match=refused):
        await asyncio.wait_for(pull(server.url, "tiny", dest, "1", options=options), timeout=60)
    # Counted at the server: the requests whose range covered the bad chunk. The first
    # carries it with its neighbours, each re-fetch asks for it alone; 5 in all (the bound
    # counts tries, the first fetch included: `PullOptions.attempts`), no more.
    asked = [
        (s, e)
        for path, s, e in server.seen
        if path.endswith(f"/{entry.path}") and s < bad.end and bad.offset < e
    ]
    assert len(asked) == options.attempts, asked
    assert asked[1:] == [(bad.offset, bad.end)] * (options.attempts - 1)
    # Nothing installed, and the corrupt bytes never reached the partial file: only
    # verified chunks are written.
    assert not _installed(dest, "tiny").exists()
    assert not (dest / "tiny" / "versions" / "1").exists()
    part = dest / "tiny" / ".partial" / "1" / "data" / entry.path
    with part.open("rb") as fh:
        fh.seek(bad.offset)
        assert fh.read(bad.size) != corrupt
    # A good source afterwards: the pull resumes what the failed one verified and finishes.
    result = await asyncio.wait_for(
        pull(_base(artifact_server), "tiny", dest, "1", options=SMALL_RANGES), timeout=60
    )
    assert result.resumed_bytes > 0
    assert result.resumed_bytes + result.fetched_bytes == manifest.size
    assert result.refetched_chunks == 0
    assert (_installed(dest, "tiny") / entry.path).read_bytes() == (
        store / "tiny" / "1" / entry.path
    ).read_bytes()
    assert verify_directory(_installed(dest, "tiny")).ok
