"""Where a gateway's artifact store is (``[artifacts]`` in the TOML file, ``--artifacts``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ArtifactsConfig"]


@dataclass(frozen=True, slots=True)
class ArtifactsConfig:
    """The artifact store a gateway serves under ``/v1/artifacts``."""

    dir: str | None = None
    """The store directory (``<dir>/<name>/<version>/manifest.json``); None: no artifacts."""
    scan_interval_s: float = 2.0
    """Seconds between scans for new versions to announce (0: only on ``POST .../rescan``)."""

    def __post_init__(self) -> None:
        if self.scan_interval_s < 0:
            raise ValueError("artifacts.scan_interval_s must be >= 0")
