"""A local model behind Airlane: tokens per second, time to first token, and what the gateway
adds per token, against calling ``generate`` directly, in the same run.

Direct: ``model.generate`` with a streamer that notes when each token is made (the same
sampling settings, one request at a time). Through the gateway: ``airlane serve --model-dir``
on a free port, a streaming chat completion read with httpx, noting when each content chunk
arrives. Both sides get the same prompts and seeds, so they generate the same tokens; the
difference in time to first token and in the mean time between tokens is the gateway's cost
(HTTP, the stream log, SSE, the thread hand-off).

By default the model is the tests' tiny one (tests/backends/local/tiny_model.py: a two-layer
GPT-2, random weights), built in a temporary directory; ``--model-dir`` measures a real one.

    .venv/bin/python benchmarks/local_model.py
    .venv/bin/python benchmarks/local_model.py --model-dir models/qwen --requests 5 --tokens 64
    .venv/bin/python benchmarks/local_model.py --json local.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MESSAGES = [{"role": "user", "content": "Tell me about real-time streams."}]


def direct(model_dir: Path, requests: int, tokens: int) -> list[dict[str, float]]:
    """Per request: time to first token and mean gap between tokens, calling generate."""
    import torch

    from airlane.backends.local.model import load_model, prompt_ids

    loaded = load_model(model_dir)
    ids = torch.tensor([prompt_ids(loaded, MESSAGES)])
    runs = []
    for seed in range(requests):
        clock = Clock()

        torch.manual_seed(seed)
        started = time.perf_counter()
        with torch.inference_mode():
            loaded.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tokens,
                do_sample=True,
                top_k=0,
                streamer=clock,
                pad_token_id=loaded.eos_token_ids[0] if loaded.eos_token_ids else 0,
            )
        runs.append(summary(started, clock.stamps))
    return runs


class Clock:
    """A ``generate`` streamer that notes when each new token is made."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate hands over the prompt first
            self._prompt_seen = True
            return
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def through_gateway(model_dir: Path, requests: int, tokens: int) -> list[dict[str, float]]:
    """The same, as a client of ``airlane serve --model-dir`` sees it."""
    from tests.servers import run_server

    runs = []
    config = "[local]\nmax_queued = 0\n"
    with (
        run_server("--model-dir", str(model_dir), config=config) as gateway,
        httpx.Client(timeout=120) as client,
    ):
        for seed in range(requests):
            body = {
                "model": "local",
                "messages": MESSAGES,
                "seed": seed,
                "max_tokens": tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            stamps: list[float] = []
            generated = 0
            started = time.perf_counter()
            with client.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and '"content"' in line:
                        stamps.append(time.perf_counter())
                    elif '"usage"' in line and '"completion_tokens"' in line:
                        generated = json.loads(line.removeprefix("data: "))["usage"][
                            "completion_tokens"
                        ]
            runs.append(summary(started, stamps, generated))
    return runs


def summary(started: float, stamps: list[float], tokens: int | None = None) -> dict[str, float]:
    """Time to the first token, mean time per token after it, tokens per second. A reader
    behind the stream may get several tokens in one chunk, so the token count is the
    usage's where known, not the chunks'."""
    tokens = len(stamps) if tokens is None else tokens
    if not stamps or tokens < 2:
        return {
            "ttft_ms": float("nan"),
            "gap_ms": float("nan"),
            "tokens": tokens,
            "tokens_per_s": 0.0,
        }
    return {
        "ttft_ms": (stamps[0] - started) * 1e3,
        "gap_ms": (stamps[-1] - stamps[0]) / (tokens - 1) * 1e3,
        "tokens": tokens,
        "tokens_per_s": tokens / (stamps[-1] - started),
    }


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="a real model (default: the tiny one)")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model_dir
        if model_dir is None:
            from tests.backends.local.tiny_model import build

            model_dir = build(Path(scratch) / "tiny")
        results = {
            "model": str(args.model_dir or "tiny (tests/backends/local/tiny_model.py)"),
            "requests": args.requests,
            "tokens": args.tokens,
            "direct": medians(direct(model_dir, args.requests, args.tokens)),
            "gateway": medians(through_gateway(model_dir, args.requests, args.tokens)),
        }
    d, g = results["direct"], results["gateway"]
    results["added_ms_per_token"] = g["gap_ms"] - d["gap_ms"]
    results["added_ttft_ms"] = g["ttft_ms"] - d["ttft_ms"]
    print(f"{'':10} {'ttft ms':>9} {'ms/token':>9} {'tokens/s':>9} {'tokens':>7}")
    for name in ("direct", "gateway"):
        r = results[name]
        print(
            f"{name:10} {r['ttft_ms']:9.2f} {r['gap_ms']:9.3f} {r['tokens_per_s']:9.1f} "
            f"{r['tokens']:7.0f}"
        )
    print(
        f"the gateway adds {results['added_ms_per_token']:.3f} ms per token and "
        f"{results['added_ttft_ms']:.2f} ms to the first (medians of {args.requests} requests)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
