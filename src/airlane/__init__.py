"""Airlane: the real-time communication layer for AI-native systems."""

__version__ = "0.1.0"

__all__ = ["__version__"]
