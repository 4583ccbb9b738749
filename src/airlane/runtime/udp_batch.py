"""Read a UDP socket in batches: every datagram waiting, in one loop turn.

asyncio's datagram transport reads one datagram per readiness callback, so a QUIC endpoint
receiving a burst runs a whole loop turn, and aioquic's send path (``datagrams_to_send``,
which builds the acknowledgements), once per datagram: measured on a 20 MB HTTP/3 download,
the client built packets 14,800 times to send 2,600. Read in batches, each turn takes all that
waits (up to ``limit``) and the endpoint sends once for the lot.

`read_in_batches` replaces the transport's reader on asyncio's own (selector) loop; sending,
closing and everything else stay the transport's. uvloop (libuv) already reads every waiting
datagram in one poll and calls ``datagram_received`` for each within one loop turn, so there a
protocol that sends with ``call_soon`` (once per turn) gets the same batching, and this
function leaves the reader alone.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

__all__ = ["read_in_batches"]

Batch = list[tuple[bytes, Any]]
MAX_DATAGRAM = 65535


def read_in_batches(
    transport: asyncio.DatagramTransport,
    on_batch: Callable[[Batch], None],
    *,
    limit: int = 64,
) -> bool:
    """From now on, hand ``on_batch`` every datagram waiting on ``transport``'s socket, up to
    ``limit`` per loop turn, with its sender's address; False (nothing changed) on a loop
    that is not asyncio's selector loop."""
    loop = asyncio.get_running_loop()
    sock: socket.socket | None = getattr(transport, "_sock", None)  # the raw socket
    # The selector loop's own reader registration (the public one refuses a transport's fd).
    remove, add = getattr(loop, "_remove_reader", None), getattr(loop, "_add_reader", None)
    if sock is None or remove is None or add is None:
        return False
    fd = sock.fileno()

    def ready() -> None:
        batch: Batch = []
        for _ in range(limit):
            try:
                batch.append(sock.recvfrom(MAX_DATAGRAM))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # an ICMP error queued on the socket: nothing to read in it
                continue
        if batch:
            on_batch(batch)

    remove(fd)
    add(fd, ready)
    return True
