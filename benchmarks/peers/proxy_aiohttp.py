"""An OpenAI-compatible streaming proxy the aiohttp way: a reference for `benchmarks/proxy.py`.

``POST /v1/chat/completions`` is forwarded to the upstream with one shared
``aiohttp.ClientSession`` (its connection limit lifted, as a user proxying hundreds of streams
must), and the response body is written back as it arrives (``iter_any``), untouched. Run by
``web.run_app`` on its default (asyncio) event loop; nothing is tuned beyond that.

    python benchmarks/peers/proxy_aiohttp.py --port 0 --upstream http://127.0.0.1:8000/v1
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from loadtest import announce, listening_socket, parse_args

UPSTREAM = web.AppKey("upstream", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """Forward one completion and stream the upstream's answer back."""
    body = await request.read()
    session, url = request.app[SESSION], request.app[UPSTREAM] + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    async with session.post(url, data=body, headers=headers) as upstream:
        content_type = upstream.headers.get("Content-Type", "text/event-stream")
        response = web.StreamResponse(
            status=upstream.status, headers={"Content-Type": content_type}
        )
        await response.prepare(request)
        async for data in upstream.content.iter_any():
            await response.write(data)
        await response.write_eof()
    return response


def make_app(upstream_url: str) -> web.Application:
    """The proxy application, with its client session's lifetime tied to the app's."""
    app = web.Application()
    app[UPSTREAM] = upstream_url.rstrip("/")

    async def session_context(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0)  # the default 100 would queue streams
        async with aiohttp.ClientSession(connector=connector) as session:
            app[SESSION] = session
            yield

    app.cleanup_ctx.append(session_context)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


def main() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("An OpenAI streaming proxy on aiohttp.", upstream=True)
    sock = listening_socket(args.host, args.port)
    announce(sock)
    web.run_app(make_app(args.upstream), sock=sock, print=None, access_log=None)


if __name__ == "__main__":
    main()
