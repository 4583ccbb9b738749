"""A tiny causal language model made at test time, saved as a model directory.

A byte-level BPE tokenizer trained by ``tokenizers`` on text in this repository (and a few
lines of multi-byte text, so that many tokens are pieces of UTF-8 characters), with a chat
template; a two-layer GPT-2 with random weights from a fixed seed. Its output is nonsense, and
that is the point: random tokens split characters and merges wherever they fall.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MULTIBYTE = [
    "Größe, Übermaß, façade, naïve café, résumé",
    "数据流与令牌、实时通信层、模型更新",
    "データの流れ、トークン、リアルタイム",
    "emoji 🙂🚀✨ and symbols ∑∫≈ €£¥",
]


def training_text() -> list[str]:
    """Lines to train the tokenizer on: the README, the docs, the multi-byte lines."""
    lines = (REPO / "README.md").read_text().splitlines()
    for doc in sorted((REPO / "docs").glob("*.md"))[:6]:
        lines += doc.read_text().splitlines()
    return [line for line in lines if line.strip()] + MULTIBYTE * 50


def build(directory: Path, *, seed: int = 1234, vocab_size: int = 600) -> Path:
    """Write the tokenizer and the model into ``directory``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    eos_id = fast.convert_tokens_to_ids(EOS)
    config = GPT2Config(
        vocab_size=len(fast),
        n_positions=512,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory
