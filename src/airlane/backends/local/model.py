"""A causal language model and its tokenizer, loaded from a local directory.

Only from that directory: nothing is fetched from a model hub at run time
(``local_files_only`` and ``HF_HUB_OFFLINE``). What cannot be loaded is one `ModelDirError`
that says which directory and what is wrong with it, before the server starts listening.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LoadedModel", "ModelDirError", "load_model", "prompt_ids"]

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class ModelDirError(ValueError):
    """The model directory is missing, incomplete or unreadable (the message says which). A
    ValueError, so that `airlane serve` reports it as a start-up failure in one line."""


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """What a generation needs from the directory."""

    name: str
    """The directory's name: what responses call the model."""
    model: Any
    """The ``transformers`` model, in evaluation mode, on the CPU."""
    tokenizer: Any
    """Its tokenizer (``PreTrainedTokenizerBase``)."""
    eos_token_ids: tuple[int, ...]
    """Ids that end a generation (the generation config's, else the tokenizer's)."""
    context: int | None = None
    """The most positions the model takes (prompt and completion), where its config says."""


def load_model(directory: Path, *, threads: int | None = None) -> LoadedModel:
    """Load the model and tokenizer in ``directory``.

    Raises:
        ModelDirError: the extra is not installed, or the directory is missing, lacks a
            config, weights or tokenizer, or they do not load.
    """
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ModelDirError(
            f"--model-dir needs the 'local' extra (torch and transformers): "
            f"pip install 'airlane[local]' ({exc.name} is missing)"
        ) from None
    if not directory.is_dir():
        raise ModelDirError(f"model directory {directory} does not exist")
    missing = []
    if not (directory / "config.json").is_file():
        missing.append("config.json")
    if not any((directory / name).is_file() for name in _WEIGHTS):
        missing.append("weights (model.safetensors or pytorch_model.bin)")
    if not any((directory / name).is_file() for name in ("tokenizer.json", "tokenizer.model")):
        missing.append("a tokenizer (tokenizer.json)")
    if missing:
        raise ModelDirError(f"model directory {directory} has no {', no '.join(missing)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a network request for a local model
    # No progress bars in a server's log.
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if threads:
        torch.set_num_threads(threads)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, local_files_only=True, dtype=torch.float32
        )
    except Exception as exc:  # transformers raises many kinds; all mean "cannot use this"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelDirError(f"model directory {directory} does not load: {reason}") from None
    model.train(False)  # evaluation mode (no dropout)
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (() if eos is None else (eos,))
    config = model.config
    context = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    eos_ids = tuple(int(i) for i in eos_ids)
    return LoadedModel(directory.name, model, tokenizer, eos_ids, int(context) if context else None)


def prompt_ids(loaded: LoadedModel, messages: Sequence[dict[str, Any]]) -> list[int]:
    """The prompt for ``messages``: through the tokenizer's chat template where it carries
    one, else as ``role: content`` lines ending with ``assistant:``."""
    tokenizer = loaded.tokenizer
    chat = [
        {"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in messages
    ]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant:"
        ids = tokenizer(text)["input_ids"]
    return [int(i) for i in ids]


def _text(content: Any) -> str:
    """A message's content as text (OpenAI's content parts: their text parts, joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
