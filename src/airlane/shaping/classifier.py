"""Attaching the lane classifier to an interface, and taking it off again (root only).

``attach`` does, on one interface (in a network namespace if given):

1. compiles the classifier if needed (`airlane.shaping.build`) and mounts a BPF filesystem at
   ``[lanes] bpf_dir`` (``/run/airlane/bpf``) if none is there; tc pins the program's maps
   under it (``tc/globals``), where the gateway opens them (`airlane.runtime.lane_flows`);
2. with ``rate``: replaces the interface's default root qdisc with HTB, one class per lane
   under the rate: control (prio 0, a tenth of the rate guaranteed), interactive (prio 1,
   three tenths) and bulk (prio 2, the rest, and the default class), each allowed up to the
   whole rate; control and interactive queue in short FIFOs, bulk in FQ-CoDel where the kernel
   has it (else a FIFO). The classifier then sets each packet's priority to its class id.
   Without ``rate`` the root qdisc is left alone and the classifier sets the lane's
   ``SO_PRIORITY`` value, which ``pfifo_fast`` and ``prio`` turn into bands;
3. adds the ``clsact`` qdisc (unless there is one) and the classifier on its egress and
   ingress hooks, in direct-action mode;
4. fills the DSCP and priority maps from ``[lanes]`` and records what it changed in a state
   file beside the BPF directory, so that ``detach`` undoes exactly that and leaves the
   interface as it was.

A root qdisc someone configured (anything but the kernel's defaults) is not replaced: the
classifier is attached without ``rate`` instead only if asked so. Each failure is one
`ShapingError` line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airlane.runtime.bpf_maps import PinnedMap
from airlane.runtime.lane_flows import MAPS_SUBDIR
from airlane.runtime.socket_lanes import LanesConfig
from airlane.shaping.build import build_object
from airlane.shaping.errors import ShapingError

__all__ = [
    "DEFAULT_QDISCS",
    "FILTER_PREF",
    "MAP_NAMES",
    "Attachment",
    "attach",
    "attachments",
    "detach",
    "parse_rate",
]

FILTER_PREF = 49_152
"""The preference (priority) of the classifier's tc filters: how ``detach`` finds them."""
DEFAULT_QDISCS = frozenset({"noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo"})
"""Root qdiscs the kernel sets up by itself: ``attach --rate`` may replace one of these."""
MAP_NAMES = ("airlane_flows", "airlane_dscp", "airlane_priority", "airlane_counters")
_HTB_MAJOR = 1
_LANE_MINORS = (0x10, 0x20, 0x30)
_LANE_SHARES = (1, 3, 6)  # tenths of the rate each lane is guaranteed
_CAP_NET_ADMIN, _CAP_SYS_ADMIN, _CAP_BPF = 12, 21, 39
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


@dataclass(frozen=True)
class Attachment:
    """What ``attach`` changed on one interface (its state file's content)."""

    dev: str
    netns: str | None
    created_clsact: bool
    rate_bit: int | None
    """The HTB rate installed as the root qdisc; None: the root qdisc was left alone."""
    bulk_qdisc: str | None
    """The bulk lane's queue (``fq_codel`` or ``pfifo``), with a rate."""
    object_path: str

    @property
    def name(self) -> str:
        """``dev`` or ``netns/dev``."""
        return f"{self.netns}/{self.dev}" if self.netns else self.dev


def parse_rate(text: str) -> int:
    """``20mbit`` (tc's units: bit, kbit, mbit, gbit) in bits per second."""
    match = _RATE.match(text.strip().lower())
    if match is None:
        raise ShapingError(f"a rate is a number and bit, kbit, mbit or gbit (20mbit), not {text!r}")
    bits = int(float(match.group(1)) * _RATE_UNITS[match.group(2)])
    if bits < 100_000:
        raise ShapingError(f"a rate below 100kbit cannot carry the lanes: {text!r}")
    return bits


