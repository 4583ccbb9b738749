"""``airlane serve --workers``: the ports the supervisor fixes stay its own until the workers
bind them (held bound, ``SO_REUSEPORT``), and the broker it starts picks its own port, so
nothing can take either in between; a port another program holds is one line and exit 2."""

from __future__ import annotations

import asyncio
import errno
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from airlane.server import ServerConfig
from airlane.server.broker import LocalBroker
from airlane.server.config import TlsConfig
from airlane.server.run import bind_socket, bind_udp
from airlane.server.workers import _fixed_ports, _Reservations
from tests.natsserver import nats_binary

pytestmark = pytest.mark.timeout(60)


def test_a_fixed_port_is_held_against_other_programs_and_open_to_the_workers() -> None:
    with _Reservations() as reserved:
        settings = _fixed_ports(ServerConfig(host="127.0.0.1", port=0), reserved)
        port = settings.port
        assert settings.reuse_port and port
        # Another program (a plain bind, with SO_REUSEADDR as most servers set) is kept out
        # of a port the system picked while no worker listens yet.
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError) as taken:
                other.bind(("127.0.0.1", port))
            assert taken.value.errno == errno.EADDRINUSE
        # A worker binds it as the workers do, and takes every connection: the held socket
        # listens to nothing.
        listener = bind_socket("127.0.0.1", port, 30, reuse_port=True)
        listener.setblocking(True)
        listener.settimeout(5)
        with listener:
            for _ in range(20):
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    accepted, _ = listener.accept()
                    accepted.close()


def test_every_enabled_listener_gets_a_held_port_of_its_own() -> None:
    with _Reservations() as reserved:
        settings = _fixed_ports(ServerConfig(host="127.0.0.1", port=0), reserved)
        tcp = [settings.port, settings.airc.port, settings.grpc.port, settings.rsocket.port]
        assert len(set(tcp)) == 4 and all(tcp)
        for port in tcp:
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("127.0.0.1", port))
        assert settings.http3.port
        with socket.socket(type=socket.SOCK_DGRAM) as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", settings.http3.port))
        # Once the workers listen, the UDP port is let go (a bound UDP socket would take a
        # share of the datagrams); a worker's socket receives what is sent to it.
        worker = bind_udp("127.0.0.1", settings.http3.port, reuse_port=True)
        reserved.release_datagrams()
        with worker, socket.socket(type=socket.SOCK_DGRAM) as client:
            worker.settimeout(5)
            worker.setblocking(True)
            for n in range(20):
                client.sendto(b"%d" % n, ("127.0.0.1", settings.http3.port))
                assert worker.recv(16) == b"%d" % n
    with socket.socket() as after:  # all let go when the supervisor ends
        after.bind(("127.0.0.1", settings.port))


def test_a_port_another_program_holds_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "airlane", "serve", "--port", str(port), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"airlane serve: the HTTP listener cannot bind 127.0.0.1:{port}: address already in "
        "use; pick another port with --port (or another address with --host)"
    ]
    assert not (tmp_path / ".airlane").exists()  # no broker was started for nothing


def test_the_broker_picks_its_own_port_and_answers_on_it(tmp_path: Path) -> None:
    nats_binary()  # skips (fails in CI) where it is missing

    async def run() -> None:
        broker = await LocalBroker.start(tmp_path / "nats")
        try:
            host, port = broker.url.removeprefix("nats://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"INFO ")
            writer.close()
        finally:
            await broker.stop()
        assert broker.process.returncode is not None
        assert not broker.ports_dir.exists()  # its port file went with it

    asyncio.run(run())


def test_under_mutual_tls_no_udp_port_is_held_for_http3_which_is_off() -> None:
    with socket.socket(type=socket.SOCK_DGRAM) as other:  # another program's UDP port
        other.bind(("127.0.0.1", 0))
        taken = other.getsockname()[1]
        tls = TlsConfig(cert_file="c.pem", key_file="k.pem", client_ca_file="ca.pem")
        settings = ServerConfig(host="127.0.0.1", port=0, tls=tls)
        settings = replace(settings, http3=replace(settings.http3, port=taken))
        with _Reservations() as reserved:
            assert _fixed_ports(settings, reserved).http3.port == taken  # no error
