"""AIRC micro-benchmark: frame encode / decode cost, a connection end to end, and memory.

Measured in this one process, no sockets (all of it is sans-I/O):

- ``encode_frame`` and ``FrameDecoder.feed`` (one buffer of many frames) with 64 B, 1.2 KB
  and 64 KB payloads: ns per frame and frames per second;
- two `AircConnection` objects joined in memory: per 1.2 KB message, ``send_message`` ->
  ``data_to_send`` -> the peer's ``receive_data``, with the peer's ACKs carried back;
- memory per connection (tracemalloc): an idle one, and one holding a full send window of
  64 unacknowledged 1.2 KB frames plus a reorder buffer of 63 frames held behind a gap.

Each timing is the median of several runs (``--repeat``), each run a bounded loop.

    .venv/bin/python benchmarks/airc_codec.py                 # ~20 s
    .venv/bin/python benchmarks/airc_codec.py --quick         # < 3 s, a smoke test
    .venv/bin/python benchmarks/airc_codec.py --json out.json # also write the results
    .venv/bin/python benchmarks/airc_codec.py --json -        # JSON on stdout, no table
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection
from airlane.wire.airc.frame import Flags, Frame, FrameDecoder, encode_frame

PAYLOADS = {"64 B": 64, "1.2 KB": 1200, "64 KB": 65535}
MESSAGE_SIZE = 1200
WINDOW = 64  # AircConfig's default send_window and reorder_window
FULL_BUDGET = 8 << 20  # payload bytes per timed run (~10-50 ms each, whatever the size)
QUICK_BUDGET = 256 << 10


def median_ns_per_op(run: Callable[[], int], repeat: int) -> float:
    """Run ``run`` (which returns how many operations it did) ``repeat`` times; the median
    of the nanoseconds per operation."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter_ns()
        count = run()
        samples.append((time.perf_counter_ns() - started) / count)
    return statistics.median(samples)


