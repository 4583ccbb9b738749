"""``airlane artifacts ...`` as a user runs it: real processes, real files, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from tests.artifacts.support import checkpoint
from tests.servers import run_server


def airlane(
    *args: str, check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "airlane", "artifacts", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    checkpoint(root / "src1" / "model.safetensors", hidden=96, layers=4)
    checkpoint(root / "src2" / "model.safetensors", hidden=96, layers=4, changed=(3,))
    public = airlane("keygen", str(root / "release.pem")).stdout.strip()
    assert public.startswith("ed25519:")
    (root / "release.pub").write_text(public)
    return root


def test_keygen_refuses_to_overwrite(workspace):
    result = airlane("keygen", str(workspace / "release.pem"), check=False)
    assert result.returncode == 1
    assert "exists" in result.stderr


def test_pack_quantized_and_sharded_then_inspect_and_verify(workspace):
    store = workspace / "store"
    packed = airlane(
        "pack",
        str(workspace / "src1" / "model.safetensors"),
        "--name",
        "tiny",
        "--version",
        "1",
        "--store",
        str(store),
        "--quantize",
        "block32",
        "--shard",
        "layer",
        "--layers-per-shard",
        "2",
        "--sign-key",
        str(workspace / "release.pem"),
        "--chunk-avg",
        "16KiB",
    ).stdout
    assert "INT8 quantization" in packed and "SQNR" in packed
    assert "signed by" in packed
    version = store / "tiny" / "1"
    files = sorted(p.name for p in version.iterdir())
    assert "plan.json" in files and "manifest.json" in files
    assert any(name.startswith("layers") for name in files)
    shown = airlane("inspect", str(version)).stdout
    assert "tiny 1" in shown and "airlane.quant" in shown
    plan = airlane("inspect", str(version / "plan.json")).stdout
    assert "shared" in plan
    shard = next(version.glob("layers*.safetensors"))
    tensors = orjson.loads(airlane("inspect", str(shard), "--json").stdout)
    assert any(t["dtype"] == "I8" for t in tensors["tensors"].values())
    as_json = orjson.loads(airlane("inspect", str(version), "--json").stdout)
    assert as_json["signature"]["algorithm"] == "ed25519"
    assert orjson.loads(as_json["metadata"]["airlane.plan"])["strategy"] == "layer"
    assert "airlane.shard" not in as_json["metadata"]  # per shard, in the shards
    verified = airlane("verify", str(version), "--key", (workspace / "release.pub").read_text())
    assert "signature verified" in verified.stdout


def test_verify_reports_damage_and_exits_1(workspace):
    store = workspace / "store"
    airlane(
        "pack",
        str(workspace / "src1" / "model.safetensors"),
        "--name",
        "dmg",
        "--version",
        "1",
        "--store",
        str(store),
    )
    target = store / "dmg" / "1" / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    result = airlane("verify", str(store / "dmg" / "1"), check=False)
    assert result.returncode == 1
    assert "bad chunks" in result.stdout and "KiB" in result.stdout
    assert "MISMATCH" in result.stdout


def test_diff_writes_a_delta_that_apply_turns_back_into_the_version(workspace):
    store = workspace / "store"
    for version, src in (("a", "src1"), ("b", "src2")):
        airlane(
            "pack",
            str(workspace / src / "model.safetensors"),
            "--name",
            "pair",
            "--version",
            version,
            "--store",
            str(store),
            "--chunk-avg",
            "16KiB",
        )
    delta = workspace / "a-b.airdelta"
    shown = airlane(
        "diff", str(store / "pair" / "a"), str(store / "pair" / "b"), "--out", str(delta)
    ).stdout
    assert "must travel" in shown and "delta" in shown
    assert delta.stat().st_size < (store / "pair" / "b" / "model.safetensors").stat().st_size / 3
    info = orjson.loads(airlane("inspect", str(delta)).stdout)
    assert info["target"]["version"] == "b"
    rebuilt = workspace / "rebuilt"
    airlane("apply", str(delta), str(store / "pair" / "a"), str(rebuilt))
    assert (rebuilt / "model.safetensors").read_bytes() == (
        store / "pair" / "b" / "model.safetensors"
    ).read_bytes()
    wrong = airlane(
        "apply", str(delta), str(store / "pair" / "b"), str(workspace / "nope"), check=False
    )
    assert wrong.returncode == 1
    assert "applies to" in wrong.stderr


def test_pull_and_rollback_from_a_served_store(workspace):
    store = workspace / "served"
    for version, src in (("1", "src1"), ("2", "src2")):
        airlane(
            "pack",
            str(workspace / src / "model.safetensors"),
            "--name",
            "m",
            "--version",
            version,
            "--store",
            str(store),
            "--sign-key",
            str(workspace / "release.pem"),
        )
    dest = workspace / "models"
    key = (workspace / "release.pub").read_text()
    with run_server("--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1") as server:
        first = airlane(
            "pull", server.url, "m", "--version", "1", "--dest", str(dest), "--key", key, "--quiet"
        )
        assert "m 1 installed" in first.stdout and "verified" in first.stdout
        second = airlane("pull", server.url, "m", "--dest", str(dest), "--key", key, "--quiet")
        assert "m 2 installed" in second.stdout and "reused" in second.stdout
        again = airlane("pull", server.url, "m", "--dest", str(dest), "--quiet")
        assert "nothing to fetch" in again.stdout
        stranger = workspace / "stranger.pem"
        other = airlane("keygen", str(stranger)).stdout.strip()
        refused = airlane("pull", server.url, "m", "--dest", str(dest), "--key", other, check=False)
        assert refused.returncode == 1 and "signed by" in refused.stderr
    assert "1 is current" in airlane("rollback", str(dest), "m").stdout
    assert os.readlink(dest / "m" / "current") == "versions/1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inspect", "missing.safetensors"), "missing.safetensors"),
        (("verify", "."), "manifest"),
        (("pack", "nothing.bin", "--name", "x", "--version", "1"), "nothing.bin"),
        (
            ("pack", "x.safetensors", "--name", "../x", "--version", "1", "--quantize", "int3"),
            "int3",
        ),
        (("rollback", ".", "never"), "no previous version"),
        (
            ("pull", "http://127.0.0.1:9", "m", "--quiet"),
            "cannot reach a gateway at http://127.0.0.1:9",
        ),
    ],
)
def test_errors_are_one_line_without_a_traceback(tmp_path, args, message):
    (tmp_path / "x.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    result = airlane(*args, check=False, cwd=tmp_path)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_malformed_safetensors_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 8 + b"{}")
    result = airlane("inspect", str(bad), check=False)
    assert result.returncode == 1
    assert "header" in result.stderr


def test_artifacts_serve_and_a_pull_with_its_progress_bar(workspace, tmp_path):
    store = tmp_path / "store"
    airlane(
        "pack",
        str(workspace / "src1" / "model.safetensors"),
        "--name",
        "m",
        "--version",
        "1",
        "--store",
        str(store),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "airlane", "artifacts", "serve", str(store), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        url = line.split("listening on ")[1].split()[0]
        assert "artifacts from" in line
        listing = httpx.get(f"{url}/v1/artifacts", timeout=10).json()
        assert listing["artifacts"][0]["name"] == "m"
        pulled = airlane("pull", url, "m", "--dest", str(tmp_path / "models"))
        assert "m 1 installed" in pulled.stdout
    finally:
        process.terminate()
        process.wait(10)