def attach(
    dev: str,
    *,
    netns: str | None = None,
    rate: str | None = None,
    config: LanesConfig | None = None,
    cache_dir: Path | None = None,
) -> Attachment:
    """Attach the classifier to ``dev`` (see the module docstring)."""
    config = config or LanesConfig()
    _check_privileges()
    tc = _Tc(dev, netns, Path(config.bpf_dir))
    state = _state_path(config, dev, netns)
    if state.exists():
        raise ShapingError(f"the classifier is already attached to {tc.name}; detach it first")
    tc.check_device()
    rate_bit = parse_rate(rate) if rate is not None else None
    if rate_bit is not None:
        root = tc.root_qdisc()
        if root not in DEFAULT_QDISCS:
            raise ShapingError(
                f"{tc.name} has a root qdisc of its own ({root}); airlane shaping does not "
                "replace it: remove it, or attach without --rate"
            )
    obj = build_object(cache_dir)
    bpf_dir = Path(config.bpf_dir)
    if _mount_bpffs(bpf_dir):
        _state_dir(config).mkdir(parents=True, exist_ok=True)
        _mounted_marker(config).touch()  # the last detach unmounts it again
    if not _attached_anywhere(config):
        _unpin_maps(bpf_dir)  # left by an older build, whose layout may differ
    created_clsact = not tc.has_clsact()
    bulk_qdisc = None
    record = Attachment(dev, netns, created_clsact, rate_bit, bulk_qdisc, str(obj))
    try:
        if rate_bit is not None:
            bulk_qdisc = tc.install_htb(rate_bit)
        if created_clsact:
            tc.run("qdisc", "add", "dev", dev, "clsact")
        for hook in ("egress", "ingress"):
            tc.run(
                "filter", "add", "dev", dev, hook, "pref", str(FILTER_PREF), "bpf", "da",
                "obj", str(obj), "sec", f"tc/{hook}",
            )  # fmt: skip
        record = Attachment(dev, netns, created_clsact, rate_bit, bulk_qdisc, str(obj))
        _fill_maps(bpf_dir, config, htb=rate_bit is not None)
    except (ShapingError, OSError) as exc:
        _undo(tc, record, quiet=True)
        if isinstance(exc, OSError):
            raise ShapingError(f"the classifier's maps could not be filled: {exc}") from exc
        raise
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(asdict(record)))
    return record


def detach(dev: str, *, netns: str | None = None, config: LanesConfig | None = None) -> Attachment:
    """Take the classifier (and the qdiscs ``attach`` added) off ``dev``."""
    config = config or LanesConfig()
    _check_privileges()
    state = _state_path(config, dev, netns)
    try:
        record = Attachment(**json.loads(state.read_text()))
    except FileNotFoundError:
        name = f"{netns}/{dev}" if netns else dev
        raise ShapingError(f"airlane shaping is not attached to {name}") from None
    _undo(_Tc(dev, netns, Path(config.bpf_dir)), record, quiet=False)
    state.unlink()
    if not _attached_anywhere(config):
        _unpin_maps(Path(config.bpf_dir))
        if _mounted_marker(config).exists():
            subprocess.run(["umount", config.bpf_dir], capture_output=True, check=False)
            _mounted_marker(config).unlink()
    return record


def attachments(config: LanesConfig | None = None) -> list[Attachment]:
    """Where the classifier is attached (by this host's state files)."""
    config = config or LanesConfig()
    folder = _state_dir(config)
    if not folder.is_dir():
        return []
    return [Attachment(**json.loads(path.read_text())) for path in sorted(folder.glob("*.json"))]


# -- the pieces --------------------------------------------------------------------------------


