"""One worker of ``airlane serve --workers``: ``python -m airlane.server.worker``.

The supervisor (`airlane.server.workers`) writes the worker's `ServerConfig` to its standard
input (pickled; the pipe is the supervisor's own) and reads one JSON line from its standard
output once every listener takes connections: where it listens. Then the worker serves as
``airlane serve`` does, logging to its standard error (the supervisor's), until a signal
stops it; a start-up failure is one line on standard error and exit status 2.
"""

from __future__ import annotations

import json
import logging
import pickle
import sys
from dataclasses import asdict

from airlane.server.config import ServerConfig
from airlane.server.run import Listening, StartupError, serve

__all__ = ["main"]

START_FAILED = 2


def main() -> None:
    """Read the configuration, serve, and report readiness on stdout."""
    # Pickled by the supervisor, through a pipe only it holds.
    settings = pickle.load(sys.stdin.buffer)
    if not isinstance(settings, ServerConfig):
        sys.exit("airlane worker: expected a ServerConfig on standard input")
    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(levelname)s [{settings.worker}] %(name)s: %(message)s",
    )

    def ready(listening: Listening) -> None:
        print(json.dumps(asdict(listening)), flush=True)

    import uvloop

    try:
        uvloop.run(serve(settings, on_ready=ready))
    except StartupError as exc:
        print(f"airlane worker {settings.worker}: {exc}", file=sys.stderr, flush=True)
        sys.exit(START_FAILED)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
