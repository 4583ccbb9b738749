"""``[local]``: the local-model backend's settings (``airlane serve --model-dir``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LocalConfig"]


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """Where the model is and how much work it takes on."""

    model_dir: str | None = None
    """A directory holding a causal language model and its tokenizer (``save_pretrained``'s
    layout); set, it replaces the synthetic backend and ``upstream``."""
    max_queued: int = 8
    """Requests that may wait while the model generates another; the next is refused with
    ``overloaded`` (HTTP 503)."""
    max_ahead: int = 64
    """Tokens the model may make before the gateway has taken them; then it waits."""
    default_max_tokens: int = 256
    """``max_tokens`` for a request that names none."""
    threads: int | None = None
    """Torch's CPU threads (None: its default, one per core)."""

    def __post_init__(self) -> None:
        if self.max_queued < 0:
            raise ValueError("local.max_queued must be 0 or more")
        if self.max_ahead < 1 or self.default_max_tokens < 1:
            raise ValueError("local.max_ahead and local.default_max_tokens must be at least 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError("local.threads must be at least 1")
