"""A NAT lab for WebRTC tests and benchmarks: a client and a gateway, each behind its own router,
with the "internet" between them, all network namespaces on this machine.

::

    client         client router        public          gateway router       gateway
    10.88.1.2 --- 10.88.1.1 |          198.51.100.3         | 10.88.2.1 --- 10.88.2.2
                   198.51.100.1 ------ (coturn) ------ 198.51.100.2
                   (NAT or not)                        (NAT or not)

Each router is a namespace with IP forwarding and an nftables ``postrouting`` rule for the kind
of NAT asked:

- ``none``: plain routing (the public side routes the private subnet back), so the host
  candidates reach each other;
- ``cone``: ``masquerade``, which keeps a flow's source port where it can: the mapping a STUN
  server sees is the one a peer can use (server-reflexive candidates work);
- ``symmetric``: ``masquerade fully-random``: every destination gets a new random source port,
  so what a STUN server saw is useless to a peer, and only a relay (TURN) connects two of them.

``forward_tcp`` ports are forwarded by a NATed gateway's router to the gateway (its HTTP
signalling, reached at `NatLab.gateway_url_host`). ``block_udp`` drops UDP forwarded by the
client's router (TCP goes on): only TURN over TCP
reaches the relay then. Links are veth pairs, no loss or delay. IPv6 is off. Nothing leaves the
namespaces; closing removes them (and the processes started with `NatLab.popen`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from airlane.bench.netlab import NetLabError

__all__ = ["Nat", "NatLab", "NatSide", "natlab_available"]

Nat = Literal["none", "cone", "symmetric"]
"""The kind of NAT a router does."""
NatSide = Literal["client", "public", "gateway", "client_router", "gateway_router"]
"""A namespace of the lab."""

_RULES = {
    "cone": "masquerade",
    "symmetric": "masquerade fully-random",
}
_TIMEOUT_S = 30.0


def natlab_available() -> str | None:
    """None if a `NatLab` can run here, else the reason it cannot (root, ``ip``, ``nft``)."""
    if os.geteuid() != 0:
        return "the NAT lab needs root (network namespaces)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"the NAT lab needs the {tool} command (Debian: apt-get install {package})"
    return None


class NatLab:
    """Five namespaces; see the module docstring. Use it as a context manager."""

    client_addr = "10.88.1.2"
    gateway_addr = "10.88.2.2"
    public_addr = "198.51.100.3"
    """The public namespace's address (a TURN server there listens on it)."""
    client_router_public = "198.51.100.1"
    gateway_router_public = "198.51.100.2"

    def __init__(
        self,
        *,
        client_nat: Nat = "cone",
        gateway_nat: Nat = "none",
        block_udp: bool = False,
        forward_tcp: Sequence[int] = (),
    ) -> None:
        for nat in (client_nat, gateway_nat):
            if nat not in ("none", "cone", "symmetric"):
                raise ValueError(f"a NAT is 'none', 'cone' or 'symmetric', not {nat!r}")
        self.client_nat = client_nat
        self.gateway_nat = gateway_nat
        self.block_udp = block_udp
        self.forward_tcp = tuple(forward_tcp)
        """TCP ports the gateway's router forwards to the gateway (its HTTP signalling, as a
        load balancer in front of a NATed gateway would)."""
        tag = secrets.token_hex(3)
        self._ns: dict[str, str] = {
            side: f"nl-{tag}-{short}"
            for side, short in (
                ("client", "c"),
                ("client_router", "cr"),
                ("public", "p"),
                ("gateway_router", "gr"),
                ("gateway", "g"),
            )
        }
        self._tag = tag
        self._created: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self._files: list[IO[str]] = []
        self._closed = False

    def __enter__(self) -> NatLab:
        reason = natlab_available()
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

    @property
    def gateway_url_host(self) -> str:
        """Where the client reaches the gateway: its own address, or its router's public one
        when it is behind a NAT (``forward_tcp`` ports)."""
        return self.gateway_addr if self.gateway_nat == "none" else self.gateway_router_public

    def _setup(self) -> None:
        for name in self._ns.values():
            self._run(["ip", "netns", "add", name])
            self._created.append(name)
            self._in(name, ["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])
            self._in(name, ["ip", "link", "set", "lo", "up"])
        ns = self._ns
        t = self._tag
        # (namespace, device, address) at each end of each link.
        client, client_router, public = ns["client"], ns["client_router"], ns["public"]
        gateway_router, gateway = ns["gateway_router"], ns["gateway"]
        links = [
            ((client, f"c{t}", "10.88.1.2/24"), (client_router, f"r{t}c", "10.88.1.1/24")),
            ((client_router, f"r{t}p", "198.51.100.1/24"), (public, f"p{t}c", "198.51.100.3/24")),
            ((public, f"p{t}g", None), (gateway_router, f"g{t}p", "198.51.100.2/24")),
            ((gateway_router, f"g{t}g", "10.88.2.1/24"), (gateway, f"w{t}", "10.88.2.2/24")),
        ]
        for (ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b) in links:
            self._run(
                ["ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b,
                 "netns", ns_b]
            )  # fmt: skip
            for where, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
                if addr is not None:
                    self._in(where, ["ip", "addr", "add", addr, "dev", dev])
                self._in(where, ["ip", "link", "set", dev, "up"])
        # The public namespace is one segment: both of its links are bridged into it.
        self._in(ns["public"], ["ip", "link", "add", f"b{t}", "type", "bridge"])
        self._in(ns["public"], ["ip", "addr", "del", "198.51.100.3/24", "dev", f"p{t}c"])
        for dev in (f"p{t}c", f"p{t}g"):
            self._in(ns["public"], ["ip", "link", "set", dev, "master", f"b{t}"])
        self._in(ns["public"], ["ip", "addr", "add", "198.51.100.3/24", "dev", f"b{t}"])
        self._in(ns["public"], ["ip", "link", "set", f"b{t}", "up"])
        # The internet drops what it cannot route, silently. Without a default route a
        # packet from the public side to a private address behind a NAT (a relay trying a
        # peer's host candidate) fails at once with ENETUNREACH, and coturn ends the whole
        # allocation on that error: relay-to-relay then never connects, only in the lab.
        # So the default route leads into a veth pair whose far end takes nothing: the next
        # hop's address is pinned to a MAC no one has, so nothing waits for ARP either.
        public = ns["public"]
        self._in(public, ["ip", "link", "add", f"v{t}", "type", "veth", "peer", "name", f"x{t}"])
        self._in(public, ["ip", "addr", "add", "192.0.2.1/24", "dev", f"v{t}"])
        for dev in (f"v{t}", f"x{t}"):
            self._in(public, ["ip", "link", "set", dev, "up"])
        self._in(
            public,
            ["ip", "neigh", "add", "192.0.2.254", "lladdr", "02:00:00:00:00:fe", "dev", f"v{t}",
             "nud", "permanent"],
        )  # fmt: skip
        self._in(public, ["ip", "route", "add", "default", "via", "192.0.2.254"])
        self._in(ns["client"], ["ip", "route", "add", "default", "via", "10.88.1.1"])
        self._in(ns["gateway"], ["ip", "route", "add", "default", "via", "10.88.2.1"])
        for router, nat, private, via, public_dev in (
            ("client_router", self.client_nat, "10.88.1.0/24", "198.51.100.1", f"r{t}p"),
            ("gateway_router", self.gateway_nat, "10.88.2.0/24", "198.51.100.2", f"g{t}p"),
        ):
            where = ns[router]
            self._in(where, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
            # Between the two routers: each knows the other's private subnet only when it does
            # not hide it behind a NAT (then the addresses are routable, as with public ones).
            script = ["table ip lab {"]
            if nat != "none":
                script.append(
                    f"  chain post {{ type nat hook postrouting priority 100; "
                    f'oifname "{public_dev}" {_RULES[nat]}; }}'
                )
            if self.forward_tcp and router == "gateway_router" and nat != "none":
                ports = ", ".join(str(port) for port in self.forward_tcp)
                script.append(
                    f"  chain pre {{ type nat hook prerouting priority -100; "
                    f'iifname "{public_dev}" tcp dport {{ {ports} }} dnat to 10.88.2.2; }}'
                )
            if self.block_udp and router == "client_router":
                script.append(
                    "  chain forward { type filter hook forward priority 0; "
                    + "meta l4proto udp drop; }"
                )
            script.append("}")
            self._in(where, ["nft", "-f", "-"], stdin="\n".join(script) + "\n")
            if nat == "none":
                self._in(ns["public"], ["ip", "route", "add", private, "via", via])
        other = {"client_router": ("10.88.2.0/24", "198.51.100.2", self.gateway_nat),
                 "gateway_router": ("10.88.1.0/24", "198.51.100.1", self.client_nat)}  # fmt: skip
        for router, (subnet, via, nat) in other.items():
            if nat == "none":
                self._in(ns[router], ["ip", "route", "add", subnet, "via", via])

    # -- what runs in it ---------------------------------------------------------------------

    def start_turn(
        self, secret: str, directory: Path, *, tls: tuple[Path, Path] | None = None
    ) -> subprocess.Popen[Any]:
        """coturn (Debian's ``turnserver``) on the public side: STUN and TURN on UDP and TCP
        port 3478 of `public_addr` (and TURN over TLS on 5349 with ``tls``, a certificate and
        its key), TURN credentials by the REST API scheme from ``secret`` (``[webrtc]
        turn_secret``), realm ``airlane.lab``; its log in ``directory``."""
        addr = self.public_addr
        security = ["--no-tls"]
        if tls is not None:
            cert, key = tls
            security = ["--cert", str(cert), "--pkey", str(key), "--tls-listening-port", "5349"]
        return self.popen(
            "public",
            [
                "turnserver", "-n", "--listening-ip", addr, "--relay-ip", addr,
                "--listening-port", "3478", "--use-auth-secret", "--static-auth-secret", secret,
                "--realm", "airlane.lab", *security, "--no-dtls", "--no-cli", "--fingerprint",
                "--simple-log", "-c", "/dev/null", "--log-file", str(directory / "turn.log"),
                "--pidfile", str(directory / "turn.pid"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def start_gateway(
        self,
        config: Path,
        port: int,
        log: Path,
        *,
        log_level: str = "warning",
        ready_s: float = 20.0,
    ) -> str:
        """``airlane serve`` on the gateway's side (HTTP on ``port`` only, ``config`` its
        configuration, its stderr at ``log_level`` in ``log``, its working directory
        ``config``'s); its URL as the client reaches it, once it answers ``/healthz`` from the
        client's side."""
        stderr = open(log, "w")  # noqa: SIM115 (closed with the lab)
        self._files.append(stderr)
        server = self.popen(
            "gateway",
            [
                sys.executable, "-m", "airlane", "serve", "--host", self.gateway_addr,
                "--port", str(port), "--config", str(config), "--log-level", log_level,
                "--airc-port", "-1", "--grpc-port", "-1", "--http3-port", "-1",
                "--rsocket-port", "-1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=config.parent,
        )  # fmt: skip
        url = f"http://{self.gateway_url_host}:{port}"
        probe = f"import httpx; httpx.get({url + '/healthz'!r}, timeout=1).raise_for_status()"
        deadline = time.monotonic() + ready_s
        while self.run("client", [sys.executable, "-c", probe], capture_output=True).returncode:
            if server.poll() is not None:
                raise NetLabError(f"the gateway exited: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise NetLabError(f"the gateway never answered {url}/healthz")
            time.sleep(0.2)
        return url

    # -- running things ----------------------------------------------------------------------

    def command(self, side: NatSide, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed to run in the namespace ``side``."""
        return ["ip", "netns", "exec", self._ns[side], *argv]

    def popen(self, side: NatSide, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``side``; stopped when the lab closes."""
        proc: subprocess.Popen[Any] = subprocess.Popen(self.command(side, argv), **kw)
        self._procs.append(proc)
        return proc

    def run(
        self, side: NatSide, argv: Sequence[str], **kw: Any
    ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to completion in ``side`` (timeout 120 s unless given)."""
        kw.setdefault("timeout", 120.0)
        return subprocess.run(self.command(side, argv), check=False, **kw)

    def close(self) -> None:
        """Stop the processes and remove the namespaces (their devices go with them)."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(3)
        for file in self._files:
            file.close()
        for ns in self._created:
            with contextlib.suppress(NetLabError):
                self._run(["ip", "netns", "del", ns])
        self._created.clear()

    def _in(self, ns: str, argv: Sequence[str], stdin: str | None = None) -> None:
        self._run(["ip", "netns", "exec", ns, *argv], stdin)

    @staticmethod
    def _run(argv: Sequence[str], stdin: str | None = None) -> None:
        try:
            done = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NetLabError(f"{' '.join(argv)} timed out") from exc
        if done.returncode != 0:
            raise NetLabError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
