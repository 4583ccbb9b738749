"""Delta sizes between real checkpoints: a small language model trained, then fine-tuned.

A character-level MLP language model (Bengio et al. 2003 style: 16 characters of context,
embedded, a stack of residual ReLU layers, a softmax head; weights stored ``(out, in)`` as
PyTorch does) is trained from scratch with Adam, in numpy on the CPU, on the repository's
``docs/*.md`` but one, and saved as safetensors: the base version. Three fine-tunes of 20
steps each on the remaining document (``docs/sync.md``) make three target versions:

- **full**: every tensor trained (every chunk changes; only the XOR trick helps);
- **top**: the last hidden layer and the head trained, the rest frozen (lower layers'
  chunks are reused);
- **grown**: 8 new vocabulary rows appended to the embedding and the head, and a rank-8
  LoRA adapter added to layer 1 (two new tensors in the middle of the file); only those
  trained.

For each: the loss on held-out text of the fine-tuning document (which the base never saw),
the target's size, its chunks and how many are new, the raw bytes of the new chunks, the delta
file with plain zstd and with the per-chunk best of zstd and XOR-then-zstd
(`airlane.artifacts.delta`), how much of the delta is its header (the target's manifest,
which every delta carries whole), and the time to write each delta and to apply it (manifests
already built; building one, chunking and hashing a version, is its own column). Every delta
is applied back and the result compared byte for byte. Seeded: the same run gives the same
sizes.

    .venv/bin/python benchmarks/artifacts_delta.py            # ~25 s (one core)
    .venv/bin/python benchmarks/artifacts_delta.py --quick    # a few seconds, a smoke test
"""

from __future__ import annotations

import argparse
import os

# One BLAS thread: on a small shared machine, OpenBLAS's spinning threads fighting other
# processes made training steps 3x slower than one thread. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from airlane.artifacts.delta import apply_delta, plan_delta, read_delta_header, write_delta
from airlane.artifacts.manifest import Manifest, build_manifest
from airlane.artifacts.tensorfile import write_tensors

Params = dict[str, np.ndarray]
MODEL = "model.safetensors"
DOCS = Path(__file__).resolve().parent.parent / "docs"
TUNE_DOC = "sync.md"
"""The document the fine-tunes learn (the base never sees it)."""
BASE_LR = 1e-3
TUNE_LR = 1e-4


@dataclass(frozen=True)
class Shape:
    context: int = 16
    embed: int = 48
    hidden: int = 768
    layers: int = 4
    batch: int = 96
    steps: int = 250
    tune_steps: int = 20


QUICK = Shape(context=8, embed=16, hidden=128, layers=3, batch=64, steps=20, tune_steps=5)


# -- the model -----------------------------------------------------------------------------


def corpus() -> tuple[str, str]:
    """The pre-training text (every doc but one) and the fine-tuning text (that one)."""
    docs = {path.name: path.read_text(errors="replace") for path in sorted(DOCS.glob("*.md"))}
    tune = docs.pop(TUNE_DOC, "") or "airlane sync " * 2000
    return "\n".join(docs.values()) or "airlane " * 10_000, tune


def evaluate(params: Params, shape: Shape, data: np.ndarray) -> float:
    """Mean loss over (up to) 1024 fixed positions of ``data``."""
    starts = np.linspace(0, len(data) - shape.context - 1, min(1024, len(data) // 2)).astype(int)
    ctx = data[starts[:, None] + np.arange(shape.context)]
    loss, _ = loss_and_grads(params, shape, ctx, data[starts + shape.context])
    return loss


def init(shape: Shape, vocab: int, rng: np.random.Generator) -> Params:
    def dense(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) * np.sqrt(2.0 / inp)).astype(np.float32)

    params = {"embed.weight": (rng.standard_normal((vocab, shape.embed)) * 0.1).astype(np.float32)}
    params["layers.0.weight"] = dense(shape.hidden, shape.context * shape.embed)
    params["layers.0.bias"] = np.zeros(shape.hidden, np.float32)
    for i in range(1, shape.layers):
        params[f"layers.{i}.weight"] = dense(shape.hidden, shape.hidden) * np.float32(0.5)
        params[f"layers.{i}.bias"] = np.zeros(shape.hidden, np.float32)
    params["head.weight"] = dense(vocab, shape.hidden)
    params["head.bias"] = np.zeros(vocab, np.float32)
    return params


def weight(params: Params, i: int) -> np.ndarray:
    """Layer ``i``'s weight, with its LoRA adapter (``lora_b @ lora_a``) if it has one."""
    w = params[f"layers.{i}.weight"]
    if f"layers.{i}.lora_a" in params:
        w = w + params[f"layers.{i}.lora_b"] @ params[f"layers.{i}.lora_a"]
    return w


def loss_and_grads(
    params: Params, shape: Shape, ctx: np.ndarray, nxt: np.ndarray
) -> tuple[float, Params]:
    """Cross-entropy of predicting ``nxt`` from ``ctx``, and its gradient (by hand)."""
    batch = len(nxt)
    x = params["embed.weight"][ctx].reshape(batch, -1)
    inputs, pre = [x], []
    h = x
    for i in range(shape.layers):
        z = h @ weight(params, i).T + params[f"layers.{i}.bias"]
        pre.append(z)
        h = np.maximum(z, 0) if i == 0 else h + np.maximum(z, 0)
        inputs.append(h)
    logits = h @ params["head.weight"].T + params["head.bias"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = float(-np.log(probs[np.arange(batch), nxt] + 1e-9).mean())
    grads: Params = {}
    d = probs
    d[np.arange(batch), nxt] -= 1
    d /= batch
    grads["head.weight"] = d.T @ h
    grads["head.bias"] = d.sum(axis=0)
    dh = d @ params["head.weight"]
    for i in reversed(range(shape.layers)):
        dz = dh * (pre[i] > 0)
        dw = dz.T @ inputs[i]
        grads[f"layers.{i}.bias"] = dz.sum(axis=0)
        grads[f"layers.{i}.weight"] = dw
        if f"layers.{i}.lora_a" in params:
            a, b = params[f"layers.{i}.lora_a"], params[f"layers.{i}.lora_b"]
            grads[f"layers.{i}.lora_a"] = b.T @ dw
            grads[f"layers.{i}.lora_b"] = dw @ a.T
        back = dz @ weight(params, i)
        dh = back if i == 0 else dh + back
    grads["embed.weight"] = np.zeros_like(params["embed.weight"])
    np.add.at(grads["embed.weight"], ctx, dh.reshape(batch, shape.context, -1))
    return loss, grads


def train(
    params: Params,
    shape: Shape,
    data: np.ndarray,
    steps: int,
    lr: float,
    rng: np.random.Generator,
    trainable: dict[str, slice | None],
) -> float:
    """Adam on the ``trainable`` tensors (a slice: only those rows); returns the last loss."""
    moments = {
        name: (np.zeros_like(params[name]), np.zeros_like(params[name])) for name in trainable
    }
    beta1, beta2, loss = 0.9, 0.999, 0.0
    for step in range(1, steps + 1):
        starts = rng.integers(0, len(data) - shape.context - 1, shape.batch)
        ctx = data[starts[:, None] + np.arange(shape.context)]
        loss, grads = loss_and_grads(params, shape, ctx, data[starts + shape.context])
        for name, rows in trainable.items():
            m, v = moments[name]
            g = grads[name]
            m *= beta1
            m += (1 - beta1) * g
            v *= beta2
            v += (1 - beta2) * g * g
            update = (lr * np.sqrt(1 - beta2**step) / (1 - beta1**step)) * m / (np.sqrt(v) + 1e-8)
            if rows is None:
                params[name] -= update.astype(np.float32)
            else:
                params[name][rows] -= update[rows].astype(np.float32)
    return loss


# -- the scenarios -------------------------------------------------------------------------


def fine_tunes(base: Params, shape: Shape, data: np.ndarray, seed: int) -> dict[str, Params]:
    """The three fine-tunes of ``base`` on ``data``, by name."""
    last = shape.layers - 1
    top = [f"layers.{last}.weight", f"layers.{last}.bias", "head.weight", "head.bias"]
    grown, trainable = grow(base, shape, np.random.default_rng(seed + 3))
    scenarios = {
        "full": ({k: v.copy() for k, v in base.items()}, dict.fromkeys(base)),
        "top": ({k: v.copy() for k, v in base.items()}, dict.fromkeys(top)),
        "grown": (grown, trainable),
    }
    for offset, (params, which) in enumerate(scenarios.values()):
        rng = np.random.default_rng(seed + 10 + offset)
        train(params, shape, data, shape.tune_steps, TUNE_LR, rng, which)
    return {name: params for name, (params, _) in scenarios.items()}


def grow(
    base: Params, shape: Shape, rng: np.random.Generator
) -> tuple[Params, dict[str, slice | None]]:
    """``base`` with 8 vocabulary rows appended and a LoRA adapter on layer 1, and what of
    it to train: the new rows and the adapter."""
    grown = {k: v.copy() for k, v in base.items()}
    vocab, extra = len(base["head.bias"]), 8
    new_embed = (rng.standard_normal((extra, shape.embed)) * 0.1).astype(np.float32)
    grown["embed.weight"] = np.concatenate([base["embed.weight"], new_embed])
    new_head = np.zeros((extra, shape.hidden), np.float32)
    grown["head.weight"] = np.concatenate([base["head.weight"], new_head])
    grown["head.bias"] = np.concatenate([base["head.bias"], np.full(extra, -5, np.float32)])
    grown["layers.1.lora_a"] = (rng.standard_normal((8, shape.hidden)) * 0.01).astype(np.float32)
    grown["layers.1.lora_b"] = np.zeros((shape.hidden, 8), np.float32)
    rows = slice(vocab, vocab + extra)
    trainable: dict[str, slice | None] = {"layers.1.lora_a": None, "layers.1.lora_b": None}
    trainable.update({"embed.weight": rows, "head.weight": rows, "head.bias": rows})
    return grown, trainable


def save(root: Path, name: str, params: Params) -> Manifest:
    folder = root / name
    folder.mkdir()
    write_tensors(folder / MODEL, params)
    return build_manifest(folder, [MODEL], name="char-mlp", version=name)


@dataclass(frozen=True)
class Row:
    scenario: str
    loss: float
    size: int
    chunks: int
    new_chunks: int
    raw_new: int
    zstd: int
    xor: int
    header: int
    xor_chunks: int
    manifest_s: float
    zstd_s: float
    xor_s: float
    apply_s: float


def measure(root: Path, base: Manifest, name: str, params: Params, loss: float) -> Row:
    """Save the fine-tune ``name``, write both deltas from the base, apply one, compare."""
    started = time.perf_counter()
    target = save(root, name, params)
    manifest_s = time.perf_counter() - started
    _, planned = plan_delta(base, target)
    base_dir, delta = root / "base", root / f"{name}.airdelta"
    started = time.perf_counter()
    plain = write_delta(base, base_dir, target, root / name, root / f"{name}.zstd", xor=False)
    zstd_s = time.perf_counter() - started
    started = time.perf_counter()
    xored = write_delta(base, base_dir, target, root / name, delta)
    xor_s = time.perf_counter() - started
    started = time.perf_counter()
    apply_delta(delta, base, base_dir, root / f"{name}.rebuilt")
    apply_s = time.perf_counter() - started
    if (root / f"{name}.rebuilt" / MODEL).read_bytes() != (root / name / MODEL).read_bytes():
        raise SystemExit(f"{name}: the rebuilt version differs")
    header = xored.encoded_bytes - sum(entry.length for entry in read_delta_header(delta)[2])
    return Row(
        name, loss, target.size, planned.chunks_total, planned.chunks_new, planned.new_bytes,
        plain.encoded_bytes, xored.encoded_bytes, header, xored.chunks_xor,
        manifest_s, zstd_s, xor_s, apply_s,
    )  # fmt: skip


def table(rows: list[Row], params: int, base_loss: float) -> str:
    """The rows as a markdown table, under a line about the base."""

    def mb(n: int) -> str:
        return f"{n / 1e6:.2f} MB"

    def pct(n: int, of: int) -> str:
        return f"{100 * n / of:.1f} %"

    lines = [
        f"base: {params / 1e6:.2f} M parameters (float32), loss {base_loss:.3f}",
        "",
        "| fine-tune | loss | full size | chunks new | raw new chunks | zstd delta "
        "| xor-zstd delta | of which header | xor chunks "
        "| manifest s | zstd delta s | xor delta s | apply s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.loss:.3f} | {mb(r.size)} | {r.new_chunks}/{r.chunks} "
            f"| {mb(r.raw_new)} ({pct(r.raw_new, r.size)}) | {mb(r.zstd)} ({pct(r.zstd, r.size)}) "
            f"| {mb(r.xor)} ({pct(r.xor, r.size)}) | {r.header / 1e3:.1f} kB | {r.xor_chunks} "
            f"| {r.manifest_s:.2f} | {r.zstd_s:.2f} | {r.xor_s:.2f} | {r.apply_s:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, a few seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, help="training steps for the base")
    parser.add_argument("--tune-steps", type=int, help="training steps per fine-tune")
    args = parser.parse_args()
    shape = QUICK if args.quick else Shape()
    shape = replace(
        shape, steps=args.steps or shape.steps, tune_steps=args.tune_steps or shape.tune_steps
    )
    pretext, tunetext = corpus()
    alphabet = sorted(set(pretext + tunetext))
    lookup = {ch: i for i, ch in enumerate(alphabet)}
    pre = np.array([lookup[ch] for ch in pretext], dtype=np.int64)
    tune = np.array([lookup[ch] for ch in tunetext], dtype=np.int64)
    held_out = len(tune) * 9 // 10  # the fine-tunes' loss is measured on the rest
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    base = init(shape, len(alphabet), rng)
    train(base, shape, pre, shape.steps, BASE_LR, rng, dict.fromkeys(base))
    tuned = fine_tunes(base, shape, tune[:held_out], args.seed)
    trained_s = time.perf_counter() - started
    losses = {"base": evaluate(base, shape, tune[held_out:])}
    losses.update({name: evaluate(p, shape, tune[held_out:]) for name, p in tuned.items()})
    with tempfile.TemporaryDirectory(prefix="airlane-delta-") as tmp:
        root = Path(tmp)
        base_manifest = save(root, "base", base)
        rows = [measure(root, base_manifest, name, p, losses[name]) for name, p in tuned.items()]
    count = sum(v.size for v in base.values())
    print(table(rows, count, losses["base"]))
    print(
        f"\n(loss: on held-out {TUNE_DOC}, which the base never saw; training: {shape.steps} "
        f"steps on {len(pretext)} characters of docs/*.md, then 3 x {shape.tune_steps} on "
        f"{TUNE_DOC}, {trained_s:.1f} s in all)"
    )


if __name__ == "__main__":
    main()