class _Tc:
    """tc (and ip) on one interface, in its namespace; maps pinned under ``bpf_dir``."""

    def __init__(self, dev: str, netns: str | None, bpf_dir: Path) -> None:
        self.dev, self.netns = dev, netns
        self.name = f"{netns}/{dev}" if netns else dev
        # tc's BPF loader pins maps under $TC_BPF_MNT/tc/globals. nsenter switches only the
        # network namespace: `ip netns exec` would remount /sys and hide a bpffs under it.
        self._env = {**os.environ, "TC_BPF_MNT": str(bpf_dir)}
        self._prefix = ["nsenter", f"--net=/run/netns/{netns}"] if netns else []
        if shutil.which("tc") is None:
            raise ShapingError("tc (iproute2) is not installed")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self._prefix, "tc", *args],
            capture_output=True,
            text=True,
            env=self._env,
            check=False,
        )
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise ShapingError(f"tc {' '.join(args)} failed on {self.name}: {detail[-1:]}")
        return done

    def check_device(self) -> None:
        done = subprocess.run(
            [*self._prefix, "ip", "link", "show", "dev", self.dev],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ShapingError(f"no interface {self.name}")

    def qdiscs(self) -> list[dict[str, Any]]:
        done = self.run("-j", "qdisc", "show", "dev", self.dev)
        found: list[dict[str, Any]] = json.loads(done.stdout or "[]")
        return found

    def root_qdisc(self) -> str:
        return next((str(q["kind"]) for q in self.qdiscs() if q.get("root")), "noqueue")

    def has_clsact(self) -> bool:
        return any(q.get("kind") == "clsact" for q in self.qdiscs())

    def install_htb(self, rate_bit: int) -> str:
        """HTB with a class per lane; the bulk lane's queue kind."""
        dev = self.dev
        self.run("qdisc", "replace", "dev", dev, "root", "handle", f"{_HTB_MAJOR}:", "htb",
                 "default", f"{_LANE_MINORS[2]:x}")  # fmt: skip
        whole = f"{rate_bit}bit"
        self.run("class", "add", "dev", dev, "parent", f"{_HTB_MAJOR}:", "classid",
                 f"{_HTB_MAJOR}:1", "htb", "rate", whole, "ceil", whole)  # fmt: skip
        bulk = "pfifo"
        for index, (minor, share) in enumerate(zip(_LANE_MINORS, _LANE_SHARES, strict=True)):
            self.run(
                "class", "add", "dev", dev, "parent", f"{_HTB_MAJOR}:1",
                "classid", f"{_HTB_MAJOR}:{minor:x}", "htb",
                "rate", f"{rate_bit * share // 10}bit", "ceil", f"{rate_bit}bit",
                "prio", str(index), "quantum", "1514",
            )  # fmt: skip
            leaf = ["parent", f"{_HTB_MAJOR}:{minor:x}", "handle", f"{minor:x}:"]
            if index == 2 and self.run("qdisc", "add", "dev", dev, *leaf, "fq_codel",
                                       check=False).returncode == 0:  # fmt: skip
                bulk = "fq_codel"
                continue
            limit = "1000" if index == 2 else "100"
            self.run("qdisc", "add", "dev", dev, *leaf, "pfifo", "limit", limit)
        return bulk


def _undo(tc: _Tc, record: Attachment, *, quiet: bool) -> None:
    """Remove what ``record`` says ``attach`` added (as much as is there)."""
    dev = record.dev
    steps: list[tuple[str, ...]] = []
    if record.created_clsact:
        steps.append(("qdisc", "del", "dev", dev, "clsact"))
    else:
        steps += [("filter", "del", "dev", dev, hook, "pref", str(FILTER_PREF))
                  for hook in ("egress", "ingress")]  # fmt: skip
    if record.rate_bit is not None:
        steps.append(("qdisc", "del", "dev", dev, "root"))  # the kernel's default comes back
    failures = []
    for step in steps:
        done = tc.run(*step, check=False)
        if done.returncode != 0:
            failures.append(f"tc {' '.join(step)}: {done.stderr.strip()}")
    if failures and not quiet:
        raise ShapingError(f"detaching from {tc.name} left something behind: {failures[0]}")


def _check_privileges() -> None:
    effective = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
    except OSError:
        pass
    net_admin = bool(effective >> _CAP_NET_ADMIN & 1)
    bpf = bool(effective >> _CAP_BPF & 1) or bool(effective >> _CAP_SYS_ADMIN & 1)
    if not (net_admin and bpf):
        raise ShapingError(
            "airlane shaping needs root (CAP_NET_ADMIN and CAP_BPF); without it the "
            "connections' own marks (DSCP, SO_PRIORITY) still sort the lanes"
        )


def _mount_bpffs(path: Path) -> bool:
    """A BPF filesystem at ``path``; True if it was mounted now."""
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 2 and fields[1] == str(path) and fields[2] == "bpf":
                return False
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "bpf", "bpf", str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ShapingError(f"cannot mount a BPF filesystem at {path}: {done.stderr.strip()}")
    return True


def _fill_maps(bpf_dir: Path, config: LanesConfig, *, htb: bool) -> None:
    pinned = bpf_dir / MAPS_SUBDIR
    with PinnedMap(pinned / "airlane_dscp", 4) as dscp:
        for dscp_value in range(64):
            dscp.update(struct.pack("<I", dscp_value), struct.pack("<I", 0))
        for lane, value in enumerate(
            (config.control_dscp, config.interactive_dscp, config.bulk_dscp)
        ):
            dscp.update(struct.pack("<I", value), struct.pack("<I", lane + 1))
    with PinnedMap(pinned / "airlane_priority", 4) as priority:
        for lane in range(3):
            if htb:  # the HTB class of the lane: major:minor
                value = _HTB_MAJOR << 16 | _LANE_MINORS[lane]
            else:
                value = (config.control_priority, config.interactive_priority,
                         config.bulk_priority)[lane]  # fmt: skip
            priority.update(struct.pack("<I", lane), struct.pack("<I", value))


def _unpin_maps(bpf_dir: Path) -> None:
    for name in MAP_NAMES:
        (bpf_dir / MAPS_SUBDIR / name).unlink(missing_ok=True)


def _state_dir(config: LanesConfig) -> Path:
    return Path(config.bpf_dir).parent / "shaping"


def _mounted_marker(config: LanesConfig) -> Path:
    return _state_dir(config) / "mounted-bpffs"


def _state_path(config: LanesConfig, dev: str, netns: str | None) -> Path:
    return _state_dir(config) / f"{netns or '-'}@{dev}.json"


def _attached_anywhere(config: LanesConfig) -> bool:
    return bool(attachments(config))
