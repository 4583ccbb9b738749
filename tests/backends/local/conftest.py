"""The tiny model, built once per test session (a second or two)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory: the tiny tokenizer and model of `tiny_model`."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the 'local' extra is not installed ({exc.name}): ./scripts/setup.sh --test")
    from .tiny_model import build

    return build(tmp_path_factory.mktemp("tiny-model"))
