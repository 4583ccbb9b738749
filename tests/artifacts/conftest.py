"""A store with two versions of a small checkpoint, and a gateway process serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airlane.artifacts.chunker import ChunkParams
from airlane.artifacts.packer import pack
from airlane.artifacts.signing import generate_private_key
from tests.artifacts.support import checkpoint
from tests.servers import FAST_SYNTHETIC, ServerProcess, run_server

SMALL_CHUNKS = ChunkParams(min_size=4096, avg_size=16384, max_size=65536)
"""Small chunks, so that a small checkpoint has many."""

SCAN = FAST_SYNTHETIC + "\n[artifacts]\nscan_interval_s = 0.2\n"


@pytest.fixture(scope="session")
def signing_key():
    return generate_private_key()


@pytest.fixture(scope="session")
def store(tmp_path_factory, signing_key) -> Path:
    """``tiny`` 1 and 2 (2 changes one layer), signed; ``plain`` 1, unsigned."""
    root = tmp_path_factory.mktemp("store")
    sources = tmp_path_factory.mktemp("sources")
    one = checkpoint(sources / "1" / "model.safetensors", hidden=192)
    two = checkpoint(sources / "2" / "model.safetensors", hidden=192, changed=(1,))
    for version, source in (("1", one), ("2", two)):
        pack(
            [source],
            root,
            name="tiny",
            version=version,
            params=SMALL_CHUNKS,
            signing_key=signing_key,
        )
    pack([one], root, name="plain", version="1", params=SMALL_CHUNKS)
    return root


@pytest.fixture(scope="session")
def artifact_server(store) -> Iterator[ServerProcess]:
    with run_server(
        "--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1", config=SCAN
    ) as server:
        yield server
