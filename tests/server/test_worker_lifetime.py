"""``airlane serve --workers``: what the supervisor starts lives no longer than it does, and
one broker store has one broker. A supervisor killed with SIGKILL takes its workers and its
``nats-server`` with it (a new one then starts on the same port and store, and removes the
temporary files the killed one could not); a broker killed
with SIGKILL is started again on its port and store, and the workers go on through it; a
second supervisor in the same directory is refused in one line while the first runs; a
worker stopped (SIGSTOP) past ``worker_stall_s`` is killed and started again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from airlane.server import broker as broker_module
from airlane.server.broker import BrokerError, LocalBroker
from tests.natsserver import nats_binary
from tests.server.processes import worker_pids
from tests.servers import run_gateway

pytestmark = pytest.mark.timeout(120)


def serve_workers(port: int = 0, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "airlane", "serve", "--port", str(port), "--workers", "2", *args,
        "--log-level", "warning", "--airc-port", "-1", "--grpc-port", "-1",
        "--http3-port", "-1", "--rsocket-port", "-1",
    ]  # fmt: skip


@pytest.fixture
def short_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TMPDIR for the supervisors started here: one killed outright cannot remove its own
    temporary directories, so the test does (short: the workers' Unix sockets live there)."""
    directory = Path(tempfile.mkdtemp(prefix="al-"))
    monkeypatch.setenv("TMPDIR", str(directory))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_supervisor_killed_outright_takes_its_workers_and_broker_with_it_and_the_next_its_files(
    tmp_path: Path, short_tmpdir: Path
) -> None:
    nats_binary()  # skips (fails in CI) where it is missing
    with run_gateway(serve_workers(), cwd=tmp_path, timeout=60) as server:
        children = psutil.Process(server.pid).children(recursive=True)
        assert any("nats-server" in " ".join(p.cmdline()) for p in children)
        assert sum("airlane.server.worker" in p.cmdline() for p in children) == 2
        port = int(server.url.rsplit(":", 1)[1])
        made = httpx.post(f"{server.url}/v1/streams", json={"name": "kept"}, timeout=10)
        assert made.status_code == 201, made.text
        stream = made.json()["id"]
        appended = httpx.post(
            f"{server.url}/v1/streams/{stream}/events",
            json={"kind": "delta", "text": "stored"},
            timeout=10,
        )
        assert appended.status_code in (200, 201, 202), appended.text
        (scratch,) = short_tmpdir.glob("airlane-workers-*")
        assert (scratch / "nats").is_dir()  # the broker's ports file is in it too
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait(10)
        _, alive = psutil.wait_procs(children, timeout=20)
        left = [p.cmdline() for p in alive]
        for process in alive:  # none, unless the test fails: leave nothing behind
            process.kill()
        assert not left, left
    # Nothing serves the port now, and a new supervisor takes it and the store over, and
    # removes the directory the killed one left.
    assert scratch.is_dir()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    with (
        run_gateway(serve_workers(port), cwd=tmp_path, timeout=60) as again,
        httpx.stream("GET", f"{again.url}/v1/streams/{stream}/events", timeout=10) as sse,
    ):
        assert not scratch.exists()
        assert [path.name[:9] for path in short_tmpdir.iterdir()] == ["airlane-w"]  # its own
        assert sse.status_code == 200
        for line in sse.iter_lines():  # what was acknowledged before the kill
            if line.startswith("data:") and "stored" in line:
                break
        else:
            raise AssertionError("the acknowledged event was not read back")


