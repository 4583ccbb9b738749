"""An OpenAI-compatible streaming proxy the FastAPI way: a reference for `benchmarks/proxy.py`.

``POST /v1/chat/completions`` is forwarded with one shared ``httpx.AsyncClient`` (no limit on
connections, no timeout: streams are long) and answered with a ``StreamingResponse`` over
the upstream's raw body, closed when the response ends. Run by uvicorn with its defaults
(uvloop and httptools where installed), warnings only.

    python benchmarks/peers/proxy_fastapi.py --port 0 --upstream http://127.0.0.1:8000/v1
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from loadtest import announce, listening_socket, parse_args
from starlette.background import BackgroundTask


def make_app(upstream_url: str) -> FastAPI:
    """The proxy application; its client lives as long as the app."""
    clients: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=None) as client:
            clients["upstream"] = client
            yield

    app = FastAPI(lifespan=lifespan)
    url = upstream_url.rstrip("/") + "/chat/completions"

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> StreamingResponse:
        client = clients["upstream"]
        body = await request.body()
        upstream_request = client.build_request(
            "POST", url, content=body, headers={"Content-Type": "application/json"}
        )
        upstream = await client.send(upstream_request, stream=True)
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=upstream.status_code,
            media_type=upstream.headers.get("Content-Type", "text/event-stream"),
            background=BackgroundTask(upstream.aclose),
        )

    return app


def main() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("An OpenAI streaming proxy on FastAPI + httpx.", upstream=True)
    sock = listening_socket(args.host, args.port)
    config = uvicorn.Config(make_app(args.upstream), log_level="warning")
    announce(sock)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
