"""The acceptor takes every connection waiting in the listen queue in one loop turn (up to its
bound), hands each to its protocol, pauses instead of spinning when descriptors run out, and
stops cleanly; on uvloop and on asyncio's own loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from airlane.runtime.acceptor import RETRY_S, Acceptor

LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def run(loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    with sock:
        yield sock


@contextlib.contextmanager
def clients(server: socket.socket, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections, handshakes done by the kernel, waiting in ``server``'s queue."""
    conns = [socket.create_connection(server.getsockname()[:2], timeout=5) for _ in range(count)]
    try:
        yield conns
    finally:
        for conn in conns:
            conn.close()


class Echo(asyncio.Protocol):
    made: list[Echo]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def echo_factory() -> tuple[list[Echo], Callable[[], Echo]]:
    made: list[Echo] = []

    def factory() -> Echo:
        protocol = Echo()
        protocol.made = made
        return protocol

    return made, factory


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], *, turns_at_most: int = 200) -> int:
    """Loop turns until ``condition`` holds (bounded); returns how many it took."""
    for turn in range(turns_at_most):
        if condition():
            return turn
        await asyncio.sleep(0)
    raise AssertionError(f"not within {turns_at_most} loop turns")


@pytest.mark.parametrize("loop", LOOPS)
def test_a_full_queue_is_accepted_in_one_turn_and_served(loop: str) -> None:
    # libuv alone takes one connection a loop turn: 60 would need 60 turns.
    async def main() -> None:
        with listening() as server, clients(server, 60) as conns:
            made, factory = echo_factory()
            acceptor = Acceptor(server, factory)
            acceptor.start()
            assert await until(lambda: acceptor.accepted > 0) <= 3
            assert acceptor.accepted == 60
            await until(lambda: len(made) == 60, turns_at_most=20)
            for i, conn in enumerate(conns):
                conn.sendall(b"ping %d" % i)
            for i, conn in enumerate(conns):
                assert await asyncio.to_thread(conn.recv, 100) == b"ping %d" % i
            acceptor.close()
            await acceptor.wait_closed()
            for protocol in made:
                protocol.transport.close()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_one_turn_accepts_at_most_its_bound(loop: str) -> None:
    async def main() -> None:
        with listening() as server, clients(server, 20):
            made, factory = echo_factory()
            acceptor = Acceptor(server, factory, max_per_turn=8)
            acceptor.start()
            await until(lambda: acceptor.accepted > 0)
            assert acceptor.accepted == 8
            await until(lambda: len(made) == 20)
            assert acceptor.accepted == 20
            acceptor.close()
            for protocol in made:
                protocol.transport.close()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_failing_factory_closes_that_connection_and_serving_goes_on(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        made, factory = echo_factory()
        calls = 0

        def flaky() -> Echo:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("no protocol for you")
            return factory()

        with listening() as server:
            acceptor = Acceptor(server, flaky)
            acceptor.start()
            with clients(server, 1) as (first,):
                assert await asyncio.to_thread(first.recv, 10) == b""  # closed by the acceptor
            with clients(server, 1) as (second,):
                second.sendall(b"still here")
                assert await asyncio.to_thread(second.recv, 100) == b"still here"
            acceptor.close()
            made[0].transport.close()
        assert "could not set up an accepted connection: no protocol for you" in caplog.text

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_closing_stops_accepting_and_closes_what_was_not_handed_over(loop: str) -> None:
    async def main() -> None:
        with listening() as server:
            made, factory = echo_factory()
            acceptor = Acceptor(server, factory)
            acceptor.start()
            assert acceptor.is_serving()
            with clients(server, 3) as conns:
                await until(lambda: acceptor.accepted == 3)
                acceptor.close()  # in the turn that accepted them: no hand-over has begun
                await acceptor.wait_closed()
                assert not acceptor.is_serving()
                assert made == []
                for conn in conns:
                    assert await asyncio.to_thread(conn.recv, 10) == b""
            with clients(server, 1):  # waits in the queue: nobody accepts it now
                await turns(5)
                assert acceptor.accepted == 3
            acceptor.close()  # twice is fine

    run(loop, main)


def test_arguments_and_a_second_start_are_refused() -> None:
    with listening() as server:
        with pytest.raises(ValueError, match="max_per_turn must be >= 1"):
            Acceptor(server, asyncio.Protocol, max_per_turn=0)

        async def main() -> None:
            acceptor = Acceptor(server, asyncio.Protocol)
            acceptor.start()
            with pytest.raises(RuntimeError, match="starts once"):
                acceptor.start()
            acceptor.close()

        run("uvloop", main)


class FailingSocket(socket.socket):
    """A listening socket whose ``accept`` fails with ``errno`` (counting the calls)."""

    def __init__(self, error: int) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def accept(self) -> tuple[socket.socket, Any]:
        self.calls += 1
        raise OSError(self.error, "simulated")


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("error", [errno.ECONNABORTED, errno.EPERM])
def test_one_connection_failing_is_skipped(loop: str, error: int) -> None:
    async def main() -> None:
        with FailingSocket(error) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            acceptor = Acceptor(server, asyncio.Protocol, max_per_turn=4)
            acceptor.start()
            with clients(server, 1):
                await until(lambda: server.calls > 0)
            # The turn went on to the next connection, up to its bound; no pause.
            assert server.calls == 4
            assert acceptor.pauses == 0
            acceptor.close()

    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_unexpected_failure_pauses_instead_of_spinning(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        with FailingSocket(errno.EINVAL) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            acceptor = Acceptor(server, asyncio.Protocol)
            acceptor.start()
            started = asyncio.get_running_loop().time()
            with clients(server, 1):  # stays readable: a spin would call accept every turn
                await asyncio.sleep(0.25)
                elapsed = asyncio.get_running_loop().time() - started
            assert 1 <= server.calls <= 1 + elapsed / RETRY_S  # once a RETRY_S at most
            assert acceptor.pauses == server.calls
            acceptor.close()

    run(loop, main)
    assert caplog.text.count("cannot accept connections (simulated)") == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE semantics")
def test_out_of_descriptors_pauses_instead_of_spinning_then_catches_up() -> None:
    # In a fresh interpreter: the soft descriptor limit is this process's to lower.
    code = textwrap.dedent(
        """
        import asyncio, logging, os, resource, socket, time, uvloop
        from airlane.runtime.acceptor import RETRY_S, Acceptor
        logging.basicConfig(level=logging.WARNING, format="%(message)s")

        async def main():
            server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(64)
            conns = [socket.create_connection(server.getsockname()) for _ in range(6)]
            made = []
            class P(asyncio.Protocol):
                def connection_made(self, transport): made.append(transport)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            in_use = len(os.listdir("/proc/self/fd"))
            resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 2, hard))
            acceptor = Acceptor(server, P)
            acceptor.start()
            await asyncio.sleep(0.35)
            print("while short", acceptor.accepted, acceptor.pauses)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            deadline = time.monotonic() + 5
            while len(made) < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            print("after", acceptor.accepted, len(made))
            acceptor.close()

        uvloop.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    short_line, after_line = result.stdout.splitlines()
    accepted_short, pauses = map(int, short_line.split()[-2:])
    assert accepted_short < 6
    assert 1 <= pauses <= 5  # one pause per RETRY_S (0.1 s), not a spin
    assert after_line.split()[-2:] == ["6", "6"]
    assert result.stderr.count("cannot accept connections") == 1  # said once, not per retry
