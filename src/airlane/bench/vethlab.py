"""A two-host lab over a veth pair, for the lanes' tests and benchmark: namespace ``a`` (where
the gateway runs, and where its egress is the bottleneck) and namespace ``b`` (the clients).

Unlike `airlane.bench.netlab` (TUN devices joined by a user-space bridge, for delay and loss),
packets here cross a kernel veth pair with an Ethernet header, so the qdiscs and the
traffic-control hook on ``dev_a`` see exactly what a NIC's would. Nothing leaves the two
namespaces: each holds only ``lo`` and its end of the pair, with no default route; IPv6 is off.

Usage (root on Linux)::

    with VethLab() as lab:
        server = lab.popen("a", [sys.executable, "-m", "http.server", "--bind", lab.addr_a])
        lab.run("b", ["curl", f"http://{lab.addr_a}:8000/"], check=True)

On exit the processes started with `popen` are stopped and both namespaces are deleted (which
deletes the pair and every qdisc on it), also when set-up failed halfway.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

from airlane.bench.netlab import NetLabError, netlab_available

__all__ = ["VethLab"]

Side = Literal["a", "b"]
_STOP_S = 5.0


class VethLab:
    """Two network namespaces joined by a veth pair; see the module docstring."""

    addr_a = "10.78.0.1"
    addr_b = "10.78.0.2"

    def __init__(self) -> None:
        tag = secrets.token_hex(4)
        self.a = f"vl-{tag}-a"
        self.b = f"vl-{tag}-b"
        self.dev_a = f"vl{tag}a"
        """The veth end in namespace ``a``: its egress is the path from the gateway."""
        self.dev_b = f"vl{tag}b"
        self._ns = {"a": self.a, "b": self.b}
        self._created: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._closed = False

    def __enter__(self) -> VethLab:
        reason = netlab_available()
        if reason is not None:
            raise NetLabError(reason)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _setup(self) -> None:
        for ns in (self.a, self.b):
            _ip("netns", "add", ns)
            self._created.append(ns)
            _check(self.command("a" if ns == self.a else "b", [
                "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ]))  # fmt: skip
        _ip("link", "add", self.dev_a, "netns", self.a, "type", "veth", "peer", "name",
            self.dev_b, "netns", self.b)  # fmt: skip
        for ns, dev, addr in ((self.a, self.dev_a, self.addr_a), (self.b, self.dev_b, self.addr_b)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")

    def close(self) -> None:
        """Stop the processes started with `popen`; delete the namespaces. Safe to repeat."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(_STOP_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(_STOP_S)
        errors = []
        for ns in self._created:
            try:
                _ip("netns", "del", ns)
            except NetLabError as exc:
                errors.append(str(exc))
        self._created.clear()
        if errors:
            raise NetLabError("; ".join(errors))

    def command(self, side: Side, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run in the namespace of ``side``."""
        return ["ip", "netns", "exec", self._ns[side], *argv]

    def popen(self, side: Side, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``side``'s namespace; stopped on close if still running."""
        proc: subprocess.Popen[Any] = subprocess.Popen(self.command(side, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(self, side: Side, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to completion in ``side``'s namespace (timeout 120 s by default)."""
        kw.setdefault("timeout", 120.0)
        check = bool(kw.pop("check", False))
        return subprocess.run(self.command(side, argv), check=check, **kw)


def _ip(*args: str) -> None:
    _check(["ip", *args])


def _check(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetLabError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