def append(url: str, stream: str, text: str, timeout: float = 30.0) -> None:
    """Append a delta, trying again while the hub is unavailable (503), up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        done = httpx.post(
            f"{url}/v1/streams/{stream}/events", json={"kind": "delta", "text": text}, timeout=20
        )
        if done.status_code in (200, 201, 202):
            return
        assert done.status_code == 503 and time.monotonic() < deadline, done.text
        time.sleep(0.5)


def read_text(url: str, stream: str, until: str) -> str:
    """The stream's text (its deltas joined: a replay may merge them), read from its start
    until it ends with ``until``."""
    text = ""
    with httpx.stream("GET", f"{url}/v1/streams/{stream}/events", timeout=10) as sse:
        assert sse.status_code == 200
        for line in sse.iter_lines():
            if line.startswith("data:") and '"text"' in line:
                text += json.loads(line[5:])["text"]
                if text.endswith(until):
                    return text
    raise AssertionError(f"{until!r} was not read back: {text!r}")


def test_a_broker_killed_outright_is_started_again_on_its_port_and_store(
    tmp_path: Path,
) -> None:
    nats_binary()
    with run_gateway(serve_workers(), cwd=tmp_path, timeout=60) as server:
        supervisor = psutil.Process(server.pid)

        def broker() -> psutil.Process:
            [found] = [p for p in supervisor.children() if "nats-server" in p.name()]
            return found

        killed = broker()
        [address] = [c.laddr for c in killed.net_connections("tcp") if c.status == "LISTEN"]
        made = httpx.post(f"{server.url}/v1/streams", json={"name": "kept"}, timeout=10)
        assert made.status_code == 201, made.text
        append(server.url, "kept", "before")
        killed.kill()
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(ValueError, psutil.Error):
                again = broker()
                if again.pid != killed.pid and any(
                    c.laddr == address and c.status == "LISTEN"
                    for c in again.net_connections("tcp")
                ):
                    break
            assert time.monotonic() < deadline, "the broker was not started again"
            time.sleep(0.2)
        append(server.url, "kept", "after")  # the workers reconnected by themselves
        assert read_text(server.url, "kept", "after") == "beforeafter"


def test_a_second_supervisor_in_the_same_directory_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    nats_binary()
    with run_gateway(serve_workers(), cwd=tmp_path, timeout=60) as first:
        started = time.monotonic()
        second = subprocess.run(
            serve_workers(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
        assert second.returncode == 2, second.stderr
        [line] = second.stderr.strip().splitlines()
        store = (tmp_path / ".airlane" / "nats").resolve()
        assert line == (
            f"airlane serve: another airlane serve --workers (pid {first.pid}), or its broker, "
            f"keeps its streams in {store}: stop it, start this one from another directory, "
            "or give both --hub nats://host:4222"
        )
        assert time.monotonic() - started < 30
        assert httpx.get(f"{first.url}/healthz", timeout=5).status_code == 200  # untouched


def test_a_store_is_taken_once_its_last_holder_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nats_binary()
    monkeypatch.setattr(broker_module, "LOCK_WAIT_S", 0.3)

    async def run() -> None:
        first = await LocalBroker.start(tmp_path)
        try:
            with pytest.raises(BrokerError, match=f"pid {os.getpid()}"):
                await LocalBroker.start(tmp_path)
        finally:
            await first.stop()
        second = await LocalBroker.start(tmp_path)  # the lock went with the first
        await second.stop()

    asyncio.run(run())


def test_a_worker_stopped_past_worker_stall_s_is_killed_and_started_again(
    tmp_path: Path,
) -> None:
    nats_binary()
    config = tmp_path / "airlane.toml"
    config.write_text("worker_stall_s = 3.0\n")
    command = serve_workers(0, "--config", str(config))
    with run_gateway(command, cwd=tmp_path, timeout=60) as server:
        supervisor = psutil.Process(server.pid)

        before = worker_pids(supervisor)
        time.sleep(2)  # running fine past the limit's first checks: nothing is killed
        assert worker_pids(supervisor) == before
        stopped = min(before)
        os.kill(stopped, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while (now := worker_pids(supervisor)) == before or len(now) < 2:
            assert time.monotonic() < deadline, "the stopped worker was not replaced"
            time.sleep(0.2)
        assert stopped not in now
        # Every new connection is answered again (none waits on a stopped process).
        for _ in range(20):
            with httpx.Client(base_url=server.url, timeout=5) as client:
                assert client.get("/healthz").status_code == 200
