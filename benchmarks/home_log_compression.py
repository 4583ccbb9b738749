"""How much realistic LLM chunks shrink in a home log message, and what it costs.

The load test's chunks are one JSON body with only ``seq`` and ``ts`` spliced in, so any
compressor shrinks a message of them a hundredfold; this measures chunks that differ the way
real ones do instead: OpenAI ``chat.completion.chunk`` bodies of ``--tokens`` tokens drawn per
chunk, each with its log-probability and bytes, ``--streams`` streams' entries of
``--per-stream`` chunks in one home log message (as the ``node`` layout writes them). For
zstd level 1 (what ``compression = "zstd"`` uses), lz4 and zlib level 1: the ratio and the
compression and decompression speeds, in this process.

    .venv/bin/python benchmarks/home_log_compression.py
    .venv/bin/python benchmarks/home_log_compression.py --streams 500 --per-stream 1 --json -
"""

from __future__ import annotations

import argparse
import random
import string
import time
import zlib
from collections.abc import Callable

import lz4.block
import orjson
import zstandard

from airlane.core import Event
from airlane.hub.jetstream.records import encode_entry, join_entries


def _words(rng: random.Random, count: int) -> list[str]:
    """Word-like tokens of 2-9 lowercase letters (English-ish lengths, not a dictionary)."""
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(count)]


def chunk(rng: random.Random, words: list[str], stream: int, seq: int, tokens: int) -> bytes:
    """One realistic chunk body: what a model API sends per delta with logprobs on."""
    drawn = [" " + rng.choice(words) for _ in range(tokens)]
    body = {
        "seq": seq,
        "ts": time.monotonic_ns(),
        "id": f"chatcmpl-{stream:024x}",
        "object": "chat.completion.chunk",
        "created": 1733400000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_airlane",
        "choices": [
            {
                "index": 0,
                "delta": {"content": "".join(drawn)},
                "logprobs": {
                    "content": [
                        {
                            "token": token,
                            "logprob": round(-rng.random() * 2, 4),
                            "bytes": list(token.encode()),
                            "top_logprobs": [],
                        }
                        for token in drawn
                    ]
                },
                "finish_reason": None,
            }
        ],
    }
    return orjson.dumps(body)


def message(streams: int, per_stream: int, tokens: int, seed: int) -> tuple[bytes, float]:
    """One home log message of realistic chunks, and the chunks' mean size."""
    rng = random.Random(seed)
    words = _words(rng, 5000)
    entries = []
    sizes = []
    for stream in range(streams):
        bodies = [chunk(rng, words, stream, seq, tokens) for seq in range(per_stream)]
        sizes += [len(body) for body in bodies]
        events = [Event.message(raw=body) for body in bodies]
        entries.append(encode_entry(f"chatcmpl-{stream:032x}", 1, events))
    return join_entries(entries), sum(sizes) / len(sizes)


def measure(
    payload: bytes,
    compress: Callable[[bytes], bytes],
    decompress: Callable[[bytes], bytes],
    volume_mb: float,
) -> dict[str, float]:
    """Ratio and MB/s each way, over ``volume_mb`` of input."""
    packed = compress(payload)
    assert decompress(packed) == payload
    repeat = max(1, int(volume_mb * 1e6 / len(payload)))
    started = time.perf_counter()
    for _ in range(repeat):
        compress(payload)
    middle = time.perf_counter()
    for _ in range(repeat):
        decompress(packed)
    ended = time.perf_counter()
    volume = len(payload) * repeat / 1e6
    return {
        "ratio": round(len(payload) / len(packed), 2),
        "compress_mb_s": round(volume / (middle - started)),
        "decompress_mb_s": round(volume / (ended - middle)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--per-stream", type=int, default=2, help="chunks of each stream")
    parser.add_argument("--tokens", type=int, default=4, help="tokens per chunk")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--volume-mb", type=float, default=200.0, help="input timed each way")
    parser.add_argument("--json", help="'-' prints the report as JSON")
    args = parser.parse_args()
    payload, mean = message(args.streams, args.per_stream, args.tokens, args.seed)
    zstd_1 = zstandard.ZstdCompressor(level=1)
    unzstd = zstandard.ZstdDecompressor()
    report = {
        "message_bytes": len(payload),
        "chunk_bytes_mean": round(mean, 1),
        "zstd-1": measure(payload, zstd_1.compress, unzstd.decompress, args.volume_mb),
        "lz4": measure(
            payload,
            lambda b: lz4.block.compress(b, store_size=True),
            lz4.block.decompress,
            args.volume_mb,
        ),
        "zlib-1": measure(payload, lambda b: zlib.compress(b, 1), zlib.decompress, args.volume_mb),
    }
    if args.json == "-":
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    print(f"one message: {report['message_bytes']} bytes, chunks {report['chunk_bytes_mean']} B")
    for name in ("zstd-1", "lz4", "zlib-1"):
        row = report[name]
        assert isinstance(row, dict)
        print(
            f"{name:7} {row['ratio']:5.2f}x  compress {row['compress_mb_s']:5} MB/s  "
            f"decompress {row['decompress_mb_s']:5} MB/s"
        )


if __name__ == "__main__":
    main()
