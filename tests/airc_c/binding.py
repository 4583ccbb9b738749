"""The C AIRC library (clients/c/airc) built as a shared library and loaded with cffi, for
tests and benchmarks only: the same byte streams go to the C and the Python codec.

`build` compiles the library with a profile of limits (``-D`` macros); `CDecoder` and
`CConnection` wrap its decoder and connection through the flat shim interface
(clients/c/airc/tests/airc_shim.c), whose byte log `parse_log` reads back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

ROOT = Path(__file__).resolve().parents[2] / "clients" / "c" / "airc"
SOURCES = [
    ROOT / "src" / "airc_frame.c",
    ROOT / "src" / "airc_signal.c",
    ROOT / "src" / "airc_conn.c",
    ROOT / "tests" / "airc_shim.c",
]
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
"""What the library must compile cleanly under (the issue's flags, plus pedantic C99)."""
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]

FUZZ_PROFILE: dict[str, int] = {
    "AIRC_MAX_STREAMS": 4,
    "AIRC_RX_PAYLOAD": 300,
    "AIRC_TX_PAYLOAD": 64,
    "AIRC_MAX_MESSAGE": 1000,
    "AIRC_SEND_WINDOW": 4,
    "AIRC_REORDER_WINDOW": 4,
    "AIRC_MAX_RECEIVE_BUFFER": 1500,
    "AIRC_ACK_EVERY": 3,
}
"""Small limits (fuzz/airc_decoder.py's AircConfig), so that short inputs reach each one."""

DEVICE_PROFILE: dict[str, int] = {}
"""airc_config.h's defaults: the microcontroller profile docs/airc-c.md measures."""

_CDEF = """
size_t shim_conn_size(void);
size_t shim_decoder_size(void);
uint32_t shim_limit(int which);
int shim_decode(void *d, const uint8_t *data, size_t len, uint8_t *out, size_t cap,
                size_t *out_len, int *overflow, uint32_t *buffered);
size_t shim_receive(void *c, const uint8_t *data, size_t len, uint32_t now, uint8_t *out,
                    size_t cap, int *overflow);
size_t shim_handle_timer(void *c, uint32_t now, uint8_t *out, size_t cap, int *overflow);
void shim_stats(const void *c, uint32_t out[9]);
uint16_t airc_crc16(const uint8_t *data, size_t len, uint16_t crc);
void airc_decoder_init(void *d, uint16_t max_payload);
void airc_conn_init(void *c, uint32_t now);
int airc_send(void *c, uint16_t stream_id, const uint8_t *data, size_t len, int priority,
              uint32_t now);
int airc_request_clock(void *c, uint32_t now);
void airc_close(void *c, int code, const char *reason, size_t reason_len);
size_t airc_output(void *c, uint32_t now, uint8_t *out, size_t cap);
int airc_next_timer(const void *c, uint32_t *deadline);
int airc_signal_check(const uint8_t *payload, size_t len);
"""

E_WOULD_BLOCK, E_INVALID, E_CLOSED = -1, -2, -3
EVENT_KINDS = {1: "message", 2: "signal", 3: "gap", 4: "ack", 5: "clock", 6: "closed"}


def compiler() -> str:
    """The C compiler the tests use (``CC``, else gcc)."""
    return os.environ.get("CC", "gcc")


