"""What the WebRTC tests need: aiortc (the ``webrtc`` extra), which CI installs."""

from __future__ import annotations

import os
from types import ModuleType

import pytest


def require_aiortc() -> ModuleType:
    """aiortc; skips the test without it, except under ``CI=true``, where it fails."""
    try:
        import aiortc
    except ImportError:
        reason = "aiortc is not installed (pip install 'airlane[webrtc]')"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return aiortc
