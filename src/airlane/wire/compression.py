"""Stream compression: choosing a method per client, and streaming (de)compressors.

Choosing. Compression trades CPU and latency for bytes, and the right trade depends on the
client (the tiered policy of the seed survey): inside the data centre bandwidth is cheap, so
nothing; a desktop browser gets Brotli at quality 3, which browsers decode natively; a mobile
client gets LZ4, the cheapest to decode on a phone (zstd added ~300 ms on some Android
devices). `negotiate` applies that default when the client's ``Accept-Encoding`` admits it
(RFC 9110 section 12.5.3) and otherwise falls back to what the client does accept.

Streaming. Every ``compress`` call returns output flushed to a block boundary, so the client
can decode each event the moment it arrives rather than when a compression block fills up;
``finish`` ends the compressed stream. Decompressors are fed the received bytes and bound
their output, so a small "decompression bomb" cannot expand into gigabytes of memory.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Protocol

import brotli
import lz4.frame
import zstandard

from airlane.wire.errors import DecodeError

__all__ = [
    "DEFAULTS",
    "DEFAULT_LEVELS",
    "DEFAULT_MAX_OUTPUT",
    "ClientClass",
    "Compression",
    "CompressionChoice",
    "Compressor",
    "Decompressor",
    "classify_client",
    "make_compressor",
    "make_decompressor",
    "negotiate",
    "parse_accept_encoding",
]


class Compression(enum.StrEnum):
    """A compression method; the value is its HTTP content-coding token."""

    NONE = "identity"
    LZ4 = "lz4"
    BROTLI = "br"
    ZSTD = "zstd"


class ClientClass(enum.StrEnum):
    """The kind of client, as far as compression is concerned."""

    INTRANET = "intranet"
    DESKTOP_BROWSER = "desktop_browser"
    MOBILE = "mobile"
    UNKNOWN = "unknown"


_LEVEL_RANGES: Final[Mapping[Compression, range]] = {
    Compression.LZ4: range(0, 17),  # lz4.frame: 0-2 fast mode, 3-16 high compression
    Compression.BROTLI: range(0, 12),  # RFC 7932 encoders: quality 0-11
    Compression.ZSTD: range(-(1 << 17), 23),  # negative levels trade ratio for speed
}


@dataclass(frozen=True, slots=True)
class CompressionChoice:
    """A method and its level; ``level=None`` means the method's `DEFAULT_LEVELS` entry."""

    method: Compression
    """The compression method."""
    level: int | None = None
    """The compression level, or ``None`` for the streaming default."""

    def __post_init__(self) -> None:
        if self.level is None:
            return
        levels = _LEVEL_RANGES.get(self.method)
        if levels is None or self.level not in levels:
            raise ValueError(f"level {self.level} is not valid for {self.method.name}")


DEFAULT_LEVELS: Final[Mapping[Compression, int | None]] = MappingProxyType(
    {
        Compression.NONE: None,
        # LZ4's fast mode: it compresses at several hundred MB/s per core.
        Compression.LZ4: 0,
        # Brotli's library default (11) is meant for static assets and is far too slow for a
        # live stream; 3 is the seed's measured choice for browsers.
        Compression.BROTLI: 3,
        # zstd's own default level.
        Compression.ZSTD: 3,
    }
)
"""Level used for each method when a choice leaves it open: tuned for live streams."""

DEFAULTS: Final[Mapping[ClientClass, CompressionChoice]] = MappingProxyType(
    {
        ClientClass.INTRANET: CompressionChoice(Compression.NONE),
        ClientClass.DESKTOP_BROWSER: CompressionChoice(Compression.BROTLI, 3),
        ClientClass.MOBILE: CompressionChoice(Compression.LZ4, 0),
        ClientClass.UNKNOWN: CompressionChoice(Compression.NONE),
    }
)
"""The compression each client class gets when its ``Accept-Encoding`` admits it."""

DEFAULT_MAX_OUTPUT = 16 << 20
"""Most bytes one `Decompressor.decompress` call may produce by default: 16 MiB, matching the
largest frame (`airlane.wire.framing.DEFAULT_MAX_FRAME`)."""

# When the client's class default is refused: our own order of preference, best ratio first.
_FALLBACK_ORDER = (Compression.ZSTD, Compression.BROTLI, Compression.LZ4)

_OVERRIDE_NAMES: Final[Mapping[str, Compression]] = {
    "none": Compression.NONE,
    "identity": Compression.NONE,
    "lz4": Compression.LZ4,
    "br": Compression.BROTLI,
    "brotli": Compression.BROTLI,
    "zstd": Compression.ZSTD,
}

