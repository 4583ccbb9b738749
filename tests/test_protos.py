"""The Protobuf contract is generated from proto/ (never committed) and imports cleanly."""

from __future__ import annotations

import subprocess
from pathlib import Path

from airlane.v1 import generate as protos

REPO = Path(__file__).parent.parent


def test_generated_modules_are_not_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "src/airlane/v1"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    # The package and its generator are the only files committed there.
    assert sorted(tracked) == [
        "src/airlane/v1/__init__.py",
        "src/airlane/v1/__main__.py",
        "src/airlane/v1/generate.py",
    ]


def test_generate_writes_every_module(tmp_path: Path) -> None:
    written = {path.name for path in protos.generate(protos.PROTO_ROOT, tmp_path / "v1")}
    for stem in ("events", "service", "model_update"):
        assert {f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"} <= written


def test_the_contract_has_the_service_and_messages() -> None:
    from airlane.v1 import events_pb2, model_update_pb2, service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["Airlane"]
    assert {m.name for m in service.methods} == {
        "Generate", "Subscribe", "Publish", "PublishStream", "Cancel", "Info", "Session",
    }  # fmt: skip
    update = model_update_pb2.AttentionUpdate(
        layer=3, head=1, delta_weights=[0.5], update_version=7
    )
    assert model_update_pb2.AttentionUpdate.FromString(update.SerializeToString()) == update
    assert events_pb2.Kind.Name(events_pb2.KIND_DONE) == "KIND_DONE"
