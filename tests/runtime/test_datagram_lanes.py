"""`airlane.runtime.datagram_lanes`: datagrams from one shared UDP socket, each marked with
its connection's lane, read back by a receiver from the packets' IP headers (``IP_RECVTOS``,
``IPV6_RECVTCLASS``)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator

import pytest

from airlane.core import Lane
from airlane.runtime.datagram_lanes import DatagramLane
from airlane.runtime.socket_lanes import LanesConfig

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=[("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)], ids=["v4", "v6"])
def receiver(request: pytest.FixtureRequest) -> Iterator[socket.socket]:
    """A UDP socket that reports each datagram's traffic class."""
    host, family = request.param
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind((host, 0))
    except OSError:
        sock.close()
        pytest.skip(f"no {host} here")
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    sock.settimeout(5)
    with sock:
        yield sock


@pytest.fixture
async def sender(receiver: socket.socket) -> AsyncIterator[asyncio.DatagramTransport]:
    """One side's shared socket: an asyncio datagram transport on the receiver's family."""
    host = "127.0.0.1" if receiver.family == socket.AF_INET else "::1"
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=(host, 0)
    )
    try:
        yield transport
    finally:
        transport.close()


def dscp(receiver: socket.socket) -> tuple[bytes, int]:
    """The next datagram and its DSCP."""
    data, ancillary, _, _ = receiver.recvmsg(2048, socket.CMSG_SPACE(4))
    (_, _, tclass), = ancillary  # fmt: skip
    return data, tclass[0] >> 2


def lane_for(transport: asyncio.DatagramTransport, config: LanesConfig) -> DatagramLane:
    raw = transport.get_extra_info("socket")
    sock = socket.fromfd(raw.fileno(), raw.family, raw.type)  # a duplicate, as the server's
    sock.setblocking(False)
    return DatagramLane(transport, config, sock)


async def test_each_datagram_carries_the_lane_declared_last(
    receiver: socket.socket, sender: asyncio.DatagramTransport
) -> None:
    to = receiver.getsockname()
    lane = lane_for(sender, LanesConfig())
    lane.sendto(b"none", to)
    assert dscp(receiver) == (b"none", 0)
    assert lane(Lane.CONTROL) == "dscp=40 priority=6"
    lane.sendto(b"control", to)
    assert dscp(receiver) == (b"control", 40)
    with lane.bulk_while() as marks:
        assert marks == "dscp=10 priority=2"
        lane.sendto(b"bulk", to)
        assert dscp(receiver) == (b"bulk", 10)
    lane.sendto(b"back", to)
    assert dscp(receiver) == (b"back", 40) and lane.lane is Lane.CONTROL
    # Another connection on the same socket: its own marks, or none.
    other = lane_for(sender, LanesConfig())
    other.sendto(b"other", to)
    assert dscp(receiver) == (b"other", 0)


async def test_a_segmented_run_carries_the_lane_on_every_datagram(
    receiver: socket.socket, sender: asyncio.DatagramTransport
) -> None:
    # Inside `batch` equal-size datagrams leave in one sendmsg with UDP_SEGMENT: the marks are
    # the call's, and the kernel copies them onto each datagram it cuts.
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    to = receiver.getsockname()
    lane = lane_for(sender, LanesConfig())
    lane(Lane.BULK)
    sent = [bytes([i]) * 1200 for i in range(10)] + [b"end"]
    with lane.batch():
        for datagram in sent:
            lane.sendto(datagram, to)
    assert [dscp(receiver) for _ in sent] == [(datagram, 10) for datagram in sent]
    assert lane.segmenting


async def test_bulk_while_an_undeclared_connection_leaves_it_undeclared(
    receiver: socket.socket, sender: asyncio.DatagramTransport
) -> None:
    lane = lane_for(sender, LanesConfig(bulk_dscp=8))
    with lane.bulk_while():
        lane.sendto(b"bulk", receiver.getsockname())
        assert dscp(receiver) == (b"bulk", 8)
    assert lane.lane is None
    lane.sendto(b"after", receiver.getsockname())
    assert dscp(receiver) == (b"after", 0)


async def test_lanes_off_or_no_socket_send_unmarked(
    receiver: socket.socket, sender: asyncio.DatagramTransport
) -> None:
    off = lane_for(sender, LanesConfig(enabled=False))
    assert off(Lane.CONTROL) == ""
    off.sendto(b"off", receiver.getsockname())
    assert dscp(receiver) == (b"off", 0)
    bare = DatagramLane(sender, LanesConfig(), None)
    assert bare(Lane.CONTROL) == ""
    bare.sendto(b"bare", receiver.getsockname())
    assert dscp(receiver) == (b"bare", 0)


REFUSED = textwrap.dedent("""
    import asyncio, logging, socket, sys
    logging.basicConfig(level=logging.INFO)
    from airlane.core import Lane
    from airlane.runtime.datagram_lanes import DatagramLane
    from airlane.runtime.socket_lanes import LanesConfig

    async def main():
        to = ("127.0.0.1", int(sys.argv[1]))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        lane = DatagramLane(transport, LanesConfig(control_priority=7),
                            socket.fromfd(transport.get_extra_info("socket").fileno(),
                                          socket.AF_INET, socket.SOCK_DGRAM))
        print(lane(Lane.CONTROL))
        lane.sendto(b"first", to)
        lane.sendto(b"second", to)
        print(lane(Lane.CONTROL))
        # A segmented run refused for its priority goes again without it, still segmented.
        again = DatagramLane(transport, LanesConfig(control_priority=7),
                             socket.fromfd(transport.get_extra_info("socket").fileno(),
                                           socket.AF_INET, socket.SOCK_DGRAM))
        print(again(Lane.CONTROL))
        with again.batch():
            for name in (b"run-0", b"run-1", b"run-2"):
                again.sendto(name, to)
        print(again.segmenting)
        await asyncio.sleep(0.1)

    asyncio.run(main())
""")


def test_a_priority_the_kernel_refuses_per_datagram_leaves_dscp() -> None:
    """Priorities above 6 need CAP_NET_ADMIN: without it (setpriv drops it even from root)
    the kernel refuses the datagram's SO_PRIORITY; the datagram still goes, marked DSCP, and
    so do the next ones, without asking again."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        receiver.settimeout(10)
        drop = "-net_admin,-net_raw"
        done = subprocess.run(
            [setpriv, "--bounding-set", drop, "--inh-caps", drop, sys.executable, "-c",
             REFUSED, str(receiver.getsockname()[1])],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines == ["dscp=40 priority=7", "dscp=40", "dscp=40 priority=7", "True"]
        assert "SO_PRIORITY refused" in done.stderr
        got = [dscp(receiver) for _ in range(5)]
        assert got == [(name, 40) for name in (b"first", b"second", b"run-0", b"run-1", b"run-2")]
