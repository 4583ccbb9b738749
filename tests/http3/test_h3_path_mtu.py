"""Datagram sizes by the path (`airlane.runtime.quic_mtu`), across the network lab: a real
``airlane serve`` in one namespace, Airlane's `H3Client` in the other, the lab's bridge
counting the largest packet each way.

- a path that carries 1500-byte packets gets datagrams of the 1452-byte ceiling;
- a route whose MTU is smaller (the lab's devices at 1300) gets datagrams that fit it;
- a black hole (the bridge drops packets over 1400 bytes without a word) costs a few lost
  packets, then the connection goes back to 1200 and the download completes.

These need root, /dev/net/tun and iproute2: they skip with the reason where the lab cannot
run, and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airlane.artifacts.packer import pack
from airlane.bench.netlab import NetLab, NetLabStats, netlab_available

pytestmark = pytest.mark.timeout(120)

PORT = 8443
SIZE = 3 << 20
IP_UDP = 28  # IPv4 and UDP headers: a datagram of 1452 bytes is a 1480-byte packet

# Runs in namespace A: one download, its size and SHA-256 as JSON; then an upload (a large
# request body, which the gateway refuses: only the client's datagrams matter there).
CLIENT = r"""
import asyncio, hashlib, json, sys
from airlane.client.h3 import H3Client

async def main():
    host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    async with await H3Client.connect(host, port, verify=False) as client:
        response = await client.request("GET", path)
        digest, size = hashlib.sha256(), 0
        async for chunk in response.chunks():
            digest.update(chunk)
            size += len(chunk)
        upload = await client.request("POST", "/v1/chat/completions", body=b"x" * 300_000,
                                      headers=[("content-type", "application/json")])
        await upload.read()
    print(json.dumps({"status": response.status, "bytes": size, "sha256": digest.hexdigest(),
                      "upload": upload.status}))

asyncio.run(asyncio.wait_for(main(), 60))
"""


def _need_lab() -> None:
    reason = netlab_available()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the network lab cannot run here: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """An artifact store with one 3 MB file: the store, the file's path, its SHA-256."""
    import hashlib

    root = tmp_path_factory.mktemp("mtu")
    source = root / "update.bin"
    data = os.urandom(SIZE)
    source.write_bytes(data)
    pack([source], root / "store", name="update", version="1")
    return root / "store", "/v1/artifacts/update/1/update.bin", hashlib.sha256(data).hexdigest()


@contextmanager
def _gateway(lab: NetLab, store: Path) -> Iterator[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "airlane", "serve", "--host", lab.addr_b, "--port", str(PORT),
            "--artifacts", str(store), "--log-level", "warning"]  # fmt: skip
    process = lab.popen("b", argv, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if "listening on" in line:
                break
            assert line, "the gateway exited before it was ready"
        yield process
    finally:
        process.terminate()
        process.wait(10)


def _download(lab: NetLab, path: str) -> dict[str, object]:
    done = lab.run(
        "a", [sys.executable, "-c", CLIENT, lab.addr_b, str(PORT), path],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _through(store: tuple[Path, str, str], **lab_settings: int) -> NetLabStats:
    """One client run (download, then upload) across a lab with ``lab_settings``; checks the
    download is whole and returns the bridge's counters."""
    _need_lab()
    directory, path, digest = store
    with NetLab(delay_ms=5, **lab_settings) as lab, _gateway(lab, directory):
        result = _download(lab, path)
        stats = lab.stats()
    assert result == {"status": 200, "bytes": SIZE, "sha256": digest, "upload": 400}
    return stats


def test_a_path_of_1500_bytes_gets_full_datagrams(store: tuple[Path, str, str]) -> None:
    stats = _through(store)
    assert stats.b_to_a.largest == 1452 + IP_UDP
    assert stats.a_to_b.largest == 1452 + IP_UDP  # the client's upload
    assert stats.b_to_a.dropped_size == 0


def test_a_route_with_a_smaller_mtu_gets_datagrams_that_fit(store: tuple[Path, str, str]) -> None:
    stats = _through(store, mtu=1300)
    assert stats.b_to_a.largest == 1300  # the route's MTU, not 1200, not more
    assert stats.a_to_b.largest == 1300


def test_a_black_hole_costs_a_few_packets_then_1200_bytes_carry_it(
    store: tuple[Path, str, str],
) -> None:
    stats = _through(store, path_mtu=1400)
    # The first larger datagrams vanished; everything after went at 1200 bytes.
    assert 1 <= stats.b_to_a.dropped_size <= 100
    assert stats.b_to_a.largest == 1452 + IP_UDP
