"""Model artifacts: safetensors in, verified, resumable, delta-aware delivery out.

The pure parts (no event loop, no sockets, no clock):

- `tensorfile`: safetensors read (bounds-checked header parsing, zero-copy arrays) and write;
- `quant`: symmetric INT8 per channel or per block of 32/64, scales as tensors, SQNR report;
- `plan`: shard plans by layer, attention-head group or size, as JSON data;
- `chunker` + `checksums`: content-defined chunking, XXH3 and the seed's Adler-32 per KiB;
- `manifest`: files, chunks, checksums, tensors and SHA-256 of a version; `signing`: Ed25519;
- `delta`: what changed between versions, as a delta file pinned to its base's hash;
- `packer`, `store`, `verify`, `install`: packing, versions on disk, checking, installing.

Transfer: `fetch` (`pull`: HTTP ranges, resumable, atomic) with `ranges`, and `service` (the
gateway's store and its announcements on the streams ``artifacts/<name>``).

Names load on first use, so importing this package costs nothing until one is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from airlane.artifacts.errors import (
    ArtifactError,
    ArtifactNotFound,
    DeltaBaseMismatch,
    MalformedArtifact,
    SignatureError,
    VerificationError,
)

if TYPE_CHECKING:
    from airlane.artifacts.chunker import ChunkParams, cut_points
    from airlane.artifacts.delta import apply_delta, plan_delta, write_delta
    from airlane.artifacts.fetch import PullOptions, PullResult, pull
    from airlane.artifacts.install import Installation
    from airlane.artifacts.manifest import Manifest, build_manifest
    from airlane.artifacts.packer import pack
    from airlane.artifacts.plan import (
        ShardPlan,
        apply_plan,
        plan_by_head_group,
        plan_by_layer,
        plan_by_size,
        reassemble,
    )
    from airlane.artifacts.quant import QuantConfig, dequantize, quantize
    from airlane.artifacts.service import ArtifactService
    from airlane.artifacts.store import ArtifactStore
    from airlane.artifacts.tensorfile import TensorFile, read_header, write_tensors
    from airlane.artifacts.verify import verify_directory

__all__ = [
    "ArtifactError",
    "ArtifactNotFound",
    "ArtifactService",
    "ArtifactStore",
    "ChunkParams",
    "DeltaBaseMismatch",
    "Installation",
    "MalformedArtifact",
    "Manifest",
    "PullOptions",
    "PullResult",
    "QuantConfig",
    "ShardPlan",
    "SignatureError",
    "TensorFile",
    "VerificationError",
    "apply_delta",
    "apply_plan",
    "build_manifest",
    "cut_points",
    "dequantize",
    "pack",
    "plan_by_head_group",
    "plan_by_layer",
    "plan_by_size",
    "plan_delta",
    "pull",
    "quantize",
    "read_header",
    "reassemble",
    "verify_directory",
    "write_delta",
    "write_tensors",
]

_WHERE = {
    "ChunkParams": "chunker",
    "cut_points": "chunker",
    "apply_delta": "delta",
    "plan_delta": "delta",
    "write_delta": "delta",
    "Installation": "install",
    "Manifest": "manifest",
    "build_manifest": "manifest",
    "pack": "packer",
    "ShardPlan": "plan",
    "apply_plan": "plan",
    "plan_by_head_group": "plan",
    "plan_by_layer": "plan",
    "plan_by_size": "plan",
    "reassemble": "plan",
    "PullOptions": "fetch",
    "PullResult": "fetch",
    "pull": "fetch",
    "QuantConfig": "quant",
    "dequantize": "quant",
    "quantize": "quant",
    "ArtifactService": "service",
    "ArtifactStore": "store",
    "TensorFile": "tensorfile",
    "read_header": "tensorfile",
    "write_tensors": "tensorfile",
    "verify_directory": "verify",
}


def __getattr__(name: str) -> object:
    # numpy, xxhash and cryptography load with the module that needs them, not with
    # `import airlane.artifacts` (the gateway imports this package's config and errors).
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"airlane.artifacts.{module}"), name)
