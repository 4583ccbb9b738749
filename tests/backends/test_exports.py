"""The public surface of `airlane.backends` is deliberate."""

from __future__ import annotations

import sys

import airlane.backends
import airlane.backends.local
from airlane.backends import base, openai, paced, pacing, synthetic
from airlane.backends.local import backend, config, detokenize, model, stops


def test_package_exports() -> None:
    assert sorted(airlane.backends.__all__) == [
        "AdmittingBackend",
        "Backend",
        "BackendError",
        "Feed",
        "FeedingBackend",
        "GenerationRequest",
        "LoadTestSpec",
        "OpenAIUpstreamBackend",
        "SyntheticBackend",
        "SyntheticConfig",
    ]


def test_the_local_model_package_exports() -> None:
    assert sorted(airlane.backends.local.__all__) == [
        "LoadedModel",
        "LocalModelBackend",
        "LocalStats",
        "ModelDirError",
        "load_model",
    ]


def test_importing_the_local_package_imports_no_torch() -> None:
    """Loading a model does; a gateway without --model-dir never pays for torch."""
    import subprocess

    code = "import airlane.backends.local, sys; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_every_exported_name_exists() -> None:
    local = (airlane.backends.local, backend, config, detokenize, model, stops)
    for module in (airlane.backends, base, openai, paced, pacing, synthetic, *local):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
