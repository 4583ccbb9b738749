"""`QuicProtocol`: aioquic's asyncio protocol, sending by a clock that does not stand still.

aioquic's `QuicConnectionProtocol.transmit` builds packets at ``loop.time()``. Under uvloop that
clock moves in whole milliseconds, once per loop turn. A pacer that opens 30 us from now sets a
timer 30 us ahead; the loop rounds the delay down to a millisecond and fires it at once; the
packets are built at the same ``loop.time()``, the pacer is still closed by that clock, nothing
is sent and the timer is set again, turn after turn until the millisecond changes. Measured on
a 50 MB HTTP/3 download from the gateway: 268,000 such empty turns, most of its CPU (4.3 s of
CPU for 50 MB on loopback; 1.3 s with this class).

So `transmit` here reads `time.monotonic()`, the clock both asyncio's and uvloop's
``loop.time`` are read from (uvloop truncated to milliseconds), so that the timer it arms stays
on the loop's scale; receiving should pass the same clock (`now`). Subclasses wrap the sending
in `sending` (the gateway's connections send in segmented runs there).
"""

from __future__ import annotations

import contextlib
import time

from aioquic.asyncio.protocol import QuicConnectionProtocol

__all__ = ["QuicProtocol", "now"]

now = time.monotonic
"""The clock packets are built and received by (see the module docstring)."""


class QuicProtocol(QuicConnectionProtocol):
    """aioquic's protocol with `transmit` on a precise clock (see the module docstring)."""

    def sending(self) -> contextlib.AbstractContextManager[object]:
        """What the datagrams of one `transmit` are sent inside (nothing by default)."""
        return contextlib.nullcontext()

    def transmit(self) -> None:
        """Send what the connection has to send now and arm its timer: aioquic's, built at
        `now` rather than at the loop's millisecond clock."""
        # aioquic's own attributes: this replaces its method (aioquic is pinned below 2).
        self._transmit_task = None
        quic, transport = self._quic, self._transport
        assert transport is not None  # connection_made came first
        with self.sending():
            for data, addr in quic.datagrams_to_send(now=now()):
                transport.sendto(data, addr)
        timer_at = quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None:
            self._timer = self._loop.call_at(timer_at, self._handle_timer)
        self._timer_at = timer_at
