"""Client commands pointed at an address where no gateway listens: one line on stderr that
names the address and says to start ``airlane serve`` or give another address, exit status
1, no traceback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import airlane


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A loopback port that is bound but not listening (held for the test, so no other process
    takes it): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def assert_one_line_naming(url: str, stderr: str, address_option: str) -> None:
    assert "Traceback" not in stderr and "╭" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"cannot reach a gateway at {url} " in lines[0]
    assert "start one with `airlane serve`" in lines[0]
    assert lines[0].endswith(f"give the address of a running one with {address_option}")


COMMANDS = {
    "stream sse": ["stream", "--prompt", "hello"],
    "stream ws": ["stream", "--transport", "ws", "--prompt", "hello"],
    "stream follow": ["stream", "--stream-id", "some-stream"],
    "logs list": ["logs", "list"],
    "logs append": ["logs", "append", "rewards", "--type", "reward.v1", "--data", '{"reward": 1}'],
    "schemas list": ["schemas", "list"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_client_command_names_the_address_and_what_to_do(
    dead_url: str, command: list[str]
) -> None:
    result = airlane(*command, "--url", dead_url)
    assert result.returncode == 1
    assert_one_line_naming(dead_url, result.stderr, "--url")


@pytest.mark.parametrize("follow", [False, True], ids=["once", "follow"])
def test_artifacts_pull_names_the_address_and_what_to_do(
    dead_url: str, tmp_path: Path, follow: bool
) -> None:
    extra = ["--follow"] if follow else []
    dest = str(tmp_path / "models")
    result = airlane("artifacts", "pull", dead_url, "demo", "--dest", dest, "--quiet", *extra)
    assert result.returncode == 1
    assert_one_line_naming(dead_url, result.stderr, "the URL argument")
