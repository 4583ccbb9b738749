"""The public surface of `airlane.backends` is deliberate."""

from __future__ import annotations

import airlane.backends
from airlane.backends import base, openai, paced, pacing, synthetic


def test_package_exports() -> None:
    assert sorted(airlane.backends.__all__) == [
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


def test_every_exported_name_exists() -> None:
    for module in (airlane.backends, base, openai, paced, pacing, synthetic):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
