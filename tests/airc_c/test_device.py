"""The device example (clients/c/airc/examples/device.c), built with the device profile, asks a
real gateway for a generation over AIRC/TCP: every event once, in order, to ``done``, the same
text the gateway keeps for the stream, a clock estimate, and a clean goodbye. With API keys it
authenticates first; a wrong key ends it with an error, not a hang."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.servers import ServerProcess, run_server

from .binding import ROOT, STRICT

PROMPT = "Hello from a device"


@pytest.fixture(scope="module")
def device(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, compiled as the README says, with every warning an error."""
    program = tmp_path_factory.mktemp("device") / "device"
    sources = [str(ROOT / "examples" / "device.c"), *map(str, sorted((ROOT / "src").glob("*.c")))]
    subprocess.run(
        ["gcc", *STRICT, "-Os", f"-I{ROOT / 'include'}", *sources, "-o", str(program)],
        check=True,
        capture_output=True,
        text=True,
    )
    return program


def run_device(
    program: Path, gateway: ServerProcess, key: str | None = None
) -> tuple[int, list[str]]:
    assert gateway.airc is not None
    host, port = gateway.airc
    env = {"AIRLANE_API_KEY": key} if key else {}
    result = subprocess.run(
        [str(program), host, str(port), PROMPT],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    return result.returncode, result.stdout.splitlines()


def test_a_generation_from_start_to_done(device: Path) -> None:
    with run_server() as gateway:
        status, lines = run_device(device, gateway)
        assert status == 0, lines
        stream = next(line.split()[2] for line in lines if line.startswith("stream "))
        events = [
            json.loads(line.removeprefix("event ")) for line in lines if line.startswith("event ")
        ]
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        assert events[-1]["kind"] == "done"
        assert f"end last_seq={len(events)}" in lines
        assert lines[-1] == "closed code=0"
        assert any(line.startswith("clock offset_us=") for line in lines)
        text = "".join(event["text"] for event in events if event["kind"] == "delta")
        snapshot = httpx.get(f"{gateway.url}/v1/streams/{stream}/snapshot", timeout=10).json()
        assert text and snapshot["text"]["content"] == text


def test_api_keys_authenticate_first_and_a_wrong_key_is_refused(device: Path) -> None:
    with run_server("--api-key", "alice=secret-key") as gateway:
        status, lines = run_device(device, gateway, "secret-key")
        assert status == 0, lines
        assert "authenticated alice" in lines
        assert lines.index("authenticated alice") < min(
            i for i, line in enumerate(lines) if line.startswith("stream ")
        )
        assert json.loads(lines[-3].removeprefix("event "))["kind"] == "done"
        status, lines = run_device(device, gateway, "wrong-key")
        assert status == 1
        assert any(line.startswith(("error ", "closed code=15")) for line in lines), lines
        # No key on plain TCP: the request is refused, said so, and the device leaves.
        status, lines = run_device(device, gateway)
        assert status == 1 and any(line.startswith("error unauthenticated") for line in lines)
