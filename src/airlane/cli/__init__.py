"""The ``airlane`` command line: ``serve``, ``demo``, ``stream`` and ``bench``."""

from airlane.cli.main import app, main

__all__ = ["app", "main"]
