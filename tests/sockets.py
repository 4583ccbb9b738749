"""What the kernel says of this machine's sockets and packets, read from outside the process
that sends them: for tests that check a connection's lane marks (docs/lanes.md)."""

from __future__ import annotations

import collections
import os
import selectors
import shutil
import socket
import subprocess
import threading

import pytest


def ss_tos(port_of: str, port: int) -> str:
    """``ss --tos`` of the established TCP sockets whose ``port_of`` (``sport``: own port,
    ``dport``: peer's port) is ``port``: the DSCP shows as ``tos:0xa0`` (``tclass:`` on IPv6),
    ``SO_PRIORITY`` as ``class_id:0x6``. Without ss (iproute2) the test skips, except under
    ``CI=true``, where it fails."""
    if shutil.which("ss") is None:
        reason = "ss (iproute2) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return subprocess.run(
        ["ss", "-tnH", "--tos", "state", "established", port_of, f"= :{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


class TosRelay:
    """A UDP relay on 127.0.0.1 between one client and ``target`` that records the DSCP of
    every datagram it forwards, read from the received packet's IP header (``IP_RECVTOS``):
    what a router on the path would see of a lane's marks. Use as a context manager; the
    relay runs on a thread of its own, so it sees datagrams while the test's loop waits."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.downstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the client
        self.upstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the target
        for sock in (self.downstream, self.upstream):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            sock.bind(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.downstream.getsockname()
        """Where the client sends (the relay's own address)."""
        self._to_target: collections.deque[int] = collections.deque(maxlen=10_000)
        self._from_target: collections.deque[int] = collections.deque(maxlen=10_000)
        self._lock = threading.Lock()
        self._client: tuple[str, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tos-relay", daemon=True)

    def to_target(self) -> list[int]:
        """The DSCP of each datagram from the client, oldest first (the latest 10,000)."""
        with self._lock:
            return list(self._to_target)

    def from_target(self) -> list[int]:
        """The DSCP of each datagram from the target, oldest first (the latest 10,000)."""
        with self._lock:
            return list(self._from_target)

    def clear(self) -> None:
        """Forget what was recorded so far."""
        with self._lock:
            self._to_target.clear()
            self._from_target.clear()

    def __enter__(self) -> TosRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.downstream.close()
        self.upstream.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.downstream, selectors.EVENT_READ)
            selector.register(self.upstream, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.1):
                    self._forward(key.fileobj is self.downstream)

    def _forward(self, from_client: bool) -> None:
        sock = self.downstream if from_client else self.upstream
        data, ancillary, _, sender = sock.recvmsg(65535, socket.CMSG_SPACE(4))
        tos = next((d[0] for level, kind, d in ancillary if kind == socket.IP_TOS), 0)
        if from_client:
            self._client = sender
            with self._lock:
                self._to_target.append(tos >> 2)
            self.upstream.sendto(data, self.target)
        elif self._client is not None:
            with self._lock:
                self._from_target.append(tos >> 2)
            self.downstream.sendto(data, self._client)