# Loopback, RFC 1918 private, link-local and RFC 4193 unique local addresses. Spelled out
# rather than ``is_private``, which also covers documentation ranges and differs between
# Python versions.
_INTRANET_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)

_MOBILE_TOKENS = ("Mobile", "Android", "iPhone", "iPad")

# RFC 9110 section 12.4.2: qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


# -- choosing ------------------------------------------------------------------------------


def classify_client(user_agent: str | None, remote_addr: str | None) -> ClientClass:
    """Guess the client class from its ``User-Agent`` and network address.

    A loopback, private (RFC 1918, RFC 4193) or link-local address is `ClientClass.INTRANET`,
    whatever the agent. Pass the client's own address: behind a reverse proxy, the address
    the proxy forwards, or every client would look like the intranet. Otherwise a
    ``User-Agent`` mentioning Mobile, Android, iPhone or iPad is `ClientClass.MOBILE`; any
    other browser (every current one sends ``Mozilla/5.0 ...``) is
    `ClientClass.DESKTOP_BROWSER`; anything else is `ClientClass.UNKNOWN`.
    """
    if remote_addr and _is_local_address(remote_addr):
        return ClientClass.INTRANET
    if user_agent:
        if any(token in user_agent for token in _MOBILE_TOKENS):
            return ClientClass.MOBILE
        if user_agent.startswith("Mozilla/"):
            return ClientClass.DESKTOP_BROWSER
    return ClientClass.UNKNOWN


@functools.lru_cache(maxsize=4096)
def _is_local_address(remote_addr: str) -> bool:
    # Cached: parsing an address costs ~40 us and a gateway sees the same peers (its own
    # proxies, a load balancer, a benchmark client) over and over; the cache is bounded.
    host = remote_addr.strip()
    if host.startswith("["):  # "[::1]:8080"
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:  # "10.0.0.1:8080"
        host = host.partition(":")[0]
    host = host.partition("%")[0]  # an IPv6 zone: "fe80::1%eth0"
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in _INTRANET_NETWORKS)


def parse_accept_encoding(header: str) -> dict[str, float]:
    """Parse an ``Accept-Encoding`` value into ``{coding: qvalue}`` (RFC 9110 section 12.5.3).

    Codings are lower-cased (they are case-insensitive). An element with a malformed qvalue is
    skipped; a coding listed twice keeps its highest qvalue.
    """
    preferences: dict[str, float] = {}
    for element in header.split(","):
        coding, *parameters = element.split(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        quality: float | None = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                value = value.strip()
                quality = float(value) if _QVALUE.fullmatch(value) else None
        if quality is not None:
            preferences[coding] = max(quality, preferences.get(coding, 0.0))
    return preferences


def _quality(preferences: Mapping[str, float], method: Compression) -> float:
    # RFC 9110 section 12.5.3: "*" covers codings not listed by name, and identity is
    # acceptable unless refused by name or by "*;q=0".
    if method.value in preferences:
        return preferences[method.value]
    if "*" in preferences:
        return preferences["*"]
    return 1.0 if method is Compression.NONE else 0.0


def negotiate(
    accept_encoding: str | None, client: ClientClass, override: str | None = None
) -> CompressionChoice:
    """Choose the compression for one stream.

    1. ``override`` (a client's explicit request such as ``"zstd"`` or ``"none"``) wins if it
       names a method we support; an unknown name is ignored.
    2. Else the client class default (`DEFAULTS`) if ``Accept-Encoding`` admits it.
    3. Else the method the client accepts with the highest qvalue, ties going to zstd, then
       br, then lz4.
    4. Else no compression.

    A missing ``Accept-Encoding`` is read like an empty one: no coding but identity. RFC 9110
    would allow any coding, but a client that did not ask cannot be assumed to decode lz4 or
    zstd, and a stream it cannot read is worse than a larger one.
    """
    if override is not None:
        method = _OVERRIDE_NAMES.get(override.strip().lower())
        if method is not None:
            return CompressionChoice(method, DEFAULT_LEVELS[method])
    preferences = parse_accept_encoding(accept_encoding or "")
    default = DEFAULTS[client]
    if _quality(preferences, default.method) > 0:
        return default
    best = max(_FALLBACK_ORDER, key=lambda method: _quality(preferences, method))
    if _quality(preferences, best) > 0:
        return CompressionChoice(best, DEFAULT_LEVELS[best])
    return CompressionChoice(Compression.NONE)


# -- compressing ---------------------------------------------------------------------------


class Compressor(Protocol):
    """One compressed stream, written event by event."""

    @property
    def method(self) -> Compression:
        """The method this compressor writes."""
        ...

    def compress(self, data: bytes) -> bytes:
        """Compress ``data`` and return everything needed to decode it right away."""
        ...

    def finish(self) -> bytes:
        """End the compressed stream and return its last bytes; no `compress` may follow."""
        ...


class _Identity:
    """No compression: bytes pass through unchanged."""

    method: Final = Compression.NONE

    def compress(self, data: bytes) -> bytes:
        return data

    def finish(self) -> bytes:
        return b""

    def decompress(self, data: bytes) -> bytes:
        # Nothing to expand, so nothing to bound: the input is already in memory.
        return data


class _StreamCompressor:
    """Guards the order of calls shared by every real compressor."""

    method: Compression

    def __init__(self) -> None:
        self._finished = False

    def compress(self, data: bytes) -> bytes:
        if self._finished:
            raise ValueError(f"{self.method.name} compressor already finished")
        return self._compress(data) if data else b""

    def finish(self) -> bytes:
        if self._finished:
            raise ValueError(f"{self.method.name} compressor already finished")
        self._finished = True
        return self._finish()

    def _compress(self, data: bytes) -> bytes:
        raise NotImplementedError

    def _finish(self) -> bytes:
        raise NotImplementedError


class _BrotliCompressor(_StreamCompressor):
    method = Compression.BROTLI

    def __init__(self, level: int) -> None:
        super().__init__()
        self._encoder = brotli.Compressor(quality=level)

    def _compress(self, data: bytes) -> bytes:
        # RFC 7932 section 9.2: an empty metadata block ends on a byte boundary, so the
        # decoder can emit everything before it.
        output: bytes = self._encoder.process(data) + self._encoder.flush()
        return output

    def _finish(self) -> bytes:
        output: bytes = self._encoder.finish()
        return output


class _ZstdCompressor(_StreamCompressor):
    method = Compression.ZSTD

    def __init__(self, level: int) -> None:
        super().__init__()
        self._encoder = zstandard.ZstdCompressor(level=level).compressobj()

    def _compress(self, data: bytes) -> bytes:
        # RFC 8878 section 3.1.1.2: ending the current block lets the decoder emit it.
        return self._encoder.compress(data) + self._encoder.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def _finish(self) -> bytes:
        return self._encoder.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)


