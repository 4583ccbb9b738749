"""Packing: source tensors in, a new immutable version of an artifact in a store out.

``pack`` optionally quantizes a safetensors file to INT8 (`airlane.artifacts.quant`), splits it
by a shard plan (`airlane.artifacts.plan`, the plan kept as ``plan.json``), chunks and hashes
everything into a manifest (`airlane.artifacts.manifest`), signs it, and moves the finished
directory into the store with one rename.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlane.artifacts.chunker import ChunkParams
from airlane.artifacts.errors import ArtifactError
from airlane.artifacts.manifest import Manifest, build_manifest
from airlane.artifacts.plan import ShardPlan, apply_plan
from airlane.artifacts.quant import QuantConfig, TensorReport, quantize
from airlane.artifacts.signing import sign_bytes
from airlane.artifacts.store import MANIFEST, ArtifactStore
from airlane.artifacts.tensorfile import Header, TensorFile, write_tensors

__all__ = ["PLAN", "PackResult", "Planner", "pack"]

PLAN = "plan.json"
"""Where a sharded version keeps its plan."""

Planner = Callable[[Header], ShardPlan]
"""Makes the shard plan for the header of the file being split."""


@dataclass(frozen=True, slots=True)
class PackResult:
    """What `pack` made."""

    manifest: Manifest
    directory: Path
    quant_report: tuple[TensorReport, ...] = ()
    plan: ShardPlan | None = None


def pack(
    sources: Sequence[Path],
    store: Path,
    *,
    name: str,
    version: str,
    quant: QuantConfig | None = None,
    plan: ShardPlan | Planner | None = None,
    params: ChunkParams | None = None,
    signing_key: Ed25519PrivateKey | None = None,
    metadata: dict[str, str] | None = None,
) -> PackResult:
    """Make version ``version`` of artifact ``name`` in ``store`` from ``sources``.

    ``quant`` quantizes a single safetensors source to INT8 first; ``plan`` then splits it
    into shards (the plan is kept as ``plan.json`` beside them); it may be a function of the
    header to split (after quantization, that header also lists the scale tensors). Without
    either, the sources are copied as they are. ``signing_key`` (an Ed25519 private key)
    signs the manifest.
    Refuses to replace an existing version: versions are immutable.
    """
    target = ArtifactStore(store).version_dir(name, version)
    if target.exists():
        raise ArtifactError(f"{name} {version} already exists in {store}; versions are immutable")
    if (quant is not None or plan is not None) and (
        len(sources) != 1 or sources[0].suffix != ".safetensors"
    ):
        raise ArtifactError("quantizing or sharding takes exactly one .safetensors source")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".incoming-{version}-{secrets.token_hex(4)}"
    work.mkdir()
    try:
        report: tuple[TensorReport, ...] = ()
        files: list[str] = []
        if quant is None and plan is None:
            for source in sources:
                shutil.copyfile(source, work / source.name)
                files.append(source.name)
        else:
            source = sources[0]
            if quant is not None:
                with TensorFile(source) as tensors:
                    quantized = quantize(tensors.arrays(), quant)
                    meta = {**tensors.header.metadata, **quantized.metadata}
                    write_tensors(work / source.name, quantized.tensors, meta)
                report = quantized.report
                source = work / source.name
                files = [source.name]
            if plan is not None:
                with TensorFile(source) as tensors:
                    if not isinstance(plan, ShardPlan):
                        plan = plan(tensors.header)
                    written = apply_plan(tensors, plan, work)
                if quant is not None:
                    source.unlink()
                files = [p.name for p in written]
                (work / PLAN).write_bytes(orjson.dumps(plan.to_json(), option=orjson.OPT_INDENT_2))
                files.append(PLAN)
        described = dict(metadata or {})
        if isinstance(plan, ShardPlan):
            described["airlane.plan"] = orjson.dumps(plan.to_json()).decode()
        manifest = build_manifest(
            work, files, name=name, version=version, params=params, metadata=described
        )
        if signing_key is not None:
            manifest = manifest.signed(sign_bytes(signing_key, manifest.canonical_bytes()))
        _write_synced(work / MANIFEST, manifest.to_bytes())
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return PackResult(manifest, target, report, plan if isinstance(plan, ShardPlan) else None)


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
