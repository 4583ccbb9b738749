"""The load-test contract served the aiohttp way: a reference for ``airlane bench --compare``.

SSE through a ``web.StreamResponse`` written chunk by chunk, WebSocket through
``web.WebSocketResponse``, run by ``web.run_app`` on its default (asyncio) event loop. Nothing
is tuned beyond what an aiohttp user would write.

    python benchmarks/peers/aiohttp_app.py --port 0     # prints: listening on http://...
"""

from __future__ import annotations

import os

from aiohttp import web
from loadtest import LoadTestQuery, announce, chunk_stream, listening_socket, parse_args

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """Liveness, and this process's id (the benchmark samples its CPU use)."""
    return web.json_response({"pid": os.getpid()})


def _query(request: web.Request) -> LoadTestQuery:
    try:
        return LoadTestQuery.parse(request.query)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None


@routes.get("/v1/loadtest/sse")
async def loadtest_sse(request: web.Request) -> web.StreamResponse:
    """One load-test stream as Server-Sent Events: each event's data is one chunk."""
    query = _query(request)
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    try:
        async for chunk in chunk_stream(query):
            await response.write(f"data: {chunk}\n\n".encode())
    except ConnectionResetError:  # the client left; nothing more to send
        return response
    await response.write_eof()
    return response


@routes.get("/v1/loadtest/ws")
async def loadtest_ws(request: web.Request) -> web.WebSocketResponse:
    """One load-test stream over WebSocket: each text message is one chunk; close 1000."""
    query = _query(request)
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    try:
        async for chunk in chunk_stream(query):
            await ws.send_str(chunk)
    except ConnectionResetError:
        return ws
    await ws.close()  # code 1000
    return ws


def main() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("The load-test contract on aiohttp.")
    sock = listening_socket(args.host, args.port)
    app = web.Application()
    app.add_routes(routes)
    announce(sock)
    web.run_app(app, sock=sock, print=None)


if __name__ == "__main__":
    main()