class _Lz4Compressor(_StreamCompressor):
    method = Compression.LZ4

    def __init__(self, level: int) -> None:
        super().__init__()
        # auto_flush: every call emits complete blocks instead of waiting to fill 64 KiB.
        self._encoder = lz4.frame.LZ4FrameCompressor(compression_level=level, auto_flush=True)
        self._header: bytes = self._encoder.begin()

    def _take_header(self) -> bytes:
        header, self._header = self._header, b""
        return header

    def _compress(self, data: bytes) -> bytes:
        output: bytes = self._encoder.compress(data)
        return self._take_header() + output

    def _finish(self) -> bytes:
        output: bytes = self._encoder.flush()
        return self._take_header() + output


_COMPRESSORS: Final[Mapping[Compression, Callable[[int], Compressor]]] = {
    Compression.BROTLI: _BrotliCompressor,
    Compression.ZSTD: _ZstdCompressor,
    Compression.LZ4: _Lz4Compressor,
}


def make_compressor(choice: CompressionChoice) -> Compressor:
    """Start a compressed stream for ``choice``; `Compression.NONE` passes bytes through."""
    level = choice.level if choice.level is not None else DEFAULT_LEVELS[choice.method]
    if choice.method is Compression.NONE or level is None:
        return _Identity()
    return _COMPRESSORS[choice.method](level)


# -- decompressing -------------------------------------------------------------------------


class Decompressor(Protocol):
    """The receiving end of one compressed stream."""

    @property
    def method(self) -> Compression:
        """The method this decompressor reads."""
        ...

    def decompress(self, data: bytes) -> bytes:
        """Decompress received bytes; return all output they complete.

        Raises:
            DecodeError: if the data is corrupt, continues after the end of the stream, or one
                call would produce more than the decompressor's ``max_output`` bytes.
        """
        ...


# How much output a decompressor produces between two size checks.
_PIECE = 64 << 10

# brotli 1.2 added output_buffer_limit (the fix for CVE-2025-6176); 1.1 can only expand a
# whole input chunk at once and be checked afterwards.
_BROTLI_BOUNDED: Final = hasattr(brotli.Decompressor, "can_accept_more_data")


def _too_large(method: Compression, max_output: int) -> DecodeError:
    return DecodeError(f"{method.name} data expands beyond the limit of {max_output} bytes")


