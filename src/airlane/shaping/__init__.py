"""``airlane shaping``: the kernel part of the lanes (root only, optional).

A BPF classifier (``lanes.bpf.c``, compiled with clang) on an interface's traffic-control hook
sorts packets into lanes by the socket they come from (the gateway feeds it the sockets whose
connections declared a lane) or by their DSCP, and sets each packet's priority so the qdisc
queues signalling ahead of bulk; `attach` can also install an HTB qdisc with a class per lane
under a rate. Per-lane counters go to ``/metrics``. docs/lanes.md has the whole story; without
root, or where anything here fails, the user-space lanes (`airlane.runtime.socket_lanes`) go on
working and the failure is one `ShapingError` line.
"""

from __future__ import annotations

from airlane.shaping.build import build_object
from airlane.shaping.classifier import Attachment, attach, attachments, detach, parse_rate
from airlane.shaping.errors import ShapingError

__all__ = [
    "Attachment",
    "ShapingError",
    "attach",
    "attachments",
    "build_object",
    "detach",
    "parse_rate",
]