def frame_count(size: int, budget: int) -> int:
    return max(16, min(20_000, budget // size))


def bench_encode(size: int, budget: int, repeat: int) -> float:
    frames = [Frame(1, i, i, bytes(size), Flags.EOM) for i in range(frame_count(size, budget))]

    def run() -> int:
        for frame in frames:
            encode_frame(frame)
        return len(frames)

    return median_ns_per_op(run, repeat)


def bench_decode(size: int, budget: int, repeat: int) -> float:
    count = frame_count(size, budget)
    buffer = b"".join(encode_frame(Frame(1, i, i, bytes(size), Flags.EOM)) for i in range(count))

    def run() -> int:
        frames = FrameDecoder().feed(buffer)
        assert len(frames) == count
        return count

    return median_ns_per_op(run, repeat)


def bench_connection(messages: int, repeat: int) -> float:
    """ns per 1.2 KB message through a connected pair, ACKs included."""
    data = bytes(MESSAGE_SIZE)

    def run() -> int:
        a, b = AircConnection(now=0.0), AircConnection(now=0.0)
        received = 0
        for i in range(messages):
            now = i * 1e-4
            a.send_message(1, data)
            received += len(b.receive_data(a.data_to_send(now), now))
            a.receive_data(b.data_to_send(now), now)  # an ACK every ack_every frames
        assert received == messages and a.closed is None
        return messages

    return median_ns_per_op(run, repeat)


def traced_bytes(build: Callable[[], object]) -> int:
    """Bytes still allocated by ``build`` while its result is alive (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return after - before


def idle_connection() -> AircConnection:
    return AircConnection(now=0.0)


def busy_connection(window: int = WINDOW) -> AircConnection:
    """A full send window in flight, and a reorder buffer of ``window - 1`` frames behind a
    gap."""
    config = AircConfig(send_window=window, reorder_window=window)
    conn = AircConnection(config, now=0.0)
    for _ in range(window):
        conn.send_message(1, bytes(MESSAGE_SIZE))
    conn.data_to_send(0.0)
    assert conn.unacknowledged(1) == window
    peer = AircConnection(config, now=0.0)
    for _ in range(window):
        peer.send_message(2, bytes(MESSAGE_SIZE))
    frames = peer.data_to_send(0.0)
    conn.receive_data(frames[len(frames) // window :], 0.0)  # all but the first frame
    conn.data_to_send(0.0)  # its ACK
    return conn


SMALL_WINDOW = 2
"""An embedded-sized window, for comparison with the seed's 3.2 KB "double buffer +
pending-ACK queue": two frames in flight, one held."""


def run_all(*, quick: bool, repeat: int) -> dict[str, Any]:
    budget = QUICK_BUDGET if quick else FULL_BUDGET
    codec = {}
    for label, size in PAYLOADS.items():
        encode_ns = bench_encode(size, budget, repeat)
        decode_ns = bench_decode(size, budget, repeat)
        codec[label] = {
            "payload_bytes": size,
            "encode_ns_per_frame": round(encode_ns),
            "encode_frames_per_s": round(1e9 / encode_ns),
            "decode_ns_per_frame": round(decode_ns),
            "decode_frames_per_s": round(1e9 / decode_ns),
        }
    connection_ns = bench_connection(200 if quick else 5000, repeat)
    return {
        "quick": quick,
        "repeat": repeat,
        "python": sys.version.split()[0],
        "codec": codec,
        "connection": {
            "message_bytes": MESSAGE_SIZE,
            "ns_per_message": round(connection_ns),
            "messages_per_s": round(1e9 / connection_ns),
        },
        "memory": {
            "idle_connection_bytes": traced_bytes(idle_connection),
            "busy_connection_bytes": traced_bytes(busy_connection),
            "busy_in_flight_frames": WINDOW,
            "busy_held_frames": WINDOW - 1,
            "busy_frame_payload_bytes": MESSAGE_SIZE,
            "small_window": SMALL_WINDOW,
            "small_window_connection_bytes": traced_bytes(lambda: busy_connection(SMALL_WINDOW)),
        },
        "config": {"send_window": AircConfig().send_window},
    }


def print_table(results: dict[str, Any]) -> None:
    print(f"AIRC codec, Python {results['python']}, median of {results['repeat']} runs")
    print(f"{'payload':>8} {'encode ns':>10} {'encode/s':>11} {'decode ns':>10} {'decode/s':>11}")
    for label, row in results["codec"].items():
        print(
            f"{label:>8} {row['encode_ns_per_frame']:>10,} {row['encode_frames_per_s']:>11,} "
            f"{row['decode_ns_per_frame']:>10,} {row['decode_frames_per_s']:>11,}"
        )
    conn = results["connection"]
    print(
        f"connection end to end, {conn['message_bytes']} B messages: "
        f"{conn['ns_per_message']:,} ns/message, {conn['messages_per_s']:,} messages/s"
    )
    memory = results["memory"]
    print(
        f"memory per connection: idle {memory['idle_connection_bytes'] / 1024:.1f} KiB; "
        f"{memory['busy_in_flight_frames']} frames in flight + {memory['busy_held_frames']} "
        f"held (1.2 KB each) {memory['busy_connection_bytes'] / 1024:.1f} KiB; "
        f"window {memory['small_window']} ({memory['small_window']} in flight + "
        f"{memory['small_window'] - 1} held) "
        f"{memory['small_window_connection_bytes'] / 1024:.1f} KiB"
    )


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small loops: a smoke test, < 3 s")
    parser.add_argument("--repeat", type=int, default=None, help="runs per timing (median)")
    parser.add_argument(
        "--json", type=Path, default=None, help="write the results here ('-': stdout only)"
    )
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 7)
    results = run_all(quick=args.quick, repeat=repeat)
    document = json.dumps(results, indent=2)
    if args.json is not None and str(args.json) == "-":
        print(document)
        return
    print_table(results)
    if args.json is not None:
        args.json.write_text(document + "\n")
        print(f"results written to {args.json}")


if __name__ == "__main__":
    main()
