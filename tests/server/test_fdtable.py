"""The descriptor table is grown once, at start-up, to the reserved size (bounded by the soft
limit), so that accepting connections later never waits for it to grow."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from airlane.server.fdtable import DEFAULT_RESERVED_FDS, reserve_fd_table

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the table size from /proc (Linux)"
)


_FDSIZE = """
import resource
def soft_limit(count):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))
def fdsize():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("FDSize:"))
"""


def _run(code: str) -> str:
    """``code`` in a fresh interpreter (the table never shrinks: this process's is spent)."""
    result = subprocess.run(
        [sys.executable, "-c", _FDSIZE + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def test_the_table_grows_to_the_reserved_size_and_no_descriptor_stays_open() -> None:
    out = _run(
        """
        import os, resource
        from airlane.server.fdtable import reserve_fd_table
        soft_limit(5000)
        before, open_before = fdsize(), len(os.listdir("/proc/self/fd"))
        reserved = reserve_fd_table(3000)
        print(before, reserved, fdsize(), len(os.listdir("/proc/self/fd")) - open_before)
        """
    )
    before, reserved, after, leaked = map(int, out.split())
    assert before < 3000
    assert reserved == 3000
    assert after >= 3000  # the kernel rounds the size up to a power of two
    assert leaked == 0


def test_the_reservation_stops_at_the_soft_limit() -> None:
    out = _run(
        """
        import resource
        from airlane.server.fdtable import reserve_fd_table
        soft_limit(300)
        print(reserve_fd_table(65536), fdsize())
        """
    )
    reserved, after = map(int, out.split())
    assert reserved == 300
    assert 300 <= after < 65536


def test_nothing_is_reserved_for_a_count_below_one() -> None:
    assert reserve_fd_table(0) == 0
    assert reserve_fd_table(-5) == 0


def test_a_table_already_large_enough_is_left_as_it_is() -> None:
    # The pytest process: whatever its table holds, asking again for as much changes nothing
    # and does not fail.
    first = reserve_fd_table(512)
    assert first in (0, 512)  # 0 only if the soft limit is below 512 and its top slot taken
    assert reserve_fd_table(512) == first


def test_the_gateway_reserves_its_table_at_start(tmp_path) -> None:
    out = _run(
        """
        import asyncio, resource
        from airlane.server import ServerConfig, serve
        soft_limit(4096)
        async def main():
            config = ServerConfig(port=0, log_level="warning")
            task = asyncio.create_task(serve(config, on_ready=lambda _: ready.set()))
            await asyncio.wait_for(ready.wait(), 30)
            print(fdsize())
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        ready = asyncio.Event()
        asyncio.run(main())
        """
    )
    assert int(out.splitlines()[-1]) >= 4096
    assert DEFAULT_RESERVED_FDS >= 4096


def test_a_process_with_every_descriptor_taken_reserves_nothing_and_does_not_fail() -> None:
    out = _run(
        """
        import os
        from airlane.server.fdtable import reserve_fd_table
        soft_limit(64)
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        print(reserve_fd_table(1000))
        """
    )
    assert out.splitlines()[-1] == "0"
