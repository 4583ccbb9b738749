"""The gateway's side of ``airlane shaping``: it tells the kernel classifier which sockets carry
which lane, and reads its counters back.

``airlane shaping attach`` loads a BPF program on an interface's traffic-control hook and pins
its maps under ``[lanes] bpf_dir`` (`airlane.shaping`). When a connection declares its lane,
`LaneFlows.add` puts the socket's cookie (``SO_COOKIE``) in the ``airlane_flows`` map, so every
packet of that socket is sorted into its lane's band whatever its DSCP; `LaneFlows.remove`
takes it out when the connection ends. `ShapingCounters` reads the per-lane packet and byte
counters for ``/metrics``.

Where the maps are not there (nothing attached, or a process without the right to open them)
this says so once, at info level, and the connections stay marked in user space only; it
looks again at most every `RETRY_S`, so attaching after the gateway started works.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from pathlib import Path
from typing import Protocol

from airlane.core import Lane
from airlane.runtime.bpf_maps import PinnedMap

__all__ = [
    "COUNTER_SLOTS",
    "MAPS_SUBDIR",
    "RETRY_S",
    "SO_COOKIE",
    "CookieSocket",
    "LaneFlows",
    "ShapingCounters",
    "socket_cookie",
]

log = logging.getLogger("airlane.lanes")

SO_COOKIE = getattr(socket, "SO_COOKIE", 57)
"""Linux's socket option for a socket's 64-bit cookie (Python 3.11 does not name it)."""
MAPS_SUBDIR = "tc/globals"
"""Where, under the BPF directory, tc pins the classifier's maps."""
RETRY_S = 30.0
"""How long after a failed open the maps are looked for again."""
COUNTER_SLOTS = ("control", "interactive", "bulk", "none")
"""The counter map's lanes, in slot order (per direction: egress, then ingress)."""


class CookieSocket(Protocol):
    """What reading a cookie needs of a socket (`socket.socket`, or asyncio's and uvloop's
    wrappers)."""

    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


def socket_cookie(sock: CookieSocket) -> int:
    """The kernel's cookie of ``sock`` (what ``bpf_get_socket_cookie`` sees)."""
    return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")


class _Opener:
    """Opens one pinned map, remembering a failure for `RETRY_S`."""

    def __init__(self, path: Path, value_size: int, *, per_cpu: bool = False) -> None:
        self.path = path
        self._value_size = value_size
        self._per_cpu = per_cpu
        self._map: PinnedMap | None = None
        self._failed_at: float | None = None
        self._told = False

    def get(self) -> PinnedMap | None:
        if self._map is not None:
            return self._map
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < RETRY_S:
            return None
        try:
            self._map = PinnedMap(self.path, self._value_size, per_cpu=self._per_cpu)
        except OSError as exc:
            self._failed_at = now
            if not self._told:
                self._told = True
                log.info(
                    "lanes: the shaping classifier's map %s cannot be opened (%s); "
                    "connections are marked in user space only (docs/lanes.md)",
                    self.path,
                    exc.strerror or exc,
                )
            return None
        self._failed_at = None
        if self._told:
            log.info("lanes: the shaping classifier's map %s is open", self.path)
        return self._map

    def drop(self) -> None:
        """Forget the open map (after an error on it: it may have been detached)."""
        if self._map is not None:
            self._map.close()
            self._map = None
            self._failed_at = time.monotonic()

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


class LaneFlows:
    """The classifier's socket -> lane map, as the gateway keeps it."""

    def __init__(self, bpf_dir: Path | str) -> None:
        self._flows = _Opener(Path(bpf_dir) / MAPS_SUBDIR / "airlane_flows", 4)
        self.added = 0
        """Sockets put in the map over this process's life."""

    def add(self, cookie: int, lane: Lane) -> bool:
        """Classify the packets of the socket with ``cookie`` as ``lane``; False where the
        map is not available."""
        flows = self._flows.get()
        if flows is None:
            return False
        try:
            flows.update(struct.pack("<Q", cookie), struct.pack("<I", lane))
        except OSError as exc:
            # E2BIG: the map is full (65536 sockets); ENOENT, EBADF: detached meanwhile.
            log.debug("lanes: a flow could not be added to the classifier: %s", exc)
            if exc.errno != 7:  # E2BIG: full, but open
                self._flows.drop()
            return False
        self.added += 1
        return True

    def remove(self, cookie: int) -> None:
        """Forget the socket with ``cookie`` (it may be closed by now)."""
        flows = self._flows.get()
        if flows is None:
            return
        try:
            flows.delete(struct.pack("<Q", cookie))
        except OSError as exc:
            log.debug("lanes: a flow could not be removed from the classifier: %s", exc)

    def close(self) -> None:
        """Close the map's descriptor."""
        self._flows.close()


class ShapingCounters:
    """The classifier's per-lane counters."""

    def __init__(self, bpf_dir: Path | str) -> None:
        self._counters = _Opener(Path(bpf_dir) / MAPS_SUBDIR / "airlane_counters", 16, per_cpu=True)

    def read(self) -> dict[tuple[str, str], tuple[int, int]]:
        """``(direction, lane) -> (packets, bytes)``, summed over CPUs; empty where the
        classifier is not attached (or its map cannot be opened)."""
        counters = self._counters.get()
        if counters is None:
            return {}
        out = {}
        try:
            for direction_index, direction in enumerate(("egress", "ingress")):
                for lane_index, lane in enumerate(COUNTER_SLOTS):
                    slot = direction_index * len(COUNTER_SLOTS) + lane_index
                    raw = counters.lookup(struct.pack("<I", slot)) or b""
                    packets = sum(p for p, _ in struct.iter_unpack("<QQ", raw))
                    size = sum(b for _, b in struct.iter_unpack("<QQ", raw))
                    out[(direction, lane)] = (packets, size)
        except OSError:
            self._counters.drop()
            return {}
        return out

    def close(self) -> None:
        """Close the map's descriptor."""
        self._counters.close()
