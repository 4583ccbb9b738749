"""`ShapingError`: why the classifier could not be built, attached or detached."""

from __future__ import annotations

__all__ = ["ShapingError"]


class ShapingError(Exception):
    """One line for the user: what failed and what to do. The user-space lanes work without
    the classifier, so the gateway goes on serving whatever this says."""
