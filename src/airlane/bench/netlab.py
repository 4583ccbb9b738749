"""A lossy-network lab for tests and benchmarks: two network namespaces joined by a user-space
bridge that delays and drops packets.

Why a user-space bridge: the usual tool, the ``netem`` qdisc, is missing from the kernel this
project is tested on (``tc qdisc add ... netem`` fails with "unknown qdisc kind"). So the lab
joins namespace A and namespace B with a TUN device each (point-to-point, IP packets with no
link layer) and forwards packets between the two TUN file descriptors from a thread of this
process. Every packet of every protocol crosses the same code, so TCP, UDP and QUIC see the
identical path: a fixed one-way delay in each direction, independent random loss per packet
and direction from a seeded RNG (a run is reproducible), and a bounded delay queue. A rate
limit, which ``tbf`` does provide on this kernel, is applied as the root qdisc of both TUN
devices (each side's egress into the bridge).

Usage (root on Linux)::

    with NetLab(delay_ms=20, loss=0.01, seed=7) as lab:
        server = lab.popen("b", [sys.executable, "-m", "http.server", "--bind", lab.addr_b])
        lab.run("a", ["curl", f"http://{lab.addr_b}:8000/"], check=True)

Nothing leaves the namespaces: each holds only its ``lo`` and its TUN device with a
point-to-point address, no default route, and the bridge writes only to the other TUN device.
IPv6 is disabled in both namespaces, so no router solicitations or MLD reports take RNG draws
away from the traffic under test. On exit the bridge thread is stopped and joined, processes
started with `NetLab.popen` are stopped, the TUN descriptors are closed (which destroys the
devices) and the namespaces are deleted, also when setup failed halfway.

Timing: a packet leaves when its delay is up, give or take the bridge's wake-up (``poll``
counts whole milliseconds, rounded up), so each direction adds about 0.5 to 1 ms to the
configured delay; with ``delay_ms=20`` a round trip measures about 41 ms.

Drops the lab does not count: the kernel's own, such as a TUN device's transmit ring (its
``txqueuelen``) overflowing when the bridge falls behind, or a full socket buffer.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import math
import os
import random
import secrets
import select
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

__all__ = [
    "LinkStats",
    "NetLab",
    "NetLabError",
    "NetLabStats",
    "Side",
    "netlab_available",
]

Side = Literal["a", "b"]
"""One end of the lab: ``"a"`` or ``"b"``."""

_TUN_PATH = "/dev/net/tun"
# From <linux/if_tun.h>: _IOW('T', 202, int), and the flags of struct ifreq's ifr_flags.
_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
# The largest IP packet; a TUN read never returns more.
_MAX_PACKET = 65535
# Packets read from one descriptor per wake-up, so one busy direction cannot starve the
# other's due packets for long.
_READ_BATCH = 256
# tbf: the queue may hold this much delay before it drops (the "latency" parameter).
_TBF_LATENCY_MS = 50
_COMMAND_TIMEOUT_S = 30.0
_JOIN_TIMEOUT_S = 5.0
_STOP_TIMEOUT_S = 3.0


class NetLabError(RuntimeError):
    """Setting up or tearing down the lab failed (a command failed, or a TUN ioctl)."""


@dataclass(frozen=True, slots=True)
class LinkStats:
    """Counters of one direction of the bridge.

    ``forwarded``: packets written to the far side after the delay; ``dropped_loss``: dropped
    by the random loss; ``dropped_queue``: dropped because the delay queue was full;
    ``write_errors``: the write to the far TUN device failed (device down, for one);
    ``queued``: packets in the delay queue now; ``dropped_size``: dropped for being larger
    than the lab's ``path_mtu``; ``largest``: the largest packet that arrived (IP bytes).
    """

    forwarded: int
    dropped_loss: int
    dropped_queue: int
    write_errors: int
    queued: int
    dropped_size: int = 0
    largest: int = 0

    @property
    def handled(self) -> int:
        """Every packet the bridge read in this direction and is done with."""
        return self.forwarded + self.dropped_loss + self.dropped_queue + self.write_errors


@dataclass(frozen=True, slots=True)
class NetLabStats:
    """Counters of both directions: ``a_to_b`` and ``b_to_a``."""

    a_to_b: LinkStats
    b_to_a: LinkStats


def netlab_available() -> str | None:
    """None if a `NetLab` can run here, else the reason it cannot.

    It needs Linux, root (namespaces and TUN devices), a usable ``/dev/net/tun`` and the
    ``ip`` command (iproute2); ``tc`` as well for a rate limit, checked when one is asked for.
    """
    if not sys.platform.startswith("linux"):
        return f"the network lab needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the network lab needs root (network namespaces and TUN devices)"
    if shutil.which("ip") is None:
        return "the network lab needs the ip command (iproute2)"
    try:
        fd = os.open(_TUN_PATH, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"the network lab cannot open {_TUN_PATH}: {exc}"
    os.close(fd)
    return None


class _Direction:
    """One direction of the bridge: reads ``src``, holds packets for the delay, writes ``dst``.

    Every packet delays the same, so due times are in arrival order and a deque is the queue.
    """

    __slots__ = (
        "dropped_loss",
        "dropped_queue",
        "dropped_size",
        "dst",
        "forwarded",
        "largest",
        "queue",
        "rng",
        "src",
        "write_errors",
    )

    def __init__(self, src: int, dst: int, rng: random.Random) -> None:
        self.src = src
        self.dst = dst
        self.rng = rng
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.forwarded = 0
        self.dropped_loss = 0
        self.dropped_queue = 0
        self.write_errors = 0
        self.dropped_size = 0
        self.largest = 0

    def stats(self) -> LinkStats:
        return LinkStats(
            forwarded=self.forwarded,
            dropped_loss=self.dropped_loss,
            dropped_queue=self.dropped_queue,
            write_errors=self.write_errors,
            queued=len(self.queue),
            dropped_size=self.dropped_size,
            largest=self.largest,
        )


class NetLab:
    """Two network namespaces, A and B, joined by a lossy, delaying user-space bridge.

    ``delay_ms``: one-way delay added in each direction (the round trip gains twice it).
    ``loss``: probability (0..1) that a packet is dropped, drawn independently per packet and
    per direction. ``rate_mbit``: a ``tbf`` rate limit on both TUN devices (megabits per
    second), or None for none. ``seed``: seeds the loss draws (one RNG per direction), so a run
    with the same traffic drops the same packets. ``queue_packets``: bound of each direction's
    delay queue; a packet arriving when it is full is dropped. ``mtu``: of both TUN devices.
    ``path_mtu``: packets larger than this (IP bytes) are dropped silently, as by a router on
    the path whose "too big" messages are filtered (a path MTU black hole); None: none.

    Use it as a context manager (or call `close`); after entering, ``a`` and ``b`` are the
    namespace names and ``addr_a`` and ``addr_b`` the addresses of their TUN devices.
    """

    addr_a = "10.77.0.1"
    addr_b = "10.77.0.2"

    def __init__(
        self,
        *,
        delay_ms: float = 0.0,
        loss: float = 0.0,
        rate_mbit: float | None = None,
        seed: int = 0,
        queue_packets: int = 4096,
        mtu: int = 1500,
        path_mtu: int | None = None,
    ) -> None:
        if not (delay_ms >= 0 and math.isfinite(delay_ms)):
            raise ValueError(f"delay_ms must be finite and >= 0, not {delay_ms!r}")
        if not 0.0 <= loss <= 1.0:
            raise ValueError(f"loss must be in 0..1, not {loss!r}")
        if rate_mbit is not None and not (rate_mbit > 0 and math.isfinite(rate_mbit)):
            raise ValueError(f"rate_mbit must be finite and > 0, or None, not {rate_mbit!r}")
        if queue_packets < 1:
            raise ValueError(f"queue_packets must be >= 1, not {queue_packets!r}")
        if not 68 <= mtu <= _MAX_PACKET:
            raise ValueError(f"mtu must be in 68..{_MAX_PACKET}, not {mtu!r}")
        self.delay_ms = delay_ms
        self.loss = loss
        self.rate_mbit = rate_mbit
        self.seed = seed
        self.queue_packets = queue_packets
        self.mtu = mtu
        if path_mtu is not None and not 68 <= path_mtu <= mtu:
            raise ValueError(f"path_mtu must be in 68..mtu ({mtu}), not {path_mtu!r}")
        self.path_mtu = path_mtu
        tag = secrets.token_hex(4)
        # Unique per lab, so labs of concurrent test runs never meet; a device name fits
        # IFNAMSIZ (15 characters).
        self.a = f"al-{tag}-a"
        self.b = f"al-{tag}-b"
        self._dev = {"a": f"al{tag}a", "b": f"al{tag}b"}
        self._ns = {"a": self.a, "b": self.b}
        self._fds: dict[str, int] = {}
        self._created_ns: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._wake_r = -1
        self._wake_w = -1
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None
        self._dirs: dict[str, _Direction] = {}
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> NetLab:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Create the namespaces, devices and addresses and start the bridge (what entering
        the context does). On any failure everything made so far is removed again."""
        if self._closed or self._thread is not None:
            raise NetLabError("a NetLab opens once")
        reason = netlab_available()
        if reason is not None:
            raise NetLabError(reason)
        if self.rate_mbit is not None and shutil.which("tc") is None:
            raise NetLabError("a rate limit needs the tc command (iproute2)")
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        for side in ("a", "b"):
            ns = self._ns[side]
            self._ip("netns", "add", ns)
            self._created_ns.append(ns)
            # Before the device arrives, so it never gets an IPv6 address: its router
            # solicitations and MLD reports would be stray packets taking RNG draws.
            self._run_checked(
                self.command(
                    side,
                    [
                        "sysctl",
                        "-q",
                        "-w",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1",
                    ],
                )
            )
            # Created in the root namespace (this process's), then moved: the descriptor
            # stays bound to the device wherever it goes.
            self._fds[side] = self._open_tun(self._dev[side])
            self._ip("link", "set", self._dev[side], "netns", ns)
        for side, local, peer in (("a", self.addr_a, self.addr_b), ("b", self.addr_b, self.addr_a)):
            ns, dev = self._ns[side], self._dev[side]
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", ns, "link", "set", dev, "mtu", str(self.mtu))
            self._ip("-n", ns, "addr", "add", local, "peer", peer, "dev", dev)
            if self.rate_mbit is not None:
                self._tbf(ns, dev, self.rate_mbit)
            self._ip("-n", ns, "link", "set", dev, "up")
        # Each direction gets its own RNG, seeded from the lab's seed and its name (str seeds
        # hash with SHA-512, the same in every process), so one direction's traffic does not
        # shift the other's draws.
        self._dirs = {
            "a_to_b": _Direction(
                self._fds["a"], self._fds["b"], random.Random(f"airlane-netlab:{self.seed}:a>b")
            ),
            "b_to_a": _Direction(
                self._fds["b"], self._fds["a"], random.Random(f"airlane-netlab:{self.seed}:b>a")
            ),
        }
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._bridge, name=f"netlab-{self.a}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the bridge, the processes started with `popen`, and remove the devices and
        namespaces. Safe to call more than once, and after a failed setup."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        if self._thread is not None:
            self._stop = True
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                errors.append("the bridge thread did not stop")
        for proc in self._procs:
            _stop_process(proc)
        # Closing a TUN descriptor destroys its (non-persistent) device, wherever it is.
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1
        for ns in self._created_ns:
            try:
                self._ip("netns", "del", ns)
            except NetLabError as exc:
                errors.append(str(exc))
        self._created_ns.clear()
        if errors:
            raise NetLabError("; ".join(errors))

    # -- running things in a namespace -----------------------------------------------------

    def command(self, side: Side, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run in the namespace of ``side`` (``ip netns exec NS ...``)."""
        if side not in self._ns:
            raise ValueError(f"side must be 'a' or 'b', not {side!r}")
        return ["ip", "netns", "exec", self._ns[side], *argv]

    def popen(self, side: Side, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in the namespace of ``side`` (keywords go to `subprocess.Popen`).

        The lab stops it on close if it is still running (SIGTERM, then SIGKILL).
        """
        proc: subprocess.Popen[Any] = subprocess.Popen(self.command(side, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(self, side: Side, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to completion in the namespace of ``side`` (keywords go to
        `subprocess.run`; the timeout defaults to 120 s, so a hung command cannot hang a test).
        """
        kw.setdefault("timeout", 120.0)
        check = bool(kw.pop("check", False))
        return subprocess.run(self.command(side, argv), check=check, **kw)

    def move(self, side: Side, addr: str) -> None:
        """Give ``side`` the IPv4 address ``addr`` in place of the one it has, as a phone that
        changes networks gets a new one: sockets bound to the old address lose their path
        (what the other side sends there is dropped), new ones leave from ``addr``, and the
        other side routes ``addr`` to this one. ``addr_a`` / ``addr_b`` follow."""
        if side not in self._ns:
            raise ValueError(f"side must be 'a' or 'b', not {side!r}")
        other: Side = "b" if side == "a" else "a"
        old = self.addr_a if side == "a" else self.addr_b
        peer = self.addr_b if side == "a" else self.addr_a
        ns, dev = self._ns[side], self._dev[side]
        self._ip("-n", ns, "addr", "add", f"{addr}/32", "dev", dev)
        # Deleting the point-to-point address takes its route to the peer with it.
        self._ip("-n", ns, "addr", "del", old, "peer", peer, "dev", dev)
        self._ip("-n", ns, "route", "add", f"{peer}/32", "dev", dev, "src", addr)
        self._ip("-n", self._ns[other], "route", "add", f"{addr}/32", "dev", self._dev[other])
        if side == "a":
            self.addr_a = addr
        else:
            self.addr_b = addr

    def stats(self) -> NetLabStats:
        """The bridge's counters now, per direction."""
        if not self._dirs:
            zero = LinkStats(0, 0, 0, 0, 0)
            return NetLabStats(a_to_b=zero, b_to_a=zero)
        return NetLabStats(a_to_b=self._dirs["a_to_b"].stats(), b_to_a=self._dirs["b_to_a"].stats())

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the bridge thread, if one did (None while it runs)."""
        return self._error

    # -- the bridge ------------------------------------------------------------------------

    def _bridge(self) -> None:
        try:
            self._bridge_loop()
        except BaseException as exc:  # kept for the owner to see; a thread has no caller
            self._error = exc

    def _bridge_loop(self) -> None:
        poller = select.poll()
        dirs = list(self._dirs.values())
        by_fd = {d.src: d for d in dirs}
        for d in dirs:
            poller.register(d.src, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        delay_s = self.delay_ms / 1000.0
        loss = self.loss
        limit = self.queue_packets
        path_mtu = self.path_mtu
        while not self._stop:
            now = time.monotonic()
            for d in dirs:
                _flush(d, now)
            # Sleep until the earliest due packet (poll counts whole milliseconds, rounded up
            # here so the loop never spins), or until a packet or the stop signal arrives.
            due = [d.queue[0][0] for d in dirs if d.queue]
            timeout_ms = max(math.ceil((min(due) - now) * 1000), 0) if due else None
            for fd, events in poller.poll(timeout_ms):
                if fd == self._wake_r:
                    return
                d = by_fd[fd]
                if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    # The device is gone; stop listening rather than spin on the event.
                    poller.unregister(fd)
                    continue
                arrived = time.monotonic()
                for _ in range(_READ_BATCH):
                    try:
                        packet = os.read(fd, _MAX_PACKET)
                    except BlockingIOError:
                        break
                    d.largest = max(d.largest, len(packet))
                    # Drawn for every packet, before the queue check, so the loss pattern
                    # depends on the seed and the packet count alone.
                    if loss and d.rng.random() < loss:
                        d.dropped_loss += 1
                    elif path_mtu is not None and len(packet) > path_mtu:
                        d.dropped_size += 1
                    elif len(d.queue) >= limit:
                        d.dropped_queue += 1
                    else:
                        d.queue.append((arrived + delay_s, packet))

    # -- helpers ---------------------------------------------------------------------------

    def _open_tun(self, name: str) -> int:
        fd = os.open(_TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            ifreq = struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI)
            fcntl.ioctl(fd, _TUNSETIFF, ifreq)
        except OSError as exc:
            os.close(fd)
            raise NetLabError(f"TUNSETIFF {name}: {exc}") from exc
        return fd

    def _tbf(self, ns: str, dev: str, rate_mbit: float) -> None:
        rate_bps = rate_mbit * 1_000_000
        # The bucket holds a few packets, or 4 ms at the rate if that is more: big enough to
        # pass full-size packets at any rate, small enough to keep the rate honest.
        burst = max(4 * self.mtu, int(rate_bps / 8 * 0.004))
        self._run_checked(
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{int(rate_bps)}bit",
                "burst",
                str(burst),
                "latency",
                f"{_TBF_LATENCY_MS}ms",
            ]
        )

    def _ip(self, *args: str) -> None:
        self._run_checked(["ip", *args])

    @staticmethod
    def _run_checked(argv: list[str]) -> None:
        try:
            done = subprocess.run(
                argv,
                check=False,
                capture_output=True,
                text=True,
                timeout=_COMMAND_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NetLabError(f"{' '.join(argv)}: {exc}") from exc
        if done.returncode != 0:
            raise NetLabError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


def _flush(d: _Direction, now: float) -> None:
    """Write every packet of ``d`` that is due by ``now`` (bounded by the queue's length)."""
    queue = d.queue
    while queue and queue[0][0] <= now:
        _, packet = queue.popleft()
        try:
            os.write(d.dst, packet)
        except OSError:
            # The far device is down or full; the packet is lost, as on a real link.
            d.write_errors += 1
        else:
            d.forwarded += 1


def _stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_STOP_TIMEOUT_S)
