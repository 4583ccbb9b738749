"""The acceptor takes every connection waiting in the listen queue in one loop turn (up to its
bound), hands each to its protocol, pauses instead of spinning when descriptors run out, and
stops cleanly; on uvloop and on asyncio's own loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import socket
import subprocess
import sys
import textwrap
import time
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
    """A listening socket whose ``accept`` fails with ``errno`` (counting the calls, noting
    when each came, and setting ``called``)."""

    def __init__(self, error: int) -> None:
        super().__init__()
        self.error = error
        self.calls = 0
        self.times: list[float] = []
        self.called = asyncio.Event()

    def accept(self) -> tuple[socket.socket, Any]:
        self.calls += 1
        self.times.append(time.monotonic())
        self.called.set()
        raise OSError(self.error, "simulated")

    async def called_at_least(self, calls: int, timeout: float = 5.0) -> None:
        """Wait until ``accept`` has been called ``calls`` times."""
        async with asyncio.timeout(timeout):
            while self.calls < calls:
                self.called.clear()
                await self.called.wait()


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
            with clients(server, 1):  # stays readable: a spin would call accept every turn
                # The first call, and one after each of two pauses.
                await server.called_at_least(3)
            # Once a RETRY_S at most (less a millisecond: loop timers may fire that early).
            gaps = [later - earlier for earlier, later in itertools.pairwise(server.times)]
            assert min(gaps) >= RETRY_S - 0.002, gaps
            assert acceptor.pauses == server.calls
            acceptor.close()

    run(loop, main)
    assert caplog.text.count("cannot accept connections (simulated)") == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_NOFILE semantics")
def test_out_of_descriptors_pauses_instead_of_spinning_then_catches_up() -> None:
    # In a fresh interpreter: the soft descriptor limit is this process's to lower.
    code = textwrap.dedent(
        """
        import asyncio, errno, logging, os, resource, socket, time, uvloop
        from airlane.runtime.acceptor import Acceptor
        logging.basicConfig(level=logging.WARNING, format="%(message)s")

        class Watched(socket.socket):
            # Notes when accept fails for want of descriptors, for the script to wait on.
            def __init__(self):
                super().__init__()
                self.short = []
                self.changed = asyncio.Event()
            def accept(self):
                try:
                    return super().accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE):
                        self.short.append(time.monotonic())
                        self.changed.set()
                    raise

        async def main():
            server = Watched(); server.bind(("127.0.0.1", 0)); server.listen(64)
            conns = [socket.create_connection(server.getsockname()) for _ in range(6)]
            made = []
            all_made = asyncio.Event()
            class P(asyncio.Protocol):
                def connection_made(self, transport):
                    made.append(transport)
                    if len(made) == 6:
                        all_made.set()
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            in_use = len(os.listdir("/proc/self/fd"))
            resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 2, hard))
            acceptor = Acceptor(server, P)
            acceptor.start()
            # Short of descriptors, paused, and short again when it tries after the pause.
            async with asyncio.timeout(5):
                while len(server.short) < 2:
                    server.changed.clear()
                    await server.changed.wait()
            gap = server.short[1] - server.short[0]
            print("while short", acceptor.accepted, acceptor.pauses, f"{gap:.4f}")
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            try:
                await asyncio.wait_for(all_made.wait(), 5)
            except TimeoutError:
                pass  # reported below
            print("after", acceptor.accepted, len(made))
            acceptor.close()

        uvloop.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    short_line, after_line = result.stdout.splitlines()
    accepted_short, pauses = map(int, short_line.split()[-3:-1])
    gap = float(short_line.split()[-1])
    assert accepted_short < 6
    # One pause per RETRY_S (0.1 s), not a spin: tried again a RETRY_S after the first (less
    # a millisecond: loop timers may fire that early).
    assert pauses == 2 and gap >= RETRY_S - 0.002, short_line
    assert after_line.split()[-2:] == ["6", "6"]
    assert result.stderr.count("cannot accept connections") == 1  # said once, not per retry
