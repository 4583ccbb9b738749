"""The web console (``/console/``) and the metrics stream its overview plots
(`airlane.transports.http.console.serve`).

``static/`` holds the console's files, built from ``clients/js`` (the TypeScript client and
the console's own modules) and shipped in the package, so that ``pip install`` alone serves
them: ``static/client/`` is `@airlane/client` as the browser loads it, ``static/app/`` the
console's views, ``static/index.html`` and ``static/console.css`` their page and style. They
are built with ``npm run build`` in ``clients/js`` (``tests/js`` checks they are up to date).
"""

from __future__ import annotations

from airlane.transports.http.console.files import STATIC_DIR
from airlane.transports.http.console.serve import (
    MetricsSampler,
    handle_console,
    serve_metrics_stream,
)

__all__ = ["STATIC_DIR", "MetricsSampler", "handle_console", "serve_metrics_stream"]
