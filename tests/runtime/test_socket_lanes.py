"""`airlane.runtime.socket_lanes`: marks set on real sockets and read back from the kernel
(`getsockopt`, and ``ss --tos`` from outside the process), and what an unprivileged process
is refused."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from airlane.core import Lane
from airlane.runtime.socket_lanes import LanesConfig, mark_socket, socket_marks
from tests.sockets import ss_tos


@pytest.fixture(params=[socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback: (the accepted end, the connecting end)."""
    family = request.param
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    with socket.socket(family) as listener:
        try:
            listener.bind((host, 0))
        except OSError:
            pytest.skip(f"no {host} here")
        listener.listen()
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        with client, accepted:
            yield accepted, client


def test_each_lane_gets_its_dscp_priority_and_bulk_its_low_water_mark(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sock, _ = pair
    config = LanesConfig()
    assert mark_socket(sock, Lane.CONTROL, config) == "dscp=40 priority=6"
    assert socket_marks(sock) == {"dscp": 40, "priority": 6, "notsent_lowat": 0}
    assert mark_socket(sock, Lane.BULK, config) == "dscp=10 priority=2 notsent_lowat=131072"
    assert socket_marks(sock) == {"dscp": 10, "priority": 2, "notsent_lowat": 131072}
    # Back from bulk: the low-water mark goes back to the system's default.
    assert mark_socket(sock, Lane.INTERACTIVE, config) == "dscp=18 priority=0"
    assert socket_marks(sock) == {"dscp": 18, "priority": 0, "notsent_lowat": 0}


def test_the_kernel_reports_the_marks_to_outside_tools(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    sock, _ = pair
    mark_socket(sock, Lane.CONTROL, LanesConfig())
    shown = ss_tos("sport", sock.getsockname()[1])
    # IPv6 sockets show their traffic class as tclass, IPv4 ones as tos; the priority shows
    # as the class id.
    assert ("tos:0xa0" in shown or "tclass:0xa0" in shown) and "class_id:0x6" in shown, shown


def test_configured_marks_and_off(pair: tuple[socket.socket, socket.socket]) -> None:
    sock, _ = pair
    config = LanesConfig(control_dscp=46, control_priority=5)
    assert mark_socket(sock, Lane.CONTROL, config) == "dscp=46 priority=5"
    assert mark_socket(sock, Lane.BULK, LanesConfig(bulk_notsent_lowat=0)) == "dscp=10 priority=2"
    assert mark_socket(sock, Lane.CONTROL, LanesConfig(enabled=False)) == ""
    assert socket_marks(sock)["dscp"] == 10  # off: left as it was


def test_a_priority_the_kernel_refuses_is_left_out_not_raised() -> None:
    """SO_PRIORITY above 6 needs CAP_NET_ADMIN (or, on newer kernels, CAP_NET_RAW): run
    without both (setpriv drops them from the bounding set, so even root loses them) and the
    rest is still marked."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    script = (
        "import socket\n"
        "from airlane.core import Lane\n"
        "from airlane.runtime.socket_lanes import LanesConfig, mark_socket\n"
        "s = socket.socket()\n"
        "print(mark_socket(s, Lane.CONTROL, LanesConfig(control_priority=7)))\n"
    )
    done = subprocess.run(
        [setpriv, "--bounding-set", "-net_admin,-net_raw", "--inh-caps", "-net_admin,-net_raw",
         sys.executable,
         "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dscp=40"


def test_the_config_is_checked() -> None:
    with pytest.raises(ValueError, match="DSCP code point"):
        LanesConfig(control_dscp=64)
    with pytest.raises(ValueError, match="bulk_notsent_lowat"):
        LanesConfig(bulk_notsent_lowat=-1)
    assert LanesConfig.lane("bulk") is Lane.BULK
    with pytest.raises(ValueError, match="control, interactive or bulk"):
        LanesConfig.lane("urgent")


def test_a_connection_closed_inside_bulk_while_ends_it_quietly() -> None:
    # uvloop hands out a stand-in socket whose descriptor is -1 once the connection closed:
    # giving the marks back then raised ValueError, a traceback on every model update whose
    # client left before the end (seen in the weak-network benchmark's fairness runs).
    import asyncio

    import uvloop

    from airlane.runtime.socket_lanes import bulk_while

    async def run() -> str:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            sock = writer.get_extra_info("socket")
            with bulk_while(sock, LanesConfig()) as marked:
                writer.close()
                await writer.wait_closed()
            return marked
        finally:
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert "dscp=" in runner.run(run())