def build(
    out_dir: Path,
    profile: Mapping[str, int] = FUZZ_PROFILE,
    *,
    sanitize: bool = False,
    optimize: str = "-O2",
) -> Path:
    """Compile the library and the shim into a shared library under ``out_dir`` (reused
    when the sources and flags are unchanged) and return its path."""
    flags = [*STRICT, optimize, "-g", "-fPIC", "-shared", f"-I{ROOT / 'include'}"]
    flags += [f"-D{name}={value}" for name, value in sorted(profile.items())]
    if sanitize:
        flags += SANITIZE
    digest = hashlib.sha256(" ".join(flags).encode())
    for source in SOURCES:
        digest.update(source.read_bytes())
    for header in sorted((ROOT / "include").glob("*.h")):
        digest.update(header.read_bytes())
    target = out_dir / f"libairc-{digest.hexdigest()[:16]}.so"
    if not target.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        command = [compiler(), *flags, *map(str, SOURCES), "-o", str(partial)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        shutil.move(partial, target)
    return target


class Library:
    """One loaded build of the library."""

    def __init__(self, path: Path) -> None:
        self.ffi = cffi.FFI()
        self.ffi.cdef(_CDEF)
        self.lib: Any = self.ffi.dlopen(str(path))
        names = ["max_streams", "rx_payload", "tx_payload", "max_message", "send_window"]
        names += ["reorder_window", "max_receive_buffer", "ack_every"]
        self.limits = {name: int(self.lib.shim_limit(i)) for i, name in enumerate(names)}


class CDecoder:
    """`airlane.wire.airc.frame.FrameDecoder`'s counterpart."""

    def __init__(self, library: Library, max_payload: int) -> None:
        self._library = library
        self._ffi = library.ffi
        self._state = self._ffi.new("uint8_t[]", int(library.lib.shim_decoder_size()))
        library.lib.airc_decoder_init(self._state, max_payload)

    def decode(self, data: bytes) -> tuple[list[tuple[int, int, int, bytes, int]], int, int]:
        """The frames ``data`` completes (as ``(stream, seq, timestamp, payload, flags)``),
        the error code that stopped the decoder (0: none) and the bytes it holds."""
        ffi, cap = self._ffi, 4 * len(data) + 0x10000 + 64  # + a frame held before
        out = ffi.new("uint8_t[]", cap)
        out_len, overflow, buffered = ffi.new("size_t *"), ffi.new("int *"), ffi.new("uint32_t *")
        error = self._library.lib.shim_decode(
            self._state, data, len(data), out, cap, out_len, overflow, buffered
        )
        assert not overflow[0]
        records = parse_log(bytes(ffi.buffer(out, out_len[0])))
        return [record[1:] for record in records], int(error), int(buffered[0])


class CConnection:
    """`airlane.wire.airc.connection.AircConnection`'s counterpart; time is integer
    microseconds (a wrapping u32), as on a device."""

    def __init__(self, library: Library, now_us: int) -> None:
        self._library = library
        self._ffi = library.ffi
        self._lib = library.lib
        self._state = self._ffi.new("uint8_t[]", int(self._lib.shim_conn_size()))
        self._lib.airc_conn_init(self._state, now_us & 0xFFFFFFFF)

    def receive(self, data: bytes, now_us: int) -> list[tuple[Any, ...]]:
        """Feed bytes from the peer; the events, as `normalize_event` tuples."""
        return self._events(
            lambda out, cap, flag: self._lib.shim_receive(
                self._state, data, len(data), now_us & 0xFFFFFFFF, out, cap, flag
            ),
            4 * len(data) + 0x20000,
        )

    def handle_timer(self, now_us: int) -> list[tuple[Any, ...]]:
        """Run what is due; the events."""
        return self._events(
            lambda out, cap, flag: self._lib.shim_handle_timer(
                self._state, now_us & 0xFFFFFFFF, out, cap, flag
            ),
            4096,
        )

    def _events(self, call: Any, cap: int) -> list[tuple[Any, ...]]:
        ffi = self._ffi
        out, overflow = ffi.new("uint8_t[]", cap), ffi.new("int *")
        size = call(out, cap, overflow)
        assert not overflow[0], "event log overflow"
        return parse_log(bytes(ffi.buffer(out, size)))

    def send(self, stream_id: int, data: bytes, now_us: int, *, priority: bool = False) -> int:
        """`airc_send`: 0, or a negative ``E_*`` code."""
        return int(
            self._lib.airc_send(
                self._state, stream_id, data, len(data), int(priority), now_us & 0xFFFFFFFF
            )
        )

    def request_clock(self, now_us: int) -> int:
        """`airc_request_clock`."""
        return int(self._lib.airc_request_clock(self._state, now_us & 0xFFFFFFFF))

    def close(self, code: int, reason: bytes = b"") -> None:
        """`airc_close`."""
        self._lib.airc_close(self._state, code, reason, len(reason))

    def output(self, now_us: int, cap: int = 1 << 16) -> bytes:
        """Everything `airc_output` has to send now."""
        ffi, chunks = self._ffi, []
        buf = ffi.new("uint8_t[]", cap)
        while size := self._lib.airc_output(self._state, now_us & 0xFFFFFFFF, buf, cap):
            chunks.append(bytes(ffi.buffer(buf, size)))
        return b"".join(chunks)

    def next_timer(self) -> int | None:
        """`airc_next_timer`: the deadline in microseconds, or None."""
        deadline = self._ffi.new("uint32_t *")
        return int(deadline[0]) if self._lib.airc_next_timer(self._state, deadline) else None

    def stats(self) -> Stats:
        """The counters, and the decoder's held bytes."""
        values = self._ffi.new("uint32_t[9]")
        self._lib.shim_stats(self._state, values)
        return Stats(*[int(value) for value in values])


@dataclass(frozen=True)
class Stats:
    """`airlane.wire.airc.connection.ConnectionStats`, plus the decoder's held bytes."""

    frames_sent: int
    frames_received: int
    messages_sent: int
    messages_received: int
    retransmits: int
    duplicates: int
    gaps: int
    beyond_window: int
    buffered: int


_FRAME = struct.Struct(">HIIBH")
_EVENT = struct.Struct(">BHIBIIiiHBI")


def parse_log(log: bytes) -> list[tuple[Any, ...]]:
    """The shim's byte log as tuples: ``("frame", stream, seq, timestamp, payload, flags)``
    and events as `normalize_event` makes them from Python's."""
    records: list[tuple[Any, ...]] = []
    at = 0
    while at < len(log):
        tag, at = log[at : at + 1], at + 1
        if tag == b"F":
            stream, seq, timestamp, flags, length = _FRAME.unpack_from(log, at)
            at += _FRAME.size
            records.append(("frame", stream, seq, timestamp, log[at : at + length], flags))
            at += length
            continue
        assert tag == b"E", tag
        fields = _EVENT.unpack_from(log, at)
        at += _EVENT.size
        kind, stream, timestamp, priority, expected, seq, offset2, delay, code, by_peer, n = fields
        data = log[at : at + n]
        at += n
        name = EVENT_KINDS[kind]
        if name == "message":
            records.append((name, stream, data, timestamp, bool(priority)))
        elif name == "signal":
            records.append((name, data, timestamp))
        elif name == "gap":
            records.append((name, stream, expected, seq))
        elif name == "ack":
            records.append((name, stream, seq))
        elif name == "clock":
            records.append((name, offset2, delay))
        else:
            records.append((name, code, bool(by_peer)))
    return records
