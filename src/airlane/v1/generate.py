"""Airlane's Protobuf contract: generating `airlane.v1` from ``proto/airlane/v1/*.proto``.

The ``.proto`` files are the source of truth; the Python modules (``airlane/v1/*_pb2.py``,
their ``.pyi`` stubs and ``*_pb2_grpc.py``) are produced from them by grpcio-tools, never
edited or committed. A wheel gets them at build time (``setup.py``); in a source checkout
`ensure_generated` (run by ``scripts/setup.sh`` and on first import of `airlane.v1`) writes
them next to ``airlane/v1/__init__.py`` whenever the ``.proto`` files or grpcio-tools
changed, which a stamp file records.

    python -m airlane.v1          # (re)generate in this checkout
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["GENERATED_DIR", "PROTO_ROOT", "ensure_generated", "generate", "proto_files"]

GENERATED_DIR = Path(__file__).resolve().parent
"""Where the generated modules go: the `airlane.v1` package, beside this generator."""
PROTO_ROOT = GENERATED_DIR.parent.parent.parent / "proto"
"""Where the ``.proto`` files live in a source checkout (``<repo>/proto``)."""
_STAMP = GENERATED_DIR / ".generated"


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """The contract's ``.proto`` files, sorted."""
    return sorted((root / "airlane" / "v1").glob("*.proto"))


def _fingerprint(root: Path) -> str:
    import grpc_tools

    digest = hashlib.sha256(getattr(grpc_tools, "__version__", "?").encode())
    for path in proto_files(root):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def generate(root: Path = PROTO_ROOT, target: Path = GENERATED_DIR) -> list[Path]:
    """Run protoc (grpcio-tools) on the contract; write the modules into ``target``.

    Files are written to a temporary directory first and moved into place one by one, so a
    process importing them meanwhile sees each old or new file, never half of one.

    Raises:
        RuntimeError: protoc failed (its message is on stderr).
    """
    from grpc_tools import protoc

    includes = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    files = proto_files(root)
    if not files:
        raise RuntimeError(f"no .proto files under {root / 'airlane' / 'v1'}")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        args = [
            "protoc",
            f"-I{root}",
            f"-I{includes}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *map(str, files),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {root}")
        for path in sorted((Path(tmp) / "airlane" / "v1").iterdir()):
            destination = target / path.name
            os.replace(path, destination)
            written.append(destination)
    return written


def ensure_generated() -> None:
    """Generate `airlane.v1` if this is a source checkout whose modules are missing or stale.
    An installed wheel (no ``proto`` directory beside the package) is left as built."""
    if not PROTO_ROOT.is_dir():
        return
    fingerprint = _fingerprint(PROTO_ROOT)
    if _STAMP.is_file() and _STAMP.read_text() == fingerprint:
        return
    generate()
    _STAMP.write_text(fingerprint)
