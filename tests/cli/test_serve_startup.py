"""``airlane serve`` that cannot start says why in one line on stderr and exits with status
2, with no traceback: a port that is taken (each of its three listeners in turn, the line
naming the listener, the address and the flag that changes it), a configuration file that is
missing, not TOML, or holds an unknown key or a value of the wrong type, a bad ``--hub``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TIMEOUT_S = 60


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``airlane serve ARGS`` to its end (it is expected not to start)."""
    return subprocess.run(
        [sys.executable, "-m", "airlane", "serve", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line ``airlane serve`` ended with, having checked the rest."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stdout == ""  # it never said it was listening
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("airlane serve: ")
    return lines[0]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def held_port(free_below: int = 3) -> Iterator[int]:
    """A port this test listens on, whose ``free_below`` ports below it are free (so that
    ``--port held - k`` binds its first listeners and fails at the held one)."""
    for _ in range(50):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if port > free_below + 1024 and all(_free(port - k) for k in range(1, free_below + 1)):
            sock.listen()
            try:
                yield port
            finally:
                sock.close()
            return
        sock.close()
    pytest.fail("no port with free neighbours")


@pytest.mark.parametrize(
    ("below", "listener", "flag"),
    [
        (0, "HTTP", "--port"),
        (1, "AIRC", "--airc-port, or turn it off with --airc-port -1"),
        (2, "gRPC", "--grpc-port, or turn it off with --grpc-port -1"),
        (3, "RSocket", "--rsocket-port, or turn it off with --rsocket-port -1"),
    ],
    ids=["http", "airc", "grpc", "rsocket"],
)
def test_each_listener_taken_in_turn(below: int, listener: str, flag: str) -> None:
    """``--port P`` binds P, P+1 (AIRC), P+2 (gRPC) and P+3 (RSocket): whichever is taken is
    named."""
    with held_port() as port:
        line = one_line(serve("--port", str(port - below)))
    assert f"the {listener} listener cannot bind 127.0.0.1:{port}: address already in use" in line
    assert flag in line


@pytest.mark.parametrize("flag", ["--airc-port", "--grpc-port", "--rsocket-port"])
def test_a_taken_port_given_by_its_flag(flag: str) -> None:
    with held_port(0) as port:
        line = one_line(serve("--port", "0", flag, str(port)))
    assert f"127.0.0.1:{port}: address already in use" in line
    assert f"{flag} -1" in line


def test_an_address_that_is_not_this_hosts() -> None:
    line = one_line(serve("--host", "192.0.2.1", "--port", "0"))  # TEST-NET-1: never ours
    assert "the HTTP listener cannot bind 192.0.2.1:0" in line
    assert "--host" in line


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read the configuration file"),
        ("this is not toml\n", "is not valid TOML"),
        ("colour = 'blue'\n", "unknown setting 'colour'"),
        ("[http]\nws_ping_s = 'soon'\n", "[http] ws_ping_s must be a number, not 'soon'"),
        ("port = 'eighty'\n", "port must be an integer"),
        ("http = 3\n", "http must be a table"),
        ("[orphan]\nmode = 'sometimes'\n", "'sometimes' is not a valid OrphanMode"),
    ],
    ids=[
        "missing",
        "not-toml",
        "unknown-key",
        "wrong-type",
        "wrong-top-level-type",
        "not-a-table",
        "bad-value",
    ],
)
def test_a_bad_configuration_file(tmp_path: Path, content: str | None, said: str) -> None:
    path = tmp_path / "airlane.toml"
    if content is not None:
        path.write_text(content)
    line = one_line(serve("--port", "0", "--config", str(path)))
    assert said in line
    assert str(path) in line


def test_a_bad_hub_url() -> None:
    line = one_line(serve("--port", "0", "--hub", "redis://127.0.0.1:6379"))
    assert "redis://127.0.0.1:6379" in line and "--hub" in line


def test_an_api_key_naming_a_bad_tenant() -> None:
    line = one_line(serve("--api-key", "al@no tenant=sk-1"))
    assert "API key name 'al@no tenant'" in line and "tenant" in line


def test_tls_settings_that_cannot_work(tmp_path: Path) -> None:
    cert = tmp_path / "missing.pem"
    line = one_line(serve("--port", "0", "--tls-cert", str(cert)))
    assert "--tls-key" in line
    line = one_line(serve("--port", "0", "--tls-cert", str(cert), "--tls-key", str(cert)))
    assert str(cert) in line
    assert "--tls-cert" in one_line(serve("--port", "0", "--tls-client-ca", str(cert)))


def test_a_bad_log_level() -> None:
    assert "--log-level" in one_line(serve("--port", "0", "--log-level", "loud"))


def test_a_hub_nobody_answers_at(tmp_path: Path) -> None:
    # Nothing listens on the port: the first connection never succeeds, and the start-up
    # gives up after the hub's bound with one line (it used to wait for ever, saying nothing).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = tmp_path / "airlane.toml"
    config.write_text("[jetstream]\nunavailable_after_s = 1.0\n")
    hub = f"nats://127.0.0.1:{port}"
    line = one_line(serve("--port", "0", "--config", str(config), "--hub", hub))
    assert f"cannot reach NATS at {hub} within 1 s" in line
