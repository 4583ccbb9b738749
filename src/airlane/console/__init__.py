"""The web console's files: pages built from ``clients/js`` (the TypeScript client and the
console's own modules), shipped in the package so that ``pip install`` alone serves them.

``static/client/`` is `@airlane/client` as the browser loads it, ``static/app/`` the console's
pages, ``static/index.html`` and ``static/console.css`` their document and style. They are
built with ``npm run build`` in ``clients/js`` (`tests/js` checks they are up to date).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""Where the console's files are."""
