"""Sans-I/O wire formats: bytes in, values out, and back.

Nothing in this package performs I/O, reads a clock or imports asyncio (ARCHITECTURE.md);
transports feed it the bytes they receive and write the bytes it returns.

- `airlane.wire.sse`: server-sent events (``text/event-stream``), encoder and decoder.
- `airlane.wire.framing`: 4-byte length-prefixed frames over byte streams.
- `airlane.wire.utf8`: cutting and reassembling UTF-8 at character boundaries.
- `airlane.wire.codecs`: JSON and MessagePack payload codecs.
- `airlane.wire.compression`: per-client compression choice and streaming (de)compressors.
- `airlane.wire.errors`: the exception tree.
- `airlane.wire.proto`: native events, chat requests and stream info to and from the Protobuf
  contract (``proto/airlane/v1``).
- `airlane.wire.airc`: the AIRC v1.2 frame protocol.
"""

from airlane.wire.codecs import CODECS, JSON, MSGPACK, Codec, get_codec
from airlane.wire.compression import (
    ClientClass,
    Compression,
    CompressionChoice,
    Compressor,
    Decompressor,
    classify_client,
    make_compressor,
    make_decompressor,
    negotiate,
)
from airlane.wire.errors import (
    DecodeError,
    EncodeError,
    FrameTooLarge,
    SSEError,
    UnknownCodec,
    WireError,
)
from airlane.wire.framing import FrameDecoder, encode_frame
from airlane.wire.sse import SSEDecoder, SSEMessage, encode_comment, encode_event, encode_retry
from airlane.wire.utf8 import Utf8Reassembler, chunk_utf8, utf8_safe_cut

__all__ = [
    "CODECS",
    "JSON",
    "MSGPACK",
    "ClientClass",
    "Codec",
    "Compression",
    "CompressionChoice",
    "Compressor",
    "DecodeError",
    "Decompressor",
    "EncodeError",
    "FrameDecoder",
    "FrameTooLarge",
    "SSEDecoder",
    "SSEError",
    "SSEMessage",
    "UnknownCodec",
    "Utf8Reassembler",
    "WireError",
    "chunk_utf8",
    "classify_client",
    "encode_comment",
    "encode_event",
    "encode_frame",
    "encode_retry",
    "get_codec",
    "make_compressor",
    "make_decompressor",
    "negotiate",
    "utf8_safe_cut",
]