class _BrotliDecompressor:
    method: Final = Compression.BROTLI

    def __init__(self, max_output: int) -> None:
        self._decoder = brotli.Decompressor()
        self._max_output = max_output

    def decompress(self, data: bytes) -> bytes:
        output: list[bytes] = []
        size = 0
        try:
            # Brotli >= 1.2 stops near output_buffer_limit (in steps of about 32 KiB) and hands
            # out the rest on later calls with empty input, even once can_accept_more_data()
            # is true; so drain until a call yields nothing, checking the size after each.
            while True:
                piece: bytes = (
                    self._decoder.process(data, output_buffer_limit=_PIECE)
                    if _BROTLI_BOUNDED
                    else self._decoder.process(data)
                )
                data = b""
                size += len(piece)
                if size > self._max_output:
                    raise _too_large(self.method, self._max_output)
                output.append(piece)
                if not piece or not _BROTLI_BOUNDED or self._decoder.is_finished():
                    return b"".join(output)
        except brotli.error as exc:
            raise DecodeError("corrupt brotli data") from exc


# A peer's frame header may ask for any window up to 2 GiB (RFC 8878 section 3.1.1.1.2);
# our own compressors stay far below 8 MiB, so a larger window is refused, not allocated.
_ZSTD_MAX_WINDOW = 8 << 20

# The most output one byte of zstd input can describe: an RLE block turns 4 bytes into
# 128 KiB (RFC 8878 section 3.1.1.2). Feeding at most room / 2**15 bytes (but at least 16) at
# a time bounds each step's output by the room left, plus one block completed from bytes fed
# earlier: memory never goes more than about 640 KiB past max_output.
_ZSTD_WORST_RATIO = 1 << 15
_ZSTD_MIN_STEP = 16


class _ZstdDecompressor:
    method: Final = Compression.ZSTD

    def __init__(self, max_output: int) -> None:
        self._max_output = max_output
        decoder = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
        # A decompressobj drains all output of each call (a stream writer can leave the end
        # of an event inside the decoder) and, with read_across_frames, takes concatenated
        # frames as RFC 8878 section 3.1 allows.
        self._decoder = decoder.decompressobj(read_across_frames=True)

    def decompress(self, data: bytes) -> bytes:
        output: list[bytes] = []
        size = 0
        offset = 0
        with memoryview(data) as view:
            while offset < len(view):
                step = max(_ZSTD_MIN_STEP, (self._max_output - size) // _ZSTD_WORST_RATIO)
                try:
                    piece: bytes = self._decoder.decompress(view[offset : offset + step])
                except zstandard.ZstdError as exc:
                    raise DecodeError(f"corrupt zstd data: {exc}") from exc
                offset += step
                size += len(piece)
                if size > self._max_output:
                    raise _too_large(self.method, self._max_output)
                output.append(piece)
        return b"".join(output)


class _Lz4Decompressor:
    method: Final = Compression.LZ4

    def __init__(self, max_output: int) -> None:
        self._decoder = lz4.frame.LZ4FrameDecompressor()
        self._max_output = max_output

    def decompress(self, data: bytes) -> bytes:
        output: list[bytes] = []
        size = 0
        while True:
            try:
                piece: bytes = self._decoder.decompress(
                    data, max_length=min(_PIECE, self._max_output - size + 1)
                )
            except RuntimeError as exc:
                raise DecodeError(f"corrupt lz4 data: {exc}") from exc
            data = b""
            size += len(piece)
            if size > self._max_output:
                raise _too_large(self.method, self._max_output)
            output.append(piece)
            if self._decoder.eof:
                # The LZ4 frame format allows frames back to back; start the next one.
                data = self._decoder.unused_data or b""
                self._decoder = lz4.frame.LZ4FrameDecompressor()
                if not data:
                    break
            elif self._decoder.needs_input:
                break
        return b"".join(output)


_DECOMPRESSORS: Final[Mapping[Compression, Callable[[int], Decompressor]]] = {
    Compression.BROTLI: _BrotliDecompressor,
    Compression.ZSTD: _ZstdDecompressor,
    Compression.LZ4: _Lz4Decompressor,
}


def make_decompressor(method: Compression, *, max_output: int = DEFAULT_MAX_OUTPUT) -> Decompressor:
    """Start reading a stream compressed with ``method``.

    ``max_output`` bounds what one `Decompressor.decompress` call may return; input that
    would expand beyond it raises `DecodeError` as soon as the excess is produced (within
    one internal step of at most a few hundred KiB), and the stream cannot be read further.
    """
    if max_output < 0:
        raise ValueError(f"max_output must be >= 0, got {max_output}")
    if method is Compression.NONE:
        return _Identity()
    return _DECOMPRESSORS[method](max_output)
